"""EncodeRows: labelled manifest rows -> serialized tf.train.Examples."""

from __future__ import annotations

import hashlib

import apache_beam as beam
from apache_beam.io.filesystems import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from transforms.example import LabelledRow
from transforms.example import LoadedImage
from transforms.example import build_example
from transforms.image import prepare_pillow
from transforms.image import process_image
from transforms.ordered_pool import OrderedPool
from transforms.progress_file import ProgressFile
from transforms.rejects import EXAMPLES
from transforms.rejects import METRICS_NAMESPACE
from transforms.rejects import REJECTED
from transforms.rejects import RowError
from transforms.rejects import STAGE_READ
from transforms.rejects import unexpected_rejection
from transforms.spec import ExampleSpec
from transforms.spec import ImageSpec

LABELLED = 'labelled'
LOADED = 'loaded'


def read_bytes(path: str) -> bytes:
  """The whole file at `path` (any Beam filesystem); RowError if unreadable."""
  try:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
      return f.read()
  except IsADirectoryError:
    raise RowError(STAGE_READ, 'is_directory', f'{path} is a directory, not a file')
  except FileNotFoundError:
    raise RowError(STAGE_READ, 'missing_file', f'file not found: {path}')
  except PermissionError as error:
    raise RowError(STAGE_READ, 'unreadable', f'permission denied: {error}')
  except Exception as error:  # remote filesystems wrap their errors in BeamIOError
    text = str(error)
    code = 'missing_file' if ('Not found' in text or '404' in text or
                              'NoSuchKey' in text) else 'unreadable'
    raise RowError(STAGE_READ, code, f'cannot read {path}: {text}')


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


def load_image(labelled: LabelledRow, spec: ImageSpec) -> LoadedImage:
  """Reads and converts one row's image; RowError if it is unusable."""
  data = read_bytes(labelled.row.path)
  image = process_image(data, spec)
  return LoadedImage(labelled, image, hashlib.sha256(data).hexdigest(), len(data))


class LoadImageFn(beam.DoFn):
  """LabelledRow -> LoadedImage (read, decode, orient, resize, encode).

  With threads > 1, images are converted on an OrderedPool (Pillow releases
  the GIL while decoding and resizing), so a single in-process worker uses
  every core without Beam's multi-worker data plane. Only the global window
  is used (outputs of finish_bundle are placed in it).
  """

  def __init__(self, spec: ImageSpec, progress_dir=None, threads: int = 1):
    self._spec = spec
    self._progress_dir = progress_dir
    self._threads = threads
    self._images = beam.metrics.Metrics.counter(METRICS_NAMESPACE, 'images_loaded')
    self._bytes = beam.metrics.Metrics.counter(METRICS_NAMESPACE, 'source_bytes')

  def setup(self):
    prepare_pillow(self._spec.max_pixels)
    self._progress = ProgressFile(self._progress_dir)
    self._pool = OrderedPool(self._threads)

  def teardown(self):
    self._pool.shutdown()

  def process(self, labelled: LabelledRow):
    self._progress.tick()
    for done in self._pool.submit(labelled, load_image, labelled, self._spec):
      yield self._outcome(*done)

  def finish_bundle(self):
    self._progress.flush()
    for done in self._pool.drain():
      outcome = self._outcome(*done)
      if isinstance(outcome, beam.pvalue.TaggedOutput):
        yield beam.pvalue.TaggedOutput(outcome.tag, _in_global_window(outcome.value))
      else:
        yield _in_global_window(outcome)

  def _outcome(self, labelled: LabelledRow, future):
    """The LoadedImage, or the row's Rejection under REJECTED."""
    row = labelled.row
    try:
      loaded = future.result()
    except RowError as error:
      return beam.pvalue.TaggedOutput(
          REJECTED, row.reject(error.stage, error.code, error.reason))
    except Exception as error:  # pylint: disable=broad-except
      # Something nobody foresaw (a Pillow plugin bug, ...): this row is
      # rejected with the exception; the element in hand is not blamed.
      return beam.pvalue.TaggedOutput(REJECTED, unexpected_rejection(row, error))
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
               progress_dir=None, image_threads: int = 1):
    super().__init__()
    self._progress_dir = progress_dir
    self._image_threads = image_threads
    self._image_spec = image_spec
    self._example_spec = example_spec
    self._label_map = label_map

  def expand(self, rows):
    labelled = rows | 'AssignLabel' >> beam.ParDo(
        AssignLabelFn(), beam.pvalue.AsSingleton(self._label_map)).with_outputs(
            REJECTED, main=LABELLED)
    loaded = labelled[LABELLED] | 'LoadImage' >> beam.ParDo(
        LoadImageFn(self._image_spec, self._progress_dir, self._image_threads)
    ).with_outputs(REJECTED, main=LOADED)
    spec = self._example_spec
    examples = loaded[LOADED] | 'BuildExample' >> beam.Map(
        lambda image: (image.labelled.row.split, build_example(image, spec)))
    rejected = (labelled[REJECTED], loaded[REJECTED]) | 'FlattenRejected' >> beam.Flatten()
    return {EXAMPLES: examples, REJECTED: rejected}
