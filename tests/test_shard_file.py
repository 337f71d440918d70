"""transforms/shard_file.py: records gathered and written a chunk at a time,
every byte in order by close(), none after a failed write."""

import gzip
import os

import pytest

from transforms import write_shards
from transforms.core.tfrecord import frame
from transforms.shard_file import ShardFile
from transforms.write_shards import GATHERED_AT_ONCE
from transforms.write_shards import _ShardTarget
from transforms.write_shards import _WriteRoundRobinFn


def test_records_reach_the_file_a_gathered_chunk_at_a_time_and_all_by_close(tmp_path):
  path = tmp_path / 'out.tfrecord'
  records = [bytes([i]) * (9000 + i) for i in range(7)]  # framed: 9,016 to 9,022 bytes
  sizes = []
  # (each write larger than the file object's own 8 KB buffer, so it is seen)
  with ShardFile(str(path), 'none', write_index=True, gather_bytes=18_000) as shard:
    spans = []
    for record in records:
      spans.append(shard.write_record(record))
      sizes.append(os.path.getsize(path))
  framed = [frame(record) for record in records]
  # written when 18,000 bytes or more wait: after records 2, 4 and 6 (1-based)
  assert sizes == [0, 18_033, 18_033, 36_070, 36_070, 54_111, 54_111]
  assert path.read_bytes() == b''.join(framed)
  offsets = [sum(map(len, framed[:i])) for i in range(len(framed))]
  assert [span[:2] for span in spans] == [(offset, len(f)) for offset, f in zip(offsets, framed)]
  assert (tmp_path / 'out.tfrecord.index').read_text() == ''.join(
      f'{offset} {len(f)}\n' for offset, f in zip(offsets, framed))


def test_records_that_gather_exactly_gather_bytes_are_written_then(tmp_path):
  """gather_bytes is the most a shard holds back: a record of exactly that
  many framed bytes goes to the file as it is written, not with the next."""
  path = tmp_path / 'out.tfrecord'
  record = b'r' * 9000  # 9,016 framed: past the file object's own 8 KB buffer
  with ShardFile(str(path), 'none', gather_bytes=len(frame(record))) as shard:
    shard.write_record(record)
    assert path.read_bytes() == frame(record)


def test_a_gzip_shard_holds_the_same_records(tmp_path):
  path = tmp_path / 'out.tfrecord.gz'
  records = [bytes([i]) * 5000 for i in range(5)]
  with ShardFile(str(path), 'gzip', gather_bytes=8000) as shard:
    for record in records:
      shard.write_record(record)
  assert gzip.decompress(path.read_bytes()) == b''.join(map(frame, records))


def test_an_abandoned_shard_writes_nothing_it_gathered(tmp_path):
  path = tmp_path / 'out.tfrecord'
  shard = ShardFile(str(path), 'none', write_index=True)
  shard.write_record(b'gathered, never written')
  shard.abandon()
  shard.close()
  assert path.read_bytes() == b''
  assert not (tmp_path / 'out.tfrecord.index').exists()


def test_shards_open_together_share_the_gathered_bytes(tmp_path):
  target = _ShardTarget(str(tmp_path / 'train'), '.tfrecord', 'none')
  one = target.create(str(tmp_path / 'a.tfrecord'))
  many = target.create(str(tmp_path / 'b.tfrecord'), open_at_once=256)
  too_many = target.create(str(tmp_path / 'c.tfrecord'), open_at_once=100_000)
  try:
    assert one._gather_bytes == 1 << 20
    assert many._gather_bytes == GATHERED_AT_ONCE // 256 == 64 << 10
    # no floor: 100,000 shards still share 16 MB (167 bytes each), not 6.4 GB
    assert too_many._gather_bytes == GATHERED_AT_ONCE // 100_000 == 167
  finally:
    for shard in (one, many, too_many):
      shard.close()


class _Example:
  """What the round-robin writer reads of a BuiltExample (no sidecar here)."""

  def __init__(self, order: int, data: bytes):
    self.order, self.key, self.data, self.framed = order, f'k{order}', data, b''


def test_round_robin_writers_of_every_split_gather_within_the_shared_bytes(tmp_path, monkeypatch):
  """Found measuring peak RSS: with a floor of 64 KB a shard per writer, 2,000
  shards (or 3 splits of 300) gathered far more than GATHERED_AT_ONCE, so a
  run of 4,000 96x96 records held all 110 MB until its end (236 MB peak RSS
  against 125 MB before gathering). Here 1 MB shared by 2 splits of 64 shards:
  8 KB each (the floor gave 64 KB: 8 MB in all, every record held)."""
  monkeypatch.setattr(write_shards, 'GATHERED_AT_ONCE', 1 << 20)
  writers = [_WriteRoundRobinFn(_ShardTarget(str(tmp_path / split), '.tfrecord', 'none'),
                                64, splits=2) for split in ('train', 'test')]
  record = bytes(range(256)) * 12  # 3,072 bytes, 3,088 framed
  for writer in writers:
    writer.setup()
    writer.start_bundle()
  for order in range(64 * 12):  # 12 records a shard, 37 KB, in both splits
    for writer in writers:
      writer.process([_Example(order, record)])
  for writer in writers:  # the writes handed to its thread are done (write_behind.py)
    writer._behind.drain()
  on_disk = sum(path.stat().st_size for path in tmp_path.glob('*.tfrecord'))
  # each shard wrote its first 3 records together (9,264 >= 8,192), then 3 more...
  assert len(list(tmp_path.glob('*.tfrecord'))) == 128
  assert on_disk == 128 * 12 * 3088
  for writer in writers:
    list(writer.finish_bundle())
  assert sum(path.stat().st_size for path in tmp_path.glob('*.tfrecord')) == 128 * 12 * 3088
  assert (tmp_path / 'test-00005-of-00064.tfrecord').read_bytes() == frame(record) * 12


def test_a_write_that_fails_mid_batch_closes_every_open_shard_and_writes_nothing_gathered(
    tmp_path):
  """A record that cannot be written (here data that is no bytes; a full disk
  likewise) fails the batch: every shard the writer holds open is abandoned
  at once, its handle closed (one left open, held by the failure's
  traceback, kept its disk space after the failed run deleted it), and what
  was gathered is never written."""
  writer = _WriteRoundRobinFn(_ShardTarget(str(tmp_path / 'train'), '.tfrecord', 'none'), 2)
  writer.setup()
  writer.start_bundle()
  writer.process([_Example(0, b'first'), _Example(1, b'second')])
  with pytest.raises(TypeError):
    writer.process([_Example(2, b'third'), _Example(3, None)])
  shards = writer.open_files()
  assert len(shards) == 2
  assert all(shard._abandoned and shard._handle.closed for shard in shards)
  assert [path.read_bytes() for path in sorted(tmp_path.glob('*.tfrecord'))] == [b'', b'']
