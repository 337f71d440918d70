"""Frozen specs shared by convert, validate and readers (dataset_info.json):
the dataset's file names and defaults, the image options (ImageSpec) and the
features an Example carries (ExampleSpec: a schema's table, in
feature_tables.py, and the --extra_features)."""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from transforms.core import decoders
from transforms.core import detection_checks as objects
from transforms.core.feature_tables import FeatureTable
from transforms.core.feature_tables import declares_label_lists
from transforms.core.feature_tables import feature_table

# 2: --extra_features declare a shape; `name:type` is a scalar (in 1 it was a
# variable-length list, feature_spec shape [null], which 2 reads the same way).
FORMAT_VERSION = 2
READABLE_FORMAT_VERSIONS = (1, 2)
DATASET_INFO = 'dataset_info.json'
LABEL_MAP = 'label_map.txt'
LABEL_MAP_PBTXT = 'label_map.pbtxt'  # --schema detection: the Object Detection API's
REJECTED_FILE = 'rejected.jsonl'
VALIDATION_REPORT = 'validation_report.json'
TFDS_FEATURES_FILE = 'features.json'  # TFDS's write_metadata's, in an export: its mark
SHARD_SUFFIX = '.tfrecord'
INDEX_SUFFIX = '.index'  # --write_index: `<shard>.index`, `offset length` lines (tfrecord, DALI)
# fnmatch patterns of shard numbers (shard_path: -00001-of-00004; 6 digits from 100,000 on)
SHARD_NUMBERS_GLOB = '-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]'
SHARD_NUMBERS_GLOBS = (SHARD_NUMBERS_GLOB, SHARD_NUMBERS_GLOB + '[0-9]',
                       SHARD_NUMBERS_GLOB.replace('-of', '[0-9]-of') + '[0-9]')


def in_shard_order(names) -> list:
  """One split's shard names or paths in the order of their numbers. They
  differ only in the number, which has 6 digits from 100,000 on: text order
  put -100000- between -10000- and -10001-, and dataset_info.json listed a
  split of over 100,000 shards so."""
  return sorted(names, key=lambda name: (len(name), name))
# The ordered writer's sidecar per split, SPLIT.sources.jsonl.gz: one line per
# record in write order (where it sits, its source's fingerprint, its label,
# its option digest), what a later --previous_dataset run reuses records by.
SOURCES_SUFFIX = '.sources.jsonl.gz'
# 2: each line adds data_crc (the record's masked CRC32C) and image (the
# path as written); a version-1 sidecar's records are encoded once again.
SOURCES_FORMAT_VERSION = 2
READABLE_SOURCES_FORMAT_VERSIONS = (1, 2)
CHANGE_DETECTIONS = ('metadata', 'content')

ENCODINGS = ('raw', 'jpeg', 'png')
RESIZE_MODES = ('stretch', 'pad', 'crop', 'none')
RESIZE_FILTERS = ('bilinear', 'bicubic', 'lanczos', 'nearest')
COMPRESSIONS = ('none', 'gzip')
# --sink: ordered (write_shards.WriteShards, the default) or Beam's WriteToTFRecord.
SINK_ORDERED = 'ordered'
SINK_TFRECORDIO = 'tfrecordio'
SINKS = (SINK_ORDERED, SINK_TFRECORDIO)
FEATURE_DTYPES = {'bytes': 'string', 'float': 'float32', 'int64': 'int64'}
KIND_OF_FEATURE_DTYPE = {dtype: kind for kind, dtype in FEATURE_DTYPES.items()}

# Pillow's own limit (Image.MAX_IMAGE_PIXELS); an image above it is never decoded.
DEFAULT_MAX_PIXELS = 89_478_485
# A source file larger than this is rejected (read/too_large) from its size,
# never read: 256 MiB, above any photo or scan a model trains on.
DEFAULT_MAX_IMAGE_BYTES = 256 * 1024 * 1024
# Transparent pixels are composited over this colour (white).
DEFAULT_BACKGROUND = (255, 255, 255)
# Pillow formats decoded by default (recognised by content; PPM covers PGM/PBM):
# the common photo and scan formats. Other decoders stay out of reach of
# untrusted files unless --formats asks for them.
DEFAULT_FORMATS = ('BMP', 'GIF', 'JPEG', 'PNG', 'PPM', 'TIFF', 'WEBP')


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
  formats: Optional[tuple] = DEFAULT_FORMATS  # Pillow formats decoded; None: all
  max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES  # larger source files are not read

  @property
  def fixed_size(self) -> bool:
    return self.resize_mode != 'none'

  @property
  def pil_mode(self) -> str:
    return 'RGB' if self.channels == 3 else 'L'

  def to_json(self) -> dict:
    data = {
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
    if self.formats != DEFAULT_FORMATS:  # datasets made by default stay as they were
      data['formats'] = list(self.formats) if self.formats else 'all'
    if self.max_image_bytes != DEFAULT_MAX_IMAGE_BYTES:  # likewise
      data['max_image_bytes'] = self.max_image_bytes
    return data

  @classmethod
  def from_json(cls, data: dict) -> ImageSpec:
    # A field missing from the JSON takes the field's default (a dataclass's
    # class attribute is the field's default); height and width: None, as
    # to_json writes them for a variable size.
    return cls(
        height=data.get('height'),
        width=data.get('width'),
        channels=int(data.get('channels', cls.channels)),
        encoding=data.get('encoding', cls.encoding),
        resize_mode=data.get('resize_mode', cls.resize_mode),
        resize_filter=data.get('resize_filter', cls.resize_filter),
        jpeg_quality=int(data.get('jpeg_quality', cls.jpeg_quality)),
        background=tuple(data.get('background', cls.background)),
        max_pixels=int(data.get('max_pixels', cls.max_pixels)),
        formats=_formats_from_json(data.get('formats', cls.formats)),
        max_image_bytes=int(data.get('max_image_bytes', cls.max_image_bytes)))


def _formats_from_json(value) -> Optional[tuple]:
  return None if value == 'all' else tuple(value)


@dataclasses.dataclass(frozen=True)
class ExtraFeature:
  """A manifest column copied into every Example: a Feature whose value is the
  row's parsed column (stored flattened) and whose check is its kind and shape.

  shape: () one value; (N,) exactly N; (None,) any number; (None, N) a list of
  N-tuples (boxes), stored flattened: a multiple of N values.
  """
  name: str
  kind: str  # bytes | float | int64
  shape: tuple = (None,)

  check = None
  decodes = False

  @property
  def field(self) -> str:
    """Readers give it under its own name."""
    return self.name

  def decode(self, values: list, record, reading) -> object:
    """An array of its declared shape (decoders.tensor)."""
    return decoders.tensor(values, self.name, FEATURE_DTYPES[self.kind], self.shape)

  def value(self, loaded) -> list:
    for name, _, values in loaded.labelled.row.extras:
      if name == self.name:
        return values
    raise KeyError(f'the row has no extra feature {self.name!r}')

  def declaration(self) -> str:
    """As --extra_features writes it: name:kind, name:kind[N], [] or [][N]."""
    return f'{self.name}:{self.kind}' + ''.join(
        '[]' if n is None else f'[{n}]' for n in self.shape)


_DECLARATION = re.compile(r'^(?P<name>[^:\[\]]+):(?P<kind>[a-z0-9]+)(?P<shape>(\[[0-9]*\])*)$')
_SHAPES = {'': lambda _: (), '[N]': lambda n: (n[0],), '[]': lambda _: (None,),
           '[][N]': lambda n: (None, n[0])}


def parse_extra_feature(text: str) -> ExtraFeature:
  """'name:kind', 'name:kind[N]', 'name:kind[]' or 'name:kind[][N]' (N >= 1)
  -> ExtraFeature; ValueError otherwise."""
  match = _DECLARATION.match(text.strip())
  if not match or match['kind'] not in FEATURE_DTYPES:
    raise ValueError(text)
  sizes = [int(n) for n in re.findall(r'\[([0-9]+)\]', match['shape'])]
  form = re.sub(r'\[[0-9]+\]', '[N]', match['shape'])
  if form not in _SHAPES or any(n < 1 for n in sizes):
    raise ValueError(text)
  return ExtraFeature(match['name'].strip(), match['kind'], _SHAPES[form](sizes))


@dataclasses.dataclass(frozen=True)
class ExampleSpec:
  """Which features an Example carries."""
  schema: str = 'default'
  extra_features: tuple = ()
  multi_label: bool = False  # image/class/label and /text are lists
  masks: bool = False  # --schema detection with --include_masks

  def features(self) -> tuple:
    """The schema's Features, then the ExtraFeatures."""
    return self.table().features + tuple(self.extra_features)

  def feature_spec(self, image: ImageSpec) -> dict:
    """Feature name -> {dtype, shape}, as written to dataset_info.json."""
    return {f.name: {'dtype': FEATURE_DTYPES[f.kind], 'shape': list(f.shape)}
            for f in self.features()}

  @classmethod
  def of_dataset(cls, schema: str, feature_spec: dict) -> ExampleSpec:
    """The spec of a dataset_info.json: its schema's table (an unknown one: the
    default's), with label lists when the label is declared a list
    (--multi_label), and every feature the table lacks an extra feature."""
    spec = cls(schema, multi_label=declares_label_lists(feature_spec),
               masks=objects.MASK in feature_spec)
    names = {f.name for f in spec.table().features}
    return dataclasses.replace(spec, extra_features=tuple(
        ExtraFeature(name, KIND_OF_FEATURE_DTYPE[d['dtype']], tuple(d['shape']))
        for name, d in feature_spec.items() if name not in names))

  def table(self) -> FeatureTable:
    return feature_table(self.schema, self.multi_label, self.masks)


def shard_suffix(compression: str) -> str:
  return SHARD_SUFFIX + ('.gz' if compression == 'gzip' else '')
