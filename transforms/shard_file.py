"""One shard file written record by record (the ordered writers of
transforms/write_shards.py), and how a failed write lets its files go."""

from __future__ import annotations

import contextlib
import os
import queue
import threading

from transforms import filesystem
from transforms.core.paths import is_remote
from transforms.core.spec import INDEX_SUFFIX
from transforms.core.tfrecord import frame

# With write_behind, a local plain shard's records are written by a thread of
# its own, in lists of about this many bytes: a write releases the GIL, so
# the copy into the page cache (~10 us a 31 KB record) runs on another core
# while the step goes on. A nightly run of 12,000 224x224 JPEG records, 1%
# changed, spent 0.19 s of its 1.51 s of CPU in those writes; written behind,
# the step's thread spent 0.10-0.22 s less (three runs each, loaded machine).
WRITE_BEHIND_BYTES = 4 << 20
_IOV_MAX = 512  # records a writev (Linux takes 1,024)


@contextlib.contextmanager
def abandoned_on_error(shards: list):
  """A failed write (e.g. ENOSPC) closes the open shards before it goes on:
  one left open, referenced by the failure's traceback, would keep its disk
  space after the failed run deletes it."""
  try:
    yield
  except Exception:
    for shard in shards:
      shard.abandon()
    raise


class _WriteBehind:
  """Lists of records written in order to a file descriptor by a daemon
  thread; at most two lists wait (then add() waits: bounded memory). A
  write's error is raised by the next add() or by finish()."""

  def __init__(self, descriptor: int):
    self._descriptor = descriptor
    self._lists = queue.Queue(maxsize=2)
    self._error = None
    self._thread = threading.Thread(target=self._write_lists, name='shard-writer',
                                    daemon=True)
    self._thread.start()

  def add(self, records: list) -> None:
    self._raise()
    self._lists.put(records)

  def finish(self) -> None:
    """Returns once every list is written; raises a write's error."""
    self._lists.put(None)
    self._thread.join()
    self._raise()

  def _raise(self) -> None:
    if self._error is not None:
      raise self._error

  def _write_lists(self) -> None:
    while True:
      records = self._lists.get()
      if records is None:
        return
      if self._error is None:  # after an error the rest is dropped: the shard is abandoned
        try:
          write_all(self._descriptor, records)
        except OSError as error:
          self._error = error


def write_all(descriptor: int, records: list) -> None:
  """Every record's bytes written in order (os.writev, then a short write's rest)."""
  for start in range(0, len(records), _IOV_MAX):
    chunk = records[start:start + _IOV_MAX]
    written = os.writev(descriptor, chunk)
    for record in chunk:  # a short write: the bytes after `written`
      if written >= len(record):
        written -= len(record)
        continue
      rest = memoryview(record)[written:]
      written = 0
      while rest:
        rest = rest[os.write(descriptor, rest):]


class ShardFile:
  """A shard written record by record; with write_index, also its
  `<shard>.index` (one `offset length` line per record, the format of the
  tfrecord package's and DALI's index tools), from the offsets seen while
  writing, so no second pass over the shard."""

  def __init__(self, path: str, compression: str, write_index: bool = False,
               files: filesystem.FileAccess | None = None, write_behind: bool = False):
    """write_behind: a local plain shard's records are written by a thread
    (_WriteBehind), up to 3 x WRITE_BEHIND_BYTES waiting: for a writer with
    one shard open at a time (the round robin's N open shards would hold N
    times that)."""
    self._path = path
    self._files = files or filesystem.FileAccess()
    self._handle = self._files.create(path, gzip_compressed=compression == 'gzip')
    self._lines = [] if write_index else None
    self._position = 0
    self._abandoned = False
    self._behind = None  # a local plain shard's _WriteBehind, and the records it waits for
    if write_behind and compression != 'gzip' and not is_remote(path):
      self._behind, self._waiting, self._waiting_bytes = (
          _WriteBehind(self._handle.fileno()), [], 0)

  def write_record(self, data: bytes, framed: bytes = b'') -> tuple:
    """-> (offset, length, data CRC) of the framed record in the uncompressed
    bytes (the CRC: the masked CRC32C that follows its data). framed: the
    record already framed (a checked copy's bytes as read), else b''."""
    framed, offset = framed or frame(data), self._position
    if self._behind is None:
      self._handle.write(framed)
    else:
      self._waiting.append(framed)
      self._waiting_bytes += len(framed)
      if self._waiting_bytes >= WRITE_BEHIND_BYTES:
        self._hand_over()
    if self._lines is not None:
      self._lines.append(f'{offset} {len(framed)}\n')
    self._position += len(framed)
    return offset, len(framed), int.from_bytes(framed[-4:], 'little')

  def _hand_over(self) -> None:
    records, self._waiting, self._waiting_bytes = self._waiting, [], 0
    self._behind.add(records)

  def abandon(self) -> None:
    """Closes the file after a failed write, whose error is the one raised;
    close() then does nothing (no index of a partial shard)."""
    self._abandoned = True
    with contextlib.suppress(OSError):  # flushing the rest fails as the write did
      if self._behind is not None:
        self._waiting = []
        self._behind.finish()
    with contextlib.suppress(OSError):
      self._handle.close()

  def close(self) -> None:
    if self._abandoned:
      return
    if self._behind is not None:
      with abandoned_on_error([self]):
        self._hand_over()
        self._behind.finish()
    self._handle.close()
    if self._lines is not None:
      with self._files.create(self._path + INDEX_SUFFIX) as index:
        index.write(''.join(self._lines).encode('ascii'))

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()
