"""A converted image and its objects -> what a detection Example stores: boxes
and masks moved as the pixels were (transforms.core.boxes), in the Object
Detection API's units: plain functions."""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import numpy as np
from PIL import Image

from transforms.core import annotations as objects
from transforms.core import boxes
from transforms.core import masks as mask_codec
from transforms.core.annotations import ImageAnnotation
from transforms.core.annotations import ObjectAnnotation
from transforms.core.coco import reject_row_if_bad
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedImage
from transforms.core.image import EncodedImage
from transforms.core.orientations import orient_box
from transforms.core.pickling import cheap_pickle
from transforms.core.rejects import RowError
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
  on_size_mismatch: str = 'reject'
  max_pixels: int = DEFAULT_MAX_PIXELS  # an annotation's mask at most (COCO RLE size)


@cheap_pickle
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
  # annotation rejections only the decoded image could tell (counts_as_row False)
  rejected: tuple = ()


def _frame(annotation: ImageAnnotation, image: EncodedImage, row_image: str,
           options: DetectionOptions) -> tuple:
  """-> (which pixels the annotation refers to, STORED or EXIF; their
  (width, height); the factors its coordinates are scaled by). RowError
  annotation/size_mismatch when the annotation records a size that is
  neither the stored nor the EXIF-oriented one (--on_size_mismatch reject)."""
  frame = boxes.annotation_frame(annotation.recorded_size, image.source_size,
                                 image.orientation, options.annotation_orientation)
  size = boxes.oriented_size(image.source_size, image.orientation) if frame == boxes.EXIF \
      else tuple(image.source_size)
  recorded = annotation.recorded_size
  if annotation.normalized:
    return frame, size, tuple(size)
  if recorded is None or tuple(recorded) == size:
    return frame, size, (1.0, 1.0)
  if options.on_size_mismatch != 'scale':
    turned = boxes.oriented_size(image.source_size, image.orientation)
    shown = f'{size[0]}x{size[1]}' + (f' ({turned[0]}x{turned[1]} after its EXIF orientation)'
                                     if turned != tuple(image.source_size) else '')
    raise RowError(objects.STAGE_ANNOTATION, objects.SIZE_MISMATCH,
                   f'{row_image} is {shown}, its annotation records {recorded[0]:g}x'
                   f'{recorded[1]:g} (--on_size_mismatch scale scales its coordinates)')
  return frame, size, (size[0] / recorded[0], size[1] / recorded[1])


def source_mask(obj: ObjectAnnotation, size: tuple, scale: tuple,
                read_png=None) -> Optional[Image.Image]:
  """The object's mask on its frame (size: the frame's (width, height)), 'L'
  0/1; None when it has no segmentation (its box then fills the mask).
  Polygons (coordinates times `scale`) are rasterised as pycocotools does;
  an RLE or a VOC PNG is decoded at its own size, which must be the size the
  annotation's coordinates are in (the frame's divided by `scale`), then
  brought to the frame's. AnnotationError bad_mask when it is not (a mask
  of another size was once stretched onto the image without a word)."""
  segmentation = obj.segmentation
  if not segmentation:
    return None
  kind = segmentation[0]
  if kind == 'polygons':
    return mask_codec.polygons_mask(segmentation[1], size, scale)
  if kind == 'rle':
    mask = mask_codec.mask_image(mask_codec.decode_rle(segmentation[1]))
    named = 'its RLE'
  elif kind == 'png':
    _, path, value = segmentation
    png = read_png(path)
    if png.mode not in ('P', 'L', '1', 'I', 'I;16'):  # an RGB one: "Too many dimensions"
      raise objects.AnnotationError(objects.BAD_MASK, (
          f'{path} holds colours ({png.mode}), not object indices (a palette or '
          'grayscale PNG, as VOC writes)'))
    mask = mask_codec.mask_image(np.asarray(png) == value)
    named = path
  else:
    raise ValueError(f'unknown segmentation kind {kind!r}')
  expected = (round(size[0] / scale[0]), round(size[1] / scale[1]))
  if mask.size != expected:
    raise objects.AnnotationError(objects.BAD_MASK, (
        f"the mask of {named} is {mask.size[0]}x{mask.size[1]}, its annotation's image "
        f'{expected[0]}x{expected[1]}'))
  return mask if mask.size == tuple(size) else mask.resize(tuple(size), Image.NEAREST)


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
  Only --resize_mode crop drops boxes (those left with less than
  options.min_box_visibility of their area, counted in `dropped`); a box
  leaving the image is a rejection in `rejected`. RowError for the whole
  row: annotation/size_mismatch, or a bad box with --on_bad_box reject_row.
  """
  row = loaded.labelled.row
  annotation: ImageAnnotation = row.annotation
  image = loaded.image
  if read_png is not None:  # a VOC PNG holds every object's mask: read once an image
    read_png = functools.lru_cache(maxsize=2)(read_png)
  frame, size, (sx, sy) = _frame(annotation, image, row.image, options)
  where = boxes.placement_of(image, spec)
  out = (image.width, image.height)
  columns = {name: [] for name in ('xmin', 'ymin', 'xmax', 'ymax', 'labels', 'texts',
                                   'is_crowd', 'area', 'difficult', 'truncated', 'masks')}
  dropped, rejected = 0, []
  for obj in annotation.objects:
    box = (obj.box[0] * sx, obj.box[1] * sy, obj.box[2] * sx, obj.box[3] * sy)
    clipped = objects.clip_box(box, size)
    if objects.leaves_image(box, size) or objects.box_area(clipped) <= 0:
      rejected.append(objects.reject_object(obj, objects.BOX_OUTSIDE_IMAGE,
                                            objects.outside_image(obj, box, size, row.image)))
      continue
    oriented = orient_box(clipped, image.source_size, image.orientation) \
        if frame == boxes.STORED else clipped
    placed, kept = boxes.place_box(oriented, where)
    if spec.resize_mode == 'crop' and boxes.crop_drops(kept, options.min_box_visibility):
      dropped += 1
      continue
    ymin, xmin, ymax, xmax = boxes.normalized(placed, out)
    if options.include_masks:
      try:
        mask = source_mask(obj, size, (sx, sy), read_png) or _box_mask(clipped, size)
      except objects.AnnotationError as error:
        if obj.segmentation[0] == 'png':  # one PNG holds every object's mask: the row
          raise RowError(objects.STAGE_ANNOTATION, error.code, f'{row.image}: {error}') from None
        rejected.append(objects.reject_object(
            dataclasses.replace(obj, shown={'image': row.image}), error.code,
            f'annotation {obj.line} in {obj.source}: {error}'))
        continue
      moved = boxes.transform_mask(mask, image.orientation, frame, spec)
      columns['masks'].append(mask_codec.encode_mask(moved))
    # the recorded area (COCO) moved as the box: the annotation's scale, the
    # part of the box inside the image, the resize, the part the crop kept
    area = objects.box_area(placed) if obj.area is None else (
        obj.area * sx * sy * objects.box_area(clipped) / objects.box_area(box)
        * where.scale_x * where.scale_y * kept)
    for name, value in (('xmin', xmin), ('ymin', ymin), ('xmax', xmax), ('ymax', ymax),
                        ('labels', obj.label), ('texts', names[obj.label]),
                        ('is_crowd', obj.is_crowd), ('area', area),
                        ('difficult', obj.difficult), ('truncated', obj.truncated)):
      columns[name].append(value)
  if rejected and options.on_bad_box == 'reject_row':
    _, (whole,) = reject_row_if_bad(row, rejected, options.on_bad_box)
    raise RowError(whole.stage, whole.code, whole.reason)
  return DetectedImage(loaded.labelled, image, loaded.sha256,
                       str(annotation.source_id).encode(),
                       **{name: tuple(values) for name, values in columns.items()},
                       dropped=dropped, rejected=tuple(rejected))
