"""transforms/shard_file.py: records gathered and written a chunk at a time,
every byte in order by close(), none after a failed write."""

import errno
import gzip
import os
import threading

import pytest

from transforms import filesystem
from transforms import write_shards
from transforms.core.tfrecord import frame
from transforms.shard_file import ShardFile
from transforms.write_behind import WriteBehind
from transforms.write_shards import GATHERED_AT_ONCE
from transforms.write_shards import _ShardTarget
from transforms.write_shards import _WriteRoundRobinFn
from transforms.write_sources import SidecarFile


def test_records_reach_the_file_a_gathered_chunk_at_a_time_and_all_by_close(tmp_path):
  path = tmp_path / 'out.tfrecord'
  records = [bytes([i]) * (9000 + i) for i in range(7)]  # framed: 9,016 to 9,022 bytes
  sizes = []
  # (each write larger than the file object's own 8 KB buffer, so it is seen)
  with ShardFile(str(path), 'none', write_index=True, gather_bytes=18_000) as shard:
    spans = []
    for record in records:
      spans.append(shard.write_record(record))
      shard._behind.wait()  # the write goes on on its own thread: done
      sizes.append(os.path.getsize(path))
  framed = [frame(record) for record in records]
  # written when 18,000 bytes or more wait: after records 2, 4 and 6 (1-based)
  assert sizes == [0, 18_033, 18_033, 36_070, 36_070, 54_111, 54_111]
  assert path.read_bytes() == b''.join(framed)
  offsets = [sum(map(len, framed[:i])) for i in range(len(framed))]
  assert [span[:2] for span in spans] == [(offset, len(f)) for offset, f in zip(offsets, framed)]
  assert (tmp_path / 'out.tfrecord.index').read_text() == ''.join(
      f'{offset} {len(f)}\n' for offset, f in zip(offsets, framed))


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
    assert [shard._behind._in_caller for shard in (one, many, too_many)] == [
        False, True, True]  # a thread a shard only for a few shards
  finally:
    for shard in (one, many, too_many):
      shard.close()


def test_writes_behind_run_in_order_on_their_own_thread():
  done = []
  behind = WriteBehind()
  for i in range(5):
    behind.run(lambda i=i: done.append((i, threading.current_thread().name)))
  behind.close()
  assert [i for i, _ in done] == [0, 1, 2, 3, 4]
  assert all(name.startswith('write-behind') for _, name in done)
  in_caller = WriteBehind(in_caller=True)
  in_caller.run(lambda: done.append(('caller', threading.current_thread().name)))
  assert done[-1] == ('caller', threading.current_thread().name)


def test_a_failed_write_behind_is_raised_by_the_next_call_and_none_runs_after_it():

  def full():
    raise OSError(errno.ENOSPC, 'No space left on device')
  done = []
  behind = WriteBehind()
  behind.run(full)
  with pytest.raises(OSError, match='No space left'):
    behind.run(done.append, 'after')
  assert done == []
  behind.run(full)
  with pytest.raises(OSError, match='No space left'):
    behind.close()
  behind.run(full)
  behind.abandon()  # the write's own error was raised already: dropped here
  behind.run(lambda: 1 / 0)
  with pytest.raises(ZeroDivisionError):  # a bug is never dropped
    behind.abandon()


def test_a_shard_and_a_sidecar_that_fail_behind_raise_at_close_and_let_their_files_go(
    tmp_path, monkeypatch):

  class Full:
    closed = False

    def write(self, data):
      raise OSError(errno.ENOSPC, 'No space left on device')

    def close(self):
      self.closed = True
  handles = []
  monkeypatch.setattr(filesystem.FileAccess, 'create',
                      lambda self, path, gzip_compressed=False: handles.append(Full()) or
                      handles[-1])
  shard = ShardFile(str(tmp_path / 'a.tfrecord'), 'none', gather_bytes=10)
  shard.write_record(b'x' * 20)  # gathered past 10 bytes: written behind, and fails
  with pytest.raises(OSError, match='No space left'):
    shard.close()
  sidecar = SidecarFile(str(tmp_path / 'a.sources.jsonl.gz'), filesystem.FileAccess())
  sidecar.add(b'{}\n')
  with pytest.raises(OSError, match='No space left'):
    sidecar.close()
  assert [handle.closed for handle in handles] == [True, True]
  assert shard._behind._executor is None and sidecar._behind._executor is None


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
  on_disk = sum(path.stat().st_size for path in tmp_path.glob('*.tfrecord'))
  # each shard wrote its first 3 records together (9,264 >= 8,192), then 3 more...
  assert len(list(tmp_path.glob('*.tfrecord'))) == 128
  assert on_disk == 128 * 12 * 3088
  for writer in writers:
    list(writer.finish_bundle())
  assert sum(path.stat().st_size for path in tmp_path.glob('*.tfrecord')) == 128 * 12 * 3088
  assert (tmp_path / 'test-00005-of-00064.tfrecord').read_bytes() == frame(record) * 12
