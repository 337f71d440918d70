"""The feature table: one table per --schema, each feature's encoding from a
LoadedImage, its check in a parsed record and its decoder for readers. The
Example builder, dataset_info.json's feature_spec, validate's record checks
and the readers (read.examples, read.load, export) are all driven by it."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from operator import attrgetter
from typing import Optional

from transforms.core import checks
from transforms.core import decoders
from transforms.core import detection_checks as objects


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
# are all driven by it. Adding a feature is one row, but no row is optional:
# a dataset written before it lacks the feature, and info_shape refuses that
# dataset's dataset_info.json (docs/ARCHITECTURE.md, "Where a change goes").
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
