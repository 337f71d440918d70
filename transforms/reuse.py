"""Reusing a previous dataset's records (--previous_dataset): deciding per row
(its previous record found by reuse_join.py), and copying the unchanged
records from the previous shards, a shard per worker call, without decoding
any image. The plain functions are in core/fingerprints.py and core/reuse.py;
these steps wrap them."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple
import zlib

import apache_beam as beam

from transforms import filesystem
from transforms.batches import Batch
from transforms.batches import BatchedFn
from transforms.batches import in_batches
from transforms.beam_util import EXAMPLES
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.beam_util import TallyPerBundle
from transforms.beam_util import in_global_window
from transforms.buckets import BufferByBucketFn
from transforms.buckets import ExactKeyFn
from transforms.buckets import row_bytes
from transforms.core import copies
from transforms.core import file_kinds
from transforms.core import fingerprints
from transforms.core import paths
from transforms.core import reuse
from transforms.core.example import BuiltExample
from transforms.core.fingerprints import record_digest
from transforms.core.pickling import replaced
from transforms.core.rejects import RowError
from transforms.core.shuffle import Ordering
from transforms.core.tfrecord import ShardError
from transforms.label_maps import label_map_side_input

REUSE = 'reuse'  # (previous shard path, Reusable)
FALLBACK_ROWS = 'fallback'  # the tag of ManifestRows whose record failed its CRC: encoded instead


class Reusable(NamedTuple):
  """A row whose record is copied: its resolved label and record digest."""
  row: object  # ManifestRow (its .previous: the record)
  label_id: object
  label_text: object
  option_digest: str


def _tally(name: str, count: int = 1):
  return beam.pvalue.TaggedOutput(TALLIES, ((reuse.TALLY, name), count))


def fingerprint_of(row, mode: str) -> str:
  """The row's fingerprint as compared (metadata: taken by FingerprintFn;
  content: from the SHA-256 of its bytes)."""
  if mode == fingerprints.CONTENT:
    return fingerprints.content_fingerprint(row.content_sha256)
  return row.fingerprint


class DecideFn(beam.DoFn):
  """ManifestRow (with .previous) -> the row to encode, its .previous
  cleared and its reason on it (counted by its example), or the row to copy:
  under REUSE (previous shard path, Reusable), or with `inline` (a single
  local worker) as it is, in the main output, for the image step to copy
  (LoadImageFn)."""

  def __init__(self, mode: str, options_digest: str, inline: bool = False):
    self._mode = mode
    self._options_digest = options_digest
    self._inline = inline

  def start_bundle(self):
    self._decided = 0

  def finish_bundle(self):  # one count a bundle, not a tally element a row
    yield in_global_window(_tally(reuse.DECIDED, self._decided))

  def process(self, row, label_map):
    try:
      label = label_map.resolve(row.label)
    except RowError:
      label = None  # encoded: AssignLabelFn rejects it as in any run
    digest = record_digest(self._options_digest, row.extras)
    previous = row.previous
    if previous is not None and self._mode == fingerprints.CONTENT:
      # The SHA-256 every sidecar records: a previous run of either mode will do.
      previous = previous._replace(
          fingerprint=fingerprints.content_fingerprint(previous.source_sha256))
    reason = reuse.decide(previous, row.split, fingerprint_of(row, self._mode), label, digest,
                          row.image)
    self._decided += 1
    if reason is None and row.content_sha256 not in ('', previous.source_sha256):
      # Hashed (HashSourceFn: its line's SHA-256 unproven) to another SHA-256
      # than its line says: the copy would write the line's into the new
      # sidecar (a --schema seed record holds none to refuse it by).
      reason = reuse.FALLBACK
    if reason is None and self._inline:
      yield row
    elif reason is None:
      yield beam.pvalue.TaggedOutput(REUSE, (row.previous.shard_path,
                                             Reusable(row, label[0], label[1], digest)))
    else:  # counted by its example: a row rejected is no encoded row
      yield replaced(row, previous=None, reuse=reason)


class CopyShardFn(beam.DoFn):
  """(previous shard path, [Reusable]) -> a BuiltExample of each, its bytes
  copied from the shard (by offset, a gzip one streamed to the offsets) with both CRCs checked, its data CRC the sidecar's, its key and
  label the row's and the sidecar's (copies.checked_copy); a record that
  fails is not copied: its row goes out under FALLBACK_ROWS to be encoded from its
  source."""

  def __init__(self, mode: str, ordering: Ordering, check: copies.CopyCheck):
    self._mode = mode
    self._ordering = ordering
    self._check = check

  def setup(self):
    self._files = filesystem.FileAccess()

  def process(self, grouped):
    path, reusables = grouped
    reusables = sorted(reusables, key=lambda r: r.row.previous.offset)
    for reusable, data in self._read(path, reusables):
      if isinstance(data, ShardError):  # encoded, counted by its example
        yield beam.pvalue.TaggedOutput(FALLBACK_ROWS, dataclasses.replace(
            reusable.row, previous=None, reuse=reuse.FALLBACK))
        continue
      yield self._example(reusable, data)

  def _read(self, path: str, reusables: list):
    """(Reusable, data or ShardError) of each, in offset order."""
    done = set()  # id() of each Reusable answered (two may name one record)
    kind = None if paths.is_remote(path) else file_kinds.not_regular(path)
    if kind:  # opening a FIFO waits for a writer: the run hung
      for reusable in reusables:
        yield reusable, ShardError(0, 'unreadable_shard',
                                   f'{path} is a {kind}, not a regular file: not read')
      return
    try:
      with self._files.open_checked(path) as stream:
        for reusable, data in self._records(stream, reusables):
          done.add(id(reusable))
          yield reusable, data
    except (OSError, EOFError, zlib.error) as error:  # gone, cut short, bad gzip
      for reusable in reusables:
        if id(reusable) not in done:
          yield reusable, ShardError(0, 'unreadable_shard', f'{path}: {error}')

  def _records(self, stream, reusables: list):
    if reusables[0].row.previous.compressed:
      # a list an offset: two lines of an edited sidecar may name one record
      by_offset = {}
      for reusable in reusables:
        by_offset.setdefault(reusable.row.previous.offset, []).append(reusable)
      wanted = {offset: [(r.row.previous, r.row.key) for r in group]
                for offset, group in by_offset.items()}
      answered = {offset: iter(group) for offset, group in by_offset.items()}
      for offset, data in copies.pick_places(stream, wanted, self._check):
        yield next(answered[offset]), data
      return
    size = stream.seek(0, 2)
    for reusable in reusables:
      try:
        yield reusable, copies.read_at(stream, size, reusable.row.previous, reusable.row.key,
                                      self._check)
      except ShardError as error:
        yield reusable, error

  def _example(self, reusable: Reusable, data: bytes) -> BuiltExample:
    row = reusable.row
    return BuiltExample(row.split, self._ordering.key(row.key, row.place), reusable.label_id,
                        row.key, row.line, row.previous.source_sha256, data,
                        fingerprint_of(row, self._mode) or row.previous.fingerprint,
                        reusable.label_text, reusable.option_digest, reuse.REUSED, row.image,
                        place=row.place)


@beam.ptransform_fn
def CopyRecords(reusables, mode: str, ordering: Ordering, check: copies.CopyCheck):
  """(previous shard path, Reusable) -> {'examples': BuiltExample, FALLBACK_ROWS:
  rows to encode, TALLIES: counts}: every shard read in its own call, so a
  distributed runner reads the shards in parallel. The Reusables cross the
  shuffle in lists per shard and bundle (buckets.py)."""
  return (reusables
          # (previous shard path, [Reusable, ...]) per bundle
          | 'ByShard' >> beam.ParDo(BufferByBucketFn(lambda pair: [pair], _reusable_bytes))
          | 'GroupByShard' >> beam.GroupByKey()
          | 'CopyShard' >> beam.ParDo(ExactKeyFn(CopyShardFn(
              mode, ordering, check))).with_outputs(FALLBACK_ROWS, TALLIES, main=EXAMPLES))


def _reusable_bytes(reusable: Reusable) -> int:
  return row_bytes(reusable.row) + row_bytes(reusable.row.previous)


class Decided(NamedTuple):
  rows: object  # PCollection of rows to encode
  examples: object  # PCollection of copied BuiltExamples
  tallies: list


def decide_and_copy(rows, label_map, mode: str, options_digest: str,
                    ordering: Ordering, check: copies.CopyCheck,
                    inline: bool = False) -> Decided:
  """Batches of rows with their previous records -> batches of the rows to
  encode (changed, new, or whose copy failed), batches of the copied
  examples, and the counts. check: the features each copy is proven its
  row's by (copies.checked_copy). inline (a single local worker): the rows to copy stay among the
  rows, in write order, for the image step to copy (no examples here)."""
  decided = rows | 'Decide' >> beam.ParDo(
      BatchedFn(DecideFn(mode, options_digest, inline)),
      label_map_side_input(label_map)).with_outputs(REUSE, TALLIES, main=ROWS)
  if inline:
    return Decided(decided[ROWS], None, [decided[TALLIES]])
  copied = decided[REUSE] | 'CopyRecords' >> CopyRecords(mode, ordering, check)
  to_encode = ((decided[ROWS], copied[FALLBACK_ROWS] | 'BatchFallbacks' >> Batch())
               | 'RowsToEncode' >> beam.Flatten())
  return Decided(to_encode, copied[EXAMPLES] | 'BatchCopies' >> Batch(),
                 [decided[TALLIES], copied[TALLIES]])



def reuse_tallies(example: BuiltExample) -> list:
  """A written example's reuse counts: copied (and its framed bytes), encoded
  after its copy failed, or encoded for its reason (core/reuse.REASONS)."""
  if example.reuse == reuse.REUSED:
    return [((reuse.TALLY, reuse.REUSED), 1),
            ((reuse.TALLY, reuse.BYTES_COPIED), len(example.data) + 16)]
  return [((reuse.TALLY, example.reuse), 1)] if example.reuse else []


def tally_reuse(examples, rejected, missing: bool) -> list:
  """The reuse counts of the examples written (reuse_tallies); with no
  previous dataset (missing: --previous_dataset_missing full, no row decided),
  the rows the image step rejected instead, under DECIDED: every row the image
  step gets is a row a decision is made for on a later night
  (core/reuse.section counts the written ones)."""
  if missing:
    return [rejected | 'TallyUndecided' >> beam.ParDo(TallyPerBundle(
        lambda _: [((reuse.TALLY, reuse.DECIDED), 1)]))]
  return [examples | 'TallyReuse' >> beam.ParDo(TallyPerBundle(in_batches(reuse_tallies)))]
