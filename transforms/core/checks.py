"""Checks of one stored feature value: plain functions the feature table in
feature_tables.py names. Each returns a list of (problem kind, detail)."""

from __future__ import annotations

import io
import re

from PIL import Image
from PIL import UnidentifiedImageError


def _text(value: bytes) -> str:
  return value.decode('utf-8', 'replace')


def check_image(data: bytes, encoding: str, height: int, width: int,
                channels: int) -> list:
  """Problems with the stored image against the expected H x W x C."""
  if height <= 0 or width <= 0:
    return [('wrong_image_size', f'image size {width}x{height} is not positive')]
  if encoding == 'raw':
    expected = height * width * channels
    if len(data) != expected:
      return [('wrong_image_size', f'raw image has {len(data)} bytes, expected '
               f'{height}x{width}x{channels} = {expected}')]
    return []
  try:
    image = Image.open(io.BytesIO(data))
    image.load()
  except UnidentifiedImageError:
    return [('undecodable_image', f'{encoding} image does not decode: not an image '
             f'Pillow can read ({len(data)} bytes, starts with {data[:8]!r})')]
  except Exception as error:  # any decoder failure is a finding, not a crash
    return [('undecodable_image', f'{encoding} image does not decode: {error}')]
  problems = png_damage(data) if image.format == 'PNG' else []
  if image.format != encoding.upper():
    problems.append(('wrong_image_format', f'image is {image.format}, expected {encoding}'))
  if image.size != (width, height):
    problems.append(('wrong_image_size', f'image decodes to {image.size[0]}x'
                     f'{image.size[1]}, expected {width}x{height}'))
  if len(image.getbands()) != channels:
    problems.append(('wrong_channels', f'image has {len(image.getbands())} channels, '
                     f'expected {channels}'))
  else:
    problems += _pixel_mode(data, image, channels)
  return problems


# The one pixel layout convert stores (image.to_mode): 8-bit grey or RGB.
_MODES = {1: 'L', 3: 'RGB'}
_LAYOUTS = {1: 'grey', 3: 'RGB'}
# A PNG's IHDR: bit depth and colour type at these bytes (after the
# signature, the chunk's length and type, width and height).
_PNG_DEPTH, _PNG_COLOUR = 24, 25
_PNG_COLOURS = {0: 'grey', 2: 'RGB', 3: 'palette', 4: 'grey + alpha', 6: 'RGBA'}


def _pixel_mode(data: bytes, image, channels: int) -> list:
  """The right number of channels, but not convert's 8-bit grey or RGB
  pixels: a palette PNG, a 1-bit or 16-bit one. The readers disagree on
  such pixels (read.examples gave a palette's indices and a 1-bit image's
  0/1, read.load's tf.io.decode_png their grey levels and 0/255), and a
  16-bit RGB PNG (which Pillow reads as 8-bit RGB) decodes to uint16 in
  readers that keep the depth."""
  if image.mode != _MODES.get(channels, image.mode):
    return [('wrong_pixel_mode', f'image is a {image.format} of pixel mode {image.mode}, '
             f'not the 8-bit {_LAYOUTS[channels]} ({_MODES[channels]}) convert writes')]
  if image.format == 'PNG' and data[12:16] == b'IHDR' and data[_PNG_DEPTH] != 8:
    colour = _PNG_COLOURS.get(data[_PNG_COLOUR], f'colour type {data[_PNG_COLOUR]}')
    return [('wrong_pixel_mode', f'image is a {data[_PNG_DEPTH]}-bit {colour} PNG, not '
             f'the 8-bit one convert writes')]
  return []


# The IEND chunk, a PNG's last 12 bytes: length 0, type, its CRC.
PNG_END = b'\x00\x00\x00\x00IEND\xaeB`\x82'


def png_damage(data: bytes) -> list:
  """What Pillow's decoding lets pass in a PNG and TensorFlow's decode_png
  (libpng) refuses: the end cut off (Pillow stops once it has every row,
  before the IDAT's CRC and the IEND chunk) and a chunk whose CRC is wrong
  (checked by verify() alone). Bytes after IEND libpng ignores, as here (a
  dataset another tool wrote may hold some). Masks are PNGs too
  (detection_checks.check_masks)."""
  if PNG_END not in data:
    return [('undecodable_image', 'png image has no IEND chunk: cut short')]
  try:
    Image.open(io.BytesIO(data)).verify()
  except Exception as error:  # any verify failure is a finding, not a crash
    return [('undecodable_image', f'png image does not decode: {error}')]
  return []


def check_format(stored: bytes, encoding: str) -> list:
  """image/format against the encoding dataset_info.json declares."""
  if _text(stored) != encoding:
    return [('wrong_image_format', f'image/format is {_text(stored)!r}, '
             f'expected {encoding!r}')]
  return []


def check_size(height: int, width: int, image) -> list:
  """image/height x width against a fixed-size ImageSpec (any size otherwise)."""
  if image.fixed_size and (height, width) != (image.height, image.width):
    return [('wrong_image_size', f'image/height x width is {height}x{width}, '
             f'expected {image.height}x{image.width}')]
  return []


def check_channels(channels: int, expected: int) -> list:
  if channels != expected:
    return [('wrong_channels', f'image/channels is {channels}, expected {expected}')]
  return []


def check_key(key: bytes, *_) -> list:
  """image/key names the record: readers' `key`, the duplicate check's and
  --split's input; convert rejects a row without one (empty_key)."""
  if not key.strip():
    return [('empty_key', 'image/key is empty')]
  return []


_SHA256 = re.compile(rb'[0-9a-f]{64}')


def check_sha256(digest: bytes, *_) -> list:
  """image/key/sha256 is the source's SHA-256 as convert writes it: 64
  lowercase hex digits (the cross-split duplicate check and --split_by
  content read it)."""
  if not _SHA256.fullmatch(digest):
    return [('bad_sha256', f'image/key/sha256 is {digest[:80]!r}, not 64 lowercase hex '
             f'digits')]
  return []


def check_label(label: int, label_map: tuple) -> list:
  if not 0 <= label < len(label_map):
    return [('label_out_of_range', f'label {label} is outside 0..{len(label_map) - 1}')]
  return []


def check_label_text(label: int, text: bytes, label_map: tuple) -> list:
  """The stored class name against the label map's (an out-of-range label is
  check_label's finding alone)."""
  if 0 <= label < len(label_map) and _text(text) != label_map[label]:
    return [('label_mismatch', f'label {label} has text {_text(text)!r}, the label map says '
             f'{label_map[label]!r}')]
  return []


def check_labels(labels: list, label_map: tuple) -> list:
  """A multi-label record's ids: at least one, each class once, each in range."""
  if not labels:
    return [('missing_label', 'image/class/label is an empty list')]
  if len(set(labels)) != len(labels):
    return [('label_mismatch', f'label ids {list(labels)} repeat a class')]
  return [problem for label in labels for problem in check_label(label, label_map)]


def check_label_texts(labels: list, texts: list, label_map: tuple) -> list:
  """A multi-label record's texts against its ids, one by one."""
  if len(texts) != len(labels):
    return [('label_mismatch', f'{len(labels)} label ids but {len(texts)} label texts')]
  return [problem for label, text in zip(labels, texts)
          for problem in check_label_text(label, text, label_map)]
