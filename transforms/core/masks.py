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
  second stored as the difference to the run two before). ValueError when
  it is neither, or a string is cut short."""
  if isinstance(counts, list):
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
      raise ValueError('RLE counts hold something that is not a whole number')
    return counts
  if not isinstance(counts, (str, bytes)):
    raise ValueError(f'RLE counts are {type(counts).__name__}, not a list or a string')
  if isinstance(counts, str) and not counts.isascii():  # ('replace' made it '?', a valid run)
    at = next(i for i, c in enumerate(counts) if not c.isascii())
    raise ValueError(f'the RLE counts string holds {counts[at]!r} at {at}')
  data = counts.encode('ascii') if isinstance(counts, str) else counts
  runs, p = [], 0
  while p < len(data):
    value, shift, more = 0, 0, True
    while more:
      if p == len(data):
        raise ValueError('the RLE counts string is cut short')
      if shift > 64:  # (a run is less than 2**64; longer took quadratic time)
        raise ValueError(f'the RLE counts string holds a run longer than 64 bits at {p}')
      c = data[p] - 48
      if not 0 <= c < 64:
        raise ValueError(f'the RLE counts string holds {chr(data[p])!r} at {p}')
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


def rle_runs(rle, max_pixels: int = 0) -> tuple:
  """A COCO RLE ({'size': [h, w], 'counts': ...}) -> (h, w, runs), checked
  before anything of the mask's size is made: ValueError (one line) when its
  size is not two positive whole numbers (at most max_pixels pixels, when
  given), or its runs are negative or do not add up to h x w."""
  size = rle.get('size') if isinstance(rle, dict) else None
  if not (isinstance(size, list) and len(size) == 2 and all(
      isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in size)):
    raise ValueError(f'RLE size {str(size)[:40]} is not [height, width]')
  height, width = size
  if max_pixels and height * width > max_pixels:
    raise ValueError(f'RLE size {height}x{width} is {height * width} pixels, more than '
                     f'--max_pixels {max_pixels}')
  runs = rle_counts(rle.get('counts'))
  if any(n < 0 for n in runs):
    raise ValueError('RLE counts hold a negative run')
  if sum(runs) != height * width:
    raise ValueError(f'RLE runs add up to {sum(runs)} pixels, the mask has '
                     f'{height}x{width}')
  return height, width, runs


def decode_rle(rle: dict) -> np.ndarray:
  """A COCO RLE ({'size': [h, w], 'counts': ...}) -> uint8 [h, w] of 0/1.
  Runs alternate 0 and 1, starting with 0, down the columns (Fortran order)."""
  height, width, runs = rle_runs(rle)
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
