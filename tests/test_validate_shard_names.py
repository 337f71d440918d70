"""validate checks each listed shard's numbers: convert names a split's N
shards SPLIT-00000-of-0000N to SPLIT-(N-1)-of-0000N. A converter that named
them -of-00003 for two shards (or numbered them 0 and 2) passed every other
check, the files on disk and the listing agreeing; readers that go by the
names look for a third shard."""

from __future__ import annotations

import pytest

from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from tests.conftest import copy_dataset
from tests.conftest import read_info
from tests.test_validate_cli import RAW_16
from tests.test_validate_cli import run_validate
from tests.test_validate_cli import write_info

pytestmark = pytest.mark.xdist_group('converted_sample')


def _renamed(out, names: dict) -> None:
  """Shards (and index files) renamed on disk and in dataset_info.json alike."""
  info = read_info(out)
  for entry in info['splits'].values():
    entry['shards'] = [names.get(shard, shard) for shard in entry['shards']]
  for old, new in names.items():
    (out / old).rename(out / new)
    if (out / (old + '.index')).exists():
      (out / (old + '.index')).rename(out / (new + '.index'))
  write_info(out, info)


@pytest.fixture
def out(converted_sample, tmp_path):
  return copy_dataset(converted_sample(*RAW_16, '--num_shards', '2', '--write_index')[1],
                      tmp_path)


def test_shards_named_one_more_than_there_are(out):
  assert read_info(out)['splits']['train']['shards'] == [
      'train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord']
  _renamed(out, {f'train-0000{i}-of-00002.tfrecord': f'train-0000{i}-of-00003.tfrecord'
                 for i in range(2)})
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'wrong_shard_number': 2})
  assert [(p['file'], p['record'], p['detail']) for p in report['problems']] == [
      (f'train-0000{i}-of-00003.tfrecord', -1,
       f"its name says shard {i} of 3, but dataset_info.json lists 2 shard(s) under split "
       "'train' (convert names them train-00000-of-00002 to train-00001-of-00002)")
      for i in range(2)]


def test_a_shard_number_past_the_count(out):
  _renamed(out, {'train-00001-of-00002.tfrecord': 'train-00002-of-00002.tfrecord'})
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'wrong_shard_number': 1})
  assert report['problems'][0]['detail'].startswith(
      'its name says shard 2 of 2, but dataset_info.json lists 2 shard(s)')


@pytest.mark.parametrize('flags', [('--num_shards', '2', '--write_index'),
                                   ('--split', 'train=0.5,test=0.5', '--num_shards', '3',
                                    '--compression', 'gzip')])
def test_the_names_convert_gives_validate_clean(converted_sample, tmp_path, flags):
  """Each split's shards numbered apart (test's -of-00003 beside train's)."""
  out = copy_dataset(converted_sample(*RAW_16, *flags)[1], tmp_path)
  code, report = run_validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0)
