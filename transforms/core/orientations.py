"""An image's orientation (EXIF's, or a TIFF's tag): where it is read, and
what it does to a size and to a box drawn on the stored pixels (the pixels
are turned by ImageOps.exif_transpose, or by Pillow as it loads a TIFF)."""

from __future__ import annotations

from typing import Optional

from PIL import Image

_EXIF_ORIENTATION = 0x0112
TRANSPOSED = (5, 6, 7, 8)  # the orientations that swap width and height


def orientation(image: Image.Image) -> int:
  """1 to 8; 1 for no tag, a malformed EXIF block or a value EXIF does not
  define (0, 9, 65535: written by buggy software), which turns nothing in
  exif_transpose or a browser: such a JPEG needs no change, and was
  re-encoded by --resize_mode none --encoding jpeg rather than kept."""
  try:
    turn = int(image.getexif().get(_EXIF_ORIENTATION, 1) or 1)
  except Exception:  # a malformed EXIF block is ignored, as browsers do
    return 1
  return turn if turn in range(1, 9) else 1


def turned_at_open(image: Image.Image) -> Optional[tuple]:
  """((stored size, orientation)) of a TIFF with an Orientation tag, which
  Pillow (12.x) turns as it opens and loads it: its size is already the
  turned one, and the tag is gone once loaded. Taken as a turned image of
  stored size, its boxes drawn on the stored pixels were never turned with
  them, and a COCO or VOC size (the stored one) was a size_mismatch. None:
  any other image (its size is the stored one, its orientation read as
  EXIF's)."""
  tags = getattr(image, 'tag_v2', None)
  if image.format != 'TIFF' or tags is None:
    return None
  try:
    turn = int(tags.get(_EXIF_ORIENTATION, 1) or 1)
  except (TypeError, ValueError):  # a malformed tag is ignored, as orientation() does
    return None
  if turn not in range(2, 9):
    return None
  width, height = image.size
  return ((height, width) if turn in TRANSPOSED else (width, height)), turn


def oriented_size(stored: tuple, orientation: int) -> tuple:
  """(width, height) of the image once its EXIF orientation is applied."""
  return stored[::-1] if orientation in TRANSPOSED else tuple(stored)


def orient_box(box: tuple, stored: tuple, orientation: int) -> tuple:
  """A box on the stored pixels (stored: their (width, height)) -> the same
  box on the EXIF-oriented image, as ImageOps.exif_transpose turns the pixels."""
  x0, y0, x1, y1 = box
  w, h = stored
  corners = {
      1: (x0, y0, x1, y1),
      2: (w - x1, y0, w - x0, y1),
      3: (w - x1, h - y1, w - x0, h - y0),
      4: (x0, h - y1, x1, h - y0),
      5: (y0, x0, y1, x1),
      6: (h - y1, x0, h - y0, x1),
      7: (h - y1, w - x1, h - y0, w - x0),
      8: (y0, w - x1, y1, w - x0),
  }
  return corners.get(orientation, corners[1])
