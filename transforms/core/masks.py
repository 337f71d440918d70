"""Instance masks from their annotations (COCO polygons and RLE, VOC
SegmentationObject PNGs), and as the Object Detection API stores them (one
PNG of 0/1 per instance): plain functions."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def rle_counts(counts) -> list:
  """COCO RLE counts: a list of run lengths as it is, or the compressed
  string (pycocotools' rleFrString: 5 bits a character, runs after the
  second stored as the difference to the run two before)."""
  if isinstance(counts, list):
    return [int(n) for n in counts]
  data = counts.encode('ascii') if isinstance(counts, str) else bytes(counts)
  runs, p = [], 0
  while p < len(data):
    value, shift, more = 0, 0, True
    while more:
      c = data[p] - 48
      value |= (c & 0x1f) << shift
      more = bool(c & 0x20)
      p += 1
      shift += 5
      if not more and c & 0x10:
        value |= -1 << shift
    if len(runs) > 2:
      value += runs[-2]
    runs.append(value)
  return runs


def decode_rle(rle: dict) -> np.ndarray:
  """A COCO RLE ({'size': [h, w], 'counts': ...}) -> uint8 [h, w] of 0/1.
  Runs alternate 0 and 1, starting with 0, down the columns (Fortran order)."""
  height, width = (int(n) for n in rle['size'])
  runs = rle_counts(rle['counts'])
  if any(n < 0 for n in runs) or sum(runs) != height * width:
    raise ValueError(f'RLE runs add up to {sum(runs)} pixels, the mask has '
                     f'{height}x{width}')
  values = np.zeros(len(runs), np.uint8)
  values[1::2] = 1
  flat = np.repeat(values, runs)
  return flat.reshape((width, height)).T.copy()


def polygons_mask(polygons: list, size: tuple, scale: tuple = (1.0, 1.0)) -> Image.Image:
  """COCO polygons ([[x0, y0, x1, y1, ...], ...], coordinates times `scale`)
  -> an 'L' mask of 0/1 of size (width, height), each polygon rasterised by
  pycocotools (frPyObjects: the COCO tools' and Model Garden's own masks,
  pixel for pixel), their union. A polygon of fewer than 3 points is
  left out (pycocotools would read 4 numbers as a box)."""
  from pycocotools import mask as coco_mask
  width, height = (int(n) for n in size)
  shapes = [[float(v) * scale[i % 2] for i, v in enumerate(polygon[:len(polygon) // 2 * 2])]
            for polygon in polygons if len(polygon) >= 6]
  if not shapes:
    return Image.fromarray(np.zeros((height, width), np.uint8), 'L')
  # their union as one RLE (pycocotools' decode warns under numpy 2)
  return mask_image(decode_rle(coco_mask.merge(coco_mask.frPyObjects(shapes, height, width))))


def mask_image(pixels: np.ndarray) -> Image.Image:
  return Image.fromarray((pixels != 0).astype(np.uint8), 'L')


def encode_mask(mask: Image.Image) -> bytes:
  """A 0/1 mask as the PNG the Object Detection API stores."""
  buffer = io.BytesIO()
  mask.save(buffer, 'PNG')
  return buffer.getvalue()


def decode_mask(data: bytes) -> np.ndarray:
  """A stored mask PNG -> uint8 [h, w]."""
  with Image.open(io.BytesIO(data)) as image:
    return np.asarray(image.convert('L'))
