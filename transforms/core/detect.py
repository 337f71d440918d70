"""A converted image and its objects -> what a detection Example stores: boxes
and masks moved as the pixels were (transforms.core.boxes), in the Object
Detection API's units: plain functions."""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import numpy as np
from PIL import Image

from transforms.core import boxes
from transforms.core import masks as mask_codec
from transforms.core.annotations import ImageAnnotation
from transforms.core.annotations import ObjectAnnotation
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedImage
from transforms.core.image import EncodedImage
from transforms.core.spec import DEFAULT_MAX_PIXELS
from transforms.core.spec import ImageSpec


@dataclasses.dataclass(frozen=True)
class DetectionOptions:
  """The flags that decide how objects are carried into the output."""
  include_masks: bool = False
  min_box_visibility: float = boxes.DEFAULT_MIN_BOX_VISIBILITY
  annotation_orientation: str = boxes.STORED  # when the recorded size cannot tell
  skip_empty: bool = False
  on_bad_box: str = 'drop'
  max_pixels: int = DEFAULT_MAX_PIXELS  # an annotation's mask at most (COCO RLE size)


@dataclasses.dataclass(frozen=True, slots=True)
class DetectedImage:
  """A LoadedImage with its objects as the Example's lists hold them."""
  labelled: LabelledRow
  image: EncodedImage
  sha256: str
  source_id: bytes
  xmin: tuple
  ymin: tuple
  xmax: tuple
  ymax: tuple
  labels: tuple
  texts: tuple
  is_crowd: tuple
  area: tuple
  difficult: tuple
  truncated: tuple
  masks: tuple = ()
  dropped: int = 0  # boxes the crop left less than --min_box_visibility of


def _frame_size(annotation: ImageAnnotation, image: EncodedImage, frame: str) -> tuple:
  return boxes.oriented_size(image.source_size, image.orientation) if frame == boxes.EXIF \
      else tuple(image.source_size)


def source_mask(obj: ObjectAnnotation, size: tuple, normalized: bool,
                read_png=None) -> Optional[Image.Image]:
  """The object's mask on its frame (size: the frame's (width, height)), 'L'
  0/1; None when it has no segmentation (its box then fills the mask)."""
  segmentation = obj.segmentation
  if not segmentation:
    return None
  kind = segmentation[0]
  if kind == 'polygons':
    scale = size if normalized else (1.0, 1.0)
    return mask_codec.polygons_mask(segmentation[1], size, scale)
  if kind == 'rle':
    pixels = mask_codec.decode_rle(segmentation[1])
    mask = mask_codec.mask_image(pixels)
    return mask if mask.size == tuple(size) else mask.resize(tuple(size), Image.NEAREST)
  if kind == 'png':
    _, path, value = segmentation
    pixels = np.asarray(read_png(path))
    return mask_codec.mask_image(pixels == value)
  raise ValueError(f'unknown segmentation kind {kind!r}')


def _box_mask(box: tuple, size: tuple) -> Image.Image:
  mask = Image.new('L', tuple(int(n) for n in size), 0)
  x0, y0, x1, y1 = (round(v) for v in box)
  if x1 > x0 and y1 > y0:
    mask.paste(1, (x0, y0, x1, y1))
  return mask


def detect(loaded: LoadedImage, names: tuple, spec: ImageSpec,
           options: DetectionOptions, read_png=None) -> DetectedImage:
  """Moves the row's objects (row.annotation) onto the converted image.

  names: the label map by id; read_png(path) -> 'L'/'P' image (VOC masks).
  A box left with less than options.min_box_visibility of its area by the
  crop is dropped (counted in `dropped`).
  """
  annotation: ImageAnnotation = loaded.labelled.row.annotation
  image = loaded.image
  if read_png is not None:  # a VOC PNG holds every object's mask: read once an image
    read_png = functools.lru_cache(maxsize=2)(read_png)
  frame = boxes.annotation_frame(annotation.recorded_size, image.source_size,
                                 image.orientation, options.annotation_orientation)
  size = _frame_size(annotation, image, frame)
  out = (image.width, image.height)
  where = boxes.placement(boxes.oriented_size(image.source_size, image.orientation),
                          spec)
  columns = {name: [] for name in ('xmin', 'ymin', 'xmax', 'ymax', 'labels', 'texts',
                                   'is_crowd', 'area', 'difficult', 'truncated', 'masks')}
  dropped = 0
  for obj in annotation.objects:
    box = obj.box
    if annotation.normalized:
      box = (box[0] * size[0], box[1] * size[1], box[2] * size[0], box[3] * size[1])
    oriented = boxes.orient_box(box, image.source_size, image.orientation) \
        if frame == boxes.STORED else box
    placed, kept = boxes.place_box(oriented, where)
    if kept < options.min_box_visibility or kept <= 0:
      dropped += 1
      continue
    ymin, xmin, ymax, xmax = boxes.normalized(placed, out)
    mask_area = None
    if options.include_masks:
      mask = source_mask(obj, size, annotation.normalized, read_png) or _box_mask(box, size)
      moved = boxes.transform_mask(mask, image.orientation, frame, spec)
      columns['masks'].append(mask_codec.encode_mask(moved))
      mask_area = float(np.count_nonzero(np.asarray(moved)))
    recorded = obj.area if obj.area is not None else (box[2] - box[0]) * (box[3] - box[1])
    area = mask_area if mask_area is not None else (
        recorded * where.scale_x * where.scale_y * kept)
    for name, value in (('xmin', xmin), ('ymin', ymin), ('xmax', xmax), ('ymax', ymax),
                        ('labels', obj.label), ('texts', names[obj.label]),
                        ('is_crowd', obj.is_crowd), ('area', area),
                        ('difficult', obj.difficult), ('truncated', obj.truncated)):
      columns[name].append(value)
  return DetectedImage(loaded.labelled, image, loaded.sha256,
                       str(annotation.source_id).encode(),
                       **{name: tuple(values) for name, values in columns.items()},
                       dropped=dropped)
