"""The feature table in transforms/core/spec.py drives the Example builder,
dataset_info.json's feature_spec and validate's record checks: they agree."""

from __future__ import annotations

import dataclasses
import io

from PIL import Image
import pytest

from tests.conftest import check_record
from transforms.core import validation
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedImage
from transforms.core.example import build_example
from transforms.core.example import example_features
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import serialize_example
from transforms.core.image import EncodedImage
from transforms.core.manifest import ManifestRow
from transforms.core.spec import FEATURE_DTYPES
from transforms.core.spec import FEATURE_TABLES
from transforms.core.spec import SCHEMAS
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ExtraFeature
from transforms.core.spec import ImageSpec

LABELS = ('cat', 'dog')
EXTRAS = (ExtraFeature('weight', 'float'), ExtraFeature('boxes', 'int64'))


def _png(width: int, height: int) -> bytes:
  out = io.BytesIO()
  Image.new('RGB', (width, height), (10, 20, 30)).save(out, format='PNG')
  return out.getvalue()


def _loaded(image: ImageSpec, extras=()) -> LoadedImage:
  h, w = image.height, image.width
  data = bytes(range(h * w * 3)) if image.encoding == 'raw' else _png(w, h)
  row = ManifestRow({}, 'm.csv', 2, image='a/b.png', path='/x/a/b.png', key='b-key',
                    label='dog', extras=extras)
  return LoadedImage(LabelledRow(row, 1, 'dog'),
                     EncodedImage(data, h, w, 3, image.encoding), 'f' * 64, len(data))


def _expected(schema: str, image: ImageSpec, extras=()) -> validation.Expected:
  return validation.Expected(schema, ExampleSpec(schema, extras).feature_spec(image), image,
                             LABELS)


IMAGES = {'default': ImageSpec(height=2, width=3, encoding='png'),
          'seed': ImageSpec(height=2, width=3)}


@pytest.mark.parametrize('schema', SCHEMAS)
def test_feature_spec_and_builder_name_the_same_features_and_kinds(schema):
  image = IMAGES[schema]
  spec = ExampleSpec(schema)
  built = example_features(_loaded(image), spec)
  declared = spec.feature_spec(image)
  assert list(built) == list(declared) == [f.name for f in FEATURE_TABLES[schema].features]
  assert {name: FEATURE_DTYPES[kind] for name, (kind, _) in built.items()} == {
      name: d['dtype'] for name, d in declared.items()}
  assert all(d['shape'] == [] for d in declared.values())


def test_default_schema_values_come_from_the_loaded_image():
  loaded = _loaded(IMAGES['default'])
  features = parse_example(build_example(loaded, ExampleSpec()))
  assert {name: values[0] for name, (_, values) in features.items()} == {
      'image/encoded': loaded.image.data, 'image/format': b'png', 'image/height': 2,
      'image/width': 3, 'image/channels': 3, 'image/class/label': 1,
      'image/class/text': b'dog', 'image/filename': b'a/b.png', 'image/key': b'b-key',
      'image/key/sha256': b'f' * 64}


def test_seed_schema_is_pixels_and_label_only():
  loaded = _loaded(IMAGES['seed'])
  features = parse_example(build_example(loaded, ExampleSpec('seed')))
  assert features == {'img_raw': ('bytes_list', [loaded.image.data]),
                      'label': ('int64_list', [1])}


def test_extra_features_are_list_features_of_the_row_in_spec_and_example():
  extras = (('weight', 'float', [0.5, 2.0]), ('boxes', 'int64', [1, 2, 3]))
  loaded = _loaded(IMAGES['default'], extras)
  spec = ExampleSpec('default', EXTRAS)
  declared = spec.feature_spec(IMAGES['default'])
  assert list(declared)[-2:] == ['weight', 'boxes']
  assert declared['weight'] == {'dtype': 'float32', 'shape': [None]}
  assert declared['boxes'] == {'dtype': 'int64', 'shape': [None]}
  features = parse_example(build_example(loaded, spec))
  assert features['weight'] == ('float_list', [0.5, 2.0])
  assert features['boxes'] == ('int64_list', [1, 2, 3])
  assert check_record(build_example(loaded, spec),
                                 _expected('default', IMAGES['default'], EXTRAS)) == (
      1, 'b-key', [])


@pytest.mark.parametrize('schema,key', [('default', 'b-key'), ('seed', None)])
def test_a_built_record_passes_its_checks(schema, key):
  image = IMAGES[schema]
  data = build_example(_loaded(image), ExampleSpec(schema))
  assert check_record(data, _expected(schema, image)) == (1, key, [])


# (schema, feature, stored value, problem kinds the checks must find, in order)
SIZE = 'wrong_image_size'
DAMAGE = [
    ('default', 'image/encoded', b'\x89PNG not really', ['undecodable_image']),
    ('default', 'image/encoded', _png(4, 2), [SIZE]),
    ('default', 'image/format', b'jpeg', ['wrong_image_format']),
    # the stored size is wrong, and the image does not decode to it either
    ('default', 'image/height', 5, [SIZE, SIZE]),
    ('default', 'image/width', 7, [SIZE, SIZE]),
    ('default', 'image/channels', 1, ['wrong_channels']),
    ('default', 'image/class/label', 2, ['label_out_of_range']),
    ('default', 'image/class/text', b'cat', ['label_mismatch']),
    ('seed', 'img_raw', b'short', [SIZE]),
    ('seed', 'label', -1, ['label_out_of_range']),
]


@pytest.mark.parametrize('schema,name,value,kinds', DAMAGE,
                         ids=[f'{d[0]}:{d[1]}:{d[3][0]}' for d in DAMAGE])
def test_each_checked_feature_finds_its_damage(schema, name, value, kinds):
  image = IMAGES[schema]
  features = example_features(_loaded(image), ExampleSpec(schema))
  features[name] = (features[name][0], value)
  _, _, problems = check_record(serialize_example(features),
                                           _expected(schema, image))
  assert [found for found, _ in problems] == kinds


def test_every_check_of_the_tables_is_exercised():
  checked = {(schema, f.name) for schema, table in FEATURE_TABLES.items()
             for f in table.features if f.check}
  # image/width is checked with image/height
  assert checked | {('default', 'image/width')} == {(d[0], d[1]) for d in DAMAGE}


@pytest.mark.parametrize('schema', SCHEMAS)
def test_a_missing_or_mistyped_feature_is_caught_before_the_checks(schema):
  image = IMAGES[schema]
  features = example_features(_loaded(image), ExampleSpec(schema))
  first = next(iter(features))
  kind = 'int64' if features[first][0] == 'bytes' else 'bytes'
  mistyped = dict(features, **{first: (kind, 1 if kind == 'int64' else b'x')})
  del features[first]
  for damaged, problem in ((features, 'missing_feature'), (mistyped, 'wrong_type')):
    result = check_record(serialize_example(damaged), _expected(schema, image))
    assert result[:2] == (None, None) and [k for k, _ in result[2]] == [problem]


def test_image_spec_from_json_fills_missing_fields_with_the_field_defaults():
  defaults = ImageSpec()
  assert ImageSpec.from_json({}) == dataclasses.replace(defaults, height=None, width=None)
  assert ImageSpec.from_json(defaults.to_json()) == defaults


def test_convert_flag_defaults_are_the_image_spec_defaults():
  import argparse

  from pipeline import config
  from pipeline import flags
  parser = argparse.ArgumentParser()
  flags.ConvertOptions._add_argparse_args(parser)
  args = parser.parse_args([])
  spec = ImageSpec()
  assert (args.height, args.width, args.channels, args.encoding, args.jpeg_quality,
          args.resize_mode, args.resize_filter, args.max_pixels) == (
      300, 300, 3, 'raw', 95, 'stretch', 'bilinear', 89_478_485)
  assert (args.height, args.width, args.channels, args.encoding, args.jpeg_quality,
          args.resize_mode, args.resize_filter, args.max_pixels) == (
      spec.height, spec.width, spec.channels, spec.encoding, spec.jpeg_quality,
      spec.resize_mode, spec.resize_filter, spec.max_pixels)
  assert config.parse_background(args.background) == spec.background == (255, 255, 255)
