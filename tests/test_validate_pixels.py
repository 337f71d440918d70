"""validate checks a stored JPEG or PNG holds the pixels convert writes:
8-bit grey (L) or RGB. A palette, 1-bit or 16-bit PNG of the right size
and channel count passed as OK, yet the readers disagree on its pixels:
read.examples gave a palette's indices and a 1-bit image's 0/1,
read.load (tf.io.decode_png) their grey levels and 0/255."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image
import pytest

from pipeline import read
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from tests.conftest import copy_dataset
from tests.test_validate_cli import rewrite_first_record
from tests.test_validate_cli import run_validate
from transforms.core.checks import check_image

pytestmark = pytest.mark.xdist_group('converted_sample')

GREY_PNG_16 = ('--channels', '1', '--encoding', 'png', '--height', '16', '--width', '16')
PIXELS = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20


def _saved(image: Image.Image, fmt: str = 'PNG') -> bytes:
  out = io.BytesIO()
  image.save(out, format=fmt)
  return out.getvalue()


def _palette(pixels: np.ndarray) -> Image.Image:
  """A palette PNG whose index i is the colour (255 - i, 0, i): its indices
  are not its grey levels."""
  image = Image.fromarray(pixels, 'L').convert('P')
  image.putpalette([v for i in range(256) for v in (255 - i, 0, i)])
  return image


def _png_16bit_rgb(pixels: np.ndarray) -> bytes:
  """A 16-bit RGB PNG (Pillow writes none; it reads one as 8-bit RGB)."""
  rgb = np.stack([pixels] * 3, axis=-1).astype('>u2') * 257
  rows = b''.join(b'\x00' + row.tobytes() for row in rgb)

  def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack('>I', len(body)) + kind + body + struct.pack(
        '>I', zlib.crc32(kind + body))

  height, width = pixels.shape
  return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 16, 2,
                                                           0, 0, 0))
          + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))


GREY = Image.fromarray(PIXELS, 'L')
CASES = [
    # (stored bytes, encoding, channels, problem details)
    (_saved(GREY), 'png', 1, []),
    (_saved(GREY, 'JPEG'), 'jpeg', 1, []),
    (_saved(GREY.convert('RGB')), 'png', 3, []),
    (_saved(_palette(PIXELS)), 'png', 1,
     ['image is a PNG of pixel mode P, not the 8-bit grey (L) convert writes']),
    (_saved(GREY.convert('1')), 'png', 1,
     ['image is a PNG of pixel mode 1, not the 8-bit grey (L) convert writes']),
    (_saved(Image.fromarray(PIXELS.astype(np.uint16) * 257)), 'png', 1,
     ['image is a PNG of pixel mode I;16, not the 8-bit grey (L) convert writes']),
    (_png_16bit_rgb(PIXELS), 'png', 3,
     ['image is a 16-bit RGB PNG, not the 8-bit one convert writes']),
]


@pytest.mark.parametrize('data,encoding,channels,details', CASES,
                         ids=['grey', 'grey-jpeg', 'rgb', 'palette', '1-bit', '16-bit-grey',
                              '16-bit-rgb'])
def test_only_8_bit_grey_or_rgb_pixels_pass(data, encoding, channels, details):
  problems = check_image(data, encoding, 3, 4, channels)
  assert problems == [('wrong_pixel_mode', detail) for detail in details]


def test_a_palette_png_in_a_grey_dataset_is_a_problem(converted_sample, tmp_path):
  out = copy_dataset(converted_sample(*GREY_PNG_16)[1], tmp_path)
  assert run_validate(out)[0] == EXIT_OK
  shown = []

  def to_palette(features):
    stored = Image.open(io.BytesIO(features['image/encoded'][1][0]))
    palette = _palette(np.asarray(stored))
    shown.append(np.asarray(palette.convert('L')))  # as tf.io.decode_png(channels=1) gives it
    features['image/encoded'] = ('bytes', [_saved(palette)])

  shard = rewrite_first_record(out, to_palette)
  # read.examples gives the palette's indices, not the grey levels it shows
  assert (next(read.examples(str(out), 'train'))['image'][..., 0] != shown[0]).any()
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'wrong_pixel_mode': 1})
  assert [(p['file'], p['record'], p['detail']) for p in report['problems']] == [
      (shard, 0, 'image is a PNG of pixel mode P, not the 8-bit grey (L) convert writes')]
