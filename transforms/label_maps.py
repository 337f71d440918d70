"""The label map made from the rows: LabelMapFromRows (a combine, read as a
side input), and LabelMapHere (the same map made by a single local worker's
in-order resolve step and read by the steps fused after it)."""

from __future__ import annotations

import math
import uuid
import weakref

import apache_beam as beam

from transforms.core import manifest
from transforms.core.labels import FolderClasses
from transforms.core.labels import LabelMap

# Where a class folder's name is written, for the integer classes' first-written
# text: after every row's label (a row names its class as its file's folder does).
_FOLDER_PLACE = (math.inf, 0)


class _LabelNamesFn(beam.CombineFn):
  """Batches of rows (and --image_dir's FolderClasses) -> the LabelMap of
  their distinct label names.

  Keeps where each name is first written ((line, position) of its first
  row), so integer classes are named as first written whatever the order in
  which a runner combines the rows.
  """

  def create_accumulator(self):
    return {}

  def add_input(self, first, rows):
    if isinstance(rows, FolderClasses):
      for label in rows.names:
        first.setdefault(label, _FOLDER_PLACE)
      return first
    for row in rows:
      for position, label in enumerate(manifest.label_list(row.label)):
        place = (row.place, position)
        if label not in first or place < first[label]:
          first[label] = place
    return first

  def merge_accumulators(self, accumulators):
    merged = {}
    for first in accumulators:
      for label, place in first.items():
        if label not in merged or place < merged[label]:
          merged[label] = place
    return merged

  def extract_output(self, first):
    return LabelMap.from_labels(sorted(first, key=lambda label: (first[label], label)))


def label_map_of(rows, classes=()) -> LabelMap:
  """The LabelMap LabelMapFromRows makes of these rows (all of them) and
  FolderClasses, in one call."""
  names = _LabelNamesFn()
  first = names.add_input(names.create_accumulator(), rows)
  return _in_folder_order(names, first, classes)


def _in_folder_order(names: _LabelNamesFn, first: dict, classes) -> LabelMap:
  """The map of `first` (a _LabelNamesFn accumulator) and the FolderClasses,
  its names in the folders' order: the ids Keras gives them."""
  for folders in classes:
    first = names.add_input(first, folders)
  made = names.extract_output(first)
  for folders in classes:
    made = folders.order(made)
  return made


class _LabelPlacesFn(_LabelNamesFn):
  """_LabelNamesFn's accumulator as its output: where each name is first written."""

  def extract_output(self, first):
    return first


def _with_folder_classes(_, places: list, classes: list) -> LabelMap:
  """The LabelMap of the rows' first places (none or one) and the FolderClasses."""
  names = _LabelNamesFn()
  return _in_folder_order(names, names.merge_accumulators(places), classes)


@beam.ptransform_fn
def LabelMapFromRows(rows, classes=None):
  """Batches of rows -> a single LabelMap of their sorted distinct label names; none when
  there is no row: read it with label_map_side_input. (Beam's default value
  would add four steps and a stage to every convert.) classes: --image_dir's
  FolderClasses (one), each a class whether or not a row has it: then one map,
  made in a step of its own from the rows' places and the classes as side inputs.

  Not a Flatten of the classes into the rows' combine: the job servers of
  Flink and Spark (Beam 2.62's Java fuser) refuse a Flatten of a step's tagged
  output (the listing's classes) and a PCollection it fuses with that step
  (the rows), which a step reading the map also reads: "PCollectionNodes
  [...classes] were consumed but never produced", every --image_dir run exit 1.
  """
  if classes is None:
    return rows | 'LabelNames' >> beam.CombineGlobally(_LabelNamesFn()).without_defaults()
  places = rows | 'LabelPlaces' >> beam.CombineGlobally(_LabelPlacesFn()).without_defaults()
  return (rows.pipeline | 'Once' >> beam.Impulse()
          | 'AndFolderClasses' >> beam.Map(_with_folder_classes, beam.pvalue.AsList(places),
                                           beam.pvalue.AsList(classes)))


class LabelMapHere:
  """A single local worker's label map from its rows, made by the in-order
  resolve step (ResolveKeys) from every kept row before any row leaves it, and
  read in the same process by the steps fused after it (Decide, AssignLabel),
  given as their label map argument instead of a side input.

  Why: a side input made from the rows cut the job in two stages there, and
  every row was pickled and unpickled between them (5.2 us a row of a nightly
  run, timed around RowBatchCoder; 12,000 rows: 1.40-1.50 against 1.52-1.57 s
  of user CPU). The map is label_map_of the same rows LabelMapFromRows
  combines, whose map dataset_info.json and label_map.txt still take: nothing
  between the two drops a row or changes a label (no --dedupe content, no
  --label_map, no detection: convert.build). A step that finds no map (run in
  another process than the resolve step) fails: it never guesses one.

  A map is kept by token for as long as the LabelMapHere the pipeline was
  built with lives (the pipeline holds it for its run), then let go, so a
  finished run leaves nothing behind in a long-lived process. Not as long as
  the steps' copies live: Beam drops a bundle processor idle for 60 s, and a
  map held only by its steps was gone before a later stage read it.
  """

  _MADE: dict = {}

  def __init__(self):
    self._token = uuid.uuid4().hex
    self._map = None
    # only the instance made at construction (copies are unpickled, no __init__)
    weakref.finalize(self, LabelMapHere._MADE.pop, self._token, None)

  def make(self, rows, classes=()) -> LabelMap:
    """Makes the map of `rows` (and FolderClasses) and keeps it for this run's
    readers; -> the map."""
    made = label_map_of(rows, classes)
    self._MADE[self._token] = made
    return made

  def resolve(self, label):
    """LabelMap.resolve with this run's map."""
    if self._map is None:
      self._map = self._MADE.get(self._token)
      if self._map is None:
        raise RuntimeError('the label map made by the in-order resolve step is not in this '
                           'process: the steps reading it ran apart from it')
    return self._map.resolve(label)

  def __getstate__(self):
    return {'_token': self._token, '_map': None}


def label_map_side_input(label_map):
  """What a step takes as its label map: a label map PCollection (one
  LabelMap, or none) as a side input, an empty map when there was no row to
  make one from; a LabelMapHere as it is."""
  if isinstance(label_map, LabelMapHere):
    return label_map
  return beam.pvalue.AsSingleton(label_map, default_value=LabelMap.from_labels([]))
