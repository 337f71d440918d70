"""Reading the TFRecord framing with both CRCs checked: plain functions.

Each record is: uint64 length | uint32 masked crc32c(length) | data |
uint32 masked crc32c(data), little-endian.
"""

from __future__ import annotations

from collections.abc import Iterator
import io
import struct
from typing import BinaryIO
from typing import Optional

import google_crc32c

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct('<QI')
_FOOTER = struct.Struct('<I')


class ShardError(Exception):
  """The shard cannot be read past record `index`."""

  def __init__(self, index: int, kind: str, detail: str):
    super().__init__(detail)
    self.index, self.kind, self.detail = index, kind, detail


def masked_crc(data: bytes) -> int:
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
  """One record in TFRecord framing (the shard writers, tests and the benchmark)."""
  length = struct.pack('<Q', len(data))
  return length + struct.pack('<I', masked_crc(length)) + data + struct.pack(
      '<I', masked_crc(data))


# A record's data is read at most this many bytes at a time: the length comes
# from the shard, and a damaged or hostile one (2^40, with a valid length CRC)
# read in one call made Python allocate it all: a MemoryError traceback.
READ_CHUNK = 16 << 20


def _read_data(stream: BinaryIO, length: int) -> bytes:
  """Up to `length` bytes of `stream` (fewer where it ends), allocating no
  more than the bytes there are plus READ_CHUNK. Over READ_CHUNK they are
  gathered in a BytesIO, whose buffer getvalue hands over without a copy:
  a 200 MiB record peaked at 232 MiB (joining the chunks: 400 MiB)."""
  if length <= READ_CHUNK:
    return stream.read(length)
  gathered, got = io.BytesIO(), 0
  while got < length:
    part = stream.read(min(READ_CHUNK, length - got))
    if not part:
      break
    gathered.write(part)
    got += len(part)
  return gathered.getvalue()


def _skip_data(stream: BinaryIO, length: int) -> int:
  """Reads and drops up to `length` bytes of a stream that cannot seek, at
  most READ_CHUNK at a time; the number of bytes there were."""
  got = 0
  while got < length:
    part = stream.read(min(READ_CHUNK, length - got))
    if not part:
      break
    got += len(part)
  return got


def _data_length(header: bytes) -> Optional[int]:
  """The data length a record's 12-byte header gives; None if its CRC fails."""
  length, length_crc = _HEADER.unpack(header)
  return length if masked_crc(header[:8]) == length_crc else None


def _intact(data: bytes, footer: bytes) -> bool:
  """Whether `data` matches the CRC in its record's 4-byte footer."""
  return masked_crc(data) == _FOOTER.unpack(footer)[0]


def data_view(framed: bytes | memoryview) -> memoryview:
  """The data of a framed record whose frame is checked (unframe), as a view
  into `framed`: no copy of it."""
  return memoryview(framed)[_HEADER.size:len(framed) - _FOOTER.size]


def unframe(framed: bytes | memoryview, length: int, where: int) -> bytes:
  """The data of one framed record of `length` bytes, read from byte `where`
  of its shard (for the messages), both CRCs checked; ShardError if it is
  not there intact (`framed` shorter: the shard ends before it). `framed`
  may be a view (of a chunk read ahead, copies.ShardReader)."""
  if len(framed) < length:
    raise ShardError(0, 'truncated_shard', f'shard ends before byte {where + length}')
  if (length < _HEADER.size + _FOOTER.size
          or _data_length(bytes(framed[:_HEADER.size])) != length - _HEADER.size - _FOOTER.size):
    raise ShardError(0, 'corrupt_shard', f'no record of {length} bytes at byte {where}')
  data_end = length - _FOOTER.size
  data = bytes(framed[_HEADER.size:data_end])  # a view's data copied: the CRC takes bytes
  if not _intact(data, framed[data_end:length]):
    raise ShardError(0, 'corrupt_shard', f'data CRC mismatch in the record at byte {where}')
  return data


def read_records(stream: BinaryIO, first_index: int = 0,
                 limit: Optional[int] = None) -> Iterator[tuple[int, bytes]]:
  """Yields (index, data); raises ShardError at the first damaged record.

  A bad data CRC is reported for that record, and reading stops: a single
  flipped byte means the file is not what convert wrote. `first_index`: the
  index of the record the stream is at; `limit`: read at most that many.
  """
  for index, data, _ in read_framed(stream, first_index, limit):
    yield index, data


def read_framed(stream: BinaryIO, first_index: int = 0, limit: Optional[int] = None,
                offset: int = 0) -> Iterator[tuple[int, bytes, tuple]]:
  """read_records, each record with its place: (index, data, (offset, framed
  length, data CRC)), `offset` being the stream's position in the shard's
  uncompressed bytes; what an index line and a sidecar line say of it."""
  index, end = first_index, None if limit is None else first_index + limit
  while end is None or index < end:
    header = stream.read(_HEADER.size)
    if not header:
      return
    if len(header) < _HEADER.size:
      raise ShardError(index, 'truncated_shard',
                       f'file ends inside the header of record {index}')
    length = _data_length(header)
    if length is None:
      raise ShardError(index, 'corrupt_shard',
                       f'length CRC mismatch at record {index}')
    data = _read_data(stream, length)
    footer = stream.read(_FOOTER.size)
    if len(data) < length or len(footer) < _FOOTER.size:
      raise ShardError(index, 'truncated_shard', cut_inside(index, len(data), length, len(footer)))
    if not _intact(data, footer):
      raise ShardError(index, 'corrupt_shard', f'data CRC mismatch at record {index}')
    framed = _HEADER.size + length + _FOOTER.size
    yield index, data, (offset, framed, _FOOTER.unpack(footer)[0])
    index += 1
    offset += framed


def starts_with_a_record(head: bytes) -> bool:
  """Whether the first bytes of a file are an intact record header (a plain
  TFRecord: its length and the length's CRC)."""
  return len(head) >= _HEADER.size and _data_length(head[:_HEADER.size]) is not None


def cut_inside(index: int, got: int, length: int, footer: int) -> str:
  """What a shard that ends inside record `index` lacks: `got` of its
  `length` data bytes, and `footer` of the 4 bytes of its data CRC."""
  if got < length:
    return f'file ends inside record {index} ({got} of its {length} data bytes)'
  return (f'file ends inside the data CRC of record {index} (its {length} data bytes are '
          f"all there, {footer} of the CRC's {_FOOTER.size})")


def read_records_skipping(stream: BinaryIO) -> Iterator[tuple[int, object]]:
  """Like read_records, but a record whose data CRC fails is yielded as a
  ShardError and reading goes on (its length was intact); a damaged length or a
  cut-off file ends the shard with a ShardError."""
  for index, _, data in read_placed_skipping(stream):
    yield index, data


def read_placed_skipping(stream: BinaryIO) -> Iterator[tuple[int, tuple, object]]:
  """read_records_skipping's records, each with its place: (index, (offset,
  framed length), data or ShardError), the offset counted from the stream's
  start (a gzip shard's uncompressed bytes); (offset, None) for a ShardError
  that ends the shard."""
  index, offset = 0, 0
  while True:
    header = stream.read(_HEADER.size)
    if not header:
      return
    if len(header) < _HEADER.size:  # not a damaged length: a file cut (or 1-11 bytes appended)
      yield index, (offset, None), ShardError(index, 'truncated_shard',
                                              f'file ends inside the header of record {index}')
      return
    length = _data_length(header)
    if length is None:
      yield index, (offset, None), ShardError(index, 'corrupt_shard',
                                              f'record {index}: damaged length; '
                                              f'the rest of the file cannot be read')
      return
    data = _read_data(stream, length)
    footer = stream.read(_FOOTER.size)
    if len(data) < length or len(footer) < _FOOTER.size:
      yield index, (offset, None), ShardError(index, 'truncated_shard',
                                              cut_inside(index, len(data), length, len(footer)))
      return
    framed = _HEADER.size + length + _FOOTER.size
    if not _intact(data, footer):
      yield index, (offset, framed), ShardError(index, 'corrupt_shard',
                                                f'data CRC mismatch at record {index}')
    else:
      yield index, (offset, framed), data
    index += 1
    offset += framed


def record_spans(stream: BinaryIO) -> Iterator[tuple[int, int]]:
  """(offset, length incl. header and footer) of each record, reading only the
  12-byte headers and seeking past the data (no data CRC check: use
  read_records for that). On a non-seekable stream the data is read and
  dropped. ShardError when a header's length CRC fails or the file ends inside
  a record: seeking past the end of a file does not fail, and a shard cut
  inside its last record counted that record as whole."""
  end = None
  if stream.seekable():
    here = stream.tell()
    end = stream.seek(0, io.SEEK_END) - here  # the bytes from here on
    stream.seek(here)
  index, offset = 0, 0
  while True:
    header = stream.read(_HEADER.size)
    if not header:
      return
    if len(header) < _HEADER.size:
      raise ShardError(index, 'truncated_shard', f'file ends inside a header at byte {offset}')
    data_length = _data_length(header)
    if data_length is None:
      raise ShardError(index, 'corrupt_shard', f'length CRC mismatch at record {index}')
    length = data_length + _HEADER.size + _FOOTER.size
    skip = length - _HEADER.size
    if end is not None:
      got = min(skip, max(0, end - offset - _HEADER.size))
      stream.seek(skip, 1)
    else:
      got = _skip_data(stream, skip)
    if got < skip:
      raise ShardError(index, 'truncated_shard', cut_inside(
          index, min(got, data_length), data_length, max(0, got - data_length)))
    yield offset, length
    offset += length
    index += 1


def plan_spans(stream: BinaryIO, span_bytes: int) -> list[tuple[int, int, Optional[int]]]:
  """Cuts a shard into (offset, first index, record count) spans of about
  `span_bytes` each, to be read (read_records) and checked independently,
  reading only the 12-byte headers and seeking past the data. The last span's
  count is None (to the end of the file): scanning stops at the first header
  that is cut off or fails its CRC, and reading that span finds the damage and
  names it as read_records always does (later records are never read).
  """
  spans, start, first, index, offset = [], 0, 0, 0, 0
  while True:
    header = stream.read(_HEADER.size)
    if not header and start == offset and spans:
      return spans  # the file ends with the last full span
    if len(header) < _HEADER.size or masked_crc(header[:8]) != _HEADER.unpack(header)[1]:
      break
    offset += _HEADER.size + _HEADER.unpack(header)[0] + _FOOTER.size
    index += 1
    if offset - start >= span_bytes:
      spans.append((start, first, index - first))
      start, first = offset, index
    stream.seek(offset)
  spans.append((start, first, None))
  return spans
