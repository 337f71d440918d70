"""What a 16/32-bit grey image holds while it is scaled to 8 bits
(transforms/core/bit_depth.py). docs/sizing.md bounds a decode at about 20
bytes a pixel; the scaling alone held 33 (a float64 copy, then new float64
arrays for the scale, the rounding and the clip, all alive at once: a 16-bit
8000x8000 PNG peaked at 2.2 GB). Counted with tracemalloc, which numpy
reports its arrays' memory to: bytes held, not timings or RSS."""

from __future__ import annotations

import tracemalloc

import numpy as np
from PIL import Image
import pytest

from transforms.core import bit_depth

SIDE = 400
PIXELS = SIDE * SIDE


def _held_while_scaling(image: Image.Image):
  tracemalloc.start()
  try:
    tracemalloc.reset_peak()
    result = bit_depth.to_8bit(image)
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  return result, peak


def _ramp(mode: str, dtype, top: float) -> tuple:
  values = (np.arange(PIXELS, dtype=np.float64) % 4096 / 4095 * top).astype(dtype)
  image = Image.fromarray(values.reshape(SIDE, SIDE), mode=mode if mode != 'I;16' else None)
  if mode == 'I;16':
    assert image.mode == 'I;16'
  return image, values


@pytest.mark.parametrize('mode, dtype, top, expected', [
    ('I;16', np.uint16, 65535, lambda v: np.rint(v / 257.0)),
    ('F', np.float32, 1.0, lambda v: np.rint(v.astype(np.float64) * 255.0)),
    ('F', np.float32, 1000.0, lambda v: np.rint((v.astype(np.float64) - v.min())
                                                * (255.0 / (float(v.max()) - v.min())))),
])
def test_scaling_to_8bit_holds_at_most_one_float_copy(mode, dtype, top, expected):
  image, values = _ramp(mode, dtype, top)
  result, peak = _held_while_scaling(image)
  pixels = np.asarray(result)
  assert result.mode == 'L' and result.size == (SIDE, SIDE)
  want = np.clip(expected(values), 0, 255).astype(np.uint8).reshape(SIDE, SIDE)
  assert np.array_equal(pixels, want)
  assert pixels[0, 0] == 0 and pixels.max() == 255
  # one float64 copy (8 B/px), the finite mask and the 8-bit result (1 each),
  # and the 2-4 B/px of the array read from the image: at most 14 B/px
  assert peak <= 14 * PIXELS, f'{peak / PIXELS:.1f} bytes a pixel held'
