"""Records of TFRecord files convert did not write (inspect --files): what
their raw pixels must match, and their image, label and class text as
guessed from their features."""

from __future__ import annotations

import glob
import io
from typing import Optional

import numpy as np
from PIL import Image

from pipeline.errors import UsageError
from transforms.core import decoders
from transforms.core import image as images
from transforms.core import paths
from transforms.core import records


def matching_files(pattern: str) -> list:
  """The files `pattern` matches, sorted: a gs:// or s3:// pattern through
  Beam's filesystems (Python's glob matched no URL: "matches no file")."""
  if not paths.is_remote(pattern):
    return sorted(glob.glob(pattern))
  from transforms import filesystem  # imports Beam: only for gs://, s3://
  try:  # inspect takes no Beam options: filesystem.beam_options() gives empty ones
    return [path for path, _ in filesystem.FileAccess().match(pattern)]
  except filesystem.read_errors() as error:  # BeamIOError: no bucket, no credentials
    raise UsageError(f'--files {pattern!r} cannot be listed: {error}')


def raw_size_problem(image_name: str, data: bytes, args, where: str) -> Optional[str]:
  """The usage error of raw pixels (neither JPEG nor PNG) that --height,
  --width and --channels do not describe; None when they do."""
  if not args.height or not args.width:
    return (f'{where}: {image_name!r} holds {len(data)} bytes that are neither JPEG nor PNG: '
            f'give --height, --width and --channels of the raw pixels')
  expected = args.height * args.width * args.channels
  if len(data) != expected:
    return (f'{where}: {image_name!r} has {len(data)} bytes, --height {args.height} --width '
            f'{args.width} --channels {args.channels} make {expected}')
  return None


def listed_size_problem(features: dict, args, where: str) -> Optional[str]:
  """A listed record's raw pixels against a size given (--height or --width):
  raw_size_problem's error, None when it matches, or when no size is given
  (the listing needs none) or the record holds no raw image feature."""
  if not args.height and not args.width:
    return None
  image_name = records.guess_feature(features, args.image_feature, records.IMAGE_FEATURES)
  if image_name is None or features[image_name][0] != 'bytes_list' or not features[image_name][1]:
    return None
  data = features[image_name][1][0]
  if decoders.sniff_encoding(data) is not None:
    return None
  return raw_size_problem(image_name, data, args, where)


def pixels(data: bytes, encoding: str, channels: int) -> np.ndarray:
  """JPEG or PNG bytes as uint8 H x W x channels, in convert's way
  (image.to_mode): decoders.decode_image's plain Pillow convert clipped a
  16-bit PNG at 255 (a picture almost all white; with --channels 1 its
  values wrapped around) and showed transparent pixels' hidden colour."""
  try:
    picture = Image.open(io.BytesIO(data))
    picture.load()
  except Exception as error:  # any decoder failure: this record is skipped, as decode_image's
    raise decoders.RecordError(f'{encoding} image does not decode: {type(error).__name__}: '
                               f'{error}')
  picture = images.to_mode(picture, channels)
  return np.asarray(picture, np.uint8).reshape(picture.height, picture.width, channels)


def foreign_image(features: dict, args, where: str) -> tuple:
  """(pixels, label or None, class text) of a record of a foreign file."""
  image_name = records.guess_feature(features, args.image_feature, records.IMAGE_FEATURES)
  if image_name is None or features[image_name][0] != 'bytes_list':
    raise UsageError(f'{where}: no image feature (tried '
                       f'{args.image_feature or ", ".join(records.IMAGE_FEATURES)}); '
                       f'name it with --image_feature')
  if not features[image_name][1]:  # an empty BytesList: an IndexError traceback, exit 1
    raise decoders.RecordError(f'{image_name!r} holds no value')
  data = features[image_name][1][0]
  encoding = decoders.sniff_encoding(data)
  if encoding is None:
    problem = raw_size_problem(image_name, data, args, where)
    if problem:
      raise UsageError(problem)
  image = (pixels(data, encoding, args.channels) if encoding else
           decoders.decode_image(data, 'raw', args.height, args.width, args.channels))
  text = features.get('image/class/text', (None, [b'']))[1]
  return image, foreign_label(features, args), text[0].decode('utf-8', 'replace') if text else ''


def foreign_label(features: dict, args) -> Optional[int]:
  """The record's label id (the first of several), or None: no label feature,
  one not int64, or an empty Int64List (its [0] was an IndexError traceback)."""
  label_name = records.guess_feature(features, args.label_feature, records.LABEL_FEATURES)
  if label_name is None or features[label_name][0] != 'int64_list':
    return None
  values = features[label_name][1]
  return values[0] if values else None
