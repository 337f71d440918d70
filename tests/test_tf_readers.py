"""The output read by TensorFlow itself: the seed's TF1 recipe and tf.data."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from pipeline import convert
from tests.conftest import COLOURS

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


def test_seed_recipe_reads_seed_schema(sample):
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--schema', 'seed', '--height', '30', '--width', '20']) == 0
  assert read_with_tensorflow('seed', sample.out, 30, 20) == expected_rows(sample)
  saved = sorted(os.listdir(sample.out / 'seed_images'))
  assert len(saved) == 9 and all('_Label_' in name for name in saved)


@pytest.mark.parametrize('flags,channels', [
    ([], 3),
    (['--schema', 'seed'], 3),
    (['--encoding', 'png', '--compression', 'gzip'], 3),
    (['--encoding', 'jpeg', '--channels', '1'], 1),
    (['--resize_mode', 'none', '--encoding', 'png', '--split',
      'train=0.5,test=0.5', '--extra_features', 'weight:float[2]'], 3),
    (['--multi_label'], 3),
])
def test_tf_data_reads_every_variant(sample, flags, channels):
  if '--extra_features' in flags:
    rows = [(image, name, '0.5 1.5') for image, name in sample.labels.items()]
    sample.manifest.write_text('image,label,weight\n' + '\n'.join(
        ','.join(r) for r in rows) + '\n')
  expected = expected_rows(sample, channels)
  if '--multi_label' in flags:  # each row also labelled green, listed second
    rows = [(image, f'{name};green') for image, name in sample.labels.items()]
    sample.manifest.write_text('image,label\n' + '\n'.join(
        ','.join(r) for r in rows) + '\n')
    green = NAMES.index('green')
    expected = sorted([[r[0]] + ([green] if r[0] != green else [])] + r[1:]
                      for r in expected)
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--height', '12', '--width', '10', *flags]) == 0
  rows = read_with_tensorflow('tfdata', sample.out)
  if '--encoding' in flags and 'jpeg' in flags:
    expected = expected_rows(sample, channels)
    assert [r[0] for r in rows] == [r[0] for r in expected]
    assert all(abs(a[1] - b[1]) <= 3 for a, b in zip(rows, expected))
  else:
    assert rows == expected
