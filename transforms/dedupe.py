"""Duplicates by content: the report of identical images under different keys,
and, on request, hashing sources before decoding (--dedupe content,
--split_by content)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional

import apache_beam as beam

from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.core import duplicates
from transforms.core import shuffle
from transforms.core import splits
from transforms.core.rejects import RowError
from transforms.encode import read_bytes
from transforms.filesystem import FileAccess
from transforms.sources import label_map_side_input


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


@beam.ptransform_fn
def ContentDuplicates(examples):
  """BuiltExamples -> one report of the rows whose source bytes repeat an
  earlier row's under another key (within a split, across splits); none when
  there is no example: read it as AsSingleton(..., default_value=
  duplicates.empty_report()). Beam's default value would add four steps and a
  stage."""
  return (examples
          | 'ContentCopies' >> beam.Map(
              lambda e: (e.sha256, duplicates.Copy(e.line, e.key, e.split)))
          | 'GroupByContent' >> beam.GroupByKey()
          | 'PerContent' >> beam.MapTuple(duplicates.content_report)
          | 'Report' >> beam.CombineGlobally(_ReportFn()).without_defaults())


class HashSourceFn(beam.DoFn):
  """ManifestRow -> the row with the SHA-256 of its source file (read once
  more, before decoding); with `split`, its split drawn from that hash, so
  copies always land in one split. An unreadable file passes unchanged: it
  is rejected when its image is loaded."""

  def __init__(self, split: Optional[splits.SplitConfig] = None):
    self._split = split

  def setup(self):
    self._reader = FileAccess()

  def process(self, row):
    try:
      digest = hashlib.sha256(read_bytes(row.path, self._reader)).hexdigest()
    except RowError:
      yield row
      return
    split = (splits.hash_split(digest, self._split.fractions, self._split.seed)
             if self._split else row.split)
    yield dataclasses.replace(row, content_sha256=digest, split=split)


def _content_key(row) -> str:
  # Rows whose file could not be read are each their own group.
  return row.content_sha256 or f'unread\x00{row.source}\x00{row.line}'


class _DedupeGroupFn(beam.DoFn):
  """(content, rows) -> the first row by line whose label resolves in the
  label map (side input); the others under REJECTED."""

  def process(self, grouped, label_map):
    _, rows = grouped
    kept, rejections = duplicates.keep_first_copy(
        list(rows), lambda row: label_map.resolves(row.label))
    for rejection in rejections:
      yield beam.pvalue.TaggedOutput(REJECTED, rejection)
    yield kept


class _DedupeAllFn(beam.DoFn):
  """(None, every row) -> the kept rows in write order; the others under REJECTED."""

  def __init__(self, ordering: shuffle.Ordering):
    self._ordering = ordering

  def process(self, grouped, label_map):
    _, rows = grouped
    by_content = {}
    for row in rows:
      by_content.setdefault(_content_key(row), []).append(row)
    kept = []
    for group in by_content.values():
      first, rejections = duplicates.keep_first_copy(
          group, lambda row: label_map.resolves(row.label))
      for rejection in rejections:
        yield beam.pvalue.TaggedOutput(REJECTED, rejection)
      kept.append(first)
    yield from shuffle.sort_rows(kept, self._ordering)


class DedupeContent(beam.PTransform):
  """Hashed rows -> {ROWS: one row per content, REJECTED: the other copies}.

  The row kept is the first by line whose label resolves in `label_map` (a
  singleton PCollection of LabelMap). in_order: every row in one group, the
  kept ones leave in write order (a single local worker); else grouped per
  content.
  """

  def __init__(self, ordering: shuffle.Ordering, in_order: bool, label_map):
    super().__init__()
    self._ordering = ordering
    self._in_order = in_order
    self._label_map = label_map

  def expand(self, rows):
    label_map = label_map_side_input(self._label_map)
    if self._in_order:
      kept = (rows
              | 'All' >> beam.Map(lambda r: (None, r))
              | 'GroupAll' >> beam.GroupByKey()
              | 'KeepFirst' >> beam.ParDo(_DedupeAllFn(self._ordering), label_map)
              .with_outputs(REJECTED, main=ROWS))
    else:
      kept = (rows
              | 'ByContent' >> beam.Map(lambda r: (_content_key(r), r))
              | 'GroupByContent' >> beam.GroupByKey()
              | 'KeepFirst' >> beam.ParDo(_DedupeGroupFn(), label_map)
              .with_outputs(REJECTED, main=ROWS))
    return {ROWS: kept[ROWS], REJECTED: kept[REJECTED]}
