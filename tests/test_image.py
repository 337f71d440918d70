"""Tests for transforms/image.py: decode, orient, convert, resize, encode.

Every awkward input is generated here, in memory (or under tmp_path), and the
assertions check pixel values at known positions, not only shapes.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import warnings
import zlib

import numpy as np
from PIL import Image
from PIL import ImageFile
import pytest

from tests.conftest import decode_pixels
from transforms.core.image import HEADER_BYTES
from transforms.core.image import check_signature
from transforms.core.image import process_image
from transforms.core.image import to_mode
from transforms.core.rejects import RowError
from transforms.core.spec import DEFAULT_FORMATS
from transforms.core.spec import ImageSpec

RED = (255, 0, 0)
GREEN = (0, 255, 0)
BLUE = (0, 0, 255)
YELLOW = (255, 255, 0)
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
# Largest per-channel error accepted after a lossy JPEG round trip, measured
# in the middle of flat colour blocks (away from chroma-subsampled edges).
JPEG_TOLERANCE = 40

# Decode at the source size unless a test asks for a resize.
NATIVE = ImageSpec(resize_mode='none')


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def encode_as(image: Image.Image, fmt: str, **options) -> bytes:
  """Saves `image` in Pillow format `fmt` and returns the file bytes."""
  buffer = io.BytesIO()
  image.save(buffer, fmt, **options)
  return buffer.getvalue()


def jpeg(image: Image.Image, orientation: int | None = None, **options) -> bytes:
  """A quality-95 JPEG, with an EXIF orientation tag if one is given."""
  if orientation is not None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    options['exif'] = exif.tobytes()
  return encode_as(image, 'JPEG', quality=95, **options)


def png(image: Image.Image, **options) -> bytes:
  return encode_as(image, 'PNG', **options)


def pixels(image: Image.Image) -> np.ndarray:
  return np.asarray(image).astype(int)


def assert_close(actual, expected, tolerance: int = 0):
  """Every channel of `actual` is within `tolerance` of `expected`."""
  actual = np.asarray(actual, dtype=int)
  expected = np.broadcast_to(np.asarray(expected, dtype=int), actual.shape)
  worst = int(np.abs(actual - expected).max())
  assert worst <= tolerance, (
      f'got {actual.tolist() if actual.size <= 16 else actual}, expected '
      f'{expected.tolist() if expected.size <= 16 else expected} '
      f'(off by {worst} > {tolerance})')


def blocks(layout, block: int = 16) -> Image.Image:
  """An RGB image made of `block`-sized flat squares: layout[row][col] colour."""
  array = np.array(layout, dtype=np.uint8)
  return Image.fromarray(array.repeat(block, axis=0).repeat(block, axis=1), 'RGB')


def quadrants(width: int, height: int, top_left, top_right, bottom_left,
              bottom_right) -> Image.Image:
  """A width x height RGB image split into four flat-coloured quadrants."""
  array = np.zeros((height, width, 3), np.uint8)
  half_h, half_w = height // 2, width // 2
  array[:half_h, :half_w] = top_left
  array[:half_h, half_w:] = top_right
  array[half_h:, :half_w] = bottom_left
  array[half_h:, half_w:] = bottom_right
  return Image.fromarray(array, 'RGB')


def quadrant_centres(image: Image.Image) -> dict:
  """Colour at the centre of each quadrant of `image`, keyed tl/tr/bl/br."""
  array = pixels(image)
  height, width = array.shape[:2]
  ys, xs = (height // 4, 3 * height // 4), (width // 4, 3 * width // 4)
  return {
      'tl': array[ys[0], xs[0]], 'tr': array[ys[0], xs[1]],
      'bl': array[ys[1], xs[0]], 'br': array[ys[1], xs[1]],
  }


def decoded_back(encoded) -> Image.Image:
  """Opens the bytes an EncodedImage holds (jpeg or png)."""
  image = Image.open(io.BytesIO(encoded.data))
  image.load()
  return image


def raw_array(encoded) -> np.ndarray:
  """An EncodedImage with format raw, as an HxWxC uint8 array."""
  assert encoded.format == 'raw'
  return np.frombuffer(encoded.data, np.uint8).reshape(
      encoded.height, encoded.width, encoded.channels)


def decode_error(data: bytes, spec: ImageSpec = NATIVE, entry=decode_pixels):
  """Runs `entry(data, spec)` and returns the RowError it must raise."""
  with pytest.raises(RowError) as caught:
    entry(data, spec)
  error = caught.value
  assert error.stage == 'decode'
  assert isinstance(error.reason, str) and error.reason.strip()
  assert str(error) == error.reason
  return error


def png_chunk(kind: bytes, body: bytes) -> bytes:
  return (struct.pack('>I', len(body)) + kind + body +
          struct.pack('>I', zlib.crc32(kind + body) & 0xFFFFFFFF))


def png_header_only(width: int, height: int) -> bytes:
  """A tiny PNG whose IHDR declares width x height 8-bit RGB and one row of data.

  Decoding it for real would need width*height*3 bytes of memory.
  """
  ihdr = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
  idat = zlib.compress(b'\x00' * (1 + 3 * min(width, 1024)))
  return (b'\x89PNG\r\n\x1a\n' + png_chunk(b'IHDR', ihdr) +
          png_chunk(b'IDAT', idat) + png_chunk(b'IEND', b''))


def noise(width: int, height: int, seed: int = 0) -> Image.Image:
  """Random RGB pixels: large, incompressible files for truncation tests."""
  rng = np.random.default_rng(seed)
  return Image.fromarray(
      rng.integers(0, 256, (height, width, 3), dtype=np.uint8), 'RGB')


# --------------------------------------------------------------------------
# EXIF orientation
# --------------------------------------------------------------------------

# The stored (sensor) image: 64 wide x 32 tall, one colour per quadrant.
STORED = dict(top_left=RED, top_right=GREEN, bottom_left=BLUE,
              bottom_right=YELLOW)

# What a viewer displays for each EXIF orientation of STORED (EXIF 2.3,
# tag 0x0112), written out by hand rather than derived from Pillow.
DISPLAYED = {
    1: dict(tl=RED, tr=GREEN, bl=BLUE, br=YELLOW),  # as stored
    2: dict(tl=GREEN, tr=RED, bl=YELLOW, br=BLUE),  # mirrored left-right
    3: dict(tl=YELLOW, tr=BLUE, bl=GREEN, br=RED),  # rotated 180
    4: dict(tl=BLUE, tr=YELLOW, bl=RED, br=GREEN),  # mirrored top-bottom
    5: dict(tl=RED, tr=BLUE, bl=GREEN, br=YELLOW),  # transposed
    6: dict(tl=BLUE, tr=RED, bl=YELLOW, br=GREEN),  # rotated 90 clockwise
    7: dict(tl=YELLOW, tr=GREEN, bl=BLUE, br=RED),  # transversed
    8: dict(tl=GREEN, tr=YELLOW, bl=RED, br=BLUE),  # rotated 90 anticlockwise
}


@pytest.mark.parametrize('orientation', sorted(DISPLAYED))
def test_exif_orientation_puts_colours_where_a_viewer_shows_them(orientation):
  data = jpeg(quadrants(64, 32, **STORED), orientation=orientation)
  image = decode_pixels(data, NATIVE)
  assert image.mode == 'RGB'
  swapped = orientation in (5, 6, 7, 8)
  assert image.size == ((32, 64) if swapped else (64, 32))
  centres = quadrant_centres(image)
  for corner, colour in DISPLAYED[orientation].items():
    assert_close(centres[corner], colour, JPEG_TOLERANCE)


@pytest.mark.parametrize('orientation', [6, 8])
def test_left_red_right_blue_rotated_becomes_top_and_bottom(orientation):
  """The classic phone photo: orientation 6/8 turn left/right into top/bottom."""
  data = jpeg(quadrants(60, 40, RED, BLUE, RED, BLUE), orientation=orientation)
  image = decode_pixels(data, NATIVE)
  assert image.size == (40, 60)
  top, bottom = (RED, BLUE) if orientation == 6 else (BLUE, RED)
  assert_close(pixels(image)[10, 20], top, JPEG_TOLERANCE)
  assert_close(pixels(image)[50, 20], bottom, JPEG_TOLERANCE)


@pytest.mark.parametrize('orientation', [3, 6, 8])
def test_exif_orientation_is_applied_before_resizing(orientation):
  """A large rotated JPEG is decoded at reduced scale, then resized: the
  target width/height refer to the displayed image, not the stored one."""
  data = jpeg(quadrants(512, 256, **STORED), orientation=orientation)
  width, height = (32, 64) if orientation in (6, 8) else (64, 32)
  spec = ImageSpec(width=width, height=height, resize_mode='stretch')
  encoded = process_image(data, spec)
  assert (encoded.height, encoded.width) == (height, width)
  centres = quadrant_centres(Image.fromarray(raw_array(encoded)))
  for corner, colour in DISPLAYED[orientation].items():
    assert_close(centres[corner], colour, JPEG_TOLERANCE)


@pytest.mark.parametrize('fmt, options', [
    ('PNG', {}),  # eXIf chunk
    ('WEBP', {'lossless': True}),
    ('TIFF', {}),
])
def test_exif_orientation_in_other_formats(fmt, options):
  exif = Image.Exif()
  exif[0x0112] = 6
  data = encode_as(quadrants(64, 32, **STORED), fmt, exif=exif.tobytes(), **options)
  image = decode_pixels(data, NATIVE)
  assert image.size == (32, 64)
  centres = quadrant_centres(image)
  for corner, colour in DISPLAYED[6].items():
    assert_close(centres[corner], colour)


@pytest.mark.parametrize('orientation', [1, 6])
def test_a_camera_jpeg_with_an_mpf_preview_is_decoded_as_a_jpeg(orientation):
  """A JPEG with an MPF header and a second image (cameras write one for
  their preview) opens as Pillow's MPO: it had been decoded at full size, not
  at a reduced DCT scale, so its record differed from the same JPEG's."""
  source = noise(800, 600)
  exif = Image.Exif()
  exif[0x0112] = orientation
  mpo = encode_as(source, 'MPO', save_all=True, append_images=[source.resize((160, 120))],
                  quality=95, exif=exif.tobytes())
  assert Image.open(io.BytesIO(mpo)).format == 'MPO'
  spec = ImageSpec(width=64, height=48, resize_mode='crop')
  encoded = process_image(mpo, spec)
  assert encoded.data == process_image(jpeg(source, orientation=orientation), spec).data
  assert (encoded.width, encoded.height, encoded.orientation) == (64, 48, orientation)


def test_malformed_exif_orientation_is_ignored():
  data = jpeg(quadrants(64, 32, **STORED), orientation=99)
  image = decode_pixels(data, NATIVE)
  assert image.size == (64, 32)
  assert_close(quadrant_centres(image)['tl'], RED, JPEG_TOLERANCE)


# --------------------------------------------------------------------------
# Colour modes
# --------------------------------------------------------------------------


@pytest.mark.parametrize('cmyk, rgb', [
    ((255, 0, 0, 0), (0, 255, 255)),  # cyan
    ((0, 255, 0, 0), (255, 0, 255)),  # magenta
    ((0, 0, 255, 0), (255, 255, 0)),  # yellow
    ((0, 0, 0, 255), (0, 0, 0)),  # black (K only)
    ((0, 0, 0, 0), (255, 255, 255)),  # no ink: white
])
def test_cmyk_jpeg_is_converted_to_rgb(cmyk, rgb):
  data = jpeg(Image.new('CMYK', (32, 32), cmyk))
  assert Image.open(io.BytesIO(data)).mode == 'CMYK'  # the fixture really is CMYK
  image = decode_pixels(data, NATIVE)
  assert image.mode == 'RGB' and image.size == (32, 32)
  assert_close(pixels(image), rgb, 8)


def grey_ramp_16bit(width: int = 256, height: int = 4) -> np.ndarray:
  """0..65535 across the width: column x holds x * 257 when width is 256."""
  return np.tile(np.linspace(0, 65535, width).round().astype(np.uint16),
                 (height, 1))


def assert_8bit_ramp(image: Image.Image, channels: int):
  """Column x of a 256-wide ramp is exactly x (v / 257), not clipped at 255."""
  array = pixels(image)
  row = array[1, :, 0] if channels == 3 else array[1]
  assert row[0] == 0 and row[-1] == 255
  assert abs(row[128] - 128) <= 1
  assert np.all(np.diff(row) >= 0), 'ramp is not monotonic'
  assert len(set(row.tolist())) == 256, 'ramp lost levels (clipped?)'
  np.testing.assert_array_equal(row, np.arange(256))
  if channels == 3:  # grey: all three channels equal
    np.testing.assert_array_equal(array[..., 0], array[..., 1])
    np.testing.assert_array_equal(array[..., 0], array[..., 2])


@pytest.mark.parametrize('channels', [3, 1])
@pytest.mark.parametrize('fmt, mode', [
    ('PNG', 'I;16'),  # a 16-bit greyscale PNG
    ('TIFF', 'I;16'),
    ('TIFF', 'I'),  # 32-bit integer TIFF holding 0..65535
])
def test_high_bit_depth_grey_is_scaled_by_range(fmt, mode, channels):
  source = Image.fromarray(grey_ramp_16bit())
  if mode == 'I':
    source = source.convert('I')
  data = encode_as(source, fmt)
  assert Image.open(io.BytesIO(data)).mode == mode  # the fixture's real mode
  image = decode_pixels(data, dataclasses.replace(NATIVE, channels=channels))
  assert image.mode == ('RGB' if channels == 3 else 'L')
  assert image.size == (256, 4)
  assert_8bit_ramp(image, channels)


@pytest.mark.parametrize('mode', ['I;16', 'I;16B', 'I'])
def test_to_mode_scales_16bit_grey_by_257(mode):
  ramp = grey_ramp_16bit()
  if mode == 'I':
    image = Image.fromarray(ramp).convert('I')
  else:
    byte_order = '>u2' if mode == 'I;16B' else '<u2'
    image = Image.frombytes(mode, ramp.shape[::-1], ramp.astype(byte_order).tobytes())
  assert image.mode == mode
  assert_8bit_ramp(to_mode(image, 3), 3)


@pytest.mark.parametrize('mode, values, expected', [
    # 32-bit integers outside 0..65535 are stretched over their own min..max.
    ('I', [-1000, 0, 1000], [0, 128, 255]),
    # Floats in 0..1 are scaled by 255.
    ('F', [0.0, 0.5, 1.0], [0, 128, 255]),
    # Other floats, by their own min..max.
    ('F', [-2.0, 0.0, 2.0], [0, 128, 255]),
])
def test_to_mode_scales_wide_grey_modes(mode, values, expected):
  dtype = np.int32 if mode == 'I' else np.float32
  image = Image.fromarray(np.array([values], dtype), mode)
  assert image.mode == mode
  assert_close(pixels(to_mode(image, 1))[0], expected, 1)


@pytest.mark.parametrize('values, expected', [
    # NaN ("no data") is 0; the range is the finite pixels' (0..1 here).
    ([np.nan, 0.0, 0.5, 1.0], [0, 0, 128, 255]),
    # -inf is 0 and +inf 255; the others stretched over -2..2.
    ([-np.inf, -2.0, 0.0, 2.0, np.inf], [0, 0, 128, 255, 255]),
    # One finite level: 0 (as any flat image), +inf still 255.
    ([3.0, np.inf, 3.0], [0, 255, 0]),
    # Nothing finite.
    ([np.nan, np.inf, -np.inf], [0, 255, 0]),
])
def test_to_mode_scales_floats_by_their_finite_pixels(values, expected):
  """A float TIFF holding NaN or inf had become all 0 (min..max was NaN)."""
  image = Image.fromarray(np.array([values], np.float32), 'F')
  data = encode_as(image, 'TIFF')
  with warnings.catch_warnings():
    warnings.simplefilter('error')  # numpy's 'invalid value' warnings had gone to stderr
    converted = decode_pixels(data, dataclasses.replace(NATIVE, channels=1))
  np.testing.assert_array_equal(pixels(converted)[0], expected)


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
  return (struct.pack('>I', len(payload)) + kind + payload +
          struct.pack('>I', zlib.crc32(kind + payload) & 0xFFFFFFFF))


def test_a_16bit_rgb_png_colour_key_is_matched_on_16_bits():
  """Pillow reads a 16-bit RGB PNG as 8-bit (high bytes) and keeps its tRNS
  key at 16 bits, which no pixel then equalled: the key's pixels stayed their
  colour instead of becoming --background."""
  key = (40000, 1234, 60000)
  samples = np.zeros((4, 6, 3), '>u2')
  samples[:, :2] = key
  samples[:, 2:4] = (40000, 1234, 60001)  # one low byte off the key: opaque
  samples[:, 4:] = (20000, 30000, 50000)
  # Sub-filtered rows (type 1: each byte less the byte 6 before, a pixel's width)
  rows = samples.reshape(4, -1).view(np.uint8)
  filtered = rows.copy()
  filtered[:, 6:] = rows[:, 6:] - rows[:, :-6]
  idat = b''.join(b'\x01' + row.tobytes() for row in filtered)
  data = (b'\x89PNG\r\n\x1a\n' +
          _png_chunk(b'IHDR', struct.pack('>IIBBBBB', 6, 4, 16, 2, 0, 0, 0)) +
          _png_chunk(b'tRNS', struct.pack('>HHH', *key)) +
          _png_chunk(b'IDAT', zlib.compress(idat)) + _png_chunk(b'IEND', b''))
  encoded = process_image(data, dataclasses.replace(NATIVE, background=(0, 128, 0)))
  row = raw_array(encoded)[2]
  assert row[:2].tolist() == [[0, 128, 0]] * 2  # the key: --background
  assert row[2:4].tolist() == [[156, 4, 234]] * 2  # the high bytes: 40000 >> 8 = 156
  assert row[4:].tolist() == [[78, 117, 195]] * 2


def _png_16bit_rgb(samples: np.ndarray) -> bytes:
  h, w, _ = samples.shape
  rows = b''.join(b'\x00' + row.astype('>u2').tobytes() for row in samples)
  return (b'\x89PNG\r\n\x1a\n' +
          _png_chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 16, 2, 0, 0, 0)) +
          _png_chunk(b'IDAT', zlib.compress(rows)) + _png_chunk(b'IEND', b''))


def test_16bit_colour_is_the_high_byte_in_a_png_and_scaled_by_maxval_in_a_ppm():
  """docs/convert.md "Modes": a 16-bit RGB PNG keeps each sample's high byte
  (v >> 8, as tf.io.decode_png); a colour PPM above 8 bits is scaled by its
  maxval as Pillow reads it, round(v * 255 / maxval): the same samples give
  other pixels (the page listed PPM among the high-byte formats)."""
  samples = np.array([[[511, 767, 128], [1000, 1000, 1000], [65535, 257, 256]]], np.uint16)
  assert raw_array(process_image(_png_16bit_rgb(samples), NATIVE))[0].tolist() == [
      [1, 2, 0], [3, 3, 3], [255, 1, 1]]
  ppm = b'P6 3 1 65535\n' + samples.astype('>u2').tobytes()
  assert raw_array(process_image(ppm, NATIVE))[0].tolist() == [
      [2, 3, 0], [4, 4, 4], [255, 1, 1]]
  ten_bit = b'P6 3 1 1023\n' + np.minimum(samples, 1023).astype('>u2').tobytes()
  assert raw_array(process_image(ten_bit, NATIVE))[0].tolist() == [
      [127, 191, 32], [249, 249, 249], [255, 64, 64]]


@pytest.mark.parametrize('bits, levels', [(2, [0, 1, 2, 3]), (4, [0, 5, 10, 15])])
def test_a_2_or_4_bit_grey_png_colour_key_is_matched(bits, levels):
  """Pillow widens 2- and 4-bit grey to 8 bits (x85, x17) but keeps the tRNS
  level unwidened, which no pixel then equalled: level 2 of 0..3 stayed 170."""
  row, = np.packbits(np.unpackbits(np.array(levels, np.uint8)[:, None], axis=1)[:, -bits:])[None]
  idat = b''.join(b'\x00' + row.tobytes() for _ in range(2))
  data = (b'\x89PNG\r\n\x1a\n' +
          _png_chunk(b'IHDR', struct.pack('>IIBBBBB', 4, 2, bits, 0, 0, 0, 0)) +
          _png_chunk(b'tRNS', struct.pack('>H', levels[2])) +
          _png_chunk(b'IDAT', zlib.compress(idat)) + _png_chunk(b'IEND', b''))
  assert Image.open(io.BytesIO(data)).info['transparency'] == levels[2]
  encoded = process_image(data, dataclasses.replace(NATIVE, background=(0, 128, 0)))
  assert raw_array(encoded)[1].tolist() == [[0, 0, 0], [85, 85, 85], [0, 128, 0], [255] * 3]


def palette_image(transparent: bool) -> tuple[Image.Image, dict]:
  """A P image: left half palette index 0 (red), right half index 1 (green).

  Returns the image and the `save` options (tRNS making index 0 transparent).
  """
  image = Image.new('P', (32, 16), 0)
  image.putpalette(list(RED) + list(GREEN) + [0, 0, 0] * 254)
  image.paste(1, (16, 0, 32, 16))
  return image, ({'transparency': 0} if transparent else {})


@pytest.mark.parametrize('fmt', ['PNG', 'GIF'])
@pytest.mark.parametrize('transparent', [False, True])
@pytest.mark.parametrize('background', [WHITE, (0, 0, 255), (10, 20, 30)])
def test_palette_with_and_without_transparency(fmt, transparent, background):
  image, options = palette_image(transparent)
  data = encode_as(image, fmt, **options)
  spec = dataclasses.replace(NATIVE, background=background)
  decoded = decode_pixels(data, spec)
  assert decoded.mode == 'RGB' and decoded.size == (32, 16)
  array = pixels(decoded)
  left = background if transparent else RED
  assert_close(array[:, :16], left)
  assert_close(array[:, 16:], GREEN)


@pytest.mark.parametrize('background, expected', [
    # 50% (alpha 128) red over the default white background.
    (None, (255, 127, 127)),
    # ... over a custom background colour.
    ((0, 0, 255), (128, 0, 127)),
    ((0, 0, 0), (128, 0, 0)),
])
def test_rgba_half_transparent_is_composited_over_background(background, expected):
  source = Image.new('RGBA', (8, 8), (255, 0, 0, 128))
  source.paste((0, 255, 0, 255), (0, 0, 4, 8))  # left half: opaque green
  source.paste((0, 0, 0, 0), (0, 0, 4, 4))  # top-left quarter: fully transparent
  spec = NATIVE if background is None else dataclasses.replace(
      NATIVE, background=background)
  image = decode_pixels(png(source), spec)
  assert image.mode == 'RGB'
  array = pixels(image)
  assert_close(array[:, 4:], expected, 1)
  assert_close(array[4:, :4], GREEN)
  assert_close(array[:4, :4], background or WHITE)


@pytest.mark.parametrize('channels, expected', [(3, (127, 127, 127)), (1, 127)])
def test_la_is_composited_over_white(channels, expected):
  source = Image.new('LA', (8, 8), (0, 128))  # black at 50% alpha
  source.paste((200, 255), (0, 0, 8, 4))  # top half: opaque grey 200
  image = decode_pixels(png(source), dataclasses.replace(NATIVE, channels=channels))
  assert image.mode == ('RGB' if channels == 3 else 'L')
  array = pixels(image)
  assert_close(array[4:], expected, 1)
  assert_close(array[:4], (200,) * channels if channels == 3 else 200)


@pytest.mark.parametrize('channels', [3, 1])
def test_one_bit_image(channels):
  source = Image.new('1', (16, 8), 0)
  source.paste(1, (8, 0, 16, 8))  # right half white
  image = decode_pixels(png(source), dataclasses.replace(NATIVE, channels=channels))
  array = pixels(image)
  white, black = (WHITE, BLACK) if channels == 3 else (255, 0)
  assert_close(array[:, :8], black)
  assert_close(array[:, 8:], white)


@pytest.mark.parametrize('channels, expected', [(3, (77, 77, 77)), (1, 77)])
def test_grey_l_image(channels, expected):
  image = decode_pixels(png(Image.new('L', (8, 8), 77)),
                        dataclasses.replace(NATIVE, channels=channels))
  assert image.mode == ('RGB' if channels == 3 else 'L')
  assert_close(pixels(image), expected)


def test_grey_with_transparent_colour_is_composited():
  """An L PNG with a tRNS grey level: that level becomes the background."""
  source = Image.new('L', (8, 8), 50)
  source.paste(90, (0, 0, 4, 8))
  data = png(source, transparency=50)
  image = decode_pixels(data, dataclasses.replace(NATIVE, background=(1, 2, 3)))
  assert_close(pixels(image)[:, :4], (90, 90, 90))
  assert_close(pixels(image)[:, 4:], (1, 2, 3))


@pytest.mark.parametrize('channels', [3, 1])
def test_16bit_grey_with_transparent_level_is_composited(channels):
  """A 16-bit grey PNG with tRNS: scaling to 8 bits must keep the transparency."""
  array = np.full((4, 8), 1000, np.uint16)
  array[:, 4:] = 60000
  data = png(Image.fromarray(array), transparency=1000)
  assert Image.open(io.BytesIO(data)).info['transparency'] == 1000
  spec = dataclasses.replace(NATIVE, channels=channels, background=(0, 0, 255))
  image = pixels(decode_pixels(data, spec))
  assert_close(image[:, :4], (0, 0, 255) if channels == 3 else 29, 1)  # background
  assert_close(image[:, 4:], (233,) * channels if channels == 3 else 233)  # 60000/257


def test_multi_frame_gif_uses_the_first_frame():
  frames = [Image.new('RGB', (16, 16), colour) for colour in (RED, BLUE, GREEN)]
  data = encode_as(frames[0], 'GIF', save_all=True, append_images=frames[1:],
                   duration=100, loop=0)
  assert Image.open(io.BytesIO(data)).n_frames == 3
  image = decode_pixels(data, NATIVE)
  assert image.mode == 'RGB' and image.size == (16, 16)
  assert_close(pixels(image), RED)


@pytest.mark.parametrize('rgb, grey', [
    (RED, 76),  # ITU-R 601-2 luma: 0.299 R + 0.587 G + 0.114 B
    (GREEN, 150),
    (BLUE, 29),
    ((100, 150, 200), 141),
    (WHITE, 255),
])
def test_channels_1_gives_luma(rgb, grey):
  spec = ImageSpec(channels=1, resize_mode='none')
  image = decode_pixels(png(Image.new('RGB', (4, 4), rgb)), spec)
  assert image.mode == 'L'
  assert_close(pixels(image), grey, 1)
  encoded = process_image(png(Image.new('RGB', (4, 4), rgb)), spec)
  assert encoded.channels == 1 and len(encoded.data) == 16
  assert_close(np.frombuffer(encoded.data, np.uint8), grey, 1)


# --------------------------------------------------------------------------
# Formats, detected by content
# --------------------------------------------------------------------------

LAYOUT = [[RED, GREEN, BLUE], [YELLOW, WHITE, BLACK]]


@pytest.mark.parametrize('fmt, options', [
    ('PNG', {}),
    ('BMP', {}),
    ('TIFF', {}),
    ('TIFF', {'compression': 'tiff_lzw'}),
    ('WEBP', {'lossless': True}),
    ('GIF', {}),
    ('PPM', {}),
])
def test_lossless_formats_decode_exactly(fmt, options):
  source = blocks(LAYOUT, 8)
  image = decode_pixels(encode_as(source, fmt, **options), NATIVE)
  assert image.mode == 'RGB' and image.size == source.size
  np.testing.assert_array_equal(pixels(image), pixels(source))


def test_lossy_webp_decodes():
  source = blocks(LAYOUT, 16)
  image = decode_pixels(encode_as(source, 'WEBP', quality=90), NATIVE)
  assert image.size == source.size
  centres = pixels(image)[8::16, 8::16]
  assert_close(centres, np.array(LAYOUT), JPEG_TOLERANCE)


def test_png_saved_under_a_jpg_name_decodes_by_content(tmp_path):
  path = tmp_path / 'photo.jpg'
  blocks(LAYOUT, 8).save(path, 'PNG')
  data = path.read_bytes()
  assert data.startswith(b'\x89PNG')
  image = decode_pixels(data, NATIVE)
  # Exact values: it was decoded as the (lossless) PNG it is.
  np.testing.assert_array_equal(pixels(image), pixels(blocks(LAYOUT, 8)))
  # ... and with resize none + jpeg it is re-encoded, never passed through.
  encoded = process_image(data, ImageSpec(resize_mode='none', encoding='jpeg'))
  assert encoded.data != data and encoded.data.startswith(b'\xff\xd8')


# --------------------------------------------------------------------------
# Resizing
# --------------------------------------------------------------------------


@pytest.mark.parametrize('height, width', [(10, 20), (20, 10), (64, 64), (1, 1)])
def test_stretch_gives_exactly_height_by_width(height, width):
  source = Image.new('RGB', (37, 23), (12, 34, 56))
  encoded = process_image(png(source), ImageSpec(height=height, width=width))
  assert (encoded.height, encoded.width, encoded.channels) == (height, width, 3)
  assert_close(raw_array(encoded), (12, 34, 56))


def test_stretch_changes_the_aspect_ratio():
  """Left half red, right half blue, squeezed: still left red, right blue."""
  source = quadrants(200, 50, RED, BLUE, RED, BLUE)
  encoded = process_image(png(source), ImageSpec(height=40, width=20))
  array = raw_array(encoded)
  assert_close(array[:, :9], RED)
  assert_close(array[:, 11:], BLUE)


@pytest.mark.parametrize('source_size, bars', [
    ((200, 100), 'rows'),  # wide: black bars at top and bottom
    ((100, 200), 'columns'),  # tall: black bars left and right
])
def test_pad_letterboxes_with_zeros(source_size, bars):
  source = Image.new('RGB', source_size, WHITE)
  encoded = process_image(png(source), ImageSpec(height=100, width=100,
                                                 resize_mode='pad'))
  assert (encoded.height, encoded.width) == (100, 100)
  array = raw_array(encoded)
  if bars == 'columns':
    array = array.transpose(1, 0, 2)
  assert_close(array[:25], 0)  # top bar
  assert_close(array[75:], 0)  # bottom bar
  assert_close(array[25:75], 255)  # the image, scaled to 100x50
  assert_close(array[50], 255)  # the middle row is white


def test_pad_keeps_content_in_place():
  """A 200x100 image, left half red and right half blue, padded into 100x100."""
  source = quadrants(200, 100, RED, BLUE, RED, BLUE)
  encoded = process_image(png(source), ImageSpec(height=100, width=100,
                                                 resize_mode='pad'))
  array = raw_array(encoded)
  assert_close(array[50, 10], RED)
  assert_close(array[50, 90], BLUE)
  assert_close(array[10, 10], BLACK)
  assert_close(array[90, 90], BLACK)


@pytest.mark.parametrize('vertical', [False, True])
@pytest.mark.parametrize('scale', [1, 3])
def test_crop_keeps_the_centre(vertical, scale):
  """Thirds red/green/blue (300x100, or 100x300) cropped to 100x100: green."""
  third = 100 * scale
  source = blocks([[RED, GREEN, BLUE]], third)
  source = source.crop((0, 0, 3 * third, third))
  if vertical:
    source = source.transpose(Image.Transpose.TRANSPOSE)
  encoded = process_image(png(source), ImageSpec(height=100, width=100,
                                                 resize_mode='crop'))
  assert (encoded.height, encoded.width) == (100, 100)
  array = raw_array(encoded)
  if scale == 1:
    assert_close(array, GREEN)  # the centre third, copied pixel for pixel
  else:
    assert_close(array[2:-2, 2:-2], GREEN)  # edges may blend with the filter


def test_crop_to_a_wider_target_trims_top_and_bottom():
  source = blocks([[RED], [GREEN], [GREEN], [BLUE]], 50)  # 50x200
  encoded = process_image(png(source), ImageSpec(height=50, width=100,
                                                 resize_mode='crop'))
  assert (encoded.height, encoded.width) == (50, 100)
  # The centre 50x25 of the source, scaled by 2: entirely green.
  assert_close(raw_array(encoded)[2:-2], GREEN)


def test_none_keeps_the_source_size():
  source = blocks(LAYOUT, 7)  # 21x14
  spec = ImageSpec(height=100, width=100, resize_mode='none')
  encoded = process_image(png(source), spec)
  assert (encoded.height, encoded.width) == (14, 21)
  np.testing.assert_array_equal(raw_array(encoded), pixels(source))


def checkerboard(size: int = 8) -> Image.Image:
  """Single-pixel black/white checkerboard (L)."""
  y, x = np.indices((size, size))
  return Image.fromarray(((x + y) % 2 * 255).astype(np.uint8), 'L')


@pytest.mark.parametrize('resize_filter', ['nearest', 'bilinear', 'bicubic',
                                           'lanczos'])
def test_filters_on_a_checkerboard(resize_filter):
  spec = ImageSpec(height=3, width=3, channels=1, resize_filter=resize_filter)
  values = set(np.frombuffer(process_image(png(checkerboard()), spec).data,
                             np.uint8).tolist())
  if resize_filter == 'nearest':
    assert values <= {0, 255}  # picks source pixels
  else:
    assert values - {0, 255}, f'{resize_filter} did not blend: {values}'


def test_nearest_and_bilinear_differ():
  data = png(checkerboard())
  out = {
      name: process_image(data, ImageSpec(height=3, width=3, channels=1,
                                          resize_filter=name)).data
      for name in ('nearest', 'bilinear')
  }
  assert out['nearest'] != out['bilinear']


def rgb_gradient(width: int, height: int) -> Image.Image:
  y, x = np.mgrid[0:height, 0:width]
  return Image.fromarray(np.stack([x * 255 // (width - 1), y * 255 // (height - 1),
                                   (x * 7 + y * 3) % 256], -1).astype(np.uint8))


@pytest.mark.parametrize('encode', [png, jpeg])
def test_the_seed_tutorial_s_resize_is_its_filter_given_as_resize_filter(encode):
  """docs/output.md (--schema seed): the tutorial's Image.open(p).resize((W, H))
  is Pillow's default filter (bicubic); --resize_filter bicubic gives its bytes,
  the default bilinear does not."""
  data = encode(rgb_gradient(37, 53))
  tutorial = Image.open(io.BytesIO(data)).resize((29, 31))
  assert tutorial.mode == 'RGB'
  for name, pillow_filter in (('bicubic', Image.BICUBIC), ('nearest', Image.NEAREST)):
    spec = ImageSpec(height=31, width=29, resize_filter=name)
    assert process_image(data, spec).data == Image.open(io.BytesIO(data)).resize(
        (29, 31), pillow_filter).tobytes()
  assert process_image(data, ImageSpec(height=31, width=29, resize_filter='bicubic')).data == (
      tutorial.tobytes())
  assert process_image(data, ImageSpec(height=31, width=29)).data != tutorial.tobytes()


def _seed_and_tutorial(data: bytes, width: int, height: int) -> tuple:
  """(convert's --schema seed --resize_filter bicubic bytes, the tutorial's)."""
  spec = ImageSpec(height=height, width=width, resize_filter='bicubic')
  return (process_image(data, spec).data,
          Image.open(io.BytesIO(data)).resize((width, height), Image.BICUBIC).tobytes())


def test_the_seed_tutorial_s_bytes_up_to_a_jpeg_four_times_the_output_each_way():
  """docs/output.md (--schema seed): a JPEG is decoded at a reduced scale, so
  differs from the tutorial's bytes, only from 4x the output size each way
  (the reduced decode keeps 2x); 'at least twice the output size' had said
  a 2x-4x JPEG differed: it gives the tutorial's bytes."""
  width, height = 30, 20
  for size in ((119, 80), (120, 79), (60, 40), (100, 70)):  # below 4x one way or both
    seed, tutorial = _seed_and_tutorial(jpeg(noise(*size)), width, height)
    assert seed == tutorial, size
  seed, tutorial = _seed_and_tutorial(jpeg(noise(120, 80)), width, height)
  assert len(seed) == len(tutorial) == width * height * 3
  assert seed != tutorial  # 4x both ways: decoded at 1/2 scale (60x40)
  half = Image.open(io.BytesIO(jpeg(noise(120, 80))))
  half.draft('RGB', (60, 40))
  assert half.size == (60, 40)
  assert seed == half.resize((width, height), Image.BICUBIC).tobytes()


def test_seed_bytes_of_rgb_files_the_tutorial_reads_otherwise():
  """docs/output.md (--schema seed): two RGB files whose seed bytes are not
  the tutorial's: an EXIF-oriented JPEG (convert turns it upright, the
  tutorial does not) and an RGB PNG with a transparent colour (tRNS: its
  pixels composited over --background)."""
  source = rgb_gradient(37, 53)
  data = jpeg(source, orientation=6)
  seed, tutorial = _seed_and_tutorial(data, 29, 31)
  assert Image.open(io.BytesIO(data)).mode == 'RGB'
  assert seed != tutorial
  upright = Image.open(io.BytesIO(data)).transpose(Image.Transpose.ROTATE_270)
  assert upright.size == (53, 37)
  assert seed == upright.resize((29, 31), Image.BICUBIC).tobytes()

  keyed = np.asarray(source).copy()
  keyed[:8, :8] = (10, 20, 30)
  data = png(Image.fromarray(keyed), transparency=(10, 20, 30))
  seed, tutorial = _seed_and_tutorial(data, 37, 53)  # no resize: the pixels as stored
  assert Image.open(io.BytesIO(data)).mode == 'RGB'
  assert tutorial == keyed.tobytes()
  expected = keyed.copy()
  expected[:8, :8] = (255, 255, 255)  # the default --background
  assert seed == expected.tobytes()


# --------------------------------------------------------------------------
# Encodings
# --------------------------------------------------------------------------


@pytest.mark.parametrize('channels', [3, 1])
@pytest.mark.parametrize('resize_mode', ['none', 'stretch', 'pad', 'crop'])
def test_raw_is_row_major_height_width_channels(channels, resize_mode):
  source = blocks(LAYOUT, 5)  # 15x10
  spec = ImageSpec(height=6, width=9, channels=channels, resize_mode=resize_mode)
  encoded = process_image(png(source), spec)
  height, width = (10, 15) if resize_mode == 'none' else (6, 9)
  assert (encoded.height, encoded.width, encoded.channels) == (height, width,
                                                                channels)
  assert encoded.format == 'raw'
  assert len(encoded.data) == height * width * channels
  if resize_mode == 'none':
    expected = np.asarray(decode_pixels(png(source), spec)).tobytes()
    assert encoded.data == expected
    # Row-major: byte (y * W + x) * C + c is pixel (x, y), channel c.
    y, x = 7, 1  # the yellow / white block row, first column: yellow
    offset = (y * width + x) * channels
    if channels == 3:
      assert tuple(encoded.data[offset:offset + 3]) == YELLOW
    else:
      assert encoded.data[offset] == 226  # luma of yellow


@pytest.mark.parametrize('encoding, fmt', [('jpeg', 'JPEG'), ('png', 'PNG')])
@pytest.mark.parametrize('channels', [3, 1])
def test_jpeg_and_png_decode_back(encoding, fmt, channels):
  source = blocks(LAYOUT, 16)  # 48x32
  spec = ImageSpec(height=32, width=48, channels=channels, encoding=encoding)
  encoded = process_image(png(source), spec)
  assert encoded.format == encoding
  assert (encoded.height, encoded.width, encoded.channels) == (32, 48, channels)
  image = decoded_back(encoded)
  assert image.format == fmt
  assert image.size == (48, 32)
  assert image.mode == ('RGB' if channels == 3 else 'L')
  expected = pixels(decode_pixels(png(source), spec))
  if encoding == 'png':  # lossless: every pixel
    np.testing.assert_array_equal(pixels(image), expected)
  else:  # lossy: the centre of every flat block
    assert_close(pixels(image)[8::16, 8::16], expected[8::16, 8::16],
                 JPEG_TOLERANCE)


def _png_chunk_kinds(data: bytes) -> list:
  kinds, at = [], 8
  while at < len(data):
    length, = struct.unpack('>I', data[at:at + 4])
    kinds.append(data[at + 4:at + 8])
    at += 12 + length
  return kinds


@pytest.mark.parametrize('resize_mode', ['stretch', 'none', 'crop', 'pad'])
@pytest.mark.parametrize('channels', [3, 1])
@pytest.mark.parametrize('source_mode, save', [('RGB', jpeg), ('CMYK', jpeg), ('L', png)])
def test_a_png_carries_no_colour_profile_of_its_source(resize_mode, channels, source_mode,
                                                        save):
  # Pillow copies a source's ICC profile into a PNG it saves: a grey PNG got
  # an RGB profile, an RGB one a CMYK source's (libpng: invalid). Colour
  # profiles are ignored (docs/convert.md): the pixels are as stored.
  from PIL import ImageCms
  profile = ImageCms.ImageCmsProfile(ImageCms.createProfile('sRGB')).tobytes()
  source = Image.new(source_mode, (40, 30), 90)
  encoded = process_image(save(source, icc_profile=profile),
                          ImageSpec(height=20, width=20, channels=channels, encoding='png',
                                    resize_mode=resize_mode))
  assert _png_chunk_kinds(encoded.data) == [b'IHDR', b'IDAT', b'IEND']
  image = decoded_back(encoded)
  assert 'icc_profile' not in image.info
  assert image.mode == ('RGB' if channels == 3 else 'L')


@pytest.mark.parametrize('resize_mode', ['stretch', 'none', 'crop', 'pad'])
@pytest.mark.parametrize('fmt', ['JPEG', 'GIF'])
def test_a_jpeg_carries_no_comment_of_its_source(resize_mode, fmt):
  # Pillow's JPEG writer copies image.info['comment'] (a JPEG's COM marker, a
  # GIF's comment) into the file, and resize and convert keep image.info: the
  # stretch, crop and none modes wrote the source's comment (pad did not).
  # A grey JPEG to RGB: re-encoded with --resize_mode none too, not passed through.
  source = Image.new('L', (40, 30), 90) if fmt == 'JPEG' else (
      Image.new('RGB', (40, 30), (10, 100, 200)).quantize(8))
  data = encode_as(source, fmt, comment=b'owner: Jane Doe')
  assert Image.open(io.BytesIO(data)).info['comment'] == b'owner: Jane Doe'
  size = {} if resize_mode == 'none' else {'height': 20, 'width': 20}
  encoded = process_image(data, ImageSpec(encoding='jpeg', resize_mode=resize_mode, **size))
  assert encoded.data != data
  assert b'\xff\xfe' not in encoded.data  # no COM marker
  assert 'comment' not in decoded_back(encoded).info


def test_plain_jpeg_is_passed_through_byte_for_byte():
  data = jpeg(blocks(LAYOUT, 16))
  encoded = process_image(data, ImageSpec(resize_mode='none', encoding='jpeg'))
  assert encoded.data == data
  assert (encoded.height, encoded.width, encoded.channels) == (32, 48, 3)
  assert encoded.format == 'jpeg'


@pytest.mark.parametrize('orientation', [0, 9, 65535])
def test_a_jpeg_whose_orientation_exif_does_not_define_is_passed_through(orientation):
  """An orientation outside 1..8 turns nothing (exif_transpose, browsers): the
  JPEG needs no change, so it is kept byte for byte (it was re-encoded: 9 and
  65535 made 871 source bytes 900 at quality 95), its orientation 1."""
  data = jpeg(blocks(LAYOUT, 16), orientation=orientation)
  encoded = process_image(data, ImageSpec(resize_mode='none', encoding='jpeg'))
  assert encoded.data == data
  assert (encoded.height, encoded.width, encoded.orientation) == (32, 48, 1)


def test_grey_jpeg_is_passed_through_for_one_channel():
  data = jpeg(Image.new('L', (16, 8), 99))
  encoded = process_image(data, ImageSpec(resize_mode='none', encoding='jpeg',
                                          channels=1))
  assert encoded.data == data
  assert (encoded.height, encoded.width, encoded.channels) == (8, 16, 1)


@pytest.mark.parametrize('case', ['exif_rotated', 'cmyk', 'grey_to_rgb',
                                  'rgb_to_grey', 'resized'])
def test_jpeg_is_re_encoded_when_pixels_change(case):
  spec = ImageSpec(resize_mode='none', encoding='jpeg')
  source = blocks(LAYOUT, 16)  # 48x32
  size = (48, 32)
  if case == 'exif_rotated':
    data, size = jpeg(source, orientation=6), (32, 48)
  elif case == 'cmyk':
    data = jpeg(source.convert('CMYK'))
  elif case == 'grey_to_rgb':
    data = jpeg(source.convert('L'))
  elif case == 'rgb_to_grey':
    data = jpeg(source)
    spec = dataclasses.replace(spec, channels=1)
  else:
    data, size = jpeg(source), (24, 16)
    spec = dataclasses.replace(spec, resize_mode='stretch', height=16, width=24)
  encoded = process_image(data, spec)
  assert encoded.data != data
  image = decoded_back(encoded)
  assert image.format == 'JPEG'
  assert image.mode == spec.pil_mode
  assert image.size == size == (encoded.width, encoded.height)
  if case == 'exif_rotated':
    # Re-encoded upright, without the orientation tag that rotated it.
    assert image.getexif().get(0x0112, 1) == 1
    assert_close(pixels(image)[8, 24], RED, JPEG_TOLERANCE)  # displayed top right
    assert_close(pixels(image)[8, 8], YELLOW, JPEG_TOLERANCE)  # displayed top left


# --------------------------------------------------------------------------
# Failures
# --------------------------------------------------------------------------

ENTRY_POINTS = {
    'decode_pixels': (decode_pixels, NATIVE),
    'process_raw': (process_image, ImageSpec(height=16, width=16)),
    'process_passthrough': (process_image,
                            ImageSpec(resize_mode='none', encoding='jpeg')),
}


@pytest.mark.parametrize('entry', sorted(ENTRY_POINTS))
def test_empty_file(entry):
  function, spec = ENTRY_POINTS[entry]
  error = decode_error(b'', spec, function)
  assert error.code == 'empty_file'
  assert '0 bytes' in error.reason


@pytest.mark.parametrize('data', [
    b'this is a text file, not an image\n',
    bytes(np.random.default_rng(1).integers(1, 256, 4096, dtype=np.uint8)),
    b'\x00' * 100,
    b'{"json": true}',
], ids=['text', 'random', 'zeros', 'json'])
def test_non_image_bytes(data):
  error = decode_error(data)
  assert error.code == 'not_an_image'
  assert 'not an image' in error.reason


@pytest.mark.parametrize('data,named', [
    (b'\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic' + bytes(300), 'an HEIC/HEIF image'),
    (b'\x00\x00\x00\x0cJXL \r\n\x87\n' + bytes(300), 'a JPEG XL image'),
    (b'\xff\x0a\xfa\x7f' + bytes(300), 'a JPEG XL image'),
    (b'%PDF-1.7\n' + bytes(300), 'a PDF document'),
], ids=['heic', 'jxl-box', 'jxl-bare', 'pdf'])
def test_a_format_pillow_does_not_decode_is_named(data, named):
  """An iPhone's HEIC said only "not an image Pillow can read (..., starts
  with b'\\x00\\x00\\x00\\x18ftyp')": the format is named, before the bytes
  are read whole (check_signature) and after (decode)."""
  said = f'not an image Pillow can read ({named}, which Pillow does not decode: convert it to '
  error = decode_error(data)
  assert error.code == 'not_an_image' and error.reason.startswith(said), error.reason
  with pytest.raises(RowError) as caught:
    check_signature(data[:HEADER_BYTES], DEFAULT_FORMATS, len(data))
  assert caught.value.code == 'not_an_image' and caught.value.reason.startswith(said)
  assert f'{len(data)} B, starts with {data[:8]!r})' in caught.value.reason


def test_bytes_of_no_known_format_name_none():
  error = decode_error(b'\x00\x00\x00\x18ftypqt  ' + bytes(300))  # a QuickTime movie
  assert error.reason.startswith('not an image Pillow can read (312 B, starts with ')


@pytest.mark.parametrize('encoder,size,entry', [
    *[(jpeg, 256, entry) for entry in sorted(ENTRY_POINTS)],
    *[(png, 128, entry) for entry in ('decode_pixels', 'process_raw')],
])
def test_truncated_file(encoder, size, entry):
  function, spec = ENTRY_POINTS[entry]
  data = encoder(noise(size, size))
  error = decode_error(data[:len(data) // 2], spec, function)
  assert error.code == 'truncated'
  assert 'truncated' in error.reason


def corrupt_idat(data: bytes) -> bytes:
  """Flips 32 bytes in the middle of a PNG's first IDAT payload."""
  start = data.index(b'IDAT') + 4
  length = struct.unpack('>I', data[start - 8:start - 4])[0]
  assert length > 200
  middle = start + length // 2
  flipped = bytes(b ^ 0xFF for b in data[middle:middle + 32])
  return data[:middle] + flipped + data[middle + 32:]


@pytest.mark.parametrize('entry', ['decode_pixels', 'process_raw'])
@pytest.mark.parametrize('source', ['noise', 'flat'])
def test_corrupted_png_is_rejected(entry, source):
  """Flipped bytes inside IDAT must not decode into a silently wrong image."""
  function, spec = ENTRY_POINTS[entry]
  image = noise(64, 64) if source == 'noise' else blocks(LAYOUT, 64)
  error = decode_error(corrupt_idat(png(image, compress_level=1)), spec, function)
  assert error.code == 'corrupt'
  assert 'corrupt' in error.reason


def test_corrupted_jpeg_header_is_rejected():
  data = bytearray(jpeg(blocks(LAYOUT, 16)))
  sof = data.index(b'\xff\xc0')
  data[sof + 5:sof + 9] = b'\x00\x00\x00\x00'  # height and width 0
  error = decode_error(bytes(data))
  # Pillow's JPEG plugin refuses the header: a JPEG still, a damaged one.
  assert (error.code, error.reason) == (
      'corrupt', f'JPEG image header is damaged or cut short ({len(data)} B): '
      'SyntaxError: not identified by this driver')


@pytest.mark.parametrize('formats', [ImageSpec().formats, None], ids=['default', 'all'])
def test_a_tiff_cut_before_its_directory_is_corrupt_not_a_non_image(formats):
  # libtiff writes the image file directory last: cut anywhere before it, no
  # plugin opens the file, which had made it 'not_an_image'.
  data = io.BytesIO()
  noise(50, 40).save(data, 'TIFF', compression='tiff_lzw')
  data = data.getvalue()
  assert int.from_bytes(data[4:8], 'little') > len(data) // 2  # the directory's offset
  error = decode_error(data[:len(data) // 2], ImageSpec(formats=formats))
  assert (error.code, error.reason) == (
      'corrupt', f'TIFF image header is damaged or cut short ({len(data) // 2 / 1024:.0f} KB): '
      'SyntaxError: Missing dimensions')


@pytest.fixture
def no_decoding(monkeypatch):
  """Fails the test if any image's pixel data is decoded."""
  def refuse(self):
    raise AssertionError(f'decoded a {self.format} of size {self.size}')
  monkeypatch.setattr(ImageFile.ImageFile, 'load', refuse)


@pytest.mark.parametrize('entry', sorted(ENTRY_POINTS))
@pytest.mark.parametrize('width, height', [
    (10_000, 10_000),  # above the default max_pixels (89,478,485)
    (100_000, 100_000),  # also above twice Pillow's own limit
    (1, 2**31 - 1),  # one very tall column
])
def test_decompression_bomb_header_is_rejected_without_decoding(
    no_decoding, entry, width, height):
  function, spec = ENTRY_POINTS[entry]
  data = png_header_only(width, height)
  assert len(data) < 10_000
  error = decode_error(data, spec, function)
  assert error.code == 'too_many_pixels'
  assert 'decompression bomb' in error.reason
  assert str(width * height) in error.reason  # the declared pixel count


@pytest.mark.parametrize('entry', sorted(ENTRY_POINTS))
def test_real_image_above_max_pixels_is_rejected_without_decoding(
    no_decoding, entry):
  function, spec = ENTRY_POINTS[entry]
  data = jpeg(blocks(LAYOUT, 16))  # 48x32 = 1536 pixels
  spec = dataclasses.replace(spec, max_pixels=1535)
  error = decode_error(data, spec, function)
  assert error.code == 'too_many_pixels'
  assert '48x32 = 1536 pixels exceeds --max_pixels 1535' in error.reason
  assert 'not decoded' in error.reason


def test_image_exactly_at_max_pixels_is_accepted():
  data = png(blocks(LAYOUT, 16))  # 48x32 = 1536 pixels
  image = decode_pixels(data, dataclasses.replace(NATIVE, max_pixels=1536))
  assert image.size == (48, 32)


def test_an_encoding_with_no_encoder_is_refused_not_written_as_png():
  # spec.ENCODINGS is the list flags and dataset_info.json take: an encoding
  # added there alone must not reach the records as PNG bytes under its name.
  from transforms.core.image import encode
  image = Image.new('RGB', (4, 3), (200, 10, 10))
  assert encode(image, ImageSpec(encoding='png')).data[:8] == b'\x89PNG\r\n\x1a\n'
  with pytest.raises(ValueError, match="no encoder for the encoding 'webp'"):
    encode(image, ImageSpec(encoding='webp'))
