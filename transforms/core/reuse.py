"""Reusing a previous dataset's records (--previous_dataset): the sidecar's
lines, the decision per row, and reading a record back by its offset with
its CRCs checked and proven to be the record the sidecar names. Plain
functions.

The sidecar SPLIT.sources.jsonl.gz holds one JSON line per record, in write
order (sources_format_version 2): key, shard (its index among the split's
shards in dataset_info.json), ordinal (its place in that shard), offset and
length (of the framed record in the shard's uncompressed bytes), data_crc
(the masked CRC32C that follows the record's data in the shard), fingerprint
(fingerprints.py), source_sha256, image (the row's image path as written),
label ({"id", "text"}; lists with --multi_label) and option_digest
(fingerprints.record_digest). Version 1 had neither data_crc nor image: its
records are read, never copied (SIDECAR_UPGRADE).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import tempfile
from typing import BinaryIO
from typing import NamedTuple
from typing import Optional
import zlib

from transforms.core import file_kinds
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import data_view
from transforms.core.tfrecord import masked_crc
from transforms.core.tfrecord import read_records_skipping
from transforms.core.tfrecord import unframe

# Why a row is encoded rather than copied (dataset_info.json reuse.encoded).
NEW = 'new'
SIDECAR_UPGRADE = 'sidecar_upgrade'  # its record's sidecar line is version 1
CHANGED_SOURCE = 'changed_source'
CHANGED_LABEL = 'changed_label'
CHANGED_SPLIT = 'changed_split'
CHANGED_FEATURES = 'changed_features'
CHANGED_OPTIONS = 'changed_options'
CHANGED_PATH = 'changed_path'  # the image path as written (image/filename)
REASONS = (NEW, CHANGED_SOURCE, CHANGED_LABEL, CHANGED_SPLIT, CHANGED_FEATURES,
           CHANGED_OPTIONS, CHANGED_PATH, SIDECAR_UPGRADE)
# Tally names (tally keys ('reuse', name)); bytes_copied sums bytes, not rows.
REUSED = 'reused'
DROPPED = 'dropped'
FALLBACK = 'reuse_fallback'
BYTES_COPIED = 'bytes_copied'
PREVIOUS = 'previous_records'  # in-order join: keys dropped = these - rows matched
MATCHED = 'matched'
DECIDED = 'decided'  # rows decided (each ends copied, encoded, fallen back or rejected)
SIDECARS_CUT_SHORT = 'sidecars_cut_short'  # read up to damage: rows past it encoded as new
TALLY = 'reuse'
# The longest sidecar line read (a line is ~300 bytes; a damaged or hostile
# sidecar must not make a reader hold a 4 GB line).
MAX_LINE_BYTES = 1 << 20
# What ShardError.kind says of a record that is intact but not the one the
# sidecar names (its CRC or its key differ).
NOT_THE_RECORD = 'not_the_record'


class PreviousRecord(NamedTuple):
  """Where one record of the previous dataset sits, and what it was made from."""
  split: str
  shard_path: str
  compressed: bool  # a gzip shard: offsets are in its uncompressed bytes
  ordinal: int
  offset: int
  length: int
  fingerprint: str
  source_sha256: str
  label_id: object  # an int, or a list of ints (--multi_label)
  label_text: object  # a str, or a list of str
  option_digest: str
  data_crc: Optional[int] = None  # None: a version-1 line (never copied)
  image: Optional[str] = None  # the image path as written; None: version 1


# json.dumps(..., ensure_ascii=False) builds an encoder on every call: one
# made once writes the same text (py-spy on 20,000 rows: json.dumps took
# 3.5% of the launcher, the encoding itself 2.7%).
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False)
# What that encoder writes for one string (the C escaper it calls).
_json_string = json.encoder.encode_basestring


def _json_value(value) -> str:
  if isinstance(value, str):
    return _json_string(value)
  if type(value) is int:  # a bool is written true or false
    return repr(value)
  return _LINE_ENCODER.encode(_plain(value))


def sidecar_line(key: str, shard: int, ordinal: int, offset: int, length: int,
                 data_crc: int, fingerprint: str, source_sha256: str, image: str,
                 label_id, label_text, option_digest: str) -> bytes:
  """One record's line of SPLIT.sources.jsonl.gz (the columns, in this order):
  the text _LINE_ENCODER writes for them as a dict, formatted directly (6.8
  against 2.9 us a line, one a record, in the writer)."""
  return (f'{{"key": {_json_string(key)}, "shard": {shard:d}, "ordinal": {ordinal:d}, '
          f'"offset": {offset:d}, "length": {length:d}, "data_crc": {data_crc:d}, '
          f'"fingerprint": {_json_string(fingerprint)}, '
          f'"source_sha256": {_json_string(source_sha256)}, "image": {_json_string(image)}, '
          f'"label": {{"id": {_json_value(label_id)}, "text": {_json_value(label_text)}}}, '
          f'"option_digest": {_json_string(option_digest)}}}\n').encode()


def _typed(data: dict, name: str, kind: type):
  value = data[name]
  if not isinstance(value, kind) or isinstance(value, bool):
    raise ValueError(f'{name} {value!r} is not a {kind.__name__}')
  return value


def _count(data: dict, name: str) -> int:
  value = _typed(data, name, int)
  if value < 0:
    raise ValueError(f'{name} {value} is negative')
  return value


def parse_line(line: bytes, split: str, shard_paths: list, compressed: bool,
               version: int = 2) -> tuple[str, PreviousRecord]:
  """A sidecar line of format `version` -> (key, PreviousRecord); ValueError
  if it is not one (a field missing or of another type, a shard the dataset
  does not list). Offsets and lengths are bounded when read (ShardReader)."""
  try:
    data = json.loads(line)
    if not isinstance(data, dict):
      raise ValueError('not a JSON object')
    shard = _count(data, 'shard')
    if shard >= len(shard_paths):
      raise ValueError(f'shard {shard!r} is not one of the {len(shard_paths)} shards')
    label = _typed(data, 'label', dict)
    v2 = version >= 2
    return _typed(data, 'key', str), PreviousRecord(
        split, shard_paths[shard], compressed, _count(data, 'ordinal'),
        _count(data, 'offset'), _count(data, 'length'), _typed(data, 'fingerprint', str),
        _typed(data, 'source_sha256', str), label['id'], label['text'],
        _typed(data, 'option_digest', str), _count(data, 'data_crc') if v2 else None,
        _typed(data, 'image', str) if v2 else None)
  except KeyError as missing:
    raise ValueError(f'no {missing} in the line')


def read_lines(stream: BinaryIO):
  """The lines of a sidecar stream, each read with at most MAX_LINE_BYTES in
  memory; ValueError at a longer one."""
  while True:
    line = stream.readline(MAX_LINE_BYTES)
    if not line:
      return
    if not line.endswith(b'\n') and len(line) >= MAX_LINE_BYTES:
      raise ValueError(f'a line longer than {MAX_LINE_BYTES} bytes')
    yield line


def _plain(value):
  """A multi-label row's tuples as the lists JSON reads back."""
  return list(value) if isinstance(value, tuple) else value


def decide(previous: Optional[PreviousRecord], split: str, fingerprint: str,
           label: Optional[tuple], option_digest: str, image: str) -> Optional[str]:
  """None: the row's record in the previous dataset may be copied (everything
  that went into it is unchanged); else why it is encoded (REASONS). label:
  the row's (id, text) in this run's label map, None if it resolves to none
  (the row is encoded, and rejected as always); image: its path as written."""
  if previous is None:
    return NEW
  if previous.data_crc is None:
    return SIDECAR_UPGRADE
  options, _, extras = option_digest.partition('-')
  previous_options, _, previous_extras = previous.option_digest.partition('-')
  if options != previous_options:
    return CHANGED_OPTIONS
  if not fingerprint or fingerprint != previous.fingerprint:
    return CHANGED_SOURCE
  if split != previous.split:
    return CHANGED_SPLIT
  if label is None or (_plain(label[0]), _plain(label[1])) != (
      previous.label_id, previous.label_text):
    return CHANGED_LABEL
  if extras != previous_extras:
    return CHANGED_FEATURES
  if image != previous.image:
    return CHANGED_PATH
  return None


def checked_copy(data: bytes, data_crc: int, record: PreviousRecord, key: str,
                 key_feature: Optional[str]) -> bytes:
  """`data` (a record read intact, data_crc its masked CRC32C) if it is the
  record the sidecar names: the CRC the sidecar recorded, and the row's key
  in its key feature (none in --schema seed); else ShardError NOT_THE_RECORD."""
  if data_crc != record.data_crc:
    raise ShardError(record.ordinal, NOT_THE_RECORD,
                     f'{_where(record)} has CRC {data_crc}; the sidecar says {record.data_crc}')
  if key_feature:
    found = _bytes_feature()(data, key_feature)
    if found != key.encode('utf-8'):
      raise ShardError(record.ordinal, NOT_THE_RECORD,
                       f'{_where(record)} holds the key {found!r}, not {key!r}')
  return data


def _where(record: PreviousRecord) -> str:
  return f'record {record.ordinal} of {record.shard_path} (byte {record.offset})'


@functools.cache
def _bytes_feature():
  """example_proto.bytes_feature, imported on first use (its descriptors take
  2.3 ms to build; an image worker process that copies nothing never needs
  them), then no import statement a copy (1 us each, 6% of a copy's time)."""
  from transforms.core.example_proto import bytes_feature
  return bytes_feature


def read_at(stream: BinaryIO, size: int, record: PreviousRecord, key: str,
            key_feature: Optional[str]) -> bytes:
  """The data of `record` in a plain shard of `size` bytes, both CRCs
  checked and proven the record named (checked_copy); ShardError if not."""
  _bounded(record, size)
  stream.seek(record.offset)
  framed = stream.read(record.length)
  return _checked(framed, record, key, key_feature)


def _bounded(record: PreviousRecord, size: int) -> None:
  """ShardError unless the record's bytes lie inside its shard's `size` (before
  any is read: a damaged length never allocates more than the shard holds)."""
  if record.offset + record.length > size:
    raise ShardError(record.ordinal, 'truncated_shard',
                     f'shard ends before byte {record.offset + record.length}')


def _checked(framed: bytes, record: PreviousRecord, key: str,
             key_feature: Optional[str]) -> bytes:
  data = unframe(framed, record.length, record.offset)
  return checked_copy(data, int.from_bytes(framed[-4:], 'little'), record, key, key_feature)


def pick_ordinals(stream: BinaryIO, wanted: dict, key_feature: Optional[str]):
  """(ordinal, data or ShardError) for each of `wanted` ({ordinal: (record,
  key)}), streaming a gzip shard once from its start; stops after the last
  one wanted. Ordinals past a damaged length or the end of the file get a
  ShardError; each record is checked as checked_copy does."""
  wanted = dict(wanted)
  if not wanted:
    return
  last = max(wanted)
  for index, data in read_records_skipping(stream):
    if index in wanted:
      record, key = wanted.pop(index)
      if not isinstance(data, ShardError):
        try:
          data = checked_copy(data, masked_crc(data), record, key, key_feature)
        except ShardError as error:
          data = error
      yield index, data
    if index >= last:
      break
  for index in sorted(wanted):
    yield index, ShardError(index, 'truncated_shard', f'record {index} cannot be read')


def section(sums: dict, previous_dataset: Optional[str], previous_run_id: Optional[str],
            missing: bool = False) -> dict:
  """dataset_info.json's `reuse`: {tally name: sum} -> the counts (of the
  rows written: a row rejected is counted as rejected, whatever its reason)."""
  encoded = sum(sums.get(reason, 0) for reason in REASONS)
  return {
      'previous_dataset': previous_dataset,
      'previous_run_id': previous_run_id,
      **({'previous_dataset_missing': True} if missing else {}),
      **({SIDECARS_CUT_SHORT: sums[SIDECARS_CUT_SHORT]} if sums.get(SIDECARS_CUT_SHORT) else {}),
      'reused': sums.get(REUSED, 0),
      'encoded': {reason: sums.get(reason, 0) for reason in REASONS},
      'num_encoded': encoded,
      # rows neither copied nor written (rejected as in any run), however often
      'rejected': sums.get(DECIDED, 0) - sums.get(REUSED, 0) - encoded - sums.get(FALLBACK, 0),
      'dropped': sums.get(DROPPED, 0) + sums.get(PREVIOUS, 0) - sums.get(MATCHED, 0),
      'reuse_fallback': sums.get(FALLBACK, 0),
      'bytes_copied': sums.get(BYTES_COPIED, 0),
  }


def summary_line(reuse: dict) -> str:
  """The console's one line about reuse."""
  if reuse.get('previous_dataset_missing'):
    return 'Reuse: no previous dataset; every row was encoded.'
  encoded = ', '.join(f'{reason} {n}' for reason, n in reuse['encoded'].items() if n)
  return (f'Reuse: {reuse["reused"]} record(s) copied ({reuse["bytes_copied"] / 1e6:.1f} MB) '
          f'from {reuse["previous_dataset"]}; {reuse["num_encoded"]} encoded'
          + (f' ({encoded})' if encoded else '')
          + (f'; {reuse["rejected"]} rejected' if reuse.get('rejected') else '')
          + f'; {reuse["dropped"]} dropped; {reuse["reuse_fallback"]} reuse_fallback.')


# --- Copies inline, on a single local worker: a reused row goes through the
# image step like any row (in write order, to the same writer), its "image
# work" a copy of its record; a copy that fails converts the image instead.

class Known(NamedTuple):
  """A pool call's result known without any work: a source's SHA-256 the
  previous dataset gave (its file unchanged by its metadata fingerprint)."""
  result: object


class Copied(NamedTuple):
  """A record copied intact (its data, CRCs checked), and the framed record
  as read (b'': none kept), which the writer writes as it is. ShardReader's
  data is a view into its framed bytes (tfrecord.data_view)."""
  data: bytes | memoryview
  framed: bytes = b''


_INFLATE_CHUNK = 1 << 20  # how much of a gzip shard is inflated at a time into its local copy


class ShardReader:
  """Reads records of local previous shards by offset, each checked
  (checked_copy against the row's key in `key_feature`). A plain shard: one
  pread on a file kept open while the reader is (2-3x as fast as an open, a
  seek and a read per record, measured on 12,000 records of 31 KB; a map of
  the file held the GIL through its page faults). A gzip shard is inflated
  once, as far as the records asked need, into an unnamed temporary file
  read the same way: the order records are asked in costs nothing (streaming
  it again for every record asked out of order took 55 s for 1,500 records
  against 2.1 s for a full run). close() lets every file go: a reader lives for
  a bundle, so a shard replaced between runs is never read through an old
  descriptor. A shard that is no regular file (a FIFO) is never opened."""

  def __init__(self, key_feature: Optional[str] = None):
    self._key_feature = key_feature
    self._files = {}  # plain shard -> (descriptor, size)
    self._inflated = {}  # gzip shard -> [gzip stream, temporary file, bytes in it]

  def copy(self, record: PreviousRecord, key: str) -> Copied:
    """The record checked as a copy (both CRCs, then checked_copy), with its
    framed bytes as read, which are what frame(data) would make again;
    COPY_ERRORS if not."""
    framed = self._framed(record)
    _checked(framed, record, key, self._key_feature)
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
    return os.pread(descriptor, record.length, record.offset)

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
      chunk = stream.read(_INFLATE_CHUNK)
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


# What reading a previous shard's record can raise besides a RowError-free bug.
COPY_ERRORS = (ShardError, OSError, EOFError, zlib.error)
