"""EncodeRows: labelled manifest rows -> serialized tf.train.Examples."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from transforms.core.example import LabelledRow
from transforms.core.example import build_example
from transforms.core.image import prepare_pillow
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError
from transforms.core.rejects import unexpected_rejection
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.metrics import METRICS_NAMESPACE
from transforms.tags import EXAMPLES
from transforms.tags import LABELLED
from transforms.tags import LOADED
from transforms.tags import REJECTED
from transforms.workers.ordered_pool import OrderedPool
from transforms.workers.progress_file import ProgressFile
from transforms.workers.source_image import convert_in_worker
from transforms.workers.source_image import convert_sources
from transforms.workers.source_image import is_local
from transforms.workers.source_image import loaded_image
from transforms.workers.source_image import read_local_file

# Rows per call to an image worker process: one pipe round trip per batch.
PROCESS_BATCH = 8


def read_bytes(path: str) -> bytes:
  """The whole file at `path` (any Beam filesystem); RowError if unreadable."""
  if is_local(path):
    return read_local_file(path)
  try:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
      return f.read()
  except Exception as error:  # remote filesystems wrap their errors in BeamIOError
    text = str(error)
    code = 'missing_file' if ('Not found' in text or '404' in text or
                              'NoSuchKey' in text) else 'unreadable'
    raise RowError(STAGE_READ, code, f'cannot read {path}: {text}')


def read_remote_sources(args: tuple) -> tuple:
  """(paths, spec) -> (sources, spec) for an image worker process: local paths
  as they are (the worker reads them), remote files as their bytes or the
  RowError reading them (workers have no Beam filesystems). Runs on the pool's
  threads, so remote files are still read in parallel."""
  paths, spec = args
  return [path if is_local(path) else _bytes_or_error(path) for path in paths], spec


def _bytes_or_error(path: str):
  try:
    return read_bytes(path)
  except RowError as error:
    return error


class AssignLabelFn(beam.DoFn):
  """ManifestRow -> LabelledRow using the LabelMap side input."""

  def process(self, row, label_map):
    try:
      label_id, label_text = label_map.lookup(row.label)
    except RowError as error:
      yield beam.pvalue.TaggedOutput(
          REJECTED, row.reject(error.stage, error.code, error.reason))
      return
    yield LabelledRow(row, label_id, label_text)


class LoadImageFn(beam.DoFn):
  """LabelledRow -> LoadedImage (read, decode, orient, resize, encode).

  With threads > 1, images are converted on an OrderedPool (Pillow releases
  the GIL while decoding and resizing), so a single in-process worker uses
  every core without Beam's multi-worker data plane; with processes > 0, in
  that many child processes instead (no GIL shared at all). Only the global
  window is used (outputs of finish_bundle are placed in it).
  """

  def __init__(self, spec: ImageSpec, progress_dir=None, threads: int = 1,
               processes: int = 0):
    self._spec = spec
    self._progress_dir = progress_dir
    self._threads = threads
    self._processes = processes
    self._images = beam.metrics.Metrics.counter(METRICS_NAMESPACE, 'images_loaded')
    self._bytes = beam.metrics.Metrics.counter(METRICS_NAMESPACE, 'source_bytes')

  def setup(self):
    prepare_pillow(self._spec.max_pixels)
    self._progress = ProgressFile(self._progress_dir)
    if self._processes:
      self._pool = OrderedPool(self._processes, processes=True,
                               prepare=read_remote_sources)
    else:
      self._pool = OrderedPool(self._threads)
    self._batch = []

  def teardown(self):
    if hasattr(self, '_pool'):  # setup may have failed before making it
      self._pool.shutdown()

  def process(self, labelled: LabelledRow):
    self._progress.tick()
    self._batch.append(labelled)
    if len(self._batch) >= (PROCESS_BATCH if self._processes else 1):
      yield from self._submit_batch()

  def finish_bundle(self):
    self._progress.flush()
    outcomes = list(self._submit_batch())
    for done in self._pool.drain():
      outcomes += self._outcomes(*done)
    for outcome in outcomes:
      if isinstance(outcome, beam.pvalue.TaggedOutput):
        yield beam.pvalue.TaggedOutput(outcome.tag, _in_global_window(outcome.value))
      else:
        yield _in_global_window(outcome)

  def _submit_batch(self):
    batch, self._batch = self._batch, []
    if batch:
      for done in self._pool.submit(batch, *self._call(batch)):
        yield from self._outcomes(*done)

  def _call(self, batch: list) -> tuple:
    """(function, *args) converting these rows on the pool."""
    paths = [labelled.row.path for labelled in batch]
    if self._processes:
      return convert_in_worker, paths, self._spec
    return convert_sources, paths, self._spec, read_bytes

  def _outcomes(self, batch: list, future) -> list:
    results = self._pool.batch_results(future, len(batch),
                                       lambda i: self._call(batch[i:i + 1]))
    return [self._outcome(labelled, result)
            for labelled, result in zip(batch, results, strict=True)]

  def _outcome(self, labelled: LabelledRow, result):
    """The LoadedImage, or the row's Rejection under REJECTED."""
    row = labelled.row
    if isinstance(result, RowError):
      return beam.pvalue.TaggedOutput(
          REJECTED, row.reject(result.stage, result.code, result.reason))
    if isinstance(result, Exception):
      # Something nobody foresaw (a Pillow plugin bug, a crashed worker, ...):
      # this row is rejected with the exception; the element in hand is not blamed.
      return beam.pvalue.TaggedOutput(REJECTED, unexpected_rejection(row, result))
    loaded = loaded_image(labelled, result)
    self._images.inc()
    self._bytes.inc(loaded.source_bytes)
    return loaded


def _in_global_window(value):
  return WindowedValue(value, GlobalWindow().max_timestamp(), [GlobalWindow()])


class EncodeRows(beam.PTransform):
  """Rows -> {'examples': (split, serialized Example), 'rejected': Rejection}.

  The label map arrives as a singleton side input, so label ids are fixed
  before any image is decoded.
  """

  def __init__(self, image_spec: ImageSpec, example_spec: ExampleSpec, label_map,
               progress_dir=None, image_threads: int = 1, image_processes: int = 0):
    super().__init__()
    self._progress_dir = progress_dir
    self._image_threads = image_threads
    self._image_processes = image_processes
    self._image_spec = image_spec
    self._example_spec = example_spec
    self._label_map = label_map

  def expand(self, rows):
    labelled = rows | 'AssignLabel' >> beam.ParDo(
        AssignLabelFn(), beam.pvalue.AsSingleton(self._label_map)).with_outputs(
            REJECTED, main=LABELLED)
    loaded = labelled[LABELLED] | 'LoadImage' >> beam.ParDo(
        LoadImageFn(self._image_spec, self._progress_dir, self._image_threads,
                    self._image_processes)
    ).with_outputs(REJECTED, main=LOADED)
    spec = self._example_spec
    examples = loaded[LOADED] | 'BuildExample' >> beam.Map(
        lambda image: (image.labelled.row.split, build_example(image, spec)))
    rejected = (labelled[REJECTED], loaded[REJECTED]) | 'FlattenRejected' >> beam.Flatten()
    return {EXAMPLES: examples, REJECTED: rejected}
