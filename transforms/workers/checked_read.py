"""An image source's bytes, read under --max_image_bytes and checked by their
first bytes against --formats, whatever holds them: a local file, an object,
an HTTP body, a Parquet cell, a tar member. Below every reader of sources
(source_image.py, source_refs.py, http_fetch.py)."""

from __future__ import annotations

from typing import BinaryIO
from typing import Optional

from transforms.core.image import HEADER_BYTES
from transforms.core.image import check_signature
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec

_CHUNK_BYTES = 1 << 20


def too_large(path: str, num_bytes: Optional[int], max_bytes: int,
              grew: bool = False) -> RowError:
  """num_bytes None: a size nobody reported, found past max_bytes as read."""
  what = ('grew past' if grew else 'has more bytes than' if num_bytes is None
          else f'is {num_bytes} bytes, more than')
  return RowError(STAGE_READ, 'too_large', f'{path} {what} --max_image_bytes {max_bytes}: '
                  'not read' + (' further' if grew or num_bytes is None else ''))


def read_checked(stream: BinaryIO, path: str, size: Optional[int], spec: ImageSpec) -> bytes:
  """The bytes of an open file whose reported size is `size` (None: unknown).

  Refused before anything is read when `size` is above spec.max_image_bytes
  (read/too_large), and after its first HEADER_BYTES bytes when no format of
  spec.formats starts that way (decode/not_an_image or format_not_allowed,
  the codes decoding would give), so a large file that is no image is never
  read whole. Reading stops past spec.max_image_bytes, should the file be
  longer than reported (still being written, or a size nobody reports).
  """
  max_bytes = spec.max_image_bytes
  if size is not None and size > max_bytes:
    raise too_large(path, size, max_bytes)
  # A file's first bytes looked at, not taken, where the stream allows it (a
  # local file's): the whole file is then one read, one bytes object. Joined
  # to a prefix read apart it was held twice while joined (a 250 MB image
  # peaked at 500 MB in its image process).
  peeked = stream.peek(HEADER_BYTES)[:HEADER_BYTES] if hasattr(stream, 'peek') else b''
  whole = size is not None and len(peeked) >= min(HEADER_BYTES, size)
  prefix = peeked if whole else stream.read(HEADER_BYTES)
  check_signature(prefix, spec.formats, size if size is not None else len(prefix))
  parts, total = ([], 0) if whole else ([prefix], len(prefix))
  if size is not None and size > total:
    parts.append(stream.read(size - total))  # the whole file as reported, in one read
    total += len(parts[-1])
  while total <= max_bytes:
    chunk = stream.read(min(_CHUNK_BYTES, max_bytes + 1 - total))
    if not chunk:
      break
    parts.append(chunk)
    total += len(chunk)
  if total > max_bytes:  # read to max_bytes + 1: that is no size (a 2 GB body's was said)
    raise too_large(path, None, max_bytes, grew=size is not None)
  return b''.join(parts)
