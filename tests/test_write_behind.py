"""WriteBehind (transforms/workers/write_behind.py): writes done on one thread,
in order, a failed one raised in the thread that handed it over; and a shard
written through it (shard_file.ShardFile)."""

import errno
import gzip
import io
import threading

import pytest

from transforms import filesystem
from transforms.core.tfrecord import frame
from transforms.shard_file import ShardFile
from transforms.workers.write_behind import IN_PLACE
from transforms.workers.write_behind import WriteBehind
from transforms.write_sources import SidecarFile


class _Failing(io.BytesIO):
  """A handle whose write number `fail_at` (from 0) fails as a full disk does."""

  def __init__(self, fail_at: int):
    super().__init__()
    self._fail_at, self.calls = fail_at, 0

  def write(self, data):
    self.calls += 1
    if self.calls - 1 == self._fail_at:
      raise OSError(errno.ENOSPC, 'No space left on device')
    return super().write(data)


class _Held(io.BytesIO):
  """A handle whose first write waits until `release` is set."""

  def __init__(self):
    super().__init__()
    self.started, self.release = threading.Event(), threading.Event()

  def write(self, data):
    if not self.started.is_set():
      self.started.set()
      assert self.release.wait(30)
    return super().write(data)


def test_writes_to_several_handles_land_in_the_order_given():
  behind, first, second = WriteBehind(in_flight=2), io.BytesIO(), io.BytesIO()
  for i in range(50):
    behind.write(first if i % 3 else second, b'%d,' % i)
  behind.drain()
  assert first.getvalue() == b''.join(b'%d,' % i for i in range(50) if i % 3)
  assert second.getvalue() == b''.join(b'%d,' % i for i in range(0, 50, 3))
  behind.close()


def test_a_failed_write_is_raised_by_every_later_call_and_nothing_after_it_is_written():
  behind, handle = WriteBehind(), _Failing(fail_at=1)
  behind.write(handle, b'a')
  behind.write(handle, b'b')  # fails on the thread
  with pytest.raises(OSError) as raised:
    behind.drain()
  assert raised.value.errno == errno.ENOSPC
  with pytest.raises(OSError):
    behind.write(handle, b'c')
  with pytest.raises(OSError):
    behind.drain()
  behind.close()
  assert handle.getvalue() == b'a'
  assert handle.calls == 2


def test_drop_waits_for_the_write_under_way_and_drops_those_not_started():
  behind, handle = WriteBehind(in_flight=4), _Held()
  behind.write(handle, b'first')
  assert handle.started.wait(30)
  behind.write(handle, b'second')
  behind.write(handle, b'third')
  dropped = threading.Thread(target=behind.drop)
  dropped.start()
  handle.release.set()
  dropped.join(30)
  assert not dropped.is_alive()
  assert handle.getvalue() == b'first'
  behind.close()


def test_an_idle_thread_ends_and_a_later_write_starts_another():
  behind, handle = WriteBehind(idle_s=0.05), io.BytesIO()
  behind.write(handle, b'one')
  thread = behind._thread
  thread.join(30)  # nothing more to write: it ends by itself
  assert not thread.is_alive()
  behind.write(handle, b'two')
  behind.drain()
  assert handle.getvalue() == b'onetwo'
  behind.close()
  assert behind._thread is None


def test_close_ends_the_thread_after_the_writes_handed_over():
  behind, handle = WriteBehind(), io.BytesIO()
  for i in range(10):
    behind.write(handle, bytes([i]) * 1000)
  thread = behind._thread
  behind.close()
  assert not thread.is_alive()
  assert handle.getvalue() == b''.join(bytes([i]) * 1000 for i in range(10))


def test_a_shard_written_behind_holds_the_bytes_of_one_written_in_place(tmp_path):
  records = [bytes([i]) * (100 + 37 * i) for i in range(200)]
  behind = WriteBehind()
  for name, through in (('behind.tfrecord', behind), ('in_place.tfrecord', IN_PLACE)):
    shard = ShardFile(str(tmp_path / name), 'none', write_index=True, gather_bytes=4096,
                      behind=through)
    spans = [shard.write_record(record) for record in records]
    shard.close()
  behind.close()
  assert (tmp_path / 'behind.tfrecord').read_bytes() == b''.join(map(frame, records))
  assert (tmp_path / 'behind.tfrecord').read_bytes() == (
      tmp_path / 'in_place.tfrecord').read_bytes()
  assert (tmp_path / 'behind.tfrecord.index').read_text() == (
      tmp_path / 'in_place.tfrecord.index').read_text()
  assert spans[1][:2] == (len(frame(records[0])), len(frame(records[1])))


def test_a_shard_whose_write_fails_behind_raises_at_the_next_write_and_is_abandoned(tmp_path):
  behind = WriteBehind()
  shard = ShardFile(str(tmp_path / 'full.tfrecord'), 'none', write_index=True,
                    gather_bytes=1024, behind=behind)
  handle = _Failing(fail_at=2)
  shard._handle.close()
  shard._handle = handle
  with pytest.raises(OSError) as raised:
    for i in range(20):  # the third 1 KB write fails on the thread: a later call raises it
      shard.write_record(bytes([i]) * 500)
    shard.close()  # at the latest
  assert raised.value.errno == errno.ENOSPC
  shard.abandon()  # as the writers do with every open shard (write_shards.py)
  shard.close()  # then does nothing
  assert handle.closed  # abandoned: its disk space goes with the failed run
  assert handle.calls == 3  # the writes after the failed one were dropped
  assert not (tmp_path / 'full.tfrecord.index').exists()  # no index of a partial shard
  behind.close()


def test_a_sidecar_written_behind_holds_the_bytes_of_one_written_in_place(tmp_path):
  lines = [b'{"key": "%d", "shard": 0}\n' % i for i in range(1000)]
  behind = WriteBehind()
  files = filesystem.FileAccess()
  for name, through in (('behind.jsonl.gz', behind), ('in_place.jsonl.gz', IN_PLACE)):
    sidecar = SidecarFile(str(tmp_path / name), files, through)
    for line in lines:
      sidecar.add(line)
    sidecar.close()
  behind.close()
  assert gzip.decompress((tmp_path / 'behind.jsonl.gz').read_bytes()) == b''.join(lines)
  assert (tmp_path / 'behind.jsonl.gz').read_bytes() == (
      tmp_path / 'in_place.jsonl.gz').read_bytes()
