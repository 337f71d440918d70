"""16-bit and 32-bit images to 8 bits: plain functions."""

from __future__ import annotations

from PIL import Image

_BITS_PER_SAMPLE = 258  # TIFF tags
_PHOTOMETRIC = 262  # PhotometricInterpretation


def to_8bit(image: Image.Image) -> Image.Image:
  """A 16/32-bit grey image (I;16*, I, F) as 8-bit L, or LA when a 16-bit
  PNG's tRNS level makes some pixels transparent; a MinIsWhite TIFF's
  levels inverted (0 is white)."""
  grey = _scale_to_8bit(image, _min_is_white(image), _tiff_bits(image))
  transparent = image.info.get('transparency')  # a 16-bit PNG's tRNS level
  if isinstance(transparent, int):
    import numpy as np  # see _scale_to_8bit
    opaque = (np.asarray(image) != transparent).astype(np.uint8) * 255
    grey = Image.merge('LA', (grey, Image.fromarray(opaque, 'L')))
  return grey


def _min_is_white(image: Image.Image) -> bool:
  """A TIFF stored MinIsWhite (PhotometricInterpretation 0: 0 is white).
  Pillow inverts such samples of 1 to 8 bits as it reads them, not 16-bit or
  float ones (I;16, F): a scan saved at 16 bits came out as its negative.
  (Pillow applies a TIFF's orientation itself, in load(): the image here is
  still the TIFF the plugin read, with its tags.)"""
  tags = getattr(image, 'tag_v2', None)
  return tags is not None and tags.get(_PHOTOMETRIC) == 0


def _tiff_bits(image: Image.Image) -> int:
  """The bits of a TIFF's samples that Pillow reads as I;16: 12 for a 12-bit
  TIFF (a scientific camera's, a scanner's), which Pillow widens to 16-bit
  samples holding 0..4095 (they had been scaled by 257: an image at most 16
  of 255, near black); 16 otherwise."""
  tags = getattr(image, 'tag_v2', None)
  bits = tags.get(_BITS_PER_SAMPLE) if tags is not None else None
  bits = bits[0] if isinstance(bits, tuple) and bits else bits
  return bits if isinstance(bits, int) and 0 < bits < 16 else 16


def _scale_to_8bit(image: Image.Image, inverted: bool = False, bits: int = 16) -> Image.Image:
  """16-bit and 32-bit grey to 8 bits by range (Pillow's convert would clip).

  I;16 uses the full 16-bit range (v / 257), or a TIFF's 12-bit range (v *
  255 / 4095) when its samples were 12 bits; I holding 0..65535 likewise;
  F holding 0..1 by 255; anything else by its finite pixels' min..max: NaN (a
  depth map's "no data") and -inf become 0, +inf 255 (a NaN had made all 0).
  """
  # Imported here, for the rare 16/32-bit image: at the top it added ~0.1 s
  # to the start of every image worker process (measured on 2 cores).
  import numpy as np
  # In place after the one float64 copy: a new array for each step (scale,
  # round, clip) held 33 bytes a pixel, over docs/sizing.md's 20 for any
  # decode (a 16-bit 8000x8000 PNG peaked at 2.2 GB); now at most 11. The
  # same float64 operations in the same order: the same pixels.
  pixels = np.asarray(image).astype(np.float64)
  finite = np.isfinite(pixels)  # no copy of the pixels (1 B/px): see docs/sizing.md
  low, high = pixels.min(where=finite, initial=np.inf), pixels.max(where=finite, initial=-np.inf)
  del finite
  if image.mode.startswith('I;16') and bits < 16:
    pixels *= 255.0 / (2 ** bits - 1)
  elif image.mode.startswith('I;16') or (image.mode == 'I' and low >= 0 and high <= 65535):
    pixels /= 257.0
  elif image.mode == 'F' and low >= 0.0 and high <= 1.0:
    pixels *= 255.0
  else:
    pixels -= low
    if high > low:
      pixels *= 255.0 / (high - low)
  if inverted:  # before rounding: 255 - round(x) is not round(255 - x) at .5
    np.subtract(255.0, pixels, out=pixels)
  np.nan_to_num(pixels, copy=False, nan=0.0, posinf=255.0, neginf=0.0)
  np.rint(pixels, out=pixels)
  np.clip(pixels, 0, 255, out=pixels)
  return Image.fromarray(pixels.astype(np.uint8), 'L')
