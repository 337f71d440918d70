"""validate's spans: local shards cut into spans that check processes read and
check themselves give the same report as reading every record here."""

from __future__ import annotations

import io
import json

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_FAILED
from tests.conftest import read_info
from transforms import check_shards
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import plan_spans
from transforms.core.tfrecord import read_records
from transforms.core.validation import check_records
from transforms.workers.pooled_step import PoolSize
from transforms.workers.shard_span import check_span


def stream_of(sizes):
  return io.BytesIO(b''.join(frame(b'x' * size) for size in sizes))


def test_spans_cover_every_record_once_and_the_last_reads_to_the_end():
  # records of 16 + 100 bytes: spans of at least 250 bytes hold 3 records
  assert plan_spans(stream_of([100] * 7), 250) == [(0, 0, 3), (348, 3, 3), (696, 6, None)]
  assert plan_spans(stream_of([100] * 6), 250) == [(0, 0, 3), (348, 3, 3)]
  assert plan_spans(stream_of([]), 250) == [(0, 0, None)]
  assert plan_spans(stream_of([100] * 2), 1 << 20) == [(0, 0, None)]


def test_planning_stops_at_a_damaged_header_which_reading_then_names():
  data = bytearray(stream_of([100] * 7).getvalue())
  data[4 * 116 + 2] ^= 0xFF  # record 4's length
  spans = plan_spans(io.BytesIO(bytes(data)), 250)
  assert spans == [(0, 0, 3), (348, 3, None)]
  stream = io.BytesIO(bytes(data))
  stream.seek(348)
  read = []
  try:
    for index, _ in read_records(stream, 3, None):
      read.append(index)
  except ShardError as error:
    assert (error.kind, error.index) == ('corrupt_shard', 4)
  assert read == [3]


def damaged_dataset(sample):
  """Three raw shards: a flipped byte in record 1 of the first, the second cut
  inside its third record, a damaged length at record 1 of the third."""
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--height', '16', '--width', '16', '--num_shards', '3']) == 0
  shards = [sample.out / name for name in read_info(sample.out)['splits']['train']['shards']]
  size = 16 + len(next(read_records(open(shards[0], 'rb')))[1])
  damage = [lambda d: d[:size + 100] + bytes([d[size + 100] ^ 1]) + d[size + 101:],
            lambda d: d[:2 * size + 50],
            lambda d: d[:size + 3] + bytes([d[size + 3] ^ 1]) + d[size + 4:]]
  for shard, change in zip(shards, damage):
    shard.write_bytes(change(shard.read_bytes()))
  return sample.out


def report_of(out, *flags):
  (out / 'validation_report.json').unlink(missing_ok=True)  # none left by an earlier run
  assert validate.main(['--input_dir', str(out), *flags]) == EXIT_FAILED
  return json.loads((out / 'validation_report.json').read_text())


def test_spans_give_the_same_report_as_reading_here(sample, monkeypatch):
  out = damaged_dataset(sample)
  here = report_of(out, '--check_threads', '1')
  monkeypatch.setattr(check_shards, 'SPAN_BYTES', 1000)  # about one record per span
  in_spans = report_of(out, '--check_processes', '2')
  assert in_spans == here
  # count_mismatch: the split's examples, and its bytes (the cut shard); the
  # sidecar names records past each shard's damage: once a shard
  assert here['problems_by_kind'] == {'corrupt_shard': 2, 'count_mismatch': 2,
                                      'sidecar_mismatch': 3, 'truncated_shard': 1}
  assert sorted((p['kind'], p['record']) for p in here['problems']
                if p['kind'] not in ('count_mismatch', 'sidecar_mismatch')) == [
      ('corrupt_shard', 1), ('corrupt_shard', 1), ('truncated_shard', 2)]
  assert here['num_examples'] == 1 + 2 + 1  # the records before each damage


@pytest.mark.xdist_group('converted_sample')  # shares test_validate_cli's raw 16x16 run
def test_whole_shards_give_the_same_report_as_reading_here(sample, monkeypatch):
  """With enough shards per check process, each reads whole shards: no pass
  over the record headers to cut spans."""
  out = damaged_dataset(sample)
  here = report_of(out, '--check_threads', '1')
  monkeypatch.setattr(validate, 'WHOLE_SHARDS_PER_PROCESS', 1)  # 3 shards, 1 process

  def no_spans(*args):
    raise AssertionError('spans were planned')
  monkeypatch.setattr(check_shards, 'plan_spans', no_spans)
  assert report_of(out, '--check_processes', '1') == here
  assert here['problems_by_kind'] == {'corrupt_shard': 2, 'count_mismatch': 2,
                                      'sidecar_mismatch': 3, 'truncated_shard': 1}


def test_check_span_reads_its_records_only(converted_sample):
  _, out = converted_sample('--height', '16', '--width', '16')
  info = read_info(out)
  from transforms.core.validation import Expected
  shard = out / info['splits']['train']['shards'][0]
  with open(shard, 'rb') as stream:
    spans = plan_spans(stream, 2000)
  results = [check_span(str(shard), *span, check_records, Expected.from_info(info))
             for span in spans]
  assert [first for first, _, _, _ in results] == [span[1] for span in spans]
  assert all(failure is None for _, _, failure, _ in results)
  labels = [result[0] for _, checked, _, _ in results for result in checked]
  assert len(labels) == 9 and sorted(labels) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
  assert len(spans) > 2


MB = 1 << 20


def equal_shards(count: int, size: int) -> dict:
  return {f'train-{i}.tfrecord': size for i in range(count)}


@pytest.mark.parametrize('flags,encoding,single,sizes,expected', [
    # small local shards: read here; JPEG checked in processes (crash isolation)
    ((0, 0), 'jpeg', True, {'train-0.tfrecord': MB}, (PoolSize(3, 2), 0, False)),
    ((0, 0), 'raw', True, {'train-0.tfrecord': MB}, (PoolSize(1, 0), 0, False)),
    # big uncompressed: span processes read them; the reader has nothing left
    ((0, 0), 'jpeg', True, {'train-0.tfrecord': 20 * MB, 'test-0.tfrecord': 20 * MB},
     (PoolSize(3, 0), 2, False)),
    # ... in whole shards once there are 4 per process, none too big
    ((0, 0), 'jpeg', True, equal_shards(8, 5 * MB), (PoolSize(3, 0), 2, True)),
    ((0, 0), 'raw', True, {**equal_shards(7, MB), 'test-0.tfrecord': 63 * MB},
     (PoolSize(1, 0), 2, False)),
    # compressed: read here, checked in processes; no span process idles
    ((0, 0), 'jpeg', True, {'train-0.tfrecord.gz': 40 * MB}, (PoolSize(3, 2), 0, False)),
    ((0, 0), 'raw', True, {'train-0.tfrecord.gz': 40 * MB}, (PoolSize(1, 0), 0, False)),
    ((0, 0), 'jpeg', True, {'train-0.tfrecord': 40 * MB, 'test-0.tfrecord.gz': MB},
     (PoolSize(3, 2), 2, False)),
    # asked for: as asked, whatever the size
    ((2, 0), 'jpeg', True, {'train-0.tfrecord': 40 * MB}, (PoolSize(2, 0), 0, False)),
    ((0, 3), 'jpeg', True, {'train-0.tfrecord': MB}, (PoolSize(3, 3), 3, False)),
    ((0, 1), 'raw', True, equal_shards(8, MB), (PoolSize(1, 1), 1, True)),
    # distributed: the runner spreads the shards
    ((0, 0), 'jpeg', False, {'train-0.tfrecord': 40 * MB}, (PoolSize(1, 0), 0, False)),
])
def test_check_pools_follow_the_size_of_the_shards(tmp_path, flags, encoding, single, sizes,
                                                   expected):
  for name, size in sizes.items():
    with open(tmp_path / name, 'wb') as handle:
      handle.truncate(size)  # sparse: no disk used
  shards = [(name.split('-')[0], name) for name in sizes]
  assert validate.check_pools(*flags, encoding, single, str(tmp_path), shards, 2) == expected


def test_check_pools_of_a_remote_dataset_leave_sizes_alone():
  shards = [('train', 'train-0.tfrecord')]
  assert validate.check_pools(0, 0, 'jpeg', True, 's3://bucket/out', shards, 2) == (
      PoolSize(3, 2), 0, False)
