"""An image's bytes where no file of its own holds them (a Parquet cell, a
tar member), read by the image step: plain functions without Beam, so that
image worker processes read local files themselves.

A tar member is read by offset: one seek and one read in a .tar. A .tar.gz
cannot be entered mid-way: a thread keeps its last .tar.gz stream open where
its last member ended, and reads on from there while the members asked for
come in tar order (--shuffle off reads each .tar.gz once); a member before
that place opens the stream again.

A Parquet cell is read with its row group's column (Parquet has no smaller
unit pyarrow reads): the column is kept in a small cache that the threads of
a process share, so the rows of one row group that come one after another
(--shuffle off, or rows sorted by file) read it once, and threads that want
one column at once wait for one read of it rather than each reading (and
holding) a copy: a row group's column can be far larger than the cache (a
pandas or pyarrow file of images is often one row group). In a shuffled
order most rows read their row group again: the cost of keeping bytes out of
the pipeline's grouping steps.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
import io
import os
import threading
from typing import BinaryIO
from typing import Optional

from transforms.core.parquet import ParquetCell
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.core.webdataset import TarMember
from transforms.core.webdataset import is_gzipped
from transforms.workers.checked_read import read_checked
from transforms.workers.checked_read import too_large

# Bytes of row-group columns a process keeps (at least the last one read).
CACHE_BYTES = 64 << 20
_LOCAL = threading.local()
# The process's cached columns: (file, row group, column) -> pyarrow Array;
# _READING: a lock per column being read, which the threads wanting it wait on.
_COLUMNS: OrderedDict = OrderedDict()
_READING: dict = {}
_COLUMNS_LOCK = threading.Lock()

Opener = Callable[[str], BinaryIO]


def _open_local(path: str) -> BinaryIO:
  return open(path, 'rb')


def _version(path: str) -> tuple:
  """What tells a local file rewritten in place since it was read (size,
  modification and change times, inode); () for a remote one. A cached
  column or an open .tar.gz stream serves only the version it was read
  from: a process (a notebook calling api.convert each night) outlives a
  run, and a file rewritten between two runs gave the second the first's
  images."""
  if '://' in path:
    return ()
  try:
    found = os.stat(path)
  except OSError:  # gone: the read says so
    return ()
  return found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino


def _cached(key: tuple):
  """The cached column of `key` (marked as used last), or None; under _COLUMNS_LOCK."""
  found = _COLUMNS.get(key)
  if found is not None:
    _COLUMNS.move_to_end(key)
  return found


def _column(cell: ParquetCell, opener: Opener):
  """The row group's column of `cell` (a pyarrow Array), cached for every
  thread of the process: read by one thread while the others wait."""
  key = (cell.file, _version(cell.file), cell.row_group, cell.column)
  with _COLUMNS_LOCK:
    found = _cached(key)
    if found is not None:
      return found
    reading = _READING.setdefault(key, threading.Lock())
  with reading:
    with _COLUMNS_LOCK:
      found = _cached(key)
    if found is not None:
      return found
    try:
      column = _read_column(cell, opener)
      with _COLUMNS_LOCK:
        _COLUMNS[key] = column
        held = sum(array.nbytes for array in _COLUMNS.values())
        while len(_COLUMNS) > 1 and held > CACHE_BYTES:
          _, dropped = _COLUMNS.popitem(last=False)
          held -= dropped.nbytes
    finally:  # cached, or failed: a thread still waiting then reads it itself
      with _COLUMNS_LOCK:
        if _READING.get(key) is reading:
          del _READING[key]
    return column


def _read_column(cell: ParquetCell, opener: Opener):
  import pyarrow.parquet as pq
  try:
    with opener(cell.file) as stream:
      table = pq.ParquetFile(stream).read_row_group(cell.row_group, columns=[cell.column])
  except RowError:
    raise
  except Exception as error:  # OSError, ArrowInvalid (a damaged page), a store's own
    raise RowError(STAGE_READ, 'unreadable', f'cannot read {cell.where()} (row group '
                   f'{cell.row_group}): {type(error).__name__}: {error}')
  return table.flatten().column(0).combine_chunks()


def release_columns() -> None:
  """Lets the process's cached columns go: a step's pool calls it as it
  closes, so a process that outlives the run (a notebook calling api.convert)
  does not keep a row group's column (up to GBs) until its next run."""
  with _COLUMNS_LOCK:
    _COLUMNS.clear()


def clear_cache() -> None:
  """Lets the process's cached columns and this thread's open .tar.gz stream
  go (tests; a file rewritten in place)."""
  with _COLUMNS_LOCK:
    _COLUMNS.clear()
  place = getattr(_LOCAL, 'gzip', None)
  if place is not None:
    place.close()
    _LOCAL.gzip = None


def read_cell(cell: ParquetCell, spec: ImageSpec, opener: Opener = _open_local,
              read_path: Optional[Callable[[str, ImageSpec], bytes]] = None) -> bytes:
  """The image bytes of a Parquet cell, checked as a file's are
  (--max_image_bytes, then --formats by the first bytes); a null cell reads
  its fallback path with read_path. RowError when unusable."""
  value = _column(cell, opener)[cell.index].as_py()
  if value is None:
    if cell.fallback and read_path is not None:
      return read_path(cell.fallback, spec)
    raise RowError(STAGE_MANIFEST, 'empty_image', f'{cell.where()}: the image cell is null '
                   f'and names no path')
  return read_checked(io.BytesIO(value), cell.where(), len(value), spec)


# Bytes skipped at a time while a .tar.gz stream is read on to a member.
_SKIP_BYTES = 1 << 20


class _GzipPlace:
  """A thread's open .tar.gz stream and the offset it is at."""

  def __init__(self, file: str, opener: Opener):
    import gzip
    self.file = file
    self.version = _version(file)
    self._raw = opener(file)
    self.stream = gzip.GzipFile(fileobj=self._raw)
    self.offset = 0

  def close(self) -> None:
    self.stream.close()
    self._raw.close()


def _read_member_data(member: TarMember, opener: Opener) -> bytes:
  if not is_gzipped(member.file):
    with opener(member.file) as stream:
      stream.seek(member.offset)
      return stream.read(member.size)
  place = getattr(_LOCAL, 'gzip', None)
  if place is not None and (place.file != member.file or place.offset > member.offset
                            or place.version != _version(member.file)):
    place.close()
    place = _LOCAL.gzip = None
  if place is None:
    place = _LOCAL.gzip = _GzipPlace(member.file, opener)
  while place.offset < member.offset:
    skipped = len(place.stream.read(min(_SKIP_BYTES, member.offset - place.offset)))
    if not skipped:
      break
    place.offset += skipped
  data = place.stream.read(member.size)
  place.offset += len(data)
  return data


def read_member(member: TarMember, spec: ImageSpec, opener: Opener = _open_local) -> bytes:
  """A tar member's bytes, checked as a file's are (--max_image_bytes before
  any is read, --formats by the first bytes); RowError when unusable."""
  if member.size > spec.max_image_bytes:
    raise too_large(member.where(), member.size, spec.max_image_bytes)
  try:
    data = _read_member_data(member, opener)
  except Exception as error:  # OSError, EOFError and zlib's errors (a cut .tar.gz), a store's
    _LOCAL.gzip = None
    raise RowError(STAGE_READ, 'unreadable', f'cannot read {member.where()}: '
                   f'{type(error).__name__}: {error}')
  if len(data) < member.size:
    raise RowError(STAGE_READ, 'truncated', f'{member.where()}: the tar ends after '
                   f'{len(data)} of its {member.size} bytes')
  return read_checked(io.BytesIO(data), member.where(), member.size, spec)


def read_ref(ref, spec: ImageSpec, opener: Opener = _open_local,
             read_path: Optional[Callable[[str, ImageSpec], bytes]] = None) -> bytes:
  """The bytes of any reference a row carries (ManifestRow.ref)."""
  if isinstance(ref, ParquetCell):
    return read_cell(ref, spec, opener, read_path)
  if isinstance(ref, TarMember):
    return read_member(ref, spec, opener)
  raise TypeError(f'no reader for {type(ref).__name__}')


def is_ref(source) -> bool:
  """A reference to bytes (ManifestRow.ref), not a path."""
  return isinstance(source, (ParquetCell, TarMember))


def ref_file(ref) -> str:
  """The file that holds a reference's bytes."""
  return ref.file
