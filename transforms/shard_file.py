"""One shard file written record by record (the ordered writers of
transforms/write_shards.py), and how a failed write lets its files go."""

from __future__ import annotations

import contextlib

from transforms import filesystem
from transforms.core.spec import INDEX_SUFFIX
from transforms.core.tfrecord import frame
from transforms.workers.write_behind import IN_PLACE
from transforms.workers.write_behind import WriteBehind
from transforms.workers.write_behind import WriteInPlace


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


# Records are gathered and written this many bytes at a time. A write call a
# 31 KB record cost 15.5 us of a record read and written again; gathered, 10.7
# (12,000 224x224 JPEG records from the page cache to a new file, ext4, 2 AMD
# EPYC cores): the file system's cost is per call as well as per byte.
GATHER_BYTES = 1 << 20


class ShardFile:
  """A shard written record by record; with write_index, also its
  `<shard>.index` (one `offset length` line per record, the format of the
  tfrecord package's and DALI's index tools), from the offsets seen while
  writing, so no second pass over the shard. Records reach the file
  gather_bytes at a time (GATHER_BYTES; less for a writer with many shards
  open), and all of them by close(); with `behind`, those writes are done on
  its thread (the writer's shards share one)."""

  def __init__(self, path: str, compression: str, write_index: bool = False,
               files: filesystem.FileAccess | None = None,
               gather_bytes: int = GATHER_BYTES, behind: WriteBehind | WriteInPlace = IN_PLACE):
    self._path = path
    self._behind = behind
    self._files = files or filesystem.FileAccess()
    self._handle = self._files.create(path, gzip_compressed=compression == 'gzip')
    self._lines = [] if write_index else None
    self._position = 0
    self._abandoned = False
    self._gathered, self._gathered_bytes, self._gather_bytes = [], 0, gather_bytes

  def write_record(self, data: bytes, framed: bytes = b'') -> tuple:
    """-> (offset, length, data CRC) of the framed record in the uncompressed
    bytes (the CRC: the masked CRC32C that follows its data). framed: the
    record already framed (a checked copy's bytes as read), else b''."""
    framed, offset = framed or frame(data), self._position
    self._gathered.append(framed)
    self._gathered_bytes += len(framed)
    if self._gathered_bytes >= self._gather_bytes:
      self._write_gathered()
    if self._lines is not None:
      self._lines.append(f'{offset} {len(framed)}\n')
    self._position += len(framed)
    return offset, len(framed), int.from_bytes(framed[-4:], 'little')

  def _write_gathered(self) -> None:
    gathered = self._gathered
    self._gathered, self._gathered_bytes = [], 0
    data = gathered[0] if len(gathered) == 1 else b''.join(gathered)
    self._behind.write(self._handle, data)

  def abandon(self) -> None:
    """Closes the file after a failed write, whose error is the one raised;
    close() then does nothing (no index of a partial shard)."""
    self._abandoned = True
    self._gathered, self._gathered_bytes = [], 0
    self._behind.drop()  # its thread no longer writes to the handle
    with contextlib.suppress(OSError):  # flushing the rest fails as the write did
      self._handle.close()

  def close(self) -> None:
    if self._abandoned:
      return
    with abandoned_on_error([self]):
      if self._gathered:
        self._write_gathered()
      self._behind.drain()
    self._handle.close()
    if self._lines is not None:
      with self._files.create(self._path + INDEX_SUFFIX) as index:
        index.write(''.join(self._lines).encode('ascii'))

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()
