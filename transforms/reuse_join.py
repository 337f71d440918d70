"""Each row's previous record found (--previous_dataset): its source
fingerprinted (FingerprintFn), the previous sidecars read and joined with the
new rows by key (JoinPrevious). What is done with the record, decided and
copied, is in reuse.py; the plain functions are in core/fingerprints.py and
core/reuse.py."""

from __future__ import annotations

from typing import Optional

import apache_beam as beam

from transforms import filesystem
from transforms.batches import BatchAndSpread
from transforms.batches import BatchedFn
from transforms.batches import BatchesOut
from transforms.batches import RowBatch
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.beam_util import in_global_window
from transforms.buckets import KEY_BUCKETS
from transforms.buckets import PerKeyFn
from transforms.buckets import buffer_by_key
from transforms.core import fingerprints
from transforms.core import reuse
from transforms.core import splits
from transforms.core.pickling import replaced
from transforms.sidecars import ReadSidecarFn
from transforms.sidecars import cut_short_tally
from transforms.sidecars import read_sidecar
from transforms.workers import http_fetch


def _tally(name: str, count: int = 1):
  return beam.pvalue.TaggedOutput(TALLIES, ((reuse.TALLY, name), count))


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
    record = reuse.first_written(previous) if previous else None
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
    self._previous = previous = {}
    for sidecar in self._sidecars:
      for key, record in read_sidecar(sidecar, cut_short):
        known = previous.setdefault(key, record)
        if known is not record:  # a key on two lines: the one the join takes
          previous[key] = reuse.first_written((known, record))
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
