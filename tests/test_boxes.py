"""Boxes and masks move exactly as the pixels do (transforms.core.boxes), for
every --resize_mode and EXIF orientation: a filled rectangle drawn into the
source, converted, lands where the transformed box says, within one pixel."""

import io

from hypothesis import HealthCheck
from hypothesis import assume
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
from PIL import Image
from PIL import ImageDraw
import pytest

from transforms.core import boxes
from transforms.core.image import process_image
from transforms.core.orientations import orient_box
from transforms.core.spec import ImageSpec

FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _transform_box(box: tuple, stored: tuple, orientation: int, frame: str,
                   spec: ImageSpec) -> tuple:
  """A box in the annotation's frame (STORED or EXIF pixels) -> (the box on
  the output image, the fraction of its area kept), by the geometry of
  transforms.core.boxes, for an image stored at `stored` (width, height)."""
  if frame == boxes.STORED:
    box = orient_box(box, stored, orientation)
  return boxes.place_box(box, boxes.placement(boxes.oriented_size(stored, orientation), spec))


def _png(pixels: Image.Image, orientation: int, fmt: str = 'PNG') -> bytes:
  """PNG (EXIF's orientation) or TIFF (its Orientation tag, which Pillow
  itself turns the pixels by as it loads them)."""
  buffer = io.BytesIO()
  if fmt == 'TIFF':
    pixels.save(buffer, 'TIFF', **({'tiffinfo': {0x0112: orientation}} if orientation != 1 else {}))
    return buffer.getvalue()
  exif = Image.Exif()
  if orientation != 1:
    exif[0x0112] = orientation
  pixels.save(buffer, 'PNG', exif=exif)
  return buffer.getvalue()


def _found_box(pixels: np.ndarray):
  """The pixel box (x0, y0, x1, y1) of the bright pixels, None if none."""
  ys, xs = np.nonzero(pixels > 127)
  if not len(xs):
    return None
  return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


@st.composite
def cases(draw, largest=64, smallest_out=12):
  width, height = draw(st.integers(12, largest)), draw(st.integers(12, largest))
  x0, y0 = draw(st.integers(0, width - 4)), draw(st.integers(0, height - 4))
  x1, y1 = draw(st.integers(x0 + 4, width)), draw(st.integers(y0 + 4, height))
  mode = draw(st.sampled_from(('stretch', 'pad', 'crop', 'none')))
  out = (draw(st.integers(smallest_out, 48)), draw(st.integers(smallest_out, 48)))
  return (width, height), (x0, y0, x1, y1), draw(st.integers(1, 8)), mode, out


def _spec(mode, out):
  return ImageSpec(height=out[1], width=out[0], channels=1, encoding='raw',
                   resize_mode=mode)


def _big_enough(box, spec):
  # A box thinner than two output pixels blurs below the threshold.
  return box[2] - box[0] >= 2 and box[3] - box[1] >= 2


@FAST
@given(cases(), st.sampled_from(boxes.ANNOTATION_ORIENTATIONS), st.sampled_from(('PNG', 'TIFF')))
def test_a_drawn_rectangle_lands_on_its_transformed_box(case, frame, fmt):
  """A TIFF too: Pillow turns it as it opens it, and its size was taken as
  the stored one (boxes on its stored pixels never turned)."""
  stored, box, orientation, mode, out = case
  spec = _spec(mode, out)
  rotated = boxes.oriented_size(stored, orientation)
  # the annotation's frame: a box on the stored pixels, or on the rotated image
  if frame == boxes.EXIF:
    assume(box[2] <= rotated[0] and box[3] <= rotated[1])
  source = Image.new('L', stored if frame == boxes.STORED else rotated, 0)
  ImageDraw.Draw(source).rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=255)
  if frame == boxes.EXIF:  # stored pixels are the rotated image turned back
    inverse = {5: 5, 6: 8, 8: 6, 7: 7}.get(orientation, orientation)
    source = source.transpose(boxes._TRANSPOSE_METHODS[inverse]) if orientation != 1 else source
  encoded = process_image(_png(source, orientation, fmt), spec)
  moved, kept = _transform_box(box, stored, orientation, frame, spec)
  assume(kept > 0.5 and _big_enough(moved, spec))
  pixels = np.frombuffer(encoded.data, np.uint8).reshape(encoded.height, encoded.width)
  found = _found_box(pixels)
  assert found is not None
  assert np.allclose(found, moved, atol=1.0), (found, moved)
  assert encoded.source_size == stored and encoded.orientation == orientation


@FAST
@given(cases(largest=160, smallest_out=8), st.sampled_from(('raw', 'jpeg')))
# a 1/2-scale decode (52x58) once letterboxed by its own rounding: 1 px low
@example(case=((103, 115), (0, 0, 16, 21), 1, 'pad', (13, 16)), encoding='raw')
def test_a_rectangle_in_a_jpeg_lands_on_its_box_on_every_path(case, encoding):
  # A JPEG source takes the other paths that write an image: a reduced-scale
  # (draft) decode when the output is much smaller, and with --resize_mode
  # none and JPEG output its bytes passed through. Each places the boxes with
  # the one geometry, placement_of (the pass-through frame was once 1/8 size).
  stored, box, orientation, mode, out = case
  spec = ImageSpec(height=out[1], width=out[0], channels=1, encoding=encoding,
                   resize_mode=mode)
  source = Image.new('L', stored, 0)
  ImageDraw.Draw(source).rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=255)
  exif = Image.Exif()
  if orientation != 1:
    exif[0x0112] = orientation
  buffer = io.BytesIO()
  source.save(buffer, 'JPEG', quality=95, exif=exif)
  encoded = process_image(buffer.getvalue(), spec)
  assert encoded.source_size == stored and encoded.orientation == orientation
  where = boxes.placement_of(encoded, spec)  # refuses a frame not the written size
  moved, kept = boxes.place_box(orient_box(box, stored, orientation), where)
  if mode == 'none' and encoding == 'jpeg' and orientation == 1:
    assert encoded.data == buffer.getvalue()  # passed through
  assume(kept > 0.5 and _big_enough(moved, spec))
  if encoding == 'raw':
    pixels = np.frombuffer(encoded.data, np.uint8).reshape(encoded.height, encoded.width)
  else:
    pixels = np.asarray(Image.open(io.BytesIO(encoded.data)).convert('L'))
  assert pixels.shape == (encoded.height, encoded.width)
  found = _found_box(pixels)
  assert found is not None
  assert np.allclose(found, moved, atol=1.0), (found, moved)


@FAST
@given(cases())
def test_a_mask_moves_with_its_box(case):
  stored, box, orientation, mode, out = case
  spec = _spec(mode, out)
  mask = Image.new('L', stored, 0)
  ImageDraw.Draw(mask).rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=1)
  moved, kept = _transform_box(box, stored, orientation, boxes.STORED, spec)
  assume(kept > 0.5 and _big_enough(moved, spec))
  placed = np.asarray(boxes.transform_mask(mask, orientation, boxes.STORED, spec))
  assert set(np.unique(placed)) <= {0, 1}
  assert placed.shape == (spec.height, spec.width) if mode != 'none' else True
  assert np.allclose(_found_box(placed * 255), moved, atol=1.0)


@pytest.mark.parametrize('recorded, orientation, default, frame', [
    ((40, 30), 6, 'exif', 'stored'),     # the stored size: stored pixels
    ((30, 40), 6, 'stored', 'exif'),     # the rotated size: the rotated image
    ((40, 40), 6, 'stored', 'stored'),   # neither: the flag
    (None, 6, 'exif', 'exif'),           # nothing recorded: the flag
    ((40, 30), 3, 'exif', 'exif'),       # a half turn keeps the size: the flag
])
def test_the_annotation_frame_follows_the_recorded_size(recorded, orientation, default,
                                                        frame):
  assert boxes.annotation_frame(recorded, (40, 30), orientation, default) == frame


def test_crop_keeps_the_visible_fraction_of_a_box():
  spec = ImageSpec(height=10, width=10, resize_mode='crop')
  # a 20x10 source: columns 5..15 are kept; a box over 0..10 keeps half
  moved, kept = _transform_box((0, 0, 10, 10), (20, 10), 1, boxes.STORED, spec)
  assert moved == (0.0, 0.0, 5.0, 10.0) and kept == 0.5
  assert boxes.normalized(moved, (10, 10)) == (0.0, 0.0, 1.0, 0.5)
