"""A converted dataset's records as plain values: decoded to numpy, no TensorFlow.

What `pipeline.read.examples` and `pipeline.look` share: from one
serialized Example and dataset_info.json to a dict of `image` (uint8 H x W x C),
`label`, `key`, `class_text` and every extra feature; and, for files convert did
not write, guessing which feature holds the image and which the label.
"""

from __future__ import annotations

import io
from typing import Optional

import numpy as np
from PIL import Image

from transforms.core.example_proto import parse_example
from transforms.core.spec import FEATURE_TABLES

# Guesses for files convert did not write (the tutorial's loop writes img_raw/label).
IMAGE_FEATURES = ('image/encoded', 'img_raw', 'image')
LABEL_FEATURES = ('image/class/label', 'label')
_NUMPY_DTYPES = {'int64': np.int64, 'float32': np.float32, 'string': object}


class RecordError(Exception):
  """One record cannot be turned into an example (it is skipped, not fatal)."""


def extra_feature_names(info: dict) -> list:
  """The dataset's --extra_features: feature_spec names its schema's table lacks."""
  table = {f.name for f in FEATURE_TABLES[info['schema']].features}
  return [name for name in info['feature_spec'] if name not in table]


def sniff_encoding(data: bytes) -> Optional[str]:
  """'jpeg' or 'png' from the bytes' signature; None for anything else (raw)."""
  if data[:3] == b'\xff\xd8\xff':
    return 'jpeg'
  if data[:8] == b'\x89PNG\r\n\x1a\n':
    return 'png'
  return None


def decode_image(data: bytes, encoding: str, height: Optional[int], width: Optional[int],
                 channels: int) -> np.ndarray:
  """Stored image bytes -> uint8 array H x W x C; RecordError if they do not fit."""
  if encoding == 'raw':
    if not height or not width or len(data) != height * width * channels:
      raise RecordError(f'raw image has {len(data)} bytes, expected {height}x{width}x'
                        f'{channels} = {(height or 0) * (width or 0) * channels}')
    return np.frombuffer(data, np.uint8).reshape(height, width, channels)
  try:
    image = Image.open(io.BytesIO(data))
    image.load()
  except Exception as error:  # any decoder failure: this record is skipped
    raise RecordError(f'{encoding} image does not decode: {type(error).__name__}: {error}')
  if len(image.getbands()) != channels:
    image = image.convert('RGB' if channels == 3 else 'L')
  return np.asarray(image, np.uint8).reshape(image.height, image.width, channels)


def _scalar(features: dict, name: str):
  if name not in features or len(features[name][1]) != 1:
    raise RecordError(f'feature {name!r} is missing or not a single value')
  return features[name][1][0]


def is_multi_label(info: dict) -> bool:
  """Whether the dataset was written with --multi_label (its label is a list)."""
  table = FEATURE_TABLES[info['schema']]
  return info['feature_spec'].get(table.label, {}).get('shape') == [None]


def to_example(data: bytes, info: dict, decode: bool = True) -> dict:
  """A serialized Example of a converted dataset -> {image, label, key,
  class_text, extras...}: image uint8 H x W x C (encoded bytes if not
  decode), label int, key and class_text str ('' for --schema seed, which has
  no key), extra features as numpy arrays (bytes ones of dtype object). With
  --multi_label, label is an int64 array of ids and class_text a list of str."""
  try:
    features = parse_example(data)
  except Exception as error:  # DecodeError: not an Example
    raise RecordError(f'not a tf.train.Example: {error}')
  image_info = info['image']
  names = info['label_map']
  table = FEATURE_TABLES[info['schema']]
  if is_multi_label(info):
    label = np.array(features.get(table.label, (None, []))[1], np.int64)
    class_text = [names[i] if 0 <= i < len(names) else '' for i in label]
  else:
    label = int(_scalar(features, table.label))
    class_text = names[label] if 0 <= label < len(names) else ''
  key = _scalar(features, table.key).decode('utf-8', 'replace') if table.key else ''
  if info['schema'] == 'seed':
    encoded = _scalar(features, 'img_raw')
    height, width = image_info['height'], image_info['width']
    channels, encoding = image_info['channels'], 'raw'
  else:
    encoded = _scalar(features, 'image/encoded')
    height, width = _scalar(features, 'image/height'), _scalar(features, 'image/width')
    channels, encoding = _scalar(features, 'image/channels'), image_info['encoding']
  example = {
      'image': decode_image(encoded, encoding, height, width, channels) if decode else encoded,
      'label': label,
      'key': key,
      'class_text': class_text,
  }
  for name in extra_feature_names(info):
    values = features.get(name, (None, []))[1]
    spec = info['feature_spec'][name]
    shape = [-1 if n is None else n for n in spec['shape']]  # [] one value, [null, N] k x N
    try:
      example[name] = np.array(values, _NUMPY_DTYPES[spec['dtype']]).reshape(shape)
    except ValueError:
      raise RecordError(f'{name} has {len(values)} values, its shape is {spec["shape"]}')
  return example


def guess_feature(features: dict, wanted: Optional[str], candidates: tuple) -> Optional[str]:
  """The feature named `wanted`, else the first of `candidates` present."""
  if wanted:
    return wanted if wanted in features else None
  return next((name for name in candidates if name in features), None)


def describe_features(features: dict) -> list:
  """[(name, kind, number of values, length of the first value or None)]."""
  rows = []
  for name, (kind, values) in sorted(features.items()):
    first = len(values[0]) if kind == 'bytes_list' and values else None
    rows.append((name, kind or 'empty', len(values), first))
  return rows


__all__ = ['RecordError', 'decode_image', 'describe_features', 'extra_feature_names',
           'guess_feature', 'is_multi_label', 'sniff_encoding', 'to_example']
