"""Copying a previous dataset's record (--previous_dataset): reading it back
by its offset with both CRCs checked, and proving it is the record its
sidecar line names (its data CRC, the row's key, the line's label, image
path and source SHA-256) before it is written again. Plain functions; the
sidecar's lines and the decision per row are in reuse.py.

A single local worker copies records inline, in its image step (a reused
row goes through it like any row, in write order, to the same writer, its
"image work" a copy of its record; a copy that fails converts the image
instead): ShardReader. Elsewhere a previous shard is read per worker call:
read_at, pick_places.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import os
import tempfile
from typing import BinaryIO
from typing import NamedTuple
from typing import Optional
import zlib

from transforms.core import file_kinds
from transforms.core.reuse import PreviousRecord
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import data_view
from transforms.core.tfrecord import masked_crc
from transforms.core.tfrecord import read_placed_skipping
from transforms.core.tfrecord import unframe

# What ShardError.kind says of a record that is intact but not the one the
# sidecar names (its CRC, its key, its label, its image path or SHA-256 differ).
NOT_THE_RECORD = 'not_the_record'

@dataclasses.dataclass(frozen=True)
class CopyCheck:
  """The features a copied record is proven its row's by (copy_check): the
  row's key, and the label id and text, image path and source SHA-256 its
  sidecar line says it holds (the run decided to copy it by that line's label
  and path, and writes the line's path and SHA-256 into its own sidecar; with
  --dedupe or --split_by content it also dedupes and splits by that SHA-256).
  None: the schema has none."""
  key: Optional[str] = None
  label: Optional[str] = None
  text: Optional[str] = None
  image: Optional[str] = None
  sha256: Optional[str] = None

  @functools.cached_property
  def names(self) -> dict:
    return {name.encode('utf-8'): name
            for name in (self.key, self.label, self.text, self.image, self.sha256) if name}

  @functools.cached_property
  def sizes(self) -> frozenset:
    return frozenset(map(len, self.names))


NO_CHECK = CopyCheck()


# The features that repeat a sidecar line's image path and source SHA-256,
# when a schema's records hold them (and they are not its key).
IMAGE_FEATURE = 'image/filename'
SHA256_FEATURE = 'image/key/sha256'


def copy_check(table) -> CopyCheck:
  """A schema's CopyCheck from its feature table (feature_tables.FeatureTable)."""
  names = {feature.name for feature in table.features} - {table.key}
  return CopyCheck(table.key, table.label, table.text,
                   IMAGE_FEATURE if IMAGE_FEATURE in names else None,
                   SHA256_FEATURE if SHA256_FEATURE in names else None)


def checked_copy(data: bytes, data_crc: int, record: PreviousRecord, key: str,
                 check: CopyCheck) -> bytes:
  """`data` (a record read intact, data_crc its masked CRC32C) if it is the
  record the sidecar names: the CRC the sidecar recorded, the row's key in
  its key feature (none in --schema seed), and the sidecar's label, image
  path and source SHA-256 in its features; else ShardError NOT_THE_RECORD. A
  sidecar line whose label is not its record's would have the run copy a
  record whose label the manifest changed; one whose SHA-256 is not would
  be written into the new sidecar and report the record a copy of another."""
  if data_crc != record.data_crc:
    raise ShardError(record.ordinal, NOT_THE_RECORD,
                     f'{_where(record)} has CRC {data_crc}; the sidecar says {record.data_crc}')
  if not check.names or _proto().differing_feature(
      data, _expected(check, record, key), check.sizes) is None:
    return data
  # Something differs: never copied. Which, and what the record holds (for
  # the message only: a record whose values equal but whose bytes do not, a
  # name given twice or not in the plain layout, is refused all the same).
  found = _proto().plain_features(data, check.names) or {}
  if check.key and found.get(check.key) != [key.encode('utf-8')]:
    raise ShardError(record.ordinal, NOT_THE_RECORD,
                     f'{_where(record)} holds the key {_shown(found.get(check.key))}, '
                     f'not {key!r}')
  for name, said in ((check.label, record.label_id), (check.text, record.label_text),
                     (check.image, record.image), (check.sha256, record.source_sha256)):
    if name and said is not None and found.get(name) != _values(said):
      raise ShardError(record.ordinal, NOT_THE_RECORD,
                       f'{_where(record)} holds the {name} {_shown(found.get(name))}; the '
                       f'sidecar says {said!r}')
  raise ShardError(record.ordinal, NOT_THE_RECORD,
                   f'{_where(record)} holds its key, label, path or SHA-256 other than as '
                   f'written (a feature given twice, or not in the plain layout)')


def _expected(check: CopyCheck, record: PreviousRecord, key: str) -> dict:
  """{feature name as bytes: its Feature's bytes} of what the record must hold."""
  # surrogatepass: a damaged line's lone surrogate is no record's value (a
  # fallback), not an error; the row's key and real paths are UTF-8
  expected = {
      name.encode('utf-8'): _proto().one_bytes_feature(value.encode('utf-8', 'surrogatepass'))
      for name, value in ((check.key, key), (check.image, record.image),
                          (check.sha256, record.source_sha256))
      if name and value is not None}
  for name, kind, said in ((check.label, 'int64', record.label_id),
                           (check.text, 'bytes', record.label_text)):
    if name and said is not None:
      try:
        expected[name.encode('utf-8')] = _label_feature(
            kind, tuple(said) if isinstance(said, list) else said)
      except (TypeError, ValueError):  # 1.0 equals the row's id 1, but is no int64
        raise ShardError(record.ordinal, NOT_THE_RECORD,
                         f'{_where(record)}: the sidecar says the {name} {said!r}, no '
                         f'{kind} value')
  return expected


@functools.lru_cache(maxsize=4096, typed=True)  # a few per class, not one a row; 1.0 is no 1
def _label_feature(kind: str, value) -> bytes:
  return _proto().feature_bytes(kind, list(value) if isinstance(value, tuple) else value)


def _values(label) -> list:
  """A sidecar line's label id or text as its record's feature values."""
  items = label if isinstance(label, list) else [label]
  return [item.encode('utf-8', 'surrogatepass') if isinstance(item, str) else item
          for item in items]


def _shown(values) -> str:
  return repr(values[0] if values and len(values) == 1 else values)


def _where(record: PreviousRecord) -> str:
  return f'record {record.ordinal} of {record.shard_path} (byte {record.offset})'


@functools.cache
def _proto():
  """example_proto, imported on first use (its descriptors take 2.3 ms to
  build; an image worker process that copies nothing never needs them), then
  no import statement a copy (1 us each, 6% of a copy's time)."""
  from transforms.core import example_proto
  return example_proto


def read_at(stream: BinaryIO, size: int, record: PreviousRecord, key: str,
            check: CopyCheck) -> bytes:
  """The data of `record` in a plain shard of `size` bytes, both CRCs
  checked and proven the record named (checked_copy); ShardError if not."""
  _bounded(record, size)
  stream.seek(record.offset)
  framed = stream.read(record.length)
  return _checked(framed, record, key, check)


def _bounded(record: PreviousRecord, size: int) -> None:
  """ShardError unless the record's bytes lie inside its shard's `size` (before
  any is read: a damaged length never allocates more than the shard holds)."""
  if record.offset + record.length > size:
    raise ShardError(record.ordinal, 'truncated_shard',
                     f'shard ends before byte {record.offset + record.length}')


def _checked(framed: bytes, record: PreviousRecord, key: str, check: CopyCheck) -> bytes:
  data = unframe(framed, record.length, record.offset)
  return checked_copy(data, int.from_bytes(framed[-4:], 'little'), record, key, check)


def pick_places(stream: BinaryIO, wanted: dict, check: CopyCheck):
  """(offset, data or ShardError) for each (record, key) of `wanted`
  ({offset: [(record, key), ...]}, in that order), streaming a gzip shard
  once from its start; stops after the last one wanted. A record is found
  where its line's offset and length place it, as read_at and ShardReader
  find one (a single local worker's copies): picked by ordinal, a line whose
  offset or length was damaged, or that named another record's place, was
  copied here and encoded there. Offsets no record starts at, or past the
  end, get a ShardError; a record is checked for each (record, key) as
  checked_copy does. Two sidecar lines may name one record (a damaged or
  edited sidecar): each gets its answer (one (record, key) a place had the
  other line's row neither copied nor encoded: lost)."""
  wanted = dict(wanted)
  if not wanted:
    return
  last = max(wanted)
  for index, (offset, framed), data in read_placed_skipping(stream):
    for record, key in wanted.pop(offset, ()):
      if not isinstance(data, ShardError) and framed != record.length:
        yield offset, ShardError(index, 'corrupt_shard', f'the record at byte {offset} is '
                                 f'{framed} bytes, its line says {record.length}')
      else:
        yield offset, _checked_or_error(data, record, key, check)
    if offset >= last:
      break
  for offset in sorted(wanted):
    for record, _ in wanted[offset]:
      yield offset, ShardError(record.ordinal, 'truncated_shard',
                               f'no record starts at byte {offset}')


def _checked_or_error(data, record: PreviousRecord, key: str, check: CopyCheck):
  """checked_copy's data, or its ShardError (or `data` itself, a ShardError)."""
  if isinstance(data, ShardError):
    return data
  try:
    return checked_copy(data, masked_crc(data), record, key, check)
  except ShardError as error:
    return error


class Copied(NamedTuple):
  """A record copied intact (its data, CRCs checked), and the framed record
  as read (b'': none kept), which the writer writes as it is. ShardReader's
  data is a view into its framed bytes (tfrecord.data_view)."""
  data: bytes | memoryview
  framed: bytes = b''


_INFLATE_CHUNK = 1 << 20  # how much of a gzip shard is inflated at a time into its local copy
# Reused records in a run of consecutive ones are read this many bytes at a
# time (ShardReader). One pread a record took 20 us of wall time against 5.5
# of CPU: each pread let the image pool's threads take the GIL, and the step
# waited to get it back (12,000 31 KB records, 1% of rows encoded, 2 cores).
READ_AHEAD = 1 << 20


class ShardReader:
  """Reads records of local previous shards by offset, each checked
  (checked_copy, by `check`). A plain shard: pread on a file kept open while
  the reader is (2-3x as fast as an open, a seek and a read per record,
  measured on 12,000 records of 31 KB; a map of the file held the GIL through
  its page faults, and a shard cut short under it would kill the process
  with SIGBUS), one record at a time, or READ_AHEAD bytes at a time along a
  run of consecutive records (_framed). A gzip shard is inflated
  once, as far as the records asked need, into an unnamed temporary file
  read the same way: the order records are asked in costs nothing (streaming
  it again for every record asked out of order took 55 s for 1,500 records
  against 2.1 s for a full run). close() lets every file go: a reader lives for
  a bundle, so a shard replaced between runs is never read through an old
  descriptor. A shard that is no regular file (a FIFO) is never opened."""

  def __init__(self, check: CopyCheck = NO_CHECK):
    self._check = check
    self._files = {}  # plain shard -> (descriptor, size)
    self._inflated = {}  # gzip shard -> [gzip stream, temporary file, bytes in it]
    # (shard, offset, bytes): the last read, where the next record is looked
    # for first; `end`: where the last record read ended in its shard
    self._ahead, self._end = (None, 0, b''), (None, 0)

  def copy(self, record: PreviousRecord, key: str) -> Copied:
    """The record checked as a copy (both CRCs, then checked_copy), with its
    framed bytes as read, which are what frame(data) would make again;
    COPY_ERRORS if not."""
    framed = self._framed(record)
    _checked(framed, record, key, self._check)
    # Only the framed bytes are kept, the data a view into them: a copy held
    # apart, while up to 1,024 copies wait for the writer, cost 7-10 us a
    # record in fresh memory (pread and unframe of 12,000 31 KB records
    # in write order, the last 1,024 kept: 14.0-17.5 us against 6.5-6.6).
    return Copied(data_view(framed), framed)

  def data(self, record: PreviousRecord) -> tuple:
    """(data, its masked CRC32C) of the framed record at the record's offset,
    both CRCs checked (not whose record it is); COPY_ERRORS if not intact."""
    framed = self._framed(record)
    return unframe(framed, record.length, record.offset), int.from_bytes(framed[-4:], 'little')

  def _framed(self, record: PreviousRecord) -> bytes:
    """The record's bytes at its offset, unchecked (inside its shard)."""
    if record.shard_path not in self._files and record.shard_path not in self._inflated:
      file_kinds.require_regular(record.shard_path, ShardError, 0, 'unreadable_shard')
    if record.compressed:
      descriptor, size = self._inflate(record.shard_path, record.offset + record.length)
    else:
      descriptor, size = self._opened(record.shard_path)
    _bounded(record, size)
    path, start, chunk = self._ahead
    end = record.offset + record.length
    if path == record.shard_path and start <= record.offset and end <= start + len(chunk):
      self._end = path, end
      # copied out (1-2 us from a chunk just read): a record kept waiting
      # for the writer holds its own bytes, never a whole chunk
      return chunk[record.offset - start:end - start]
    # A record right after the last one read, in the same shard, is read
    # with those that follow it (READ_AHEAD bytes): reused rows come in runs
    # of consecutive records. Any other record is read alone: no chunk is
    # read for records that are not asked for next.
    sequential = self._end == (record.shard_path, record.offset)
    self._end = record.shard_path, end
    if not sequential:
      return os.pread(descriptor, record.length, record.offset)
    chunk = os.pread(descriptor, max(record.length, min(READ_AHEAD, size - record.offset)),
                     record.offset)
    self._ahead = record.shard_path, record.offset, chunk
    return chunk[:record.length]

  def _opened(self, path: str) -> tuple:
    if path not in self._files:
      descriptor = os.open(path, os.O_RDONLY | getattr(os, 'O_CLOEXEC', 0))
      self._files[path] = descriptor, os.fstat(descriptor).st_size
    return self._files[path]

  def _inflate(self, path: str, end: int) -> tuple:
    """(descriptor, bytes inflated) of the local copy of gzip shard `path`,
    inflated up to byte `end` or its end."""
    if path not in self._inflated:
      stream = gzip.open(path, 'rb')
      self._inflated[path] = [stream, tempfile.TemporaryFile(), 0]
    entry = self._inflated[path]
    stream, copy, size = entry
    while size < end and stream is not None:
      # read1: what is inflated so far comes out before a cut raises
      # EOFError (read(n) dropped the chunk it held: a shard cut short had
      # every record encoded, those before the cut too; by shard, streamed,
      # they were copied)
      chunk = stream.read1(_INFLATE_CHUNK)
      if not chunk:
        stream.close()
        entry[0] = stream = None
        break
      copy.write(chunk)
      size += len(chunk)
    copy.flush()
    entry[2] = size
    return copy.fileno(), size

  def close(self) -> None:
    for descriptor, _ in self._files.values():
      os.close(descriptor)
    for stream, copy, _ in self._inflated.values():
      if stream is not None:
        stream.close()
      copy.close()
    self._files, self._inflated = {}, {}
    self._ahead, self._end = (None, 0, b''), (None, 0)


# What reading a previous shard's record can raise besides a RowError-free bug.
COPY_ERRORS = (ShardError, OSError, EOFError, zlib.error)
