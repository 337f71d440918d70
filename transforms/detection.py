"""--schema detection in Beam: the annotations read (COCO streamed by one
reader, grouped by image; VOC and YOLO one file per image) into rows, and
the converted images' objects moved with their pixels into Examples."""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import apache_beam as beam

from transforms import filesystem
from transforms.batches import Batch
from transforms.batches import BatchedFn
from transforms.batches import RowBatch
from transforms.beam_util import EXAMPLES
from transforms.beam_util import LOADED
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.beam_util import counter
from transforms.core import annotation_versions
from transforms.core import annotations as objects
from transforms.core import coco
from transforms.core import detection_info
from transforms.core import fingerprints
from transforms.core.detect import DetectionOptions
from transforms.core.detect import detect
from transforms.core.example import BuiltExample
from transforms.core.example import LabelledRow
from transforms.core.example import build_example
from transforms.core.example import held_bytes
from transforms.core.image import prepare_pillow
from transforms.core.rejects import RowError
from transforms.core.rejects import unexpected_rejection
from transforms.core.shuffle import Ordering
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.core.tally import lines_key
from transforms.encode import LoadImageFn


def image_key(image_id):
  """A GroupByKey key for an image id as the file gives it (6.0 is 6: coco.whole_id)."""
  image_id = coco.whole_id(image_id)
  return image_id if isinstance(image_id, (int, str)) and not isinstance(image_id, bool) \
      else repr(image_id)


class _StreamCocoFn(beam.DoFn):
  """Runs once: the file's images, then its annotations, streamed (ijson),
  each keyed by its image id: no more than one element in memory."""

  def __init__(self, path: str):
    self._path = path

  def process(self, _):
    files = filesystem.FileAccess()
    with files.open(self._path) as stream:
      for line, image in coco.items(stream, 'images'):
        yield image_key(image.get('id') if isinstance(image, dict) else None), (
            'images', (line, image))
    with files.open(self._path) as stream:
      for line, ann in coco.items(stream, 'annotations'):
        yield image_key(ann.get('image_id') if isinstance(ann, dict) else None), (
            'annotations', (line, ann))


class _CocoImageFn(beam.DoFn):
  """(image id, its tagged records) -> its row, rejections and tallies."""

  def __init__(self, source: coco.CocoSource):
    self._source = source

  def process(self, grouped):
    image_id, tagged = grouped
    images = sorted(v for tag, v in tagged if tag == 'images')
    anns = [v for tag, v in tagged if tag == 'annotations']
    if images and not anns and self._source.skip_empty:
      yield beam.pvalue.TaggedOutput(TALLIES, (detection_info.SKIPPED_EMPTY, 1))
      return
    if images:  # each image record is a row (a repeated id: a rejected one)
      yield beam.pvalue.TaggedOutput(TALLIES, (lines_key(False), len(images)))
    row, rejected = coco_row(images[0][1].get('id') if images else image_id, images, anns,
                             self._source)
    for rejection in rejected:
      yield beam.pvalue.TaggedOutput(REJECTED, rejection)
    if row is not None:
      yield row


def coco_row(image_id, images: list, anns: list, source: coco.CocoSource) -> tuple:
  """coco.image_row, its row fingerprinted with the records it was made of
  (the sidecar's `fingerprint`: validate --recompute tells by it whether they
  changed since the run)."""
  row, rejected = coco.image_row(image_id, images, anns, source)
  if row is not None:
    row = dataclasses.replace(row, annotation=dataclasses.replace(
        row.annotation, fingerprint=annotation_versions.coco_fingerprint(images, anns)))
  return row, rejected


class ReadCoco(beam.PTransform):
  """A COCO instances JSON -> {ROWS, REJECTED, TALLIES}: one row per image."""

  def __init__(self, source: coco.CocoSource):
    super().__init__()
    self._source = source

  def expand(self, pbegin):
    grouped = (pbegin | 'Once' >> beam.Impulse()
               | 'Stream' >> beam.ParDo(_StreamCocoFn(self._source.path))
               | 'GroupByImage' >> beam.GroupByKey())
    read = grouped | 'ImageRows' >> beam.ParDo(_CocoImageFn(self._source)).with_outputs(
        REJECTED, TALLIES, main=ROWS)
    return {ROWS: read[ROWS] | 'BatchRows' >> Batch(), REJECTED: read[REJECTED],
            TALLIES: read[TALLIES]}


def read_png(path: str, max_pixels: int):
  """A VOC SegmentationObject PNG (any Beam filesystem), its palette indices
  kept; RowError (the image's row) when it does not decode or has more than
  max_pixels pixels (checked before its pixels are decoded)."""
  import io

  from PIL import Image
  with filesystem.FileAccess().open(path) as stream:
    data = stream.read()
  try:
    image = Image.open(io.BytesIO(data))
    if image.width * image.height > max_pixels:
      raise ValueError(f'{image.width}x{image.height} is more than --max_pixels {max_pixels}')
    image.load()
  except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
    # (Pillow's "cannot identify" names the stream's address: not the same twice)
    said = 'not an image Pillow can read' if isinstance(error, Image.UnidentifiedImageError) \
        else str(error)
    raise RowError(objects.STAGE_ANNOTATION, objects.BAD_MASK, f'{path}: {said}') from None
  return image


class _DetectFn(beam.DoFn):
  """LoadedImage -> BuiltExample with its objects moved onto the output."""

  def __init__(self, names: tuple, image: ImageSpec, example: ExampleSpec,
               options: DetectionOptions, ordering: Ordering):
    self._names = names
    self._image = image
    self._example = example
    self._options = options
    self._ordering = ordering
    # the pixels' and the Example's version (validate --recompute: a record
    # another version encoded is not compared)
    self._digest = fingerprints.options_digest(image, example)

  def setup(self):
    self._dropped = counter('boxes_dropped_by_crop')
    # VOC masks open here, in the launcher, whatever opens the images: its
    # Pillow must take --max_pixels (the image step prepares it only when
    # images open on its threads)
    prepare_pillow(self._image.max_pixels)

  def process(self, loaded):
    row = loaded.labelled.row
    try:
      found = detect(loaded, self._names, self._image, self._options,
                     functools.partial(read_png, max_pixels=self._image.max_pixels))
      data = build_example(found, self._example)
    except RowError as error:  # (size_mismatch, --on_bad_box reject_row, a VOC mask PNG
      # too large or that does not decode)
      yield beam.pvalue.TaggedOutput(REJECTED, row.reject(error.stage, error.code,
                                                          error.reason))
      return
    except Exception as error:  # (a mask that does not decode: this row's problem)
      yield beam.pvalue.TaggedOutput(REJECTED, unexpected_rejection(row, error))
      return
    for rejection in found.rejected:
      yield beam.pvalue.TaggedOutput(REJECTED, rejection)
    if found.dropped:
      self._dropped.inc(found.dropped)
      yield beam.pvalue.TaggedOutput(TALLIES, (detection_info.DROPPED_BY_CROP, found.dropped))
    yield BuiltExample(row.split, self._ordering.key(row.key, row.place), found.labels,
                       row.key, row.line, loaded.sha256, data, row.annotation.fingerprint,
                       option_digest=self._digest, place=row.place)


class DetectRows(beam.PTransform):
  """Batches of rows with annotations -> {EXAMPLES: batches of BuiltExamples,
  REJECTED, TALLIES}; the images are loaded as EncodeRows loads them
  (LoadImageFn's pool)."""

  def __init__(self, names: tuple, image: ImageSpec, example: ExampleSpec,
               options: DetectionOptions, ordering: Ordering, load: LoadImageFn):
    super().__init__()
    self._detect = _DetectFn(names, image, example, options, ordering)
    self._load = load

  def expand(self, rows):
    unlabelled = functools.partial(LabelledRow, label_id=0, label_text='')
    loaded = (rows | 'Unlabelled' >> beam.Map(
        lambda batch: RowBatch(unlabelled(row) for row in batch)).with_output_types(RowBatch)
              | 'LoadImage' >> beam.ParDo(BatchedFn(self._load, held_bytes)).with_outputs(
                  REJECTED, main=LOADED))
    built = loaded[LOADED] | 'Detect' >> beam.ParDo(
        BatchedFn(self._detect, held_bytes)).with_outputs(
        REJECTED, TALLIES, main=EXAMPLES)
    rejected = (loaded[REJECTED], built[REJECTED]) | 'FlattenRejected' >> beam.Flatten()
    return {EXAMPLES: built[EXAMPLES], REJECTED: rejected, TALLIES: built[TALLIES]}


def file_source(detection, split):
  """The FileSource of --annotation_format voc|yolo (detection: pipeline's DetectionConfig)."""
  from transforms.detection_files import FileSource
  named = [(i, name) for i, name in enumerate(detection.names) if name]
  options = detection.options
  return FileSource(detection.annotation_format, detection.image_dir, split,
                    tuple((name, i) for i, name in named)
                    if detection.annotation_format == 'voc' else tuple(i for i, _ in named),
                    detection.mask_dir, options.include_masks, options.on_bad_box,
                    options.skip_empty, detection.keypoint_values)


def read_annotations(p, detection, split) -> Optional[dict]:
  """The reader of --annotation_format (detection: pipeline's DetectionConfig)."""
  if detection.annotation_format == 'coco':
    return p | 'ReadCoco' >> ReadCoco(detection.coco_source(split))
  from transforms.detection_files import ReadAnnotationFiles
  return p | 'ReadAnnotationFiles' >> ReadAnnotationFiles(file_source(detection, split),
                                                          detection.files)
