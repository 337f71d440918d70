"""validate checks the record order dataset_info.json promises: with
sink.record_order 'shuffled' (--shuffle on, the default), each shard's
records by the salted hash of their key (core/shuffle.Ordering). A
converter that wrote them in manifest order (an --image_dir: by class), or
by another seed, passed every other check: the sidecar and index files
agree with whatever order the records are in."""

from __future__ import annotations

import gzip
import json

import pytest

from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from tests.conftest import copy_dataset
from tests.conftest import read_info
from tests.test_validate_cli import RAW_16
from tests.test_validate_cli import run_validate
from transforms.core.example_proto import parse_example
from transforms.core.shuffle import Ordering
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import read_framed

pytestmark = pytest.mark.xdist_group('converted_sample')

SHARDED = (*RAW_16, '--num_shards', '2', '--write_index')


def _key(data: bytes) -> str:
  return parse_example(data)['image/key'][1][0].decode()


def _reorder(out, shard: str, order) -> list:
  """Rewrites `shard` with its records sorted by order(key), as a converter
  that ignored the write order would, its index and its split's sidecar
  lines written to match (offsets, lengths, CRCs, ordinals): -> the keys
  in the new order."""
  with open(out / shard, 'rb') as stream:
    records = sorted((data for _, data, _ in read_framed(stream)),
                     key=lambda data: order(_key(data)))
  (out / shard).write_bytes(b''.join(frame(data) for data in records))
  with open(out / shard, 'rb') as stream:
    places = {_key(data): (index, place) for index, data, place in read_framed(stream)}
  (out / (shard + '.index')).write_text(
      ''.join(f'{offset} {length}\n' for _, (offset, length, _) in sorted(places.values())))
  sidecar = out / 'train.sources.jsonl.gz'
  lines = [json.loads(line) for line in gzip.open(sidecar)]
  for line in lines:
    if line['key'] in places:
      index, (offset, length, crc) = places[line['key']]
      line.update(ordinal=index, offset=offset, length=length, data_crc=crc)
  lines.sort(key=lambda line: (line['shard'], line['ordinal']))
  with gzip.open(sidecar, 'wb') as stream:
    stream.write(b''.join(json.dumps(line).encode() + b'\n' for line in lines))
  return [_key(data) for data in records]


@pytest.fixture
def out(converted_sample, tmp_path):
  return copy_dataset(converted_sample(*SHARDED)[1], tmp_path)


def test_records_in_manifest_order_though_shuffled_is_said(out):
  shard = read_info(out)['splits']['train']['shards'][0]
  keys = _reorder(out, shard, lambda key: key)  # the manifest's (and the classes') order
  order = Ordering(seed=0)
  first = next(i for i in range(1, len(keys))
               if order.key(keys[i], 0) < order.key(keys[i - 1], 0))
  code, report = run_validate(out)
  assert code == EXIT_FAILED
  assert report['problems_by_kind'] == {'wrong_record_order': 1}
  (problem,) = report['problems']
  assert (problem['kind'], problem['file'], problem['record']) == (
      'wrong_record_order', shard, first)
  assert problem['detail'] == (
      f'record {first} (key {keys[first]!r}) comes after record {first - 1} (key '
      f"{keys[first - 1]!r}), which the write order puts after it: dataset_info.json's "
      "sink.record_order says 'shuffled' (each shard's records by a salted hash of their "
      'key, --seed 0)')


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_records_in_another_seeds_order(out):
  shard = read_info(out)['splits']['train']['shards'][1]
  _reorder(out, shard, lambda key: Ordering(seed=7).key(key, 0))
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'wrong_record_order': 1})
  assert report['problems'][0]['file'] == shard
  # as the files are read on distributed runners (a GroupByKey by split)
  code, distributed = run_validate(out, '--direct_num_workers', '2')
  assert (code, distributed['problems']) == (EXIT_FAILED, report['problems'])


def test_the_written_order_is_no_problem(out):
  shard = read_info(out)['splits']['train']['shards'][0]
  _reorder(out, shard, lambda key: Ordering(seed=0).key(key, 0))  # as convert wrote it
  code, report = run_validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0)


@pytest.mark.parametrize('flags', [('--seed', '3'), ('--shuffle', 'off'),
                                   ('--num_shards', '3', '--compression', 'gzip')])
def test_other_orders_convert_writes_validate_clean(converted_sample, tmp_path, flags):
  """--seed 3 salts the order; --shuffle off writes manifest order (nothing to
  check); three gzip shards, round robin."""
  out = copy_dataset(converted_sample(*RAW_16, *flags)[1], tmp_path)
  code, report = run_validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0)
  assert read_info(out)['sink']['record_order'] == (
      'manifest' if flags == ('--shuffle', 'off') else 'shuffled')


def test_manifest_order_with_shuffle_off_is_not_checked(converted_sample, tmp_path):
  out = copy_dataset(converted_sample(*RAW_16, '--shuffle', 'off')[1], tmp_path)
  shard = read_info(out)['splits']['train']['shards'][0]
  _reorder(out, shard, lambda key: Ordering(seed=0).key(key, 0))
  code, report = run_validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0)
