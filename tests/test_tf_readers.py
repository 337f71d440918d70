"""The output read by TensorFlow itself: the seed's TF1 recipe and tf.data.

Every dataset is converted first, then all are read in ONE TensorFlow process
(tf_readers.py jobs): its import costs ~5 s, once instead of once per test.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from pipeline import convert
from tests.conftest import COLOURS
from tests.conftest import make_sample

# TensorFlow in a subprocess (~30 s): make test-integration, with the other
# real clients (make test reads the seed recipe in test_read.py); one worker
# shares the read_back fixture.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group('tf_readers')]

READERS = pathlib.Path(__file__).with_name('tf_readers.py')
NAMES = sorted(COLOURS)


def read_with_tensorflow(*args) -> list:
  done = subprocess.run([sys.executable, str(READERS), *map(str, args)],
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


def expected_rows(sample, channels=3):
  rows = []
  for name in sample.labels.values():
    colour = list(COLOURS[name])
    if channels == 1:
      r, g, b = colour
      colour = [round(0.299 * r + 0.587 * g + 0.114 * b)]
    rows.append([NAMES.index(name)] + colour)
  return sorted(rows)


SEED_RECIPE = ['--schema', 'seed', '--height', '30', '--width', '20']
VARIANTS = {
    'raw': ([], 3),
    'seed': (['--schema', 'seed'], 3),
    'png_gzip': (['--encoding', 'png', '--compression', 'gzip'], 3),
    'jpeg_grey': (['--encoding', 'jpeg', '--channels', '1'], 1),
    'none_split_extra': (['--resize_mode', 'none', '--encoding', 'png', '--split',
                          'train=0.5,test=0.5', '--extra_features', 'weight:float[2]'], 3),
    'multi_label': (['--multi_label'], 3),
}


def _prepare(sample, flags) -> None:
  """The manifest a variant needs: a weight column, or a second label."""
  if '--extra_features' in flags:
    rows = [(image, name, '0.5 1.5') for image, name in sample.labels.items()]
    sample.manifest.write_text('image,label,weight\n' + '\n'.join(
        ','.join(r) for r in rows) + '\n')
  if '--multi_label' in flags:  # each row also labelled green, listed second
    rows = [(image, f'{name};green') for image, name in sample.labels.items()]
    sample.manifest.write_text('image,label\n' + '\n'.join(
        ','.join(r) for r in rows) + '\n')


@pytest.fixture(scope='module')
def read_back(tmp_path_factory):
  """-> {'recipe' or a VARIANTS name: (sample, exit code of convert, what
  TensorFlow read: {'rows': ...} or {'error': ...})}."""
  runs = {}
  sample = make_sample(tmp_path_factory.mktemp('seed_recipe'))
  runs['recipe'] = (sample, convert.main(['--manifest', str(sample.manifest), '--output_dir',
                                          str(sample.out), *SEED_RECIPE]),
                    ['seed', str(sample.out), 30, 20])
  for name, (flags, _) in VARIANTS.items():
    sample = make_sample(tmp_path_factory.mktemp(f'tfdata_{name}'))
    _prepare(sample, flags)
    size = [] if 'none' in flags else ['--height', '12', '--width', '10']  # own sizes
    code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                         *size, *flags])
    runs[name] = (sample, code, ['tfdata', str(sample.out)])
  converted = [name for name, (_, code, _) in runs.items() if code == 0]
  done = subprocess.run([sys.executable, str(READERS), 'jobs',
                         json.dumps([runs[name][2] for name in converted])],
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  found = dict(zip(converted, json.loads(done.stdout.strip().splitlines()[-1])))
  return {name: (sample, code, found.get(name)) for name, (sample, code, _) in runs.items()}


def _rows(read: tuple) -> list:
  _, code, found = read
  assert code == 0
  assert 'error' not in found, found['error'][-3000:]
  return found['rows']


def test_seed_recipe_reads_seed_schema(read_back):
  sample = read_back['recipe'][0]
  assert _rows(read_back['recipe']) == expected_rows(sample)
  saved = sorted(os.listdir(sample.out / 'seed_images'))
  assert len(saved) == 9 and all('_Label_' in name for name in saved)


@pytest.mark.parametrize('variant', list(VARIANTS))
def test_tf_data_reads_every_variant(read_back, variant):
  flags, channels = VARIANTS[variant]
  sample = read_back[variant][0]
  rows = _rows(read_back[variant])
  expected = expected_rows(sample, channels)
  if '--multi_label' in flags:
    green = NAMES.index('green')
    expected = sorted([[r[0]] + ([green] if r[0] != green else [])] + r[1:]
                      for r in expected)
  if '--encoding' in flags and 'jpeg' in flags:
    expected = expected_rows(sample, channels)
    assert [r[0] for r in rows] == [r[0] for r in expected]
    assert all(abs(a[1] - b[1]) <= 3 for a, b in zip(rows, expected))
  else:
    assert rows == expected


DOC_MULTI_HOT = """
import json, re, sys
import tensorflow as tf
page, out = sys.argv[1:]
recipe = re.search(r'for a multi-hot target use\\s*`([^`]+)`', open(page).read()).group(1)
info = json.load(open(out + '/dataset_info.json'))
spec = {'image/key': tf.io.FixedLenFeature([], tf.string),
        'image/class/label': tf.io.VarLenFeature(tf.int64)}
files = [out + '/' + shard for shard in info['splits']['train']['shards']]
found = {}
for size in (1, 3):
  for batch in tf.data.TFRecordDataset(files).batch(size).map(
      lambda records: tf.io.parse_example(records, spec)):
    labels = batch['image/class/label']
    hot = eval(recipe, {'tf': tf, 'info': info, 'labels': labels})
    for key, row in zip(batch['image/key'].numpy(), hot.numpy()):
      found.setdefault(key.decode(), []).append(row.astype(int).tolist())
print(json.dumps(found))
"""


def test_the_documented_multi_hot_recipe_on_batches(tmp_path):
  """docs/reading.md's multi-hot expression, on a batch of parse_example
  labels as its own recipe reads them: every record's classes and no other.
  axis=0 took the maximum across the batch ([k, classes], not [batch,
  classes]), and to_dense's padding 0 marked class 0 in each shorter list."""
  sample = make_sample(tmp_path)
  labels = {'images/red_0.png': 'green;red', 'images/green_1.png': 'green',
            'images/blue_2.png': 'red', 'images/red_3.png': 'blue;green;red'}
  sample.manifest.write_text('image,label\n' + ''.join(
      f'{image},{label}\n' for image, label in labels.items()))
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--height', '4', '--width', '4', '--multi_label']) == 0
  done = subprocess.run([sys.executable, '-c', DOC_MULTI_HOT,
                         str(pathlib.Path(__file__).parents[1] / 'docs' / 'reading.md'),
                         str(sample.out)], capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  found = json.loads(done.stdout.strip().splitlines()[-1])
  classes = ['blue', 'green', 'red']  # label_map.txt: sorted
  assert found == {image: [[int(c in label.split(';')) for c in classes]] * 2
                   for image, label in labels.items()}
