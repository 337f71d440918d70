"""A converted dataset's records as plain values: decoded to numpy, no TensorFlow.

What `pipeline.read.examples` and `pipeline.look` share: from one
serialized Example and dataset_info.json to a dict of `image` (uint8 H x W x C),
`label`, `key`, `class_text` and every extra feature, each decoded by its
feature's decoder in the feature table; and, for files convert did not write,
guessing which feature holds the image and which the label.
"""

from __future__ import annotations

from typing import Optional

from transforms.core import decoders
from transforms.core.example_proto import parse_example
from transforms.core.spec import ExampleSpec

# Guesses for files convert did not write (the tutorial's loop writes img_raw/label).
IMAGE_FEATURES = ('image/encoded', 'img_raw', 'image')
LABEL_FEATURES = ('image/class/label', 'label')
# The fields every example has, in this order; then each extra feature's.
FIELDS = ('image', 'label', 'key', 'class_text')


def example_spec(info: dict) -> ExampleSpec:
  """The features dataset_info.json declares: its schema's table and extras."""
  return ExampleSpec.of_dataset(info['schema'], info['feature_spec'])


class ExampleDecoder:
  """Serialized Examples of one converted dataset -> {image, label, key,
  class_text, extras...}: each field decoded by its feature's decoder in the
  table (feature_tables.py). image: uint8 H x W x C (the stored bytes if not decode);
  label an int; key and class_text str (key '' for --schema seed, which has
  none; class_text the label map's name); extra features numpy arrays of their
  declared shape (bytes ones of dtype object). With --multi_label, label is an
  int64 array of ids and class_text a list of str. A detection record also has
  `classes` (its label) and `num_objects`, as read.load. A record that does not fit
  dataset_info.json: decoders.RecordError."""

  def __init__(self, info: dict, decode: bool = True):
    spec = example_spec(info)
    self._detection = spec.schema == 'detection'
    self._reading = decoders.Reading.from_info(info, spec.table().size, decode)
    self._fields = [f for f in spec.features() if f.field]
    # read whole: list features and every extra feature (its decoder checks its shape)
    self._lists = frozenset([f.name for f in spec.table().features if f.shape != ()]
                            + [f.name for f in spec.extra_features])

  def __call__(self, data: bytes) -> dict:
    try:
      features = parse_example(data)
    except Exception as error:  # DecodeError: not an Example
      raise decoders.RecordError(f'not a tf.train.Example: {error}')
    record = decoders.StoredValues(features, self._lists)
    example = dict.fromkeys(FIELDS, '')
    for feature in self._fields:
      example[feature.field] = feature.decode(record[feature.name], record, self._reading)
    example['class_text'] = decoders.class_text(example['label'], self._reading.label_map)
    if self._detection:  # each object's class and their count, as read.load names them
      example['classes'] = example['label']
      example['num_objects'] = len(example['label'])
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


__all__ = ['ExampleDecoder', 'describe_features', 'example_spec', 'guess_feature']
