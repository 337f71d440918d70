"""ReadManifest and ResolveKeys: manifest lines -> one row per key."""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Optional

import apache_beam as beam

from transforms.batches import Batch
from transforms.batches import BatchAndSpread
from transforms.batches import BatchesOut
from transforms.batches import RowBatch
from transforms.batches import chunks
from transforms.beam_util import CLASSES
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.beam_util import SKIPPED
from transforms.beam_util import TALLIES
from transforms.beam_util import counter
from transforms.buckets import KEY_BUCKETS
from transforms.buckets import PerKeyFn
from transforms.buckets import buffer_by_key
from transforms.core import image_dir
from transforms.core import manifest
from transforms.core import manifest_keys
from transforms.core import paths
from transforms.core import shuffle
from transforms.core import splits
from transforms.core.labels import DEFAULT_NORMALIZE
from transforms.core.labels import FolderClasses
from transforms.core.local_files import walk_local_files
from transforms.core.manifest_lines import LineParser
from transforms.core.rejects import Rejection
from transforms.core.rejects import RowError
from transforms.core.tally import SHOWN_SKIPPED_FILES
from transforms.core.tally import lines_key
from transforms.core.tally import skipped_key
from transforms.filesystem import FileAccess
from transforms.label_maps import LabelMapHere
from transforms.manifest_ranges import LINES
from transforms.manifest_ranges import READS
from transforms.manifest_ranges import NumberLinesFn
from transforms.manifest_ranges import ReadManifestLines
from transforms.manifest_ranges import manifest_files
from transforms.parquet_source import ReadParquet
from transforms.webdataset_source import ReadTars


class ParseLineFn(BatchesOut, NumberLinesFn):
  """Numbered lines -> batches of ManifestRows (a chunk's rows, one list),
  or a Rejection under REJECTED (core/manifest_lines.parse_line).

  configs: the ManifestConfig of each file. progress_dir: where a local
  run's progress line finds the number of rows (pipeline/runs/progress.py).
  deferred: each chunk's lines leave unparsed, (file, line, position, raw)
  in one batch, for ResolveKeys in order to parse where the rows meet.
  """

  def __init__(self, configs: tuple, progress_dir: Optional[str] = None,
               deferred: bool = False):
    super().__init__(progress_dir)
    self._parse = LineParser(configs)
    self._deferred = deferred
    self._rows = counter(
        'label_manifest_rows' if configs[0].role == manifest.ROLE_LABELS else 'manifest_rows')

  def numbered(self, file: int, line: int, position: int, raw: bytes):
    if self._deferred:
      yield file, line, position, raw
      return
    parsed = self._parse(file, line, position, raw)
    yield beam.pvalue.TaggedOutput(REJECTED, parsed) if isinstance(parsed, Rejection) else parsed

  def process(self, tagged, reads):
    """A chunk of lines -> its rows as one batch, each rejected line alone."""
    self._rows.inc(len(tagged[2]))  # once a chunk: a counter's inc costs 0.6 us
    rows = RowBatch()
    for output in super().process(tagged, reads):
      if isinstance(output, beam.pvalue.TaggedOutput):
        yield output
      else:
        rows.append(output)
    if rows:
      yield rows


class ReadManifest(beam.PTransform):
  """Reads one manifest (one file, or the files of a pattern) in the
  pipeline, in byte ranges every worker reads (transforms/manifest_ranges.py).

  Out: {ROWS: batches of ManifestRows, REJECTED: Rejection, TALLIES: line tallies}.
  Each file's rows carry its own path (`source`, and the folder relative
  image paths resolve against). range_bytes: force the range size (tests).
  progress_dir: where a local run's progress line finds the number of rows.
  deferred (a single local worker, for ResolveKeys in order): a line-based
  manifest's ROWS are batches of its lines unparsed, parsed by `parser`
  where the rows meet: batches of raw lines cross that step's grouping for
  less than their rows would (RowBatchCoder: pickling ManifestRows).
  """

  def __init__(self, config: manifest.ManifestConfig, range_bytes: Optional[int] = None,
               progress_dir: Optional[str] = None, deferred: bool = False):
    super().__init__()
    self._config = config
    self._range_bytes = range_bytes
    self._progress_dir = progress_dir
    self._deferred = deferred
    # With deferred, a line-based manifest's ROWS are its lines unparsed
    # (ParseLineFn), and this is what parses them (for ResolveKeys); else None.
    self.parser = None

  def expand(self, pbegin):
    if self._config.fmt == manifest.PARQUET:  # by row group (transforms/parquet_source.py)
      return pbegin | 'ReadParquet' >> ReadParquet(self._config, self._progress_dir)
    if self._config.fmt == manifest.WEBDATASET:  # a tar each (transforms/webdataset_source.py)
      return pbegin | 'ReadTars' >> ReadTars(self._config)
    files = manifest_files(self._config)
    configs = tuple(dataclasses.replace(self._config, path=file.path, files=())
                    for file in files)
    if self._deferred:
      self.parser = LineParser(configs)
    read = pbegin | 'Read' >> ReadManifestLines(
        files, manifest.has_header(self._config.fmt), self._range_bytes,
        ParseLineFn(configs, self._progress_dir, self._deferred), (REJECTED,))
    key = lines_key(self._config.role == manifest.ROLE_LABELS)
    tallies = read[READS] | 'TallyLines' >> beam.Map(lambda read: (key, read.data_lines))
    return {ROWS: read[LINES], REJECTED: read[REJECTED], TALLIES: tallies}


class ResolveKeyFn(beam.DoFn):
  """(key, {'images': rows, 'labels': rows}) -> one row, plus rejections."""

  def __init__(self, joined: bool):
    self._joined = joined

  def process(self, grouped):
    key, sides = grouped
    row, rejections = manifest_keys.resolve_key(
        key, list(sides['images']), list(sides.get('labels', ())), self._joined)
    for rejection in rejections:
      yield beam.pvalue.TaggedOutput(REJECTED, rejection)
    if row is not None:
      yield row


class _ResolveAllFn(BatchesOut, beam.DoFn):
  """(None, [(side, [row, ...]), ...]) -> every kept row in write order, in batches
  (lists of BATCH_ROWS rows), plus rejections.

  The single-worker form of ResolveKeyFn: all rows arrive as one group, so
  the rows (small) are put in their write order before any image is decoded,
  and the images never go through a shuffle.
  """

  def __init__(self, joined: bool, ordering: shuffle.Ordering,
               label_map_here: Optional[LabelMapHere] = None,
               parse: Optional[LineParser] = None):
    self._joined = joined
    self._ordering = ordering
    self._label_map_here = label_map_here
    self._parse = parse

  def process(self, grouped):
    _, batches = grouped
    tagged, classes = [], []
    for side, rows in batches:
      if side == CLASSES:
        classes.append(rows)  # one FolderClasses, not rows
      elif side == 'images' and self._parse is not None:  # lines (ReadManifest deferred)
        for line in rows:
          parsed = self._parse(*line)
          if isinstance(parsed, Rejection):
            yield beam.pvalue.TaggedOutput(REJECTED, parsed)
          else:
            tagged.append((side, parsed))
      else:
        tagged += [(side, row) for row in rows]
    del batches
    ordering = self._ordering
    # Shuffled, a key's rows share its place: one sort both groups them and
    # puts the kept rows in write order.
    # In manifest order the kept row's line decides, known once resolved.
    place = ordering.key if ordering.shuffle else (lambda key, place: 0)
    tagged = sorted(tagged, key=lambda t: (place(t[1].key, t[1].place), t[1].key, t[0],
                                           t[1].source, t[1].line))
    kept = []
    for key, group in itertools.groupby(tagged, key=lambda t: t[1].key):
      sides = {'images': [], 'labels': []}
      for side, row in group:
        sides[side].append(row)
      row, rejections = manifest_keys.resolve_key(key, sides['images'], sides['labels'],
                                             self._joined)
      for rejection in rejections:
        yield beam.pvalue.TaggedOutput(REJECTED, rejection)
      if row is not None:
        kept.append(row)
    del tagged
    if self._label_map_here is not None:  # before any row goes on to the steps that read it
      self._label_map_here.make(kept, classes)
    yield from chunks(kept if ordering.shuffle else shuffle.sort_rows(kept, ordering))


class ResolveKeys(beam.PTransform):
  """Keeps one image row per key and, with a label manifest, joins labels.

  In: batches of image rows (and optionally of label rows). Out: {'rows': batches of rows
  (lists, transforms/batches.py), 'rejected': Rejection}.
  in_order: one group of every row, which comes out sorted in the write order
  of `ordering` (for a single local worker, which then writes records in
  the order they arrive); else grouped per key, in no particular order:
  through the shuffle in lists per bucket of keys (`buckets`, buckets.py),
  resolved key by key. label_map_here (in_order only): made from the kept
  rows (and `classes`, --image_dir's FolderClasses, grouped with them) before
  any leaves (label_maps.LabelMapHere). parse (in_order only): the image rows
  are a manifest's lines unparsed (ReadManifest deferred), parsed so here.
  """

  def __init__(self, label_rows=None, ordering: shuffle.Ordering = shuffle.DEFAULT_ORDERING,
               in_order: bool = False, buckets: int = KEY_BUCKETS,
               label_map_here: Optional[LabelMapHere] = None, classes=None,
               parse: Optional[LineParser] = None):
    super().__init__()
    self._classes = classes
    self._parse = parse
    self._label_rows = label_rows
    self._ordering = ordering
    self._in_order = in_order
    self._buckets = buckets
    self._label_map_here = label_map_here

  def expand(self, image_rows):
    joined = self._label_rows is not None
    if self._in_order:
      tagged = [image_rows | 'TagImages' >> beam.Map(lambda rows: (None, ('images', rows)))]
      if joined:
        tagged.append(self._label_rows | 'TagLabels' >> beam.Map(
            lambda rows: (None, ('labels', rows))))
      if self._label_map_here is not None and self._classes is not None:
        tagged.append(self._classes | 'TagClasses' >> beam.Map(
            lambda classes: (None, (CLASSES, classes))))
      grouped = (tagged | 'AllRows' >> beam.Flatten()
                 | 'GroupAll' >> beam.GroupByKey())
      resolved = grouped | 'ResolveInOrder' >> beam.ParDo(
          _ResolveAllFn(joined, self._ordering, self._label_map_here, self._parse)).with_outputs(
              REJECTED, main=ROWS)
      return {ROWS: resolved[ROWS], REJECTED: resolved[REJECTED]}
    # batches of rows -> (bucket, [(key, row), ...]) per bundle -> (bucket, {'images': lists,
    # 'labels': lists}) -> ResolveKeyFn per key of the bucket
    def by_key():
      return beam.ParDo(buffer_by_key(lambda rows: [(r.key, r) for r in rows], self._buckets))
    sides = {'images': image_rows | 'KeyImages' >> by_key()}
    if joined:
      sides['labels'] = self._label_rows | 'KeyLabels' >> by_key()
    grouped = sides | 'GroupByKey' >> beam.CoGroupByKey()
    resolved = grouped | 'ResolveKey' >> beam.ParDo(
        PerKeyFn(ResolveKeyFn(joined))).with_outputs(REJECTED, main=ROWS)
    return {ROWS: resolved[ROWS] | 'BatchRows' >> BatchAndSpread(),
            REJECTED: resolved[REJECTED]}


def list_files(directory: str) -> list:
  """Every file below DIR (any Beam filesystem), relative to DIR, sorted."""
  prefix = directory.rstrip('/') + '/'
  paths = sorted(path for path, _ in FileAccess().list(prefix))
  return [p[len(prefix):] for p in paths if p.startswith(prefix)]


def list_tree(directory: str) -> list:
  """(relative path, None) of every file below DIR, and (relative folder
  path/, RowError) of what cannot be listed there (local folders: see
  local_files.walk_local_files; object stores have no such entries), sorted."""
  if not paths.is_remote(directory):
    return sorted(walk_local_files(directory), key=lambda entry: entry[0])
  return [(relative, None) for relative in list_files(directory)]


def local_class_folders(directory: str, layout: str) -> list:
  """The folders at a layout's class depth below a local --image_dir, empty or
  not, as Keras' index_directory lists them (os.path.isdir: a symlinked
  folder too), relative to it. A folder that cannot be listed is passed
  over: the walk makes it a rejected row (read/unreadable)."""
  level = ['']
  for _ in range(image_dir.class_depth(layout)):
    below = []
    for relative in level:
      try:
        names = os.listdir(os.path.join(directory, relative))
      except OSError:
        continue  # rejected by list_tree's walk, with its reason
      below += [relative + name + '/' for name in names
                if os.path.isdir(os.path.join(directory, relative, name))]
    level = below
  return level


def list_image_dir(directory: str, extensions=None, layout: str = image_dir.LAYOUT_LABEL,
                   modes: frozenset = DEFAULT_NORMALIZE):
  """(number, relative path, None) of every image file below DIR, and
  (number, relative folder path, RowError) of every folder that could not be
  listed, sorted; hidden files skipped silently, files of other extensions
  under SKIPPED; last, its class folders' labels, one FolderClasses under
  CLASSES (from this one listing: one source of the map's names).

  Files at a depth the layout has no label for are rows (rejected as such,
  never ignored); so are folders that could not be listed.
  """
  number = 0
  tree = list_tree(directory)
  for relative, problem in tree:
    relative, misnamed = image_dir.utf8_name(relative)
    if problem is not None or image_dir.wanted_file(relative, extensions):
      number += 1
      yield number, relative, problem or misnamed
    elif image_dir.wanted_file(relative, None):
      yield beam.pvalue.TaggedOutput(SKIPPED, relative)
  folders = (image_dir.folders_of_files([relative for relative, _ in tree], layout)
             if paths.is_remote(directory) else local_class_folders(directory, layout))
  yield beam.pvalue.TaggedOutput(CLASSES, FolderClasses.of(
      image_dir.folder_labels(folders, layout), modes))


class ReadImageDir(beam.PTransform):
  """A folder-per-class tree as manifest rows (label = folder name; with
  layout split/label, DIR/<split>/<label>/...). A folder that cannot be
  listed is one rejected row (read/unreadable), keyed by its path.

  Out: {ROWS, REJECTED, TALLIES, SKIPPED: the first skipped file names, one list,
  CLASSES: its class folders, one FolderClasses}.
  """

  def __init__(self, directory: str, split: splits.SplitConfig,
               layout: str = image_dir.LAYOUT_LABEL, extensions=None,
               label_normalize: frozenset = DEFAULT_NORMALIZE):
    super().__init__()
    self._config = manifest.ManifestConfig(
        path=directory.rstrip('/') + '/', fmt='csv', header=('image', 'label'), listed=True,
        split=split, label_normalize=label_normalize)
    self._layout = layout
    self._extensions = extensions

  def expand(self, pbegin):
    config = self._config
    listed = (pbegin
              | 'Once' >> beam.Impulse()
              | 'ListFiles' >> beam.FlatMap(
                  lambda _, path, extensions, layout, modes: list_image_dir(
                      path, extensions, layout, modes),
                  config.path, self._extensions, self._layout, config.label_normalize)
              .with_outputs(SKIPPED, CLASSES, main=ROWS))
    files = listed[ROWS]
    parsed = files | 'ToRows' >> beam.ParDo(
        _ImageDirRowFn(config, self._layout)).with_outputs(REJECTED, main=ROWS)
    tallies = (
        files | 'TallyFiles' >> beam.Map(lambda _: (lines_key(False), 1)),
        listed[SKIPPED] | 'TallySkipped' >> beam.Map(lambda _: (skipped_key(), 1)),
    ) | 'Tallies' >> beam.Flatten()
    # No value when nothing was skipped: the reader's side input supplies []
    # (Beam's default value would add four steps and a stage).
    skipped = listed[SKIPPED] | 'FirstSkipped' >> beam.combiners.Top.Smallest(
        SHOWN_SKIPPED_FILES, has_defaults=False)
    return {ROWS: parsed[ROWS] | 'BatchRows' >> Batch(), REJECTED: parsed[REJECTED],
            TALLIES: tallies, SKIPPED: skipped, CLASSES: listed[CLASSES]}


class _ImageDirRowFn(beam.DoFn):
  """(number, path relative to --image_dir, RowError or None) -> its
  ManifestRow, label (and split) from its folders, or its Rejection under
  REJECTED."""

  def __init__(self, config: manifest.ManifestConfig, layout: str):
    self._config = config
    self._layout = layout

  def process(self, numbered):
    line, relative, problem = numbered
    fields = {'image': relative}
    try:
      if problem is not None:  # a folder that could not be listed: its path is the key
        raise problem
      fields = image_dir.image_dir_fields(relative, self._layout)
      yield manifest.row_from_fields(fields, self._config, line)
    except RowError as error:
      yield beam.pvalue.TaggedOutput(REJECTED, Rejection(
          fields, error.stage, error.code, error.reason, self._config.path, line))
