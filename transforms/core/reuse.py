"""Reusing a previous dataset's records (--previous_dataset): the sidecar's
lines, the decision per row, and reading a record back by its offset or
ordinal with its CRCs checked. Plain functions.

The sidecar SPLIT.sources.jsonl.gz holds one JSON line per record, in write
order: key, shard (its index among the split's shards in dataset_info.json),
ordinal (its place in that shard), offset and length (of the framed record
in the shard's uncompressed bytes), fingerprint (fingerprints.py),
source_sha256, label ({"id", "text"}; lists with --multi_label) and
option_digest (fingerprints.record_digest).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
import gzip
import json
import os
from typing import BinaryIO
from typing import NamedTuple
from typing import Optional
import zlib

from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import read_records_skipping
from transforms.core.tfrecord import unframe

# Why a row is encoded rather than copied (dataset_info.json reuse.encoded).
NEW = 'new'
CHANGED_SOURCE = 'changed_source'
CHANGED_LABEL = 'changed_label'
CHANGED_SPLIT = 'changed_split'
CHANGED_FEATURES = 'changed_features'
CHANGED_OPTIONS = 'changed_options'
REASONS = (NEW, CHANGED_SOURCE, CHANGED_LABEL, CHANGED_SPLIT, CHANGED_FEATURES,
           CHANGED_OPTIONS)
# Tally names (tally keys ('reuse', name)); bytes_copied sums bytes, not rows.
REUSED = 'reused'
DROPPED = 'dropped'
FALLBACK = 'reuse_fallback'
BYTES_COPIED = 'bytes_copied'
# The in-order join's: keys dropped = records of the previous dataset - rows matched.
PREVIOUS = 'previous_records'
MATCHED = 'matched'
TALLY = 'reuse'


class PreviousRecord(NamedTuple):
  """Where one record of the previous dataset sits, and what it was made from."""
  split: str
  shard_path: str
  compressed: bool  # a gzip shard: read by ordinal, streaming
  ordinal: int
  offset: int
  length: int
  fingerprint: str
  source_sha256: str
  label_id: object  # an int, or a list of ints (--multi_label)
  label_text: object  # a str, or a list of str
  option_digest: str


def sidecar_line(key: str, shard: int, ordinal: int, offset: int, length: int,
                 fingerprint: str, source_sha256: str, label_id, label_text,
                 option_digest: str) -> bytes:
  """One record's line of SPLIT.sources.jsonl.gz (the columns, in this order)."""
  return (json.dumps({
      'key': key, 'shard': shard, 'ordinal': ordinal, 'offset': offset, 'length': length,
      'fingerprint': fingerprint, 'source_sha256': source_sha256,
      'label': {'id': _plain(label_id), 'text': _plain(label_text)},
      'option_digest': option_digest}, ensure_ascii=False) + '\n').encode('utf-8')


def parse_line(line: bytes, split: str, shard_paths: list,
               compressed: bool) -> tuple[str, PreviousRecord]:
  """A sidecar line -> (key, PreviousRecord); ValueError if it is not one
  (or names a shard the dataset does not list)."""
  data = json.loads(line)
  shard = data['shard']
  if not isinstance(shard, int) or not 0 <= shard < len(shard_paths):
    raise ValueError(f'shard {shard!r} is not one of the {len(shard_paths)} shards')
  label = data['label']
  return data['key'], PreviousRecord(
      split, shard_paths[shard], compressed, int(data['ordinal']), int(data['offset']),
      int(data['length']), data['fingerprint'], data['source_sha256'], label['id'],
      label['text'], data['option_digest'])


def _plain(value):
  """A multi-label row's tuples as the lists JSON reads back."""
  return list(value) if isinstance(value, tuple) else value


def decide(previous: Optional[PreviousRecord], split: str, fingerprint: str,
           label: Optional[tuple], option_digest: str) -> Optional[str]:
  """None: the row's record in the previous dataset may be copied; else why
  it is encoded (REASONS). label: the row's (id, text) in this run's label map,
  None if it resolves to none (the row is encoded, and rejected as always)."""
  if previous is None:
    return NEW
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
  return None


def read_at(stream: BinaryIO, offset: int, length: int) -> bytes:
  """The data of the framed record at `offset` of `length` bytes in a plain
  shard, both CRCs checked; ShardError if it is not there intact."""
  stream.seek(offset)
  return unframe(stream.read(length), length, offset)


def pick_ordinals(stream: BinaryIO, wanted: Iterable[int]) -> Iterator[tuple[int, object]]:
  """(ordinal, data or ShardError) for each wanted ordinal, streaming the
  shard from its start (a gzip shard cannot be addressed by offset); stops
  after the last one wanted. Ordinals past a damaged length or the end of the
  file get a ShardError."""
  wanted = set(wanted)
  if not wanted:
    return
  last = max(wanted)
  for index, data in read_records_skipping(stream):
    if index in wanted:
      wanted.discard(index)
      yield index, data
    if index >= last:
      break
  for index in sorted(wanted):
    yield index, ShardError(index, 'truncated_shard', f'record {index} cannot be read')


def section(sums: dict, previous_dataset: Optional[str], previous_run_id: Optional[str],
            missing: bool = False) -> dict:
  """dataset_info.json's `reuse`: {tally name: sum} -> the counts."""
  return {
      'previous_dataset': previous_dataset,
      'previous_run_id': previous_run_id,
      **({'previous_dataset_missing': True} if missing else {}),
      'reused': sums.get(REUSED, 0),
      'encoded': {reason: sums.get(reason, 0) for reason in REASONS},
      'num_encoded': sum(sums.get(reason, 0) for reason in REASONS),
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
          + (f' ({encoded})' if encoded else '') + f'; {reuse["dropped"]} dropped; '
          f'{reuse["reuse_fallback"]} reuse_fallback.')


# --- Copies inline, on a single local worker: a reused row goes through the
# image step like any row (in write order, to the same writer), its "image
# work" a copy of its record; a copy that fails converts the image instead.

class CopySource(NamedTuple):
  """What the image step does for a reused row: copy the record at (shard,
  offset, length) or, in a gzip shard, its ordinal; `path`: the row's image,
  converted if the copy fails."""
  path: str
  shard_path: str
  compressed: bool
  ordinal: int
  offset: int
  length: int


class Known(NamedTuple):
  """A pool call's result known without any work: a source's SHA-256 the
  previous dataset gave (its file unchanged by its metadata fingerprint)."""
  result: object


class Copied(NamedTuple):
  """A record copied intact (its data, CRCs checked)."""
  data: bytes


class FellBack(NamedTuple):
  """A record that could not be copied, converted from its image instead:
  `converted` is what converting gives ((image, sha256, size))."""
  converted: tuple
  why: str


def copy_source(record: PreviousRecord, image_path: str) -> CopySource:
  return CopySource(image_path, record.shard_path, record.compressed, record.ordinal,
                    record.offset, record.length)


class ShardReader:
  """Reads records of local previous shards: a plain shard by offset, one
  pread on a file kept open while the reader is (2-3x as fast as an open, a
  seek and a read per record, measured on 12,000 records of 31 KB; a map of
  the file held the GIL through its page faults); a gzip shard by ordinal,
  streaming, its stream kept open while the ordinals asked go up (rows come
  in write order, which keeps most records' order), started again when one
  goes back. close() lets every file go: a reader lives for a bundle, so a
  shard replaced between runs is never read through an old descriptor."""

  def __init__(self):
    self._streams = {}  # gzip shard -> (records iterator, next ordinal, file)
    self._files = {}  # plain shard -> its open file descriptor

  def read(self, source: CopySource) -> bytes:
    if not source.compressed:
      framed = os.pread(self._opened(source.shard_path), source.length, source.offset)
      return unframe(framed, source.length, source.offset)
    records, next_ordinal, handle = self._streams.get(source.shard_path, (None, 0, None))
    if records is None or source.ordinal < next_ordinal:
      if handle is not None:
        handle.close()
      handle = gzip.open(source.shard_path, 'rb')
      records, next_ordinal = read_records_skipping(handle), 0
    self._streams[source.shard_path] = (records, next_ordinal, handle)
    for index, data in records:
      self._streams[source.shard_path] = (records, index + 1, handle)
      if index == source.ordinal:
        if isinstance(data, ShardError):
          raise data
        return data
    self._streams.pop(source.shard_path)
    handle.close()
    raise ShardError(source.ordinal, 'truncated_shard',
                     f'record {source.ordinal} cannot be read')

  def _opened(self, path: str) -> int:
    if path not in self._files:
      self._files[path] = os.open(path, os.O_RDONLY | getattr(os, 'O_CLOEXEC', 0))
    return self._files[path]

  def close(self) -> None:
    for descriptor in self._files.values():
      os.close(descriptor)
    for _, _, handle in self._streams.values():
      handle.close()
    self._files, self._streams = {}, {}


# What reading a previous shard's record can raise besides a RowError-free bug.
COPY_ERRORS = (ShardError, OSError, EOFError, zlib.error)


def read_record(source: CopySource, reader: Optional[ShardReader] = None) -> bytes:
  """The record's data, by `reader` (None: a reader for this one record);
  COPY_ERRORS if it is not there intact."""
  if reader is not None:
    return reader.read(source)
  one = ShardReader()
  try:
    return one.read(source)
  finally:
    one.close()


def copy_or_convert(source: CopySource, convert: Callable[[], tuple]):
  """Copied(data), or FellBack(convert()) when the record is not there intact
  (a RowError converting it is raised, as converting any image's is)."""
  try:
    return Copied(read_record(source))
  except COPY_ERRORS as error:
    return FellBack(convert(), f'{type(error).__name__}: {error}')
