"""Frozen specs shared by convert, validate and readers (dataset_info.json)."""

from __future__ import annotations

import dataclasses
from typing import Optional

FORMAT_VERSION = 1
DATASET_INFO = 'dataset_info.json'
LABEL_MAP = 'label_map.txt'
REJECTED_FILE = 'rejected.jsonl'
VALIDATION_REPORT = 'validation_report.json'
SHARD_SUFFIX = '.tfrecord'
SHARD_TEMPLATE = '-SSSSS-of-NNNNN'
# fnmatch pattern of SHARD_TEMPLATE + SHARD_SUFFIX, for any split, any compression
SHARD_NUMBERS_GLOB = '-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]'

ENCODINGS = ('raw', 'jpeg', 'png')
SCHEMAS = ('default', 'seed')
RESIZE_MODES = ('stretch', 'pad', 'crop', 'none')
RESIZE_FILTERS = ('bilinear', 'bicubic', 'lanczos', 'nearest')
COMPRESSIONS = ('none', 'gzip')
FEATURE_DTYPES = {'bytes': 'string', 'float': 'float32', 'int64': 'int64'}

# Pillow's own limit (Image.MAX_IMAGE_PIXELS); an image above it is never decoded.
DEFAULT_MAX_PIXELS = 89_478_485
# Transparent pixels are composited over this colour (white).
DEFAULT_BACKGROUND = (255, 255, 255)


@dataclasses.dataclass(frozen=True)
class ImageSpec:
  """How every image is decoded, resized and encoded."""
  height: Optional[int] = 300
  width: Optional[int] = 300
  channels: int = 3
  encoding: str = 'raw'
  resize_mode: str = 'stretch'
  resize_filter: str = 'bilinear'
  jpeg_quality: int = 95
  background: tuple = DEFAULT_BACKGROUND
  max_pixels: int = DEFAULT_MAX_PIXELS

  @property
  def fixed_size(self) -> bool:
    return self.resize_mode != 'none'

  @property
  def pil_mode(self) -> str:
    return 'RGB' if self.channels == 3 else 'L'

  def to_json(self) -> dict:
    return {
        'height': self.height if self.fixed_size else None,
        'width': self.width if self.fixed_size else None,
        'channels': self.channels,
        'encoding': self.encoding,
        'resize_mode': self.resize_mode,
        'resize_filter': self.resize_filter,
        'jpeg_quality': self.jpeg_quality,
        'background': list(self.background),
        'max_pixels': self.max_pixels,
    }

  @classmethod
  def from_json(cls, data: dict) -> ImageSpec:
    return cls(
        height=data.get('height'),
        width=data.get('width'),
        channels=int(data.get('channels', 3)),
        encoding=data.get('encoding', 'raw'),
        resize_mode=data.get('resize_mode', 'stretch'),
        resize_filter=data.get('resize_filter', 'bilinear'),
        jpeg_quality=int(data.get('jpeg_quality', 95)),
        background=tuple(data.get('background', DEFAULT_BACKGROUND)),
        max_pixels=int(data.get('max_pixels', DEFAULT_MAX_PIXELS)))


@dataclasses.dataclass(frozen=True)
class ExtraFeature:
  """A manifest column copied into every Example as a list feature."""
  name: str
  kind: str  # bytes | float | int64


@dataclasses.dataclass(frozen=True)
class ExampleSpec:
  """Which features an Example carries."""
  schema: str = 'default'
  extra_features: tuple = ()

  def feature_spec(self, image: ImageSpec) -> dict:
    """Feature name -> {dtype, shape}, as written to dataset_info.json."""
    if self.schema == 'seed':
      return {
          'img_raw': {'dtype': 'string', 'shape': []},
          'label': {'dtype': 'int64', 'shape': []},
      }
    spec = {
        'image/encoded': {'dtype': 'string', 'shape': []},
        'image/format': {'dtype': 'string', 'shape': []},
        'image/height': {'dtype': 'int64', 'shape': []},
        'image/width': {'dtype': 'int64', 'shape': []},
        'image/channels': {'dtype': 'int64', 'shape': []},
        'image/class/label': {'dtype': 'int64', 'shape': []},
        'image/class/text': {'dtype': 'string', 'shape': []},
        'image/filename': {'dtype': 'string', 'shape': []},
        'image/key': {'dtype': 'string', 'shape': []},
        'image/key/sha256': {'dtype': 'string', 'shape': []},
    }
    for extra in self.extra_features:
      spec[extra.name] = {'dtype': FEATURE_DTYPES[extra.kind], 'shape': [None]}
    return spec


def shard_suffix(compression: str) -> str:
  return SHARD_SUFFIX + ('.gz' if compression == 'gzip' else '')
