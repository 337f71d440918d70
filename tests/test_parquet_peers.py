"""A Parquet image dataset written by Hugging Face's `datasets` library
(Image and ClassLabel features, Dataset.to_parquet), in its own venv
(.peers/datasets, tests/peers/requirements-datasets.txt), converts with no
flag but --manifest and --output_dir: its label_map.txt is the ClassLabel
names, each record its row's image, label and key."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess

from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import read_examples
from tests.conftest import read_info

REPO = pathlib.Path(__file__).resolve().parent.parent
# Where `make test-integration` builds the venv (another one: this variable).
PYTHON = pathlib.Path(os.environ.get('IMG2TFRECORD_DATASETS_PYTHON') or
                      REPO / '.peers' / 'datasets' / 'bin' / 'python')
NAMES = ['tabby', 'ant', 'zebra']  # not sorted: the ids are ClassLabel's
LABELS = [2, 0, 1, 0, 2]

WRITE = """
import sys
from datasets import ClassLabel, Dataset, Features, Image
folder, names = sys.argv[1], sys.argv[2].split(',')
images = [{'bytes': open(f'{folder}/{i}.png', 'rb').read(), 'path': None}
          for i in range(5)]
images[1]['path'] = 'one.png'
features = Features({'image': Image(), 'label': ClassLabel(names=names)})
Dataset.from_dict({'image': images, 'label': [int(v) for v in sys.argv[3].split(',')]},
                  features=features).to_parquet(f'{folder}/train-00000-of-00001.parquet')
"""


def _png(i: int) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (10 + i, 6), (50 * i, 0, 255 - 50 * i)).save(buffer, 'PNG')
  return buffer.getvalue()


@pytest.mark.integration
def test_a_datasets_parquet_converts_with_only_manifest_and_output_dir(tmp_path):
  if not PYTHON.exists():
    pytest.fail('.peers/datasets is missing: run `make .peers/datasets/.installed`')
  for i in range(5):
    (tmp_path / f'{i}.png').write_bytes(_png(i))
  done = subprocess.run([str(PYTHON), '-c', WRITE, str(tmp_path), ','.join(NAMES),
                         ','.join(map(str, LABELS))], capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, HF_DATASETS_CACHE=str(tmp_path / 'hf'),
                                              HF_HOME=str(tmp_path / 'hf')))
  assert done.returncode == 0, done.stderr[-3000:]
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'train-00000-of-00001.parquet'),
                       '--output_dir', str(out)]) == EXIT_OK
  assert (out / 'label_map.txt').read_text().splitlines() == NAMES
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(out)}
  keys = [f'train-00000-of-00001.parquet:{row}' for row in range(5)]
  assert sorted(examples) == sorted(keys)
  for key, label in zip(keys, LABELS):
    assert examples[key]['image/class/label'][1] == [label]
    assert examples[key]['image/class/text'][1] == [NAMES[label].encode()]
  assert examples['train-00000-of-00001.parquet:1']['image/filename'][1] == [b'one.png']
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected']) == (5, 0)
  assert list(info['splits']) == ['train']
