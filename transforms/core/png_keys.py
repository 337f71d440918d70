"""A 16-bit RGB PNG's tRNS colour key, matched on all 16 bits of a sample.

Pillow reads a 16-bit RGB PNG as 8-bit RGB (each sample's high byte) and
keeps its tRNS key at 16 bits, which no 8-bit pixel equals: the key's pixels
kept their colour where --background belonged (an 8x4 PNG, generated). 16-bit
grey keeps its 16 bits in Pillow (image.to_mode matches its key itself).
"""

from __future__ import annotations

import io

from PIL import Image

# How Pillow unpacks a 16-bit RGB PNG's rows: each sample's high byte; read
# as little-endian, the same rows (unfiltered alike: 6 bytes a pixel) give the low byte.
_HIGH_BYTES = 'RGB;16B'
_LOW_BYTES = 'RGB;16L'


def keyed(image: Image.Image, data: bytes) -> Image.Image:
  """`image` (decoded from `data`) as RGBA, transparent exactly where a
  pixel's three 16-bit samples are the tRNS key, if it is a 16-bit RGB PNG
  with one; else `image` itself (an 8-bit key is Pillow's to apply)."""
  key = image.info.get('transparency')
  if image.format != 'PNG' or image.mode != 'RGB' or not isinstance(key, tuple):
    return image
  low = Image.open(io.BytesIO(data), formats=('PNG',))
  if [tile.args for tile in low.tile] != [_HIGH_BYTES]:
    return image
  low.tile = [low.tile[0]._replace(args=_LOW_BYTES)]
  low.load()  # decoded once already: the same bytes decode again
  import numpy as np  # here, as image._scale_to_8bit: rare images only
  samples = np.asarray(image, np.uint16) << 8 | np.asarray(low, np.uint16)
  opaque = (samples != np.array(key, np.uint16)).any(axis=-1)
  alpha = Image.fromarray(opaque.astype(np.uint8) * 255, 'L')
  rgba = Image.merge('RGBA', (*image.split(), alpha))
  # The rest of info stays: EXIF orientation is read from it next.
  rgba.info = {name: value for name, value in image.info.items() if name != 'transparency'}
  return rgba
