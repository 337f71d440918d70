"""ReadManifest and ResolveKeys: manifest lines -> one row per key."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.core import manifest
from transforms.core.labels import LabelMap
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import Rejection
from transforms.core.rejects import RowError
from transforms.core.tally import lines_key
from transforms.filesystem import open_checked
from transforms.metrics import METRICS_NAMESPACE
from transforms.tags import REJECTED
from transforms.tags import ROWS
from transforms.tags import TALLIES


def read_numbered_lines(path: str, fmt: str):
  """Yields (line number, raw bytes) for every non-blank data line; a cut-off
  .gz fails rather than silently losing its tail."""
  with open_checked(path) as stream:
    yield from manifest.iter_lines(stream, fmt)


class ParseLineFn(beam.DoFn):
  """(line number, raw line) -> ManifestRow, or a Rejection under REJECTED."""

  def __init__(self, config: manifest.ManifestConfig):
    self._config = config
    self._rows = beam.metrics.Metrics.counter(
        METRICS_NAMESPACE,
        'label_manifest_rows' if config.role == manifest.ROLE_LABELS else 'manifest_rows')

  def process(self, numbered):
    line, raw = numbered
    self._rows.inc()
    try:
      row = manifest.parse_line(raw, line, self._config)
    except RowError as error:
      yield self._reject(raw, line, error.stage, error.code, error.reason)
      return
    except Exception as error:  # pylint: disable=broad-except
      # A line nobody foresaw is that line's problem, never the job's.
      yield self._reject(raw, line, STAGE_MANIFEST, 'unexpected_error',
                         f'{type(error).__name__}: {error}')
      return
    yield row

  def _reject(self, raw: bytes, line: int, stage: str, code: str, reason: str):
    return beam.pvalue.TaggedOutput(REJECTED, Rejection(
        manifest.shown_line(raw), stage, code, reason, self._config.path, line,
        counts_as_row=self._config.role != manifest.ROLE_LABELS))


class ReadManifest(beam.PTransform):
  """Reads one manifest in the pipeline.

  Out: {ROWS: ManifestRow, REJECTED: Rejection, TALLIES: a line tally per line}.
  """

  def __init__(self, config: manifest.ManifestConfig):
    super().__init__()
    self._config = config

  def expand(self, pbegin):
    lines = (
        pbegin
        | 'ManifestPath' >> beam.Create([self._config.path])
        | 'ReadLines' >> beam.FlatMap(read_numbered_lines, self._config.fmt))
    parsed = lines | 'ParseLines' >> beam.ParDo(
        ParseLineFn(self._config)).with_outputs(REJECTED, main=ROWS)
    key = lines_key(self._config.role == manifest.ROLE_LABELS)
    tallies = lines | 'TallyLines' >> beam.Map(lambda _: (key, 1))
    return {ROWS: parsed[ROWS], REJECTED: parsed[REJECTED], TALLIES: tallies}


class ResolveKeyFn(beam.DoFn):
  """(key, {'images': rows, 'labels': rows}) -> one row, plus rejections."""

  def __init__(self, joined: bool):
    self._joined = joined

  def process(self, grouped):
    key, sides = grouped
    row, rejections = manifest.resolve_key(
        key, list(sides['images']), list(sides.get('labels', ())), self._joined)
    for rejection in rejections:
      yield beam.pvalue.TaggedOutput(REJECTED, rejection)
    if row is not None:
      yield row


class ResolveKeys(beam.PTransform):
  """Keeps one image row per key and, with a label manifest, joins labels.

  In: image rows (and optionally label rows). Out: {'rows', 'rejected'}.
  """

  def __init__(self, label_rows=None):
    super().__init__()
    self._label_rows = label_rows

  def expand(self, image_rows):
    sides = {'images': image_rows | 'KeyImages' >> beam.Map(lambda r: (r.key, r))}
    if self._label_rows is not None:
      sides['labels'] = self._label_rows | 'KeyLabels' >> beam.Map(
          lambda r: (r.key, r))
    grouped = sides | 'GroupByKey' >> beam.CoGroupByKey()
    resolved = grouped | 'ResolveKey' >> beam.ParDo(
        ResolveKeyFn(self._label_rows is not None)).with_outputs(REJECTED, main=ROWS)
    return {ROWS: resolved[ROWS], REJECTED: resolved[REJECTED]}


class _LabelNamesFn(beam.CombineFn):
  """Rows -> the LabelMap of their distinct label names."""

  def create_accumulator(self):
    return set()

  def add_input(self, names, row):
    names.add(row.label or '')
    return names

  def merge_accumulators(self, accumulators):
    return set().union(*accumulators)

  def extract_output(self, names):
    return LabelMap.from_labels(list(names))


@beam.ptransform_fn
def LabelMapFromRows(rows):  # pylint: disable=invalid-name
  """Rows -> a single LabelMap of their sorted distinct label names."""
  return rows | 'LabelNames' >> beam.CombineGlobally(_LabelNamesFn())


def list_image_dir(directory: str):
  """(number, relative path) of every file below DIR, sorted; hidden ones skipped.

  The label is the first folder (DIR/<label>/.../<file>); a file directly in
  DIR has none and is rejected as such rather than ignored.
  """
  pattern = directory.rstrip('/') + '/**'
  paths = sorted(m.path for r in FileSystems.match([pattern]) for m in r.metadata_list)
  prefix = directory.rstrip('/') + '/'
  relative = [p[len(prefix):] for p in paths if p.startswith(prefix)]
  visible = [r for r in relative if not any(part.startswith('.') for part in r.split('/'))]
  return list(enumerate(visible, 1))


class ReadImageDir(beam.PTransform):
  """A folder-per-class tree as manifest rows (label = folder name).

  Out: {ROWS, REJECTED, TALLIES}, like ReadManifest.
  """

  def __init__(self, directory: str, split: manifest.SplitConfig):
    super().__init__()
    self._config = manifest.ManifestConfig(
        path=directory.rstrip('/') + '/', fmt='csv', header=('image', 'label'),
        split=split)

  def expand(self, pbegin):
    config = self._config
    files = (pbegin
             | 'ImageDir' >> beam.Create([config.path])
             | 'ListFiles' >> beam.FlatMap(list_image_dir))
    parsed = files | 'ToRows' >> beam.ParDo(_ImageDirRowFn(config)).with_outputs(
        REJECTED, main=ROWS)
    tallies = files | 'TallyFiles' >> beam.Map(lambda _: (lines_key(False), 1))
    return {ROWS: parsed[ROWS], REJECTED: parsed[REJECTED], TALLIES: tallies}


class _ImageDirRowFn(beam.DoFn):

  def __init__(self, config: manifest.ManifestConfig):
    self._config = config

  def process(self, numbered):
    line, relative = numbered
    fields = {'image': relative, 'label': relative.split('/')[0] if '/' in relative else ''}
    try:
      yield manifest.row_from_fields(fields, self._config, line)
    except RowError as error:
      yield beam.pvalue.TaggedOutput(REJECTED, Rejection(
          fields, error.stage, error.code, error.reason, self._config.path, line))
