"""Boxes and masks through exactly the transform the pixels went through
(transforms.core.image: EXIF orientation, then --resize_mode): plain functions.

A box is (xmin, ymin, xmax, ymax) in continuous pixel coordinates of its
image: pixel column i covers [i, i + 1), so a box around the whole of a
W x H image is (0, 0, W, H).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from PIL import Image

from transforms.core.image import centre_crop_box
from transforms.core.image import letterbox
from transforms.core.image import resize
from transforms.core.orientations import TRANSPOSED
from transforms.core.orientations import oriented_size
from transforms.core.spec import ImageSpec

Box = tuple  # (xmin, ymin, xmax, ymax), floats

# --annotation_orientation: which pixels an annotation's coordinates refer to
# when its recorded size cannot tell (a square image, no recorded size).
STORED = 'stored'
EXIF = 'exif'
ANNOTATION_ORIENTATIONS = (STORED, EXIF)
DEFAULT_MIN_BOX_VISIBILITY = 0.3
# place_box's kept fraction is a ratio of areas moved through the crop's
# float scale: a box keeping exactly --min_box_visibility of its area came out
# a few ulps below it and was dropped (a box wholly inside the crop window,
# its edges on the window's, kept 0.9999999999999997 < 1).
_VISIBILITY_SLACK = 1e-9


def default_orientation(annotation_format: str) -> str:
  """--annotation_orientation when not given: EXIF for YOLO, which records no
  size and whose Ultralytics trainer reads each photo turned upright (boxes
  on the stored pixels of a phone photo came out turned, without a word);
  STORED for COCO and VOC, whose releases draw on the stored pixels."""
  return EXIF if annotation_format == 'yolo' else STORED


# Pillow's ImageOps.exif_transpose: orientation -> Image.transpose method.
_TRANSPOSE_METHODS = {
    2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def annotation_frame(recorded: Optional[tuple], stored: tuple, orientation: int,
                     default: str = STORED) -> str:
  """Which pixels an image's annotations refer to: STORED or EXIF. Decided by
  the size the annotation records (recorded: (width, height) or None) when
  only one of the stored and the rotated size matches it; else `default`
  (--annotation_orientation)."""
  if recorded is None or orientation not in TRANSPOSED:
    return default
  rotated = oriented_size(stored, orientation)
  recorded = tuple(recorded)
  if recorded == tuple(stored) and recorded != rotated:
    return STORED
  if recorded == rotated and recorded != tuple(stored):
    return EXIF
  return default


@dataclasses.dataclass(frozen=True)
class Placement:
  """Where the oriented source image (src: (width, height)) lands in the
  output: output x = (x - left) * scale_x + offset_x, likewise y; the output
  is out: (width, height)."""
  src: tuple
  out: tuple
  left: float = 0.0
  top: float = 0.0
  scale_x: float = 1.0
  scale_y: float = 1.0
  offset_x: float = 0.0
  offset_y: float = 0.0


def placement(src: tuple, spec: ImageSpec) -> Placement:
  """The placement image.resize gives an oriented image of size src."""
  if not spec.fixed_size:
    return Placement(tuple(src), tuple(src))
  out = (spec.width, spec.height)
  src_w, src_h = src
  if spec.resize_mode == 'crop' and tuple(src) != out:
    left, top, right, bottom = centre_crop_box(tuple(src), out)
    return Placement(tuple(src), out, left, top, out[0] / (right - left),
                     out[1] / (bottom - top))
  if spec.resize_mode == 'pad' and tuple(src) != out:
    inner, offset = letterbox(tuple(src), out)
    return Placement(tuple(src), out, scale_x=inner[0] / src_w, scale_y=inner[1] / src_h,
                     offset_x=offset[0], offset_y=offset[1])
  return Placement(tuple(src), out, scale_x=out[0] / src_w, scale_y=out[1] / src_h)


def placement_of(image, spec: ImageSpec) -> Placement:
  """Where the source of an EncodedImage (image.source_size, its stored
  size, and image.orientation, set by image.process_image on every path that
  writes an image) lands in that image: the one geometry boxes and masks are
  moved with. ValueError if it does not end at the written image's size."""
  where = placement(oriented_size(image.source_size, image.orientation), spec)
  if tuple(where.out) != (image.width, image.height):
    raise ValueError(f"the boxes' frame {where.out[0]}x{where.out[1]} is not the written "
                     f"image's {image.width}x{image.height}")
  return where


def place_box(box: Box, where: Placement) -> tuple:
  """A box on the oriented source -> (the box on the output, clipped to it;
  the fraction of its area that stays inside). A box of no area keeps 0."""
  x0, y0, x1, y1 = box
  moved = ((x0 - where.left) * where.scale_x + where.offset_x,
           (y0 - where.top) * where.scale_y + where.offset_y,
           (x1 - where.left) * where.scale_x + where.offset_x,
           (y1 - where.top) * where.scale_y + where.offset_y)
  width, height = where.out
  clipped = (min(max(moved[0], 0.0), width), min(max(moved[1], 0.0), height),
             min(max(moved[2], 0.0), width), min(max(moved[3], 0.0), height))
  full = (moved[2] - moved[0]) * (moved[3] - moved[1])
  kept = (clipped[2] - clipped[0]) * (clipped[3] - clipped[1])
  return clipped, (kept / full if full > 0 else 0.0)


def crop_drops(kept: float, min_visibility: float) -> bool:
  """True if --resize_mode crop drops a box that keeps `kept` (place_box's
  fraction) of its area: less than --min_box_visibility (up to float
  rounding), or nothing at all."""
  return kept <= 0 or kept < min_visibility - _VISIBILITY_SLACK


def transform_mask(mask: Image.Image, orientation: int, frame: str,
                   spec: ImageSpec) -> Image.Image:
  """A mask ('L', 0/1, in the annotation's frame) -> the mask on the output
  image: the same orientation and resize as the pixels, nearest neighbour
  (values stay 0/1)."""
  if frame == STORED and orientation in _TRANSPOSE_METHODS:
    mask = mask.transpose(_TRANSPOSE_METHODS[orientation])
  return resize(mask, dataclasses.replace(spec, resize_filter='nearest'))


def normalized(box: Box, out: tuple) -> Box:
  """Output-pixel box -> (ymin, xmin, ymax, xmax) in [0, 1], as TF orders them."""
  width, height = out
  x0, y0, x1, y1 = box
  return (y0 / height, x0 / width, y1 / height, x1 / width)
