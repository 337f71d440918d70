"""validate checks which shard each record is in, with --num_shards N and
sink.record_order 'shuffled': convert deals a split's records round robin in
write order (core/shuffle.shard_of), the record of rank r to shard r % N as
its record r // N. A record swapped with one of another shard, or one
dropped with every count, index and sidecar line made to match, keeps each
shard's own order (test_validate_order.py) and passed every other check."""

from __future__ import annotations

import gzip
import json

import pytest

from pipeline.errors import EXIT_FAILED
from tests.conftest import copy_dataset
from tests.conftest import read_info
from tests.conftest import recount_imbalance
from tests.test_validate_cli import RAW_16
from tests.test_validate_cli import run_validate
from transforms.core.example_proto import parse_example
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import masked_crc
from transforms.core.tfrecord import read_records

pytestmark = pytest.mark.xdist_group('converted_sample')

SHARDED = (*RAW_16, '--num_shards', '2', '--write_index')


def _key(data: bytes) -> str:
  return parse_example(data)['image/key'][1][0].decode()


def _records(out, shards) -> list:
  result = []
  for shard in shards:
    with open(out / shard, 'rb') as stream:
      result.append([data for _, data in read_records(stream)])
  return result


def _rewrite(out, shards, records) -> None:
  """Writes `records` (a list a shard) as the split's shards, with their
  index files, sidecar lines, counts and num_bytes to match, as a careful
  post-processing script would: only the records' places show."""
  lines = {line['key']: line
           for line in map(json.loads, gzip.open(out / 'train.sources.jsonl.gz'))}
  kept = []
  for number, (shard, datas) in enumerate(zip(shards, records)):
    offset, index = 0, []
    for ordinal, data in enumerate(datas):
      framed = frame(data)
      index.append(f'{offset} {len(framed)}\n')
      kept.append(dict(lines[_key(data)], shard=number, ordinal=ordinal, offset=offset,
                       length=len(framed), data_crc=masked_crc(data)))
      offset += len(framed)
    (out / shard).write_bytes(b''.join(frame(data) for data in datas))
    (out / (shard + '.index')).write_text(''.join(index))
  with gzip.open(out / 'train.sources.jsonl.gz', 'wb') as stream:
    stream.write(b''.join(json.dumps(line).encode() + b'\n' for line in kept))
  info = read_info(out)
  split, dropped = info['splits']['train'], len(lines) - len(kept)
  split['num_bytes'] = sum((out / shard).stat().st_size for shard in shards)
  split['num_examples'] -= dropped
  info['num_examples'] -= dropped
  info['num_manifest_rows'] -= dropped
  counts = {}
  for line in kept:
    counts[line['label']['text']] = counts.get(line['label']['text'], 0) + 1
  split['examples_per_class'] = counts
  recount_imbalance(split)
  (out / 'dataset_info.json').write_text(json.dumps(info))


@pytest.fixture
def out(converted_sample, tmp_path):
  return copy_dataset(converted_sample(*SHARDED)[1], tmp_path)


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_records_swapped_between_shards(out):
  shards = read_info(out)['splits']['train']['shards']
  first, second = _records(out, shards)
  moved = _key(first[0])  # rank 0 of the split: shard 0, record 0
  first[0], second[0] = second[0], first[0]  # each shard's own order still holds
  _rewrite(out, shards, [first, second])
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'wrong_record_order': 1})
  (problem,) = report['problems']
  assert (problem['file'], problem['record']) == (shards[1], 0)
  assert problem['detail'] == (
      f"record 0 (key {moved!r}) is record 0 of split 'train' in write order, which "
      f"--num_shards 2 deals to {shards[0]} as its record 0: dataset_info.json's "
      "sink.record_order says 'shuffled' (a split's records dealt round robin to its "
      'shards by a salted hash of their key, --seed 0)')
  # as the files are read on distributed runners (a GroupByKey by split)
  code, distributed = run_validate(out, '--direct_num_workers', '2')
  assert (code, distributed['problems']) == (EXIT_FAILED, report['problems'])


def test_record_dropped_with_every_count_made_to_match(out):
  shards = read_info(out)['splits']['train']['shards']
  first, second = _records(out, shards)
  assert (len(first), len(second)) == (5, 4)
  first.pop(1)  # rank 2 of the split; every later record of shard 0 keeps its order
  _rewrite(out, shards, [first, second])
  assert read_info(out)['num_examples'] == 8
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'wrong_record_order': 1})
  (problem,) = report['problems']
  # the split's rank 2 is now shard 1's record 1, which round robin puts in shard 0
  assert (problem['file'], problem['record']) == (shards[1], 1)
  assert problem['detail'].startswith(
      f"record 1 (key {_key(second[1])!r}) is record 2 of split 'train' in write order, "
      f'which --num_shards 2 deals to {shards[0]} as its record 1')


def test_the_written_placement_rewritten_is_no_problem(out):
  """The harness itself: the shards rewritten as convert wrote them pass."""
  shards = read_info(out)['splits']['train']['shards']
  _rewrite(out, shards, _records(out, shards))
  code, report = run_validate(out)
  assert (code, report['num_problems']) == (0, 0)
