"""Frozen specs shared by convert, validate and readers (dataset_info.json)."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from operator import attrgetter
import re
from typing import Optional

from transforms.core import checks
from transforms.core import decoders
from transforms.core import detection_checks as objects

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
class Feature:
  """One feature of the Example, as a TFDS FeatureConnector: how convert
  encodes it from a LoadedImage (transforms.core.example), how validate checks
  it in a parsed record, and how readers decode it."""
  name: str
  kind: str  # bytes | float | int64
  # LoadedImage -> value (a scalar, or a list for shape (None,))
  value: Callable
  # (its value, the record's values (decoders.StoredValues), validation.Expected)
  # -> [(problem kind, detail)]; None: only presence, kind and shape are checked
  check: Optional[Callable] = None
  shape: tuple = ()  # (): one value; (None,): a list of any length
  # decoding the image is the costly check: it runs after the others
  decodes: bool = False
  # The field of the readers' example it fills (read.examples, read.load,
  # export: 'image', 'label', 'key'; None: left out of the example) and how
  # read.examples decodes it: (its value, the record's values,
  # decoders.Reading) -> the field's value.
  field: Optional[str] = None
  decode: Optional[Callable] = None


def _check_encoded(data, record, expected):
  image = expected.image
  return checks.check_image(data, image.encoding, record['image/height'],
                            record['image/width'], image.channels)


def _check_seed_pixels(data, _, expected):
  image = expected.image
  return checks.check_image(data, 'raw', image.height, image.width, image.channels)


@dataclasses.dataclass(frozen=True)
class FeatureTable:
  """The features of one --schema; their fields say which name the record."""
  features: tuple  # Feature, in dataset_info.json's feature_spec order
  # The features holding each record's image height, width and channels; None:
  # dataset_info.json's (--schema seed: raw pixels of one size).
  size: Optional[tuple] = None
  # The stored class name, if the schema has one: read.load's class_text
  # (read.examples, and read.load of a schema without one: the label map's name).
  text: Optional[str] = None
  unique: tuple = ()  # (feature, problem kind): no two records share it (as the key)

  def by_field(self, field: str) -> Optional[str]:
    """The name of the feature that fills the readers' `field`, if any."""
    return next((f.name for f in self.features if f.field == field), None)

  @functools.cached_property
  def label(self) -> str:
    """The feature holding the label id."""
    return self.by_field('label')

  @functools.cached_property
  def key(self) -> Optional[str]:
    """The feature holding the row key, if any."""
    return self.by_field('key')

  @functools.cached_property
  def checked(self) -> tuple:
    """The features that have a check, in the order they run."""
    return tuple(sorted((f for f in self.features if f.check), key=lambda f: f.decodes))


# The encoded image and its size, first in the default and detection tables.
_IMAGE_FEATURES = (
    Feature('image/encoded', 'bytes', attrgetter('image.data'), _check_encoded,
            decodes=True, field='image', decode=decoders.image),
    Feature('image/format', 'bytes', attrgetter('image.format'),
            lambda value, _, e: checks.check_format(value, e.image.encoding)),
    Feature('image/height', 'int64', attrgetter('image.height'),
            lambda value, record, e: checks.check_size(value, record['image/width'], e.image)),
    Feature('image/width', 'int64', attrgetter('image.width')),  # checked with image/height
)

# One table per schema: the Example builder, feature_spec() (dataset_info.json),
# validate's record checks and the readers (read.examples, read.load, export)
# are all driven by it. Adding a feature is one row.
FEATURE_TABLES = {
    'default': FeatureTable(
        features=(
            *_IMAGE_FEATURES,
            Feature('image/channels', 'int64', attrgetter('image.channels'),
                    lambda value, _, e: checks.check_channels(value, e.image.channels)),
            Feature('image/class/label', 'int64', attrgetter('labelled.label_id'),
                    lambda value, _, e: checks.check_label(value, e.label_map),
                    field='label', decode=decoders.label),
            Feature('image/class/text', 'bytes', attrgetter('labelled.label_text'),
                    lambda value, record, e: checks.check_label_text(
                        record['image/class/label'], value, e.label_map)),
            Feature('image/filename', 'bytes', attrgetter('labelled.row.image')),
            Feature('image/key', 'bytes', attrgetter('labelled.row.key'), checks.check_key,
                    field='key', decode=decoders.text),
            Feature('image/key/sha256', 'bytes', attrgetter('sha256'), checks.check_sha256),
        ),
        size=('image/height', 'image/width', 'image/channels'), text='image/class/text'),
    # The TF1 recipe's two features: fixed-size raw RGB pixels and the label.
    'seed': FeatureTable(
        features=(
            Feature('img_raw', 'bytes', attrgetter('image.data'), _check_seed_pixels,
                    decodes=True, field='image', decode=decoders.image),
            Feature('label', 'int64', attrgetter('labelled.label_id'),
                    lambda value, _, e: checks.check_label(value, e.label_map),
                    field='label', decode=decoders.label),
        )),
    # The Object Detection API's layout (its readers and the Model Garden's
    # TfExampleDecoder read it unchanged): one list entry per object.
    'detection': FeatureTable(
        features=(
            *_IMAGE_FEATURES,
            Feature('image/filename', 'bytes', attrgetter('labelled.row.image'),
                    field='key', decode=decoders.text),
            Feature('image/source_id', 'bytes', attrgetter('source_id'),
                    objects.check_source_id),
            Feature('image/key/sha256', 'bytes', attrgetter('sha256'), checks.check_sha256),
            Feature('image/object/bbox/xmin', 'float', attrgetter('xmin'),
                    objects.check_boxes, shape=(None,)),
            Feature('image/object/bbox/xmax', 'float', attrgetter('xmax'), shape=(None,)),
            Feature('image/object/bbox/ymin', 'float', attrgetter('ymin'), shape=(None,),
                    field='boxes', decode=objects.boxes),
            Feature('image/object/bbox/ymax', 'float', attrgetter('ymax'), shape=(None,)),
            Feature('image/object/class/text', 'bytes', attrgetter('texts'),
                    objects.check_object_texts, shape=(None,), field='class_text',
                    decode=objects.object_texts),
            Feature('image/object/class/label', 'int64', attrgetter('labels'),
                    objects.check_object_labels, shape=(None,), field='label',
                    decode=objects.int64s),
            Feature('image/object/is_crowd', 'int64', attrgetter('is_crowd'),
                    functools.partial(objects.check_flags, 'is_crowd'), shape=(None,)),
            Feature('image/object/area', 'float', attrgetter('area'), objects.check_areas,
                    shape=(None,)),
            Feature('image/object/difficult', 'int64', attrgetter('difficult'),
                    functools.partial(objects.check_flags, 'difficult'), shape=(None,)),
            Feature('image/object/truncated', 'int64', attrgetter('truncated'),
                    functools.partial(objects.check_flags, 'truncated'), shape=(None,)),
        ),  # COCO evaluation (Model Garden, pycocotools) keys its images on it:
        unique=(('image/source_id', 'duplicate_source_id'),)),
}
SCHEMAS = tuple(FEATURE_TABLES)
# --include_masks: the detection table and one 0/1 PNG per object.
DETECTION_MASKS_TABLE = dataclasses.replace(FEATURE_TABLES['detection'], features=(
    *FEATURE_TABLES['detection'].features,
    Feature(objects.MASK, 'bytes', attrgetter('masks'), objects.check_masks, shape=(None,),
            decodes=True, field='masks', decode=objects.masks)))


def _multi_label(table: FeatureTable) -> FeatureTable:
  """--multi_label: the label ids and their texts are lists (int64, bytes) in
  the order given, checked element by element; the ids decode to an array."""
  label, text = table.label, table.text
  as_lists = {
      label: {'check': lambda values, _, e: checks.check_labels(values, e.label_map),
              'decode': decoders.labels},
      text: {'check': lambda values, record, e: checks.check_label_texts(
          record[label], values, e.label_map)},
  }
  return dataclasses.replace(table, features=tuple(
      dataclasses.replace(f, shape=(None,), **as_lists[f.name])
      if f.name in as_lists else f for f in table.features))


MULTI_LABEL_TABLE = _multi_label(FEATURE_TABLES['default'])


def declares_label_lists(feature_spec: dict) -> bool:
  """Whether a dataset_info.json's feature_spec declares label lists (--multi_label)."""
  return feature_spec.get(MULTI_LABEL_TABLE.label, {}).get('shape') not in (None, [])


def feature_table(schema: str, multi_label: bool = False, masks: bool = False) -> FeatureTable:
  """The table of `schema` (an unknown one: the default's); with multi_label,
  the default schema with label lists (--schema seed has one label); with
  masks, the detection schema with its masks."""
  if multi_label:
    return MULTI_LABEL_TABLE
  if masks and schema == 'detection':
    return DETECTION_MASKS_TABLE
  return FEATURE_TABLES.get(schema, FEATURE_TABLES['default'])


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
