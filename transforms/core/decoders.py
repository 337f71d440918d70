"""How a reader turns one stored feature into a Python or numpy value: plain
functions the feature table in feature_tables.py names (as it names checks.py's), for
read.examples and inspect. No TensorFlow: read.load decodes with TensorFlow's
ops, from the same table.

A decoder takes (its value, the record's values, Reading) and returns the
value of its field in the reader's example. A value is as the feature's shape
holds it: a scalar's one value, a list's list (StoredValues).

numpy is imported where it is used: spec.py and feature_tables.py import
this module, and image worker processes, which import spec.py, started ~0.1 s
later with numpy
(see bit_depth._scale_to_8bit).
"""

from __future__ import annotations

import dataclasses
import io
from typing import Optional

from PIL import Image


class RecordError(Exception):
  """One record cannot be turned into an example (it is skipped, not fatal)."""


class StoredValues:
  """A parsed record's ({name: (kind, values)}) values by feature name, each
  read when asked for: a list feature's (named in `lists`) whole list, empty
  if it is missing; any other's one value, a RecordError if it has not
  exactly one."""
  __slots__ = ('_features', '_lists')

  def __init__(self, features: dict, lists):
    self._features = features
    self._lists = lists

  def __getitem__(self, name: str):
    values = self._features.get(name, (None, []))[1]
    if name in self._lists:
      return values
    if len(values) != 1:
      raise RecordError(f'feature {name!r} is missing or not a single value')
    return values[0]


@dataclasses.dataclass(frozen=True)
class Reading:
  """What decoding a record needs besides the record: dataset_info.json's
  image spec and label map, and the size features of its table."""
  encoding: str
  height: Optional[int]  # None: each record's own (--resize_mode none)
  width: Optional[int]
  channels: int
  label_map: tuple
  # the features of each record's height, width, channels (FeatureTable.size);
  # None: the size above
  size: Optional[tuple] = None
  decode: bool = True  # images to pixels; False: their stored bytes

  @classmethod
  def from_info(cls, info: dict, size: Optional[tuple], decode: bool = True) -> Reading:
    image = info['image']
    return cls(image['encoding'], image['height'], image['width'], image['channels'],
               tuple(info['label_map']), size, decode)


def sniff_encoding(data: bytes) -> Optional[str]:
  """'jpeg' or 'png' from the bytes' signature; None for anything else (raw)."""
  if data[:3] == b'\xff\xd8\xff':
    return 'jpeg'
  if data[:8] == b'\x89PNG\r\n\x1a\n':
    return 'png'
  return None


def decode_image(data: bytes, encoding: str, height: Optional[int], width: Optional[int],
                 channels: int):
  """Stored image bytes -> uint8 array H x W x C; RecordError if they do not fit."""
  import numpy as np
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


def image(data: bytes, record: dict, reading: Reading):
  """The stored image as uint8 pixels H x W x C (its bytes if not
  reading.decode), of the record's size features, or dataset_info.json's. A
  record lacking a size feature is no example, decoded or not."""
  if reading.size:
    height, width, channels = (record[name] for name in reading.size)
    fixed = (reading.height, reading.width, reading.channels)
    if reading.height is not None and (height, width, channels) != fixed:
      # read.load refuses such a record (its static shape is dataset_info.json's)
      raise RecordError(f'image is {height}x{width}x{channels}, dataset_info.json says '
                        f'{fixed[0]}x{fixed[1]}x{fixed[2]}')
  else:
    height, width, channels = reading.height, reading.width, reading.channels
  if not reading.decode:
    return data
  pixels = decode_image(data, reading.encoding, height, width, channels)
  if height is not None and pixels.shape[:2] != (height, width):
    # a JPEG or PNG of another size than its record (or dataset_info.json) says
    raise RecordError(f'{reading.encoding} image is {pixels.shape[0]}x{pixels.shape[1]}, '
                      f'expected {height}x{width}')
  return pixels


def _known(value: int, reading: Reading) -> int:
  """A label id of the label map; RecordError for one outside it (read.load
  raises too; the record's class text was '' and training got the id)."""
  if not 0 <= value < len(reading.label_map):
    raise RecordError(f'label {value} is outside 0..{len(reading.label_map) - 1}, the ids '
                      f"of dataset_info.json's label_map")
  return value


def label(value: int, _record, reading: Reading) -> int:
  return _known(int(value), reading)


def labels(values: list, _record, reading: Reading):
  """--multi_label: the ids, an int64 array."""
  import numpy as np
  return np.array([_known(int(value), reading) for value in values], np.int64)


def text(value: bytes, *_) -> str:
  return value.decode('utf-8', 'replace')


def class_text(label_value, label_map: tuple):
  """The label map's name of a label ('' outside it); of each of a
  --multi_label record's ids, a list."""
  if not isinstance(label_value, int):
    return [class_text(int(i), label_map) for i in label_value]
  return label_map[label_value] if 0 <= label_value < len(label_map) else ''


def tensor(values: list, name: str, dtype: str, shape: tuple):
  """An --extra_features value as an array of its declared shape: [] one
  value, [N], [null] a list, [null, N] k x N (bytes: dtype object)."""
  import numpy as np
  dtypes = {'int64': np.int64, 'float32': np.float32, 'string': object}
  try:
    return np.array(values, dtypes[dtype]).reshape([-1 if n is None else n for n in shape])
  except ValueError:
    raise RecordError(f'{name} has {len(values)} values, its shape is {list(shape)}')
