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


SPLITS_OF = """
import json, os, sys
from datasets.data_files import DataFilesDict, get_data_patterns
root = sys.argv[1]
files = DataFilesDict.from_patterns(get_data_patterns(root), base_path=root)
print(json.dumps({os.path.relpath(f, root): str(split) for split, fs in files.items() for f in fs}))
"""


@pytest.mark.integration
@pytest.mark.parametrize('names, pattern', [
    (['train.parquet', 'test.parquet', 'validation.parquet'], '*.parquet'),
    (['my_train-1.parquet', 'dev.parquet', 'evaluation.parquet'], '*.parquet'),
    (['train/a.parquet', 'val_2024/b.parquet', 'testing/c.parquet'], '*/*.parquet'),
])
def test_a_folder_s_files_go_to_the_splits_datasets_reads_them_into(tmp_path, names, pattern):
  # load_dataset reads train.parquet and test.parquet of a folder as two
  # splits; convert had read every row into train, the test rows with them.
  if not PYTHON.exists():
    pytest.fail('.peers/datasets is missing: run `make .peers/datasets/.installed`')
  import pyarrow as pa
  import pyarrow.parquet as pq
  root = tmp_path / 'root'
  for i, name in enumerate(names):
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({'image': [_png(i)], 'label': ['cat']}), root / name)
  done = subprocess.run([str(PYTHON), '-c', SPLITS_OF, str(root)], capture_output=True,
                        text=True, timeout=300,
                        env=dict(os.environ, HF_DATASETS_CACHE=str(tmp_path / 'hf'),
                                 HF_HOME=str(tmp_path / 'hf'), HF_DATASETS_OFFLINE='1'))
  assert done.returncode == 0, done.stderr[-3000:]
  theirs = __import__('json').loads(done.stdout)
  assert sorted(theirs) == sorted(names)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(root / pattern), '--output_dir', str(out),
                       '--height', '8', '--width', '8', '--progress', 'off']) == EXIT_OK
  ours = {example['image/key'][1][0].decode().rsplit(':', 1)[0]: split
          for split in read_info(out)['splits'] for example in read_examples(out, split)}
  assert ours == theirs
