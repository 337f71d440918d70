"""Duplicates by content: the report of identical images under different keys,
and, on request, hashing sources before decoding (--dedupe content,
--split_by content)."""

from __future__ import annotations

from collections.abc import Callable
import functools
from typing import Optional

import apache_beam as beam
from apache_beam.typehints import Any

from transforms.batches import BatchAndSpread
from transforms.batches import BatchesOut
from transforms.batches import chunks
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.buckets import KEY_BUCKETS
from transforms.buckets import PerKeyFn
from transforms.buckets import buffer_by_key
from transforms.core import annotations
from transforms.core import duplicates
from transforms.core import shuffle
from transforms.core import splits
from transforms.core.copies import COPY_ERRORS
from transforms.core.copies import NO_CHECK
from transforms.core.copies import CopyCheck
from transforms.core.copies import ShardReader
from transforms.core.paths import is_remote
from transforms.core.pickling import replaced
from transforms.core.rejects import STAGE_DECODE
from transforms.core.rejects import RowError
from transforms.core.rejects import unexpected_error
from transforms.core.reuse import Known
from transforms.core.spec import ImageSpec
from transforms.label_maps import label_map_side_input
from transforms.pooled_source import PooledSourceFn
from transforms.workers.child_process import WorkerTimedOut
from transforms.workers.pooled_step import PoolSize
from transforms.workers.source_image import hash_in_worker
from transforms.workers.source_image import hash_sources


class _ReportFn(beam.CombineFn):
  """The report of each content -> one report (counts + the first pairs)."""

  def create_accumulator(self):
    return duplicates.empty_report()

  def add_input(self, report, content_report):
    return duplicates.add_report(report, content_report)

  def merge_accumulators(self, accumulators):
    return duplicates.merge_reports(accumulators)

  def extract_output(self, report):
    return report


class _ContentReportFn(beam.DoFn):
  """(sha256, Copies) -> its report (duplicates.content_report); none for a
  content seen once, whose report would be empty (nearly every row: 3 us a
  row less, its report made and summed)."""

  def process(self, grouped):
    sha256, copies = grouped
    if len(copies) > 1:
      yield duplicates.content_report(sha256, [duplicates.Copy(*copy) for copy in copies])


def _copies(batch) -> list:
  """(sha256, (line, key, split, place, label text)) of each example: every
  row crosses the shuffle so, a plain tuple, made a Copy only where a content
  repeats (pickling 12,000 of them: 0.4 against 2.8 us a row as Copy
  dataclasses, 0.3 against 1.9 to unpickle; timeit). The label text (a
  class name already held by the example) tells copies under conflicting
  labels apart."""
  return [(e.sha256, (e.line, e.key, e.split, e.place, e.label_text)) for e in batch]


@beam.ptransform_fn
def ContentDuplicates(examples, buckets: int = KEY_BUCKETS):
  """Batches of BuiltExamples -> one report of the rows whose source bytes repeat an
  earlier row's under another key (within a split, across splits; under
  another label than the first copy's); none when
  there is no example: read it as AsSingleton(..., default_value=
  duplicates.empty_report()). Beam's default value would add four steps and a
  stage. The copies cross the shuffle in lists per bucket of contents
  (`buckets`, buckets.py), each content reported on its own."""
  return (examples
          # (bucket, [(sha256, (line, key, split, place)), ...]) per bundle
          | 'ContentCopies' >> beam.ParDo(buffer_by_key(_copies, buckets))
          | 'GroupByContent' >> beam.GroupByKey()
          # a report per content, contents in order within a bucket
          # Any: as inferred, without walking the code (2.6 ms a convert)
          | 'PerContent' >> beam.ParDo(PerKeyFn(_ContentReportFn())).with_output_types(Any)
          | 'Report' >> beam.CombineGlobally(_ReportFn()).without_defaults())


class HashSourceFn(PooledSourceFn):
  """ManifestRow -> the row with the SHA-256 of its source file (read once
  more, before decoding); with `split`, its split drawn from that hash, so
  copies always land in one split.

  Files are read and hashed where images are decoded: in image worker
  processes under --image_timeout_s (size: the image step's PoolSize), or on
  its threads, with the same checks (no FIFO or device, --max_image_bytes,
  an image signature). A row whose file cannot be hashed passes on unhashed
  with that error as its read_error: it is rejected with it (after its label
  is checked, as any row) when its image would be loaded, without a second
  read. hash_on_thread/hash_in_process: what hashes a batch (tests swap them).
  check: the schema's copies.copy_check(table), of which its key and SHA-256
  features prove a line's SHA-256 (a record holding the line's SHA-256 but
  another key is another row's: a line naming it had the row deduped or
  split as that row's copy); no SHA-256 feature (--schema seed): no record
  holds one (nor NO_CHECK), so no sidecar's SHA-256 is proven and every
  file is hashed.
  """

  # Hashing a file costs ~40 us a 80 KB JPEG, a pipe round trip more than
  # that: 12,000 files (971 MB) took 1.65 s in calls of 8, 1.05 s in calls of 64
  # (the hashing step, 2 cores).
  BATCH = 64

  def __init__(self, spec: ImageSpec, size: PoolSize,
               split: Optional[splits.SplitConfig] = None,
               hash_on_thread=hash_sources, hash_in_process=hash_in_worker, http=None,
               check: CopyCheck = NO_CHECK):
    super().__init__(spec, size, hash_on_thread, hash_in_process, http)
    self._split = split
    # The key and SHA-256 only: the label or path may have changed since
    # (such a row is encoded), its SHA-256 still the file's.
    self._proof = CopyCheck(check.key, sha256=check.sha256)

  def setup(self):
    super().setup()
    self._records = ShardReader(self._proof)

  def finish_bundle(self):
    yield from super().finish_bundle()
    self._records.close()  # a reader lives for a bundle, as the copy's

  def teardown(self):
    self._records.close()
    super().teardown()

  def source_of(self, row):
    """A row whose SHA-256 the previous dataset gave is not read again, if its
    previous record holds that SHA-256: a sidecar line whose SHA-256 was
    edited (its gzip written again) had the row deduped and split as another
    file's copy, where a full run kept it (validate said OK)."""
    if row.content_sha256 and self._proven(row.previous, row.key):
      return Known(row.content_sha256)
    return super().source_of(row)

  def _proven(self, record, key: str) -> bool:
    """Whether `record` (the row's previous one, its SHA-256 the row's)
    holds that SHA-256 and the row's key in its record (a line naming another
    row's record, its place, CRC and SHA-256, had the row rejected as that
    row's duplicate or moved to its split): read by offset, both CRCs
    checked. 12 us a 46 KB record from the page cache (300 records, warm),
    against reading and hashing the file (~40 us an 80 KB JPEG); the copy
    reads it again.
    Never where nothing can prove it: a --schema seed record holds no
    SHA-256 (each was read for nothing, then its file hashed), and one on an
    object store is not read here (trusted, an edited line had the row
    deduped or split by another file's SHA-256 before its copy was refused)."""
    if record is None or self._proof.sha256 is None or is_remote(record.shard_path):
      return False
    try:
      self._records.copy(record, key)
    except COPY_ERRORS:  # damaged, another SHA-256 or key: the file is hashed
      return False
    return True

  def outcome(self, row, result):
    size = None
    if isinstance(result, tuple):  # (hash_sized_sources: --schema detection)
      result, size = result
    if isinstance(result, str):
      split = (splits.hash_split(result, self._split.fractions, self._split.seed)
               if self._split else row.split)
      return replaced(row, content_sha256=result, split=split, content_size=size)
    if isinstance(result, WorkerTimedOut):  # alone in its call: this file is the slow one
      error = RowError(STAGE_DECODE, 'timeout', f'reading and hashing the file (content) took '
                       f'longer than --image_timeout_s {self._timeout_s:g}: stopped')
    elif isinstance(result, RowError):
      error = result
    else:  # nobody foresaw it (a crashed worker, ...): this row's problem, not the job's
      error = unexpected_error(result)
    return replaced(row, read_error=error)


def _content_key(row) -> str:
  # Rows whose file could not be read are each their own group.
  return row.content_sha256 or f'unread\x00{row.source}\x00{row.line}'


def label_resolves(row, label_map) -> bool:
  """A copy DedupeContent may keep: its label resolves in the label map."""
  return label_map.resolves(row.label)


def copy_fits(on_size_mismatch: str, on_bad_box: str) -> Callable:
  """--schema detection's copy DedupeContent may keep: its annotation fits
  its file's header size (annotations.copy_fits)."""
  return functools.partial(_copy_fits, on_size_mismatch=on_size_mismatch,
                           on_bad_box=on_bad_box)


def _copy_fits(row, label_map, on_size_mismatch: str, on_bad_box: str) -> bool:
  return annotations.copy_fits(row.annotation, row.content_size, on_size_mismatch, on_bad_box)


class _DedupeGroupFn(beam.DoFn):
  """(content, rows) -> the first row by line that is `usable` (row, label
  map (side input)); the others under REJECTED."""

  def __init__(self, usable: Callable = label_resolves):
    self._usable = usable

  def process(self, grouped, label_map):
    _, rows = grouped
    kept, rejections = duplicates.keep_first_copy(
        list(rows), lambda row: self._usable(row, label_map))
    for rejection in rejections:
      yield beam.pvalue.TaggedOutput(REJECTED, rejection)
    yield kept


class _DedupeAllFn(BatchesOut, beam.DoFn):
  """(None, every batch of rows) -> the kept rows in write order, in batches;
  the others under REJECTED."""

  def __init__(self, ordering: shuffle.Ordering, usable: Callable = label_resolves):
    self._ordering = ordering
    self._usable = usable

  def process(self, grouped, label_map):
    _, batches = grouped
    by_content = {}
    for batch in batches:
      for row in batch:
        by_content.setdefault(_content_key(row), []).append(row)
    kept = []
    for group in by_content.values():
      first, rejections = duplicates.keep_first_copy(
          group, lambda row: self._usable(row, label_map))
      for rejection in rejections:
        yield beam.pvalue.TaggedOutput(REJECTED, rejection)
      kept.append(first)
    yield from chunks(shuffle.sort_rows(kept, self._ordering))


class DedupeContent(beam.PTransform):
  """Batches of hashed rows -> {ROWS: batches of one row per content,
  REJECTED: the other copies}.

  The row kept is the first by line that is `usable` (row, label map): by
  default whose label resolves in `label_map` (a singleton PCollection of
  LabelMap); --schema detection: copy_fits. in_order: every row in one group, the
  kept ones leave in write order (a single local worker); else grouped per
  content: through the shuffle in lists per bucket of contents (`buckets`,
  buckets.py), kept content by content.
  """

  def __init__(self, ordering: shuffle.Ordering, in_order: bool, label_map,
               buckets: int = KEY_BUCKETS, usable: Callable = label_resolves):
    super().__init__()
    self._ordering, self._in_order, self._label_map = ordering, in_order, label_map
    self._buckets = buckets
    self._usable = usable

  def expand(self, rows):
    label_map = label_map_side_input(self._label_map)
    if self._in_order:
      kept = (rows
              | 'All' >> beam.Map(lambda r: (None, r))
              | 'GroupAll' >> beam.GroupByKey()
              | 'KeepFirst' >> beam.ParDo(_DedupeAllFn(self._ordering, self._usable), label_map)
              .with_outputs(REJECTED, main=ROWS))
    else:
      by_content = buffer_by_key(
          lambda batch: [(_content_key(r), r) for r in batch], self._buckets)
      kept = (rows
              # (bucket, [(content, row), ...]) per bundle
              | 'ByContent' >> beam.ParDo(by_content)
              | 'GroupByContent' >> beam.GroupByKey()
              | 'KeepFirst' >> beam.ParDo(PerKeyFn(_DedupeGroupFn(self._usable)), label_map)
              .with_outputs(REJECTED, main=ROWS))
      return {ROWS: kept[ROWS] | 'BatchRows' >> BatchAndSpread(), REJECTED: kept[REJECTED]}
    return {ROWS: kept[ROWS], REJECTED: kept[REJECTED]}
