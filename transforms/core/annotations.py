"""Object annotations of one image, whatever format they came in (COCO, VOC,
YOLO), and their checks: plain functions.

A box is kept as (xmin, ymin, xmax, ymax) in pixels of the image the
annotation was made on (its frame, transforms.core.boxes), or, for YOLO, as
fractions of that image's size (normalized=True).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from transforms.core.labels import MAX_INTEGER_LABEL
from transforms.core.pickling import cheap_pickle
from transforms.core.rejects import Rejection

STAGE_ANNOTATION = 'annotation'
ANNOTATION_FORMATS = ('coco', 'voc', 'yolo')
ON_BAD_BOX = ('drop', 'reject_row')
# --on_size_mismatch: an image whose file is not the size its annotation
# records is rejected (annotation/size_mismatch), or its coordinates scaled.
ON_SIZE_MISMATCH = ('reject', 'scale')
SIZE_MISMATCH = 'size_mismatch'
# A box may overshoot its image by this many pixels (rounding in the tools
# that made it, VOC's 1-based corners): it is clipped, not rejected. Every
# format's: YOLO's fractions are checked in pixels once the image's size is
# known (transforms.core.detect), not as fractions of a 1x1 image.
EDGE_TOLERANCE = 1.0
# A YOLO box ending exactly EDGE_TOLERANCE past the edge comes out a few ulps
# beyond it once its fractions are multiplied back to pixels ((0.65 +
# 0.7666666666666667 / 2) * 30 is 31.000000000000004 on a 30-px image): it
# was box_outside_image (with --on_bad_box reject_row, its image's row) where
# the same box in COCO or VOC pixels was clipped and kept.
_EDGE_SLACK = 1e-6

# Codes of rejected annotations (rejected.jsonl, counts_as_row false).
BOX_OUTSIDE_IMAGE = 'box_outside_image'
EMPTY_BOX = 'empty_box'
UNKNOWN_CATEGORY = 'unknown_category'
MISSING_IMAGE = 'missing_image'  # also a row: a YOLO label file without its image
SHORT_POLYGON = 'short_polygon'
BAD_ANNOTATION = 'bad_annotation'
BAD_MASK = 'bad_mask'  # a COCO RLE or VOC PNG that does not decode, or over --max_pixels
# A YOLO row repeating an earlier row of its file (class and coordinates):
# the object is kept once, as Ultralytics keeps it (its label check drops
# repeated rows); no bad box: --on_bad_box reject_row leaves its image alone.
DUPLICATE_ANNOTATION = 'duplicate_annotation'
# Codes of rejected rows (an image's whole record).
BAD_IMAGE_RECORD = 'bad_image_record'
PATH_OUTSIDE_IMAGE_DIR = 'path_outside_image_dir'  # absolute, or climbing out with ..
# A VOC id an ImageSets/Main split file lists without its Annotations/<id>.xml.
MISSING_ANNOTATION = 'missing_annotation'
# A row rejected whole (--on_bad_box reject_row): its first bad box says why.
BAD_BOX_ROW = 'bad_box'


@cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class ObjectAnnotation:
  """One object: its class (the output label id), box and flags.

  segmentation: None; ('polygons', [[x0, y0, x1, y1, ...], ...]) in the box's
  units; ('rle', {'size': [h, w], 'counts': ...}); ('png', path, value): the
  pixels of a VOC SegmentationObject PNG equal to `value`.
  """
  label: int
  box: tuple
  is_crowd: int = 0
  area: Optional[float] = None  # as recorded, in frame pixels
  difficult: int = 0
  truncated: int = 0
  segmentation: Optional[tuple] = None
  # what rejected.jsonl shows of it, and where it was read
  shown: object = None
  source: str = ''
  line: int = 0
  category: str = ''  # its class as the file gives it, for messages ("class 5")


@cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class ImageAnnotation:
  """The objects of one image, with what the annotation says of the image."""
  source_id: int
  recorded_size: Optional[tuple]  # (width, height) the annotation records, if any
  objects: tuple  # ObjectAnnotation
  normalized: bool = False  # boxes and polygons are fractions of the frame's size
  # what it was read from (core/annotation_versions): the record's sidecar fingerprint
  fingerprint: str = ''


class AnnotationError(ValueError):
  """One annotation unusable, with the code it is rejected with."""

  def __init__(self, code: str, reason: str):
    super().__init__(reason)
    self.code = code


def reject_object(obj: ObjectAnnotation, code: str, reason: str) -> Rejection:
  """A bad annotation: a rejected.jsonl line that is not a row."""
  return Rejection(obj.shown, STAGE_ANNOTATION, code, reason, obj.source, obj.line,
                   counts_as_row=False)


def outside_image(obj: ObjectAnnotation, box: tuple, size: tuple, image: str) -> str:
  """The reason of box_outside_image, for an object whose box (as checked, in
  the units of `size`) leaves the (width, height) image `image`: it names
  the box, the annotation (its position in its file) and the image. Its one
  wording, whether the size was recorded (box_problem) or decoded (detect)."""
  return (f'box {_shown_box(box)} of annotation {obj.line} in {obj.source} is outside '
          f'the {_shown_size(size)} image {image}')


def box_problem(obj: ObjectAnnotation, size: Optional[tuple], include_masks: bool,
                image: str = '') -> Optional[tuple]:
  """(code, reason) of what makes an object unusable, or None. size: the
  (width, height) of the image in pixels (None: not known, not checked);
  image: its name, for messages."""
  x0, y0, x1, y1 = obj.box
  if not all(math.isfinite(v) for v in obj.box):
    return BAD_ANNOTATION, f'box {_shown_box(obj.box)} has a coordinate that is not a number'
  if not (x1 > x0 and y1 > y0):
    return EMPTY_BOX, f'box {_shown_box(obj.box)} has no area (width or height <= 0)'
  if size is not None and leaves_image(obj.box, size):
    return BOX_OUTSIDE_IMAGE, outside_image(obj, obj.box, size, image)
  if include_masks and obj.segmentation and obj.segmentation[0] == 'polygons':
    short = [p for p in obj.segmentation[1] if len(p) < 6]
    if short or not obj.segmentation[1]:
      points = len(short[0]) // 2 if short else 0
      return SHORT_POLYGON, f'a polygon has {points} point(s), fewer than 3'
    far = _far_point(obj.segmentation[1], obj.box)
    if far:
      return BAD_ANNOTATION, (f'polygon point ({far[0]:g}, {far[1]:g}) is far outside its box '
                              f'{_shown_box(obj.box)}')
  if include_masks and size is not None and obj.segmentation and obj.segmentation[0] == 'rle':
    height, width = obj.segmentation[1]['size']
    if (width, height) != tuple(size):
      return BAD_MASK, (f'RLE size [{height}, {width}] (height, width) is not the '
                        f"{_shown_size(size)} image's")
  return None


def _far_point(polygons: list, box: tuple) -> Optional[tuple]:
  """The first polygon point that is not a finite number or lies outside
  the box grown by its own width and height (and the edge tolerance) on
  each side, or None. pycocotools draws every edge at 5x, so one far point
  would make it allocate without bound (1e7 is a segmentation fault)."""
  x0, y0, x1, y1 = box
  grow_x, grow_y = x1 - x0 + EDGE_TOLERANCE, y1 - y0 + EDGE_TOLERANCE
  for polygon in polygons:
    for x, y in zip(polygon[0::2], polygon[1::2]):
      if not (math.isfinite(x) and math.isfinite(y) and x0 - grow_x <= x <= x1 + grow_x
              and y0 - grow_y <= y <= y1 + grow_y):
        return x, y
  return None


def leaves_image(box: tuple, size: tuple) -> bool:
  """True when the box leaves the (width, height) image by more than
  EDGE_TOLERANCE, both in pixels (normalised boxes are checked once the
  image's size is known: transforms.core.detect)."""
  x0, y0, x1, y1 = box
  width, height = size
  limit = EDGE_TOLERANCE + _EDGE_SLACK
  return x0 < -limit or y0 < -limit or x1 > width + limit or y1 > height + limit


def copy_fits(annotation, size, on_size_mismatch: str, on_bad_box: str) -> bool:
  """Whether a --schema detection row (its ImageAnnotation) fits its file of
  `size` ((width, height) as its header gives it, or None: unknown), as far
  as that tells, either way round (an EXIF orientation, not read, may turn
  it): --dedupe content keeps the first copy that does, not one the image
  step then rejects (annotation/size_mismatch; with --on_bad_box
  reject_row, annotation/bad_box for a box outside the decoded image) with
  every copy rejected as its duplicate. Boxes checked against a recorded
  size were rejected as the annotations were read."""
  if annotation is None or size is None:
    return True
  frames = (tuple(size), tuple(size)[::-1])
  recorded = annotation.recorded_size
  if recorded is not None and not annotation.normalized:
    return on_size_mismatch == 'scale' or tuple(recorded) in frames
  return on_bad_box != 'reject_row' or any(
      _boxes_fit(annotation.objects, frame, annotation.normalized) for frame in frames)


def _boxes_fit(found, frame: tuple, normalized: bool) -> bool:
  """No box leaves the (width, height) frame, as transforms.core.detect checks it."""
  sx, sy = frame if normalized else (1.0, 1.0)
  for obj in found:
    box = (obj.box[0] * sx, obj.box[1] * sy, obj.box[2] * sx, obj.box[3] * sy)
    if leaves_image(box, frame) or box_area(clip_box(box, frame)) <= 0:
      return False
  return True


def box_area(box: tuple) -> float:
  return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def clip_box(box: tuple, size: Optional[tuple]) -> tuple:
  if size is None:
    return box
  width, height = size
  return (min(max(box[0], 0.0), width), min(max(box[1], 0.0), height),
          min(max(box[2], 0.0), width), min(max(box[3], 0.0), height))


def _shown_box(box: tuple) -> str:
  return '(' + ', '.join(f'{v:g}' for v in box) + ')'


def _shown_size(size: tuple) -> str:
  return f'{size[0]:g}x{size[1]:g}'


def checked_objects(annotation: ImageAnnotation, known_labels, include_masks: bool,
                    image: str = '', size: Optional[tuple] = None) -> tuple:
  """-> (the usable objects, boxes clipped to the image; a Rejection for
  each bad one). known_labels: the label ids in the label map. image: its
  name, for messages. size: the frame's (width, height) when the annotation
  records none. Normalised boxes (YOLO) are not checked against the image
  here: its size in pixels is not known yet, and the edge tolerance is a
  pixel (detect checks them). An object kept without a size to check it by
  keeps what a rejection shows of it (`shown`): detect checks it against the
  decoded image and may reject it then."""
  size = None if annotation.normalized else (annotation.recorded_size or size)
  kept, rejected = [], []
  for obj in annotation.objects:
    if obj.label not in known_labels:
      named = obj.category or f'category {obj.label}'
      rejected.append(reject_object(obj, UNKNOWN_CATEGORY,
                                    f'{named} is not one of the classes'))
      continue
    problem = box_problem(obj, size, include_masks, image)
    if problem:
      rejected.append(reject_object(obj, *problem))
      continue
    # what only a rejection would show, or only a mask would need, is not
    # carried on with the row (rows wait in memory for the write order),
    # unless its box is still to be checked (no size yet)
    clipped = clip_box(obj.box, size)
    # a recorded area keeps the fraction of the box the clipping kept
    area = obj.area if obj.area is None or clipped == obj.box else (
        obj.area * box_area(clipped) / box_area(obj.box))
    kept.append(dataclasses.replace(obj, box=clipped, area=area,
                                    shown=obj.shown if size is None else None,
                                    segmentation=obj.segmentation if include_masks else None))
  return tuple(kept), rejected


# --- the label map of a detection dataset: ids with gaps, 0 the background ---

# dataset_info.json's label_map holds one name per id up to the largest: the
# same bound as a classification run's integer labels
MAX_CLASS_ID = MAX_INTEGER_LABEL


class LabelMapError(ValueError):
  """A class id or name the label map cannot hold (a usage error on the launcher)."""


def label_names(categories: dict, source: str) -> tuple:
  """{id: name} -> names indexed by id ('' for an id no class has, and 0).
  LabelMapError, naming `source`, for an id over MAX_CLASS_ID (2**62 made a
  list of 2**62 names), an empty name (label_map.txt would leave its class
  out), or a name with a line break or tab (one `id<TAB>name` line each)."""
  for label, name in sorted(categories.items()):
    if label > MAX_CLASS_ID:
      raise LabelMapError(f'{source}: class id {label} is over {MAX_CLASS_ID:,} (the label '
                          f'map holds a name for every id up to the largest)')
    if not name:
      raise LabelMapError(f'{source}: class {label} has an empty name')
    if any(c in name for c in '\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029'):
      raise LabelMapError(f'{source}: class name {name!r} holds a line break or tab '
                          f'(label_map.txt has one id<TAB>name line per class)')
  return tuple(categories.get(i, '') for i in range(max(categories, default=0) + 1))


def objects_per_name(per_id: dict, names) -> dict:
  """{label id: objects} -> {class name: objects}. Ids that share a name
  (two COCO categories, two YOLO names) add up: convert's objects_per_class
  and validate's count of the records agree (one id's count in place of
  both's failed validate on the dataset convert wrote). A label with no name
  in `names` (None, out of range) stays as it is."""
  counts = {}
  for label, n in per_id.items():
    name = names[label] if label is not None and 0 <= label < len(names) else label
    counts[name] = counts.get(name, 0) + n
  return counts


def label_map_text(names) -> str:
  """label_map.txt of a detection dataset: `id<TAB>name` lines (ids have gaps)."""
  return ''.join(f'{i}\t{name}\n' for i, name in enumerate(names) if name)


def label_map_pbtxt(names) -> str:
  """label_map.pbtxt: the Object Detection API's StringIntLabelMap text format."""
  return ''.join(f'item {{\n  id: {i}\n  name: {_quoted(name)}\n}}\n'
                 for i, name in enumerate(names) if name)


def _quoted(text: str) -> str:
  return '"' + text.replace('\\', '\\\\').replace('"', '\\"') + '"'


def category_shift(category_ids) -> int:
  """1 when a file uses category 0 (the Object Detection API's background):
  every id then moves up by one; else 0."""
  return 1 if 0 in set(category_ids) else 0
