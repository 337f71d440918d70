"""TIFF sample layouts checked pixel for pixel against numpy references:
MinIsWhite at every depth, and layouts Pillow has no mode for.

The TIFFs are written here byte by byte (Pillow writes no MinIsWhite 16-bit
or float TIFF, nor the layouts it cannot read).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from transforms.core.image import process_image
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec

NATIVE_GREY = ImageSpec(resize_mode='none', channels=1, formats=('TIFF',))
_DTYPES = {(1, 8): '<u1', (1, 16): '<u2', (3, 32): '<f4'}


def tiff(samples: np.ndarray, photometric: int, bits: int, sample_format: int = 1,
         extra_samples: int | None = None) -> bytes:
  """A little-endian, uncompressed, one-strip TIFF of samples (H, W[, C])."""
  height, width = samples.shape[:2]
  per_pixel = 1 if samples.ndim == 2 else samples.shape[2]
  data = np.ascontiguousarray(samples.astype(_DTYPES[sample_format, bits])).tobytes()
  entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, bits), (259, 3, 1, 1),
             (262, 3, 1, photometric), (273, 4, 1, 0), (277, 3, 1, per_pixel),
             (278, 4, 1, height), (279, 4, 1, len(data)), (339, 3, 1, sample_format)]
  if extra_samples is not None:
    entries.append((338, 3, 1, extra_samples))
  entries.sort()
  directory_end = 8 + 2 + 12 * len(entries) + 4
  bits_list = struct.pack(f'<{per_pixel}H', *[bits] * per_pixel)
  data_offset = directory_end + (len(bits_list) if per_pixel > 2 else 0)
  packed = b''
  for tag, kind, count, value in entries:
    if tag == 258 and per_pixel > 2:  # more values than fit in the entry: stored after it
      packed += struct.pack('<HHII', tag, kind, per_pixel, directory_end)
    elif tag == 258:
      packed += struct.pack('<HHI', tag, kind, per_pixel) + bits_list.ljust(4, b'\0')
    elif kind == 3:
      packed += struct.pack('<HHIH2x', tag, kind, count, value)
    else:
      packed += struct.pack('<HHII', tag, kind, count, data_offset if tag == 273 else value)
  tail = bits_list if per_pixel > 2 else b''
  return (b'II*\0' + struct.pack('<IH', 8, len(entries)) + packed + b'\0' * 4 + tail + data)


def tiff_12_bit(levels: np.ndarray) -> bytes:
  """A MinIsBlack TIFF of 12-bit samples (levels: 0..4095, an even number a
  row), packed two to three bytes, most significant bit first."""
  data = tiff(levels.astype(np.uint16), 1, 16)
  packed = b''.join(bytes([a >> 4, (a & 15) << 4 | b >> 8, b & 255])
                    for a, b in levels.reshape(-1, 2).tolist())
  head = bytearray(data[:-levels.size * 2])
  for index in range(struct.unpack_from('<H', head, 8)[0]):
    tag = struct.unpack_from('<H', head, 10 + 12 * index)[0]
    if tag in (258, 279):  # BitsPerSample, StripByteCounts
      struct.pack_into('<I' if tag == 279 else '<H', head, 18 + 12 * index,
                       len(packed) if tag == 279 else 12)
  return bytes(head) + packed


def grey(data: bytes, spec: ImageSpec = NATIVE_GREY) -> np.ndarray:
  encoded = process_image(data, spec)
  return np.frombuffer(encoded.data, np.uint8).reshape(encoded.height, encoded.width)


LEVELS = np.array([[0, 1000, 30000], [40000, 65000, 65535]], np.uint16)


def test_min_is_white_8_bit_is_inverted_by_pillow_as_a_reference():
  # 8 bits: Pillow reads MinIsWhite inverted (0 is white): the rule 16 bits must follow.
  levels = (LEVELS // 257).astype(np.uint8)
  np.testing.assert_array_equal(grey(tiff(levels, 0, 8)), 255 - levels)
  np.testing.assert_array_equal(grey(tiff(levels, 1, 8)), levels)


def test_min_is_white_16_bit_is_inverted_as_8_bit_is():
  # Pillow reads 16-bit MinIsWhite samples as stored: a 16-bit scan came out
  # as its negative (0 black, where the file says white), unlike the same scan
  # at 8 bits.
  scaled = np.rint(LEVELS / 257).astype(np.uint8)
  np.testing.assert_array_equal(grey(tiff(LEVELS, 0, 16)), 255 - scaled)
  np.testing.assert_array_equal(grey(tiff(LEVELS, 1, 16)), scaled)  # MinIsBlack: unchanged
  rgb = process_image(tiff(LEVELS, 0, 16), ImageSpec(resize_mode='none', formats=('TIFF',)))
  pixels = np.frombuffer(rgb.data, np.uint8).reshape(2, 3, 3)
  assert pixels[0, 0].tolist() == [255, 255, 255] and pixels[1, 2].tolist() == [0, 0, 0]


def test_min_is_white_float_is_inverted():
  levels = np.array([[0.0, 0.25], [0.5, 1.0]], np.float32)
  np.testing.assert_array_equal(grey(tiff(levels, 0, 32, sample_format=3)),
                                [[255, 191], [128, 0]])
  np.testing.assert_array_equal(grey(tiff(levels, 1, 32, sample_format=3)),
                                [[0, 64], [128, 255]])


@pytest.mark.parametrize('samples, photometric, bits, sample_format, extra', [
    (np.zeros((2, 3, 2), np.uint16), 1, 16, 1, 2),  # 16-bit grey + alpha
    (np.zeros((2, 3, 3), np.float32), 2, 32, 3, None),  # 32-bit float RGB
], ids=['LA16', 'float-RGB'])
def test_a_valid_tiff_pillow_has_no_mode_for_is_unsupported_not_damaged(
    samples, photometric, bits, sample_format, extra):
  # Its header is whole: 'header is damaged or cut short' (corrupt) sent its
  # owner looking for a broken file.
  data = tiff(samples, photometric, bits, sample_format, extra)
  with pytest.raises(RowError) as error:
    process_image(data, ImageSpec(formats=('TIFF',)))
  assert (error.value.stage, error.value.code) == ('decode', 'unsupported')
  assert error.value.reason == ('an image variant Pillow cannot read: TIFF samples Pillow '
                                'has no mode for (SyntaxError: unknown pixel mode)')


def test_12_bit_tiff_is_scaled_by_its_own_range():
  # Pillow reads 12-bit samples as I;16 holding 0..4095: scaled by 257 as
  # 16-bit ones, a 12-bit scan came out near black (4095 -> 16 of 255).
  levels = np.array([[0, 1000, 2048, 4095]])
  np.testing.assert_array_equal(grey(tiff_12_bit(levels)),
                                np.rint(levels * 255 / 4095).astype(np.uint8))
  assert grey(tiff_12_bit(levels)).tolist() == [[0, 62, 128, 255]]
