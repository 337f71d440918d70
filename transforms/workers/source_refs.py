"""An image's bytes where no file of its own holds them (a Parquet cell),
read by the image step: plain functions without Beam, so that image worker
processes read local files themselves.

A Parquet cell is read with its row group's column (Parquet has no smaller
unit pyarrow reads): the column is kept in a small per-thread cache, so the
rows of one row group that come one after another (--shuffle off, or rows
sorted by file) read it once. In a shuffled order most rows read their row
group again: the cost of keeping bytes out of the pipeline's grouping steps.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
import io
import threading
from typing import BinaryIO
from typing import Optional

from transforms.core.parquet import ParquetCell
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec

# Bytes of row-group columns a thread keeps (at least the last one read).
CACHE_BYTES = 64 << 20
_LOCAL = threading.local()

Opener = Callable[[str], BinaryIO]


def _open_local(path: str) -> BinaryIO:
  return open(path, 'rb')


def _cache() -> OrderedDict:
  cache = getattr(_LOCAL, 'columns', None)
  if cache is None:
    cache = _LOCAL.columns = OrderedDict()
  return cache


def _column(cell: ParquetCell, opener: Opener):
  """The row group's column of `cell` (a pyarrow Array), cached."""
  cache = _cache()
  key = (cell.file, cell.row_group, cell.column)
  found = cache.get(key)
  if found is not None:
    cache.move_to_end(key)
    return found
  import pyarrow.parquet as pq
  try:
    with opener(cell.file) as stream:
      table = pq.ParquetFile(stream).read_row_group(cell.row_group, columns=[cell.column])
  except RowError:
    raise
  except Exception as error:  # OSError, ArrowInvalid (a damaged page), a store's own
    raise RowError(STAGE_READ, 'unreadable', f'cannot read {cell.where()} (row group '
                   f'{cell.row_group}): {type(error).__name__}: {error}')
  column = table.flatten().column(0).combine_chunks()
  cache[key] = column
  held = sum(array.nbytes for array in cache.values())
  while len(cache) > 1 and held > CACHE_BYTES:
    _, dropped = cache.popitem(last=False)
    held -= dropped.nbytes
  return column


def clear_cache() -> None:
  """Lets this thread's cached columns go (tests; a file rewritten in place)."""
  _cache().clear()


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
  from transforms.workers.source_image import read_checked
  return read_checked(io.BytesIO(value), cell.where(), len(value), spec)


def read_ref(ref, spec: ImageSpec, opener: Opener = _open_local,
             read_path: Optional[Callable[[str, ImageSpec], bytes]] = None) -> bytes:
  """The bytes of any reference a row carries (ManifestRow.ref)."""
  if isinstance(ref, ParquetCell):
    return read_cell(ref, spec, opener, read_path)
  raise TypeError(f'no reader for {type(ref).__name__}')


def is_ref(source) -> bool:
  """A reference to bytes (ManifestRow.ref), not a path."""
  return isinstance(source, ParquetCell)


def ref_file(ref) -> str:
  """The file that holds a reference's bytes."""
  return ref.file
