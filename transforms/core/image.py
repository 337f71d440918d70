"""Decode, orient, convert, resize and encode one image: plain functions."""

from __future__ import annotations

import dataclasses
import io
import re
import warnings

from PIL import Image
from PIL import ImageOps
from PIL import UnidentifiedImageError

from transforms.core import bit_depth
from transforms.core import orientations
from transforms.core import png_keys
from transforms.core.pickling import cheap_pickle
from transforms.core.rejects import STAGE_DECODE
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec

FILTERS = {name: getattr(Image.Resampling, name.upper())
           for name in ('bilinear', 'bicubic', 'lanczos', 'nearest')}
_HIGH_BIT_DEPTH_MODES = ('I;16', 'I;16L', 'I;16B', 'I;16N', 'I', 'F')
_ALPHA_MODES = ('RGBA', 'LA', 'PA', 'RGBa', 'La')
# What Image.open reads to pick a format: every plugin's signature check sees
# this much of the file (check_signature looks at no more, before reading it all).
HEADER_BYTES = 16
# What Pillow's TIFF plugin says of a header it read whole whose samples
# (16-bit grey + alpha, 32-bit float RGB, ...) it has no mode for.
_NO_MODE = 'unknown pixel mode'
# JPEG decoding at a reduced DCT scale keeps at least this many source pixels
# per output pixel (the same gap Pillow's thumbnail() uses).
_DRAFT_GAP = 2


@cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class EncodedImage:
  data: bytes
  height: int
  width: int
  channels: int
  format: str  # raw | jpeg | png
  # The source as stored (width, height) and its EXIF orientation: what moves
  # a detection dataset's boxes and masks with the pixels (transforms.core.boxes).
  source_size: tuple = ()
  orientation: int = 1


def _decode_error(code: str, reason: str) -> RowError:
  return RowError(STAGE_DECODE, code, reason)


def _size_text(num_bytes: int) -> str:
  return f'{num_bytes / 1024:.0f} KB' if num_bytes >= 1024 else f'{num_bytes} B'


def prepare_pillow(max_pixels: int) -> None:
  """Once per worker, before images are opened on several threads: loads
  Pillow's format plugins (their lazy loading is not thread-safe) and raises
  Pillow's own decompression-bomb limit, a process-wide setting, to
  --max_pixels when that is larger (open_image enforces --max_pixels itself,
  from the header, before decoding). Never lowers it."""
  Image.init()
  if Image.MAX_IMAGE_PIXELS is not None and max_pixels > Image.MAX_IMAGE_PIXELS:
    Image.MAX_IMAGE_PIXELS = max_pixels
  # Pillow warns about images it will still open; open_image rejects them.
  warnings.filterwarnings('ignore', category=Image.DecompressionBombWarning)


def identify_format(data: bytes) -> str | None:
  """The Pillow format whose signature check accepts these bytes, without
  parsing them (no plugin's decoder runs); None if none does."""
  prefix = data[:HEADER_BYTES]
  for name in Image.ID:
    accept = Image.OPEN[name][1]
    if accept is None:  # a plugin without a signature check cannot tell
      continue
    try:
      if accept(prefix):
        return name
    except Exception:  # (its check failed: not this format)
      continue
  return None


def _accepts(name: str, prefix: bytes):
  """True if format `name`'s signature check accepts `prefix`, False if it
  refuses it, None if it cannot tell (no check: any bytes may be one)."""
  accept = Image.OPEN[name][1]
  if accept is None:
    return None
  try:
    # A string is Pillow's "not this format, but say why" (Image.open goes on).
    found = accept(prefix)
  except Exception:
    return None  # its check failed: open_image says what Image.open makes of it
  return bool(found) and not isinstance(found, str)


def check_signature(prefix: bytes, formats: tuple | None, num_bytes: int) -> None:
  """Refuses a file from its first HEADER_BYTES bytes, before the rest is
  read: RowError not_an_image, or format_not_allowed when only a format left
  out of `formats` (None: every format) knows them, as open_image would say.
  Lets through what some allowed format accepts, what an allowed format
  without a signature check (TGA, ...) might be, and an empty file
  (open_image says empty_file). num_bytes: the file's size, for the message."""
  if not prefix:
    return
  Image.init()  # every plugin registered (at once after prepare_pillow)
  allowed = Image.ID if formats is None else [f for f in formats if f in Image.OPEN]
  if any(_accepts(name, prefix) is not False for name in allowed):
    return
  found = identify_format(prefix) if formats is not None else None
  if found is not None and found not in formats:
    raise _decode_error('format_not_allowed', f'{found} image: format not in --formats '
                        f'({", ".join(formats)})')
  raise _not_an_image(prefix, num_bytes)


# Formats users meet that Pillow decodes none of, by their first bytes: named
# in the not_an_image reason (an iPhone's HEIC said only "starts with
# b'\x00\x00\x00\x18ftyp'"). The HEIF brands of HEVC images only: mif1
# and msf1, also AVIF's, are Pillow's AVIF plugin's to open (or refuse).
_HEIF_BRANDS = (b'heic', b'heix', b'hevc', b'hevx', b'heim', b'heis')


def _not_pillows(prefix: bytes) -> str:
  """'' or the name of the format these first bytes begin, with a comma."""
  if prefix[4:8] == b'ftyp' and prefix[8:12] in _HEIF_BRANDS:
    kind = 'an HEIC/HEIF image'
  elif prefix.startswith((b'\xff\x0a', b'\x00\x00\x00\x0cJXL ')):
    kind = 'a JPEG XL image'
  elif prefix.startswith(b'%PDF-'):
    kind = 'a PDF document'
  else:
    return ''
  return f'{kind}, which Pillow does not decode: convert it to JPEG or PNG first; '


def _not_an_image(data: bytes, num_bytes: int) -> RowError:
  return _decode_error('not_an_image', f'not an image Pillow can read ({_not_pillows(data)}'
                       f'{_size_text(num_bytes)}, starts with {data[:8]!r})')


def _bomb_pixels(error: Exception) -> str:
  """The pixel count in Pillow's DecompressionBombError message, if it has one."""
  found = re.search(r'\((\d+) pixels\)', str(error))
  return f'{int(found.group(1))} pixels' if found else 'more pixels'


def refuse_empty(data: bytes) -> None:
  """decode/empty_file for a file of no bytes (opened, or only hashed)."""
  if not data:
    raise _decode_error('empty_file', 'file is empty (0 bytes)')


def open_image(data: bytes, max_pixels: int, formats: tuple | None = None) -> Image.Image:
  """Opens the image header; refuses empty files, non-images, formats not in
  `formats` (None: every format) and bombs."""
  refuse_empty(data)
  try:
    # Only the allowed formats' plugins ever parse the bytes.
    image = Image.open(io.BytesIO(data), formats=formats)
  except Image.DecompressionBombError as error:
    raise _decode_error('too_many_pixels', f'decompression bomb: {_bomb_pixels(error)} '
                        f'exceeds --max_pixels {max_pixels}; not decoded')
  except UnidentifiedImageError:
    found = identify_format(data)
    if found is not None and formats is not None and found not in formats:
      raise _decode_error('format_not_allowed', f'{found} image: format not in --formats '
                          f'({", ".join(formats)})')
    if found is not None:  # its signature, and a header its plugin refuses
      refusal = _refusal(found, data)
      if _NO_MODE in refusal:  # a whole header whose sample layout Pillow has no mode for
        raise _decode_error('unsupported', f'an image variant Pillow cannot read: {found} '
                            f'samples Pillow has no mode for ({refusal})')
      raise _decode_error('corrupt', f'{found} image header is damaged or cut short '
                          f'({_size_text(len(data))}): {refusal}')
    raise _not_an_image(data, len(data))
  except (OSError, SyntaxError, ValueError, EOFError) as error:
    if 'unsupported' in str(error).lower():
      # a valid variant (a BMP compression, ...) that Pillow does not decode
      raise _decode_error('unsupported', f'an image variant Pillow cannot read: {error}')
    raise _decode_error('corrupt', f'image header is corrupt: {error}')
  width, height = image.size
  if width * height > max_pixels:
    raise _decode_error(
        'too_many_pixels', f'decompression bomb: {width}x{height} = '
        f'{width * height} pixels exceeds --max_pixels {max_pixels}; not decoded')
  if width == 0 or height == 0:
    raise _decode_error('corrupt', f'image has no pixels ({width}x{height})')
  return image


def _refusal(name: str, data: bytes) -> str:
  """Why format `name`'s plugin refuses these bytes (Image.open says only
  that no plugin took them: a TIFF cut before its IFD, which libtiff writes
  last, had been 'not an image')."""
  try:
    Image.OPEN[name][0](io.BytesIO(data), '')
  except Exception as error:  # (any plugin error: what it says is the reason)
    return f'{type(error).__name__}: {error}'
  return 'Pillow cannot open it'


def load_pixels(image: Image.Image, num_bytes: int,
                draft_size: tuple[int, int] | None = None) -> Image.Image:
  """Decodes the pixels (first frame), at a reduced JPEG scale if allowed."""
  try:
    if draft_size and image.format in ('JPEG', 'MPO'):  # MPO: a JPEG with an MPF preview
      image.draft(None, draft_size)
    image.load()
  except (OSError, SyntaxError, ValueError, EOFError, IndexError) as error:
    text = str(error)
    if 'truncated' in text or isinstance(error, EOFError):
      raise _decode_error(
          'truncated',
          f'image file is truncated (read {_size_text(num_bytes)}): {text}')
    raise _decode_error('corrupt', f'image data is corrupt: {text or repr(error)}')
  return image


def _has_alpha(image: Image.Image) -> bool:
  return image.mode in _ALPHA_MODES or (
      image.mode in ('P', 'L', 'RGB', '1') and 'transparency' in image.info)


def to_mode(image: Image.Image, channels: int,
            background: tuple = (255, 255, 255)) -> Image.Image:
  """Converts any Pillow mode to 8-bit RGB (channels=3) or L (channels=1).

  Transparent pixels are composited over `background`.
  """
  if image.mode in _HIGH_BIT_DEPTH_MODES:
    image = bit_depth.to_8bit(image)
  if _has_alpha(image):
    rgba = image.convert('RGBA')
    canvas = Image.new('RGBA', rgba.size, tuple(background) + (255,))
    image = Image.alpha_composite(canvas, rgba)
  target = 'RGB' if channels == 3 else 'L'
  if image.mode not in ('RGB', 'L'):
    image = image.convert('RGB')
  return image if image.mode == target else image.convert(target)


def resize(image: Image.Image, spec: ImageSpec, source_size: tuple | None = None,
           frame: tuple | None = None) -> Image.Image:
  """Resizes to spec.width x spec.height according to spec.resize_mode.

  source_size is the oriented source's size and frame the box it spans in
  `image` (both default to the image itself). They differ after a reduced-scale
  JPEG decode; the geometry (crop box, letterbox) is then still computed on the
  source's size, so that it is the one transforms.core.boxes.placement gives
  (a 103x115 JPEG padded to 13x16 once letterboxed 1 px lower than its boxes).
  """
  if not spec.fixed_size:
    return image
  size = (spec.width, spec.height)
  source_size = tuple(source_size or image.size)
  frame = tuple(frame or (0, 0) + image.size)
  if image.size == size and frame == (0, 0) + size:
    return image
  resample = FILTERS[spec.resize_filter]
  if spec.resize_mode == 'stretch':
    return image.resize(size, resample, box=frame)
  if spec.resize_mode == 'crop':
    return image.resize(size, resample, box=_within(
        centre_crop_box(source_size, size), source_size, frame))
  # pad: keep the aspect ratio, letterbox with zeros (as tf.image.resize_with_pad,
  # but the resized size is rounded where TF floors it: up to 1 px apart; boxes
  # follow these pixels, boxes.placement)
  inner, offset = letterbox(source_size, size)
  canvas = Image.new(image.mode, size, 0)
  canvas.paste(image.resize(inner, resample, box=frame), offset)
  return canvas


def _within(box: tuple, source_size: tuple, frame: tuple) -> tuple:
  """A box on the source (of source_size) -> the same box in the pixels where
  the source spans `frame`."""
  scale_x = (frame[2] - frame[0]) / source_size[0]
  scale_y = (frame[3] - frame[1]) / source_size[1]
  return (frame[0] + box[0] * scale_x, frame[1] + box[1] * scale_y,
          frame[0] + box[2] * scale_x, frame[1] + box[3] * scale_y)


def letterbox(src: tuple[int, int], dst: tuple[int, int]) -> tuple:
  """--resize_mode pad: (the resized source's size, where it is pasted)."""
  src_w, src_h = src
  scale = min(dst[0] / src_w, dst[1] / src_h)
  inner = (max(1, round(src_w * scale)), max(1, round(src_h * scale)))
  return inner, ((dst[0] - inner[0]) // 2, (dst[1] - inner[1]) // 2)


def centre_crop_box(src: tuple[int, int], dst: tuple[int, int]):
  src_w, src_h = src
  dst_w, dst_h = dst
  if src_w * dst_h > src_h * dst_w:  # source is wider: trim left and right
    crop_w = src_h * dst_w / dst_h
    return ((src_w - crop_w) / 2, 0, (src_w + crop_w) / 2, src_h)
  crop_h = src_w * dst_h / dst_w
  return (0, (src_h - crop_h) / 2, src_w, (src_h + crop_h) / 2)


def encode(image: Image.Image, spec: ImageSpec) -> EncodedImage:
  """Encodes the final pixels as raw bytes, JPEG or PNG."""
  if spec.encoding == 'raw':
    data = image.tobytes()
  else:
    buffer = io.BytesIO()
    # Else Pillow writes what image.info kept of the source: a PNG its ICC
    # profile (a grey PNG got an RGB one), a JPEG its comment (a JPEG's COM, a GIF's).
    if spec.encoding == 'jpeg':
      image.save(buffer, 'JPEG', quality=spec.jpeg_quality, comment=b'')
    elif spec.encoding == 'png':
      image.save(buffer, 'PNG', icc_profile=None)
    else:  # an encoding added to spec.ENCODINGS alone would have been written as PNG
      raise ValueError(f'no encoder for the encoding {spec.encoding!r}')
    data = buffer.getvalue()
  width, height = image.size
  return EncodedImage(data, height, width, spec.channels, spec.encoding)


def _draft_size(spec: ImageSpec, transposed: bool):
  if not spec.fixed_size:
    return None
  size = (spec.width * _DRAFT_GAP, spec.height * _DRAFT_GAP)
  return size[::-1] if transposed else size


def _can_pass_through(image: Image.Image, spec: ImageSpec, turn: int) -> bool:
  return (spec.resize_mode == 'none' and spec.encoding == 'jpeg' and
          image.format == 'JPEG' and turn == 1 and image.mode == spec.pil_mode)


def _orientation(image: Image.Image, num_bytes: int) -> int:
  """EXIF orientation, read before decoding only where that is safe.

  A JPEG's EXIF (an MPO's too: it had been decoded whole, in 9x the time) is
  in its header, so it is read first (it picks the draft size). Other formats
  are decoded first: PNG's getexif() decodes the pixels itself, and
  orientation() would swallow a decode error, leaving a half decoded image
  that the next load() accepts as good.
  """
  if image.format not in ('JPEG', 'MPO'):
    load_pixels(image, num_bytes)
  return orientations.orientation(image)


def _oriented_pixels(image: Image.Image, num_bytes: int, spec: ImageSpec, turn: int) -> tuple:
  """-> (the decoded pixels, EXIF-oriented, in spec's mode; the box the
  source spans in them). A reduced-scale JPEG decode by 1/s gives
  ceil(size / s) pixels, of which the source spans size / s."""
  stored = image.size
  image = load_pixels(image, num_bytes, _draft_size(spec, turn in orientations.TRANSPOSED))
  scale = (getattr(image, 'decoderconfig', None) or (1,))[0] or 1
  frame = orientations.orient_box((0, 0, stored[0] / scale, stored[1] / scale), image.size, turn)
  if turn != 1:
    image = ImageOps.exif_transpose(image)
  return to_mode(image, spec.channels, spec.background), frame


def _framed(encoded: EncodedImage, stored: tuple, turn: int) -> EncodedImage:
  """The one place a written image gets the geometry its boxes and masks
  are moved with (transforms.core.boxes.placement_of): the source's size as
  its header gives it (stored pixels, before any reduced-scale decode) and
  its EXIF orientation. Every path of process_image ends here."""
  return dataclasses.replace(encoded, source_size=tuple(stored), orientation=turn)


def process_image(data: bytes, spec: ImageSpec) -> EncodedImage:
  """Source file bytes -> the encoded image an Example stores.

  Raises RowError (stage decode) for anything that is not a usable image.
  """
  image = open_image(data, spec.max_pixels, spec.formats)
  turned_at_open = orientations.turned_at_open(image)
  if turned_at_open is None:
    stored = image.size  # from the header: a draft decode below shrinks image.size
    turn = pixel_turn = _orientation(image, len(data))
  else:  # Pillow turns these pixels itself as it loads them
    (stored, turn), pixel_turn = turned_at_open, 1
  if _can_pass_through(image, spec, turn):
    # Verify the whole entropy-coded stream at 1/8 scale, keep the bytes.
    load_pixels(image, len(data), (1, 1))
    width, height = stored
    return _framed(EncodedImage(data, height, width, spec.channels, 'jpeg'), stored, turn)
  pixels, frame = _oriented_pixels(png_keys.keyed(image, data), len(data), spec, pixel_turn)
  return _framed(encode(resize(pixels, spec, orientations.oriented_size(stored, turn), frame), spec),
                 stored, turn)
