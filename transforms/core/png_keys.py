"""A PNG's tRNS colour key where Pillow reads the pixels at another depth.

Pillow reads a 16-bit RGB PNG as 8-bit RGB (each sample's high byte) and a
2- or 4-bit grey one widened to 8 bits (x85, x17), and keeps their tRNS key
as stored, which no pixel then equals: the key's pixels kept their colour
where --background belonged (generated 6x4 and 4x2 PNGs). 16-bit grey keeps
its 16 bits in Pillow (image.to_mode matches its key itself).
"""

from __future__ import annotations

import io

from PIL import Image

# How Pillow unpacks a 16-bit RGB PNG's rows: each sample's high byte; read
# as little-endian, the same rows (unfiltered alike: 6 bytes a pixel) give the low byte.
_HIGH_BYTES = 'RGB;16B'
_LOW_BYTES = 'RGB;16L'
_WIDENED_GREY = {'L;2': 85, 'L;4': 17}  # Pillow's 2- and 4-bit grey, times this


def keyed(image: Image.Image, data: bytes) -> Image.Image:
  """`image` (decoded from `data`) with its tRNS key matched at the depth
  its pixels were stored at: a 2- or 4-bit grey PNG's key widened as they
  were; a 16-bit RGB PNG as RGBA, transparent exactly where a pixel's three
  16-bit samples are the key. Else `image` itself (Pillow's key is right)."""
  key = image.info.get('transparency')
  if image.format != 'PNG' or not isinstance(key, (int, tuple)) or image.mode not in ('L', 'RGB'):
    return image
  stored = Image.open(io.BytesIO(data), formats=('PNG',))  # the header again: its rawmode
  rawmodes = [tile.args for tile in stored.tile]
  if image.mode == 'L':
    if len(rawmodes) == 1 and rawmodes[0] in _WIDENED_GREY:
      image.info = dict(image.info, transparency=key * _WIDENED_GREY[rawmodes[0]])
    return image
  if rawmodes != [_HIGH_BYTES]:
    return image
  stored.tile = [stored.tile[0]._replace(args=_LOW_BYTES)]
  stored.load()  # decoded once already: the same bytes decode again
  import numpy as np  # here, as bit_depth._scale_to_8bit: rare images only
  samples = np.asarray(image, np.uint16) << 8 | np.asarray(stored, np.uint16)
  opaque = (samples != np.array(key, np.uint16)).any(axis=-1)
  alpha = Image.fromarray(opaque.astype(np.uint8) * 255, 'L')
  rgba = Image.merge('RGBA', (*image.split(), alpha))
  # The rest of info stays: EXIF orientation is read from it next.
  rgba.info = {name: value for name, value in image.info.items() if name != 'transparency'}
  return rgba
