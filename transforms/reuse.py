"""Reusing a previous dataset's records (--previous_dataset): fingerprinting
sources, reading the previous sidecars, joining them with the new rows by
key, deciding per row, and copying the unchanged records from the previous
shards, a shard per worker call, without decoding any image. The plain
functions are in core/fingerprints.py and core/reuse.py; these steps wrap them."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple
from typing import Optional
import zlib

import apache_beam as beam

from transforms import filesystem
from transforms.batches import Batch
from transforms.batches import BatchAndSpread
from transforms.batches import BatchedFn
from transforms.batches import BatchesOut
from transforms.batches import RowBatch
from transforms.batches import in_batches
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.beam_util import TallyPerBundle
from transforms.beam_util import in_global_window
from transforms.buckets import KEY_BUCKETS
from transforms.buckets import BufferByBucketFn
from transforms.buckets import ExactKeyFn
from transforms.buckets import PerKeyFn
from transforms.buckets import buffer_by_key
from transforms.buckets import row_bytes
from transforms.core import copies
from transforms.core import file_kinds
from transforms.core import fingerprints
from transforms.core import paths
from transforms.core import reuse
from transforms.core import splits
from transforms.core.example import BuiltExample
from transforms.core.fingerprints import record_digest
from transforms.core.pickling import replaced
from transforms.core.rejects import RowError
from transforms.core.shuffle import Ordering
from transforms.core.tfrecord import ShardError
from transforms.label_maps import label_map_side_input
from transforms.sidecars import ReadSidecarFn
from transforms.sidecars import cut_short_tally
from transforms.sidecars import read_sidecar
from transforms.workers import http_fetch

REUSE = 'reuse'  # (previous shard path, Reusable)
FALLBACK = 'fallback'  # ManifestRow whose record failed its CRC: encoded instead


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


class FingerprintFn(BatchesOut, beam.DoFn):
  """A batch of ManifestRows -> the batch, each row with its source's metadata
  fingerprint, taken in the worker (a stat, or the store's metadata: no image
  byte read; remote ones looked up in parallel, within timeout_s: None no
  limit). Rows leave in the order they came.

  A batch at a time (batches.BATCH_ROWS, 256 rows): each waits for its
  slowest lookup. 600 http:// images from a local server (a HEAD each)
  converted in 20-22 s with batches of 32, 12-16 s with 256 (2 loaded cores).
  """

  def __init__(self, timeout_s: Optional[float] = None,
               http: Optional[http_fetch.HttpConfig] = None, http_from_fetch: bool = False):
    """http_from_fetch: an http(s) image's row is left without one (''):
    the image step takes it from the GET that fetches it (LoadImageFn's
    fingerprint_fetches), one request instead of a HEAD and a GET."""
    self._timeout_s = timeout_s
    self._http_config = http or http_fetch.HttpConfig()
    self._http_from_fetch = http_from_fetch

  def setup(self):
    self._files = filesystem.FileAccess()
    self._http = http_fetch.client(self._http_config)

  def process(self, batch):
    if batch:
      yield RowBatch(self._fingerprinted(batch))

  def _fingerprinted(self, batch):
    # This thread's S3 client, shared by the lookup threads: a HEAD keeps no
    # state in Beam's client wrapper (a download does), and boto3 clients are
    # thread-safe; a client per thread would cost 0.1-0.5 s of CPU each.
    # A row whose bytes are a part of a file (row.ref: a Parquet cell) is
    # that file's fingerprint and the part's place, and its fallback path's.
    fallbacks = [getattr(row.ref, 'fallback', '') for row in batch]
    paths = [('' if self._http_from_fetch and row.ref is None and http_fetch.is_http(row.path)
              else row.path) for row in batch] + fallbacks
    s3io = self._files._s3() if any(path.startswith('s3://') for path in paths) else None
    found = fingerprints.fingerprint_all(
        paths, lambda path: self._http.metadata(path) if http_fetch.is_http(path) else
        fingerprints.beam_metadata(path, s3io and s3io._s3_object), self._timeout_s)
    for row, fingerprint, fallback in zip(batch, found, found[len(batch):]):
      if row.ref is not None:
        fingerprint = fingerprints.part_fingerprint(fingerprint, row.ref.part(), fallback)
      yield replaced(row, fingerprint=fingerprint)


class _JoinFn(beam.DoFn):
  """(key, {'rows': [row], 'previous': [record]}) -> the row with its previous
  record attached (with the source's SHA-256 and content split taken from it
  when its metadata fingerprint is unchanged, so no unchanged file is read to
  hash it); a key only in the previous dataset is dropped and counted."""

  def __init__(self, mode: str, split: Optional[splits.SplitConfig]):
    self._mode = mode
    self._split = split

  def process(self, joined):
    _, grouped = joined
    previous = list(grouped['previous'])
    record = previous[0] if previous else None
    rows = list(grouped['rows'])
    if not rows:
      yield _tally(reuse.DROPPED)
      return
    for row in rows:
      yield self._attached(row, record)

  def _attached(self, row, record):
    if (record is not None and self._mode == fingerprints.METADATA and row.fingerprint
            and row.fingerprint == record.fingerprint and record.source_sha256):
      split = (splits.hash_split(record.source_sha256, self._split.fractions,
                                 self._split.seed) if self._split else row.split)
      # one replace, not two: ~5 us a reused row
      return replaced(row, previous=record, content_sha256=record.source_sha256, split=split)
    return replaced(row, previous=record)


class _AttachFn(_JoinFn):
  """ManifestRow -> the row with its previous record (a single local worker:
  rows keep their write order). The sidecars are read into a dict by key in
  setup(), not taken as a side input, which Beam's side-input cache sized and
  decoded record by record (with the tallies summed per bundle, the step's
  stage took 0.54 s for 12,000 rows instead of 0.97 s, and the 0.15 s stage
  reading the sidecars is gone). Counts, at the end of a bundle, the rows
  that found a record and, once, the records (the keys dropped: the records
  less the rows that found one): a single local worker has one instance and
  retries no bundle."""

  def __init__(self, mode: str, split: Optional[splits.SplitConfig], sidecars: tuple):
    super().__init__(mode, split)
    self._sidecars = sidecars

  def setup(self):
    cut_short = []
    self._previous = dict(record for sidecar in self._sidecars
                          for record in read_sidecar(sidecar, cut_short))
    self._unreported = len(self._previous)
    self._cut_short = len(cut_short)

  def start_bundle(self):
    self._matched = 0

  def process(self, row):
    record = self._previous.get(row.key)
    self._matched += record is not None
    yield self._attached(row, record)  # the join of one row, without its lists

  def finish_bundle(self):
    yield in_global_window(_tally(reuse.MATCHED, self._matched))
    yield in_global_window(_tally(reuse.PREVIOUS, self._unreported))
    yield in_global_window(cut_short_tally(self._cut_short))
    self._unreported = self._cut_short = 0


@beam.ptransform_fn
def JoinPrevious(rows, sidecars: tuple, mode: str, split: Optional[splits.SplitConfig],
                 in_order: bool = False, buckets: int = KEY_BUCKETS):
  """Batches of rows -> {ROWS: batches of each row with its previous record
  (or None), TALLIES: the dropped keys}. The sidecars are read in the workers, one per split.
  split: with --split_by content, the split drawn from a reused SHA-256.
  in_order (a single local worker): the previous records are a dict in the
  step and rows keep their order; else joined by key (CoGroupByKey), rows and
  records in lists per bucket of keys (`buckets`, buckets.py)."""
  if in_order:
    attached = rows | 'Attach' >> beam.ParDo(
        BatchedFn(_AttachFn(mode, split, sidecars))).with_outputs(TALLIES, main=ROWS)
    return {ROWS: attached[ROWS], TALLIES: attached[TALLIES]}
  # (bucket, [(key, PreviousRecord), ...]) and (bucket, [(key, row), ...]) per bundle
  previous = (rows.pipeline
              | 'Sidecars' >> beam.Create(list(sidecars))
              | 'ReadSidecar' >> beam.ParDo(ReadSidecarFn(buckets)).with_outputs(
                  TALLIES, main=ROWS))
  keyed = rows | 'ByKey' >> beam.ParDo(buffer_by_key(
      lambda batch: [(row.key, row) for row in batch], buckets))
  joined = ({'rows': keyed, 'previous': previous[ROWS]}
            | 'CoGroupByKey' >> beam.CoGroupByKey()
            | 'Attach' >> beam.ParDo(PerKeyFn(_JoinFn(mode, split))).with_outputs(
                TALLIES, main=ROWS))
  return {ROWS: joined[ROWS] | 'BatchRows' >> BatchAndSpread(),
          TALLIES: (joined[TALLIES], previous[TALLIES]) | 'Tallies' >> beam.Flatten()}


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
  copied from the shard (by offset in a plain shard, by ordinal streaming a
  gzip one) with both CRCs checked, its data CRC the sidecar's, its key and
  label the row's and the sidecar's (copies.checked_copy); a record that
  fails is not copied: its row goes out under FALLBACK to be encoded from its
  source."""

  def __init__(self, mode: str, ordering: Ordering, check: copies.CopyCheck):
    self._mode = mode
    self._ordering = ordering
    self._check = check

  def setup(self):
    self._files = filesystem.FileAccess()

  def process(self, grouped):
    path, reusables = grouped
    reusables = sorted(reusables, key=lambda r: r.row.previous.ordinal)
    for reusable, data in self._read(path, reusables):
      if isinstance(data, ShardError):  # encoded, counted by its example
        yield beam.pvalue.TaggedOutput(FALLBACK, dataclasses.replace(
            reusable.row, previous=None, reuse=reuse.FALLBACK))
        continue
      yield self._example(reusable, data)

  def _read(self, path: str, reusables: list):
    """(Reusable, data or ShardError) of each, in ordinal order."""
    done = set()  # id() of each Reusable answered (two may share an ordinal)
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
      # a list an ordinal: two lines of an edited sidecar may name one record
      by_ordinal = {}
      for reusable in reusables:
        by_ordinal.setdefault(reusable.row.previous.ordinal, []).append(reusable)
      wanted = {ordinal: [(r.row.previous, r.row.key) for r in group]
                for ordinal, group in by_ordinal.items()}
      answered = {ordinal: iter(group) for ordinal, group in by_ordinal.items()}
      for ordinal, data in copies.pick_ordinals(stream, wanted, self._check):
        yield next(answered[ordinal]), data
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
                        reusable.label_text, reusable.option_digest, reuse.REUSED, row.image)


@beam.ptransform_fn
def CopyRecords(reusables, mode: str, ordering: Ordering, check: copies.CopyCheck):
  """(previous shard path, Reusable) -> {'examples': BuiltExample, FALLBACK:
  rows to encode, TALLIES: counts}: every shard read in its own call, so a
  distributed runner reads the shards in parallel. The Reusables cross the
  shuffle in lists per shard and bundle (buckets.py)."""
  return (reusables
          # (previous shard path, [Reusable, ...]) per bundle
          | 'ByShard' >> beam.ParDo(BufferByBucketFn(lambda pair: [pair], _reusable_bytes))
          | 'GroupByShard' >> beam.GroupByKey()
          | 'CopyShard' >> beam.ParDo(ExactKeyFn(CopyShardFn(
              mode, ordering, check))).with_outputs(FALLBACK, TALLIES, main='examples'))


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
  to_encode = ((decided[ROWS], copied[FALLBACK] | 'BatchFallbacks' >> Batch())
               | 'RowsToEncode' >> beam.Flatten())
  return Decided(to_encode, copied['examples'] | 'BatchCopies' >> Batch(),
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
