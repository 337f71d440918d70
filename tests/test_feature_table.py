"""The feature table in transforms/core/feature_tables.py drives the Example builder,
dataset_info.json's feature_spec and validate's record checks: they agree."""

from __future__ import annotations

import dataclasses
import io

from PIL import Image
import pytest

from pipeline.configuration import configs
from tests.conftest import check_record
from transforms.core import validation
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedImage
from transforms.core.example import build_example
from transforms.core.example import example_features
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import serialize_example
from transforms.core.feature_tables import FEATURE_TABLES
from transforms.core.feature_tables import SCHEMAS
from transforms.core.image import EncodedImage
from transforms.core.manifest import ManifestRow
from transforms.core.spec import FEATURE_DTYPES
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ExtraFeature
from transforms.core.spec import ImageSpec

LABELS = ('cat', 'dog')
EXTRAS = (ExtraFeature('weight', 'float'), ExtraFeature('boxes', 'int64'))


def _png(width: int, height: int, mode: str = 'RGB', fmt: str = 'PNG') -> bytes:
  out = io.BytesIO()
  Image.new(mode, (width, height), (10, 20, 30, 40)[:len(mode)]).save(out, format=fmt)
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


# The schemas of one label per image (detection's objects: tests/test_detection.py).
LABEL_SCHEMAS = [s for s in SCHEMAS if s != 'detection']
IMAGES = {'default': ImageSpec(height=2, width=3, encoding='png'),
          'seed': ImageSpec(height=2, width=3)}


@pytest.mark.parametrize('schema', LABEL_SCHEMAS)
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
    # a JPEG in a PNG dataset (tf.io.decode_png refuses it), at the right size
    ('default', 'image/encoded', _png(3, 2, fmt='JPEG'), ['wrong_image_format']),
    # more channels than declared, as fewer are
    ('default', 'image/encoded', _png(3, 2, 'RGBA'), ['wrong_channels']),
    ('default', 'image/encoded', _png(3, 2, 'L'), ['wrong_channels']),
    ('default', 'image/format', b'jpeg', ['wrong_image_format']),
    ('default', 'image/format', b'', ['wrong_image_format']),
    # the stored size is wrong, and the image does not decode to it either
    ('default', 'image/height', 5, [SIZE, SIZE]),
    ('default', 'image/width', 7, [SIZE, SIZE]),
    ('default', 'image/channels', 1, ['wrong_channels']),
    ('default', 'image/class/label', 2, ['label_out_of_range']),
    ('default', 'image/class/text', b'cat', ['label_mismatch']),
    ('default', 'image/class/text', b'Dog', ['label_mismatch']),  # the label map's is 'dog'
    ('default', 'image/key', b'', ['empty_key']),
    ('default', 'image/key', b' ', ['empty_key']),
    ('default', 'image/key/sha256', b'xyz', ['bad_sha256']),
    ('default', 'image/key/sha256', b'F' * 64, ['bad_sha256']),  # convert writes lowercase
    ('default', 'image/key/sha256', b'f' * 63 + b'g', ['bad_sha256']),
    ('default', 'image/key/sha256', b'f' * 64 + b'\n', ['bad_sha256']),
    ('seed', 'img_raw', b'short', [SIZE]),
    ('seed', 'img_raw', bytes(2 * 3 * 3 + 1), [SIZE]),  # one byte too many
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
             for f in table.features if f.check and schema in LABEL_SCHEMAS}
  # image/width is checked with image/height
  assert checked | {('default', 'image/width')} == {(d[0], d[1]) for d in DAMAGE}


@pytest.mark.parametrize('schema', LABEL_SCHEMAS)
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

  from pipeline.configuration import flags
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
  assert configs.parse_background(args.background) == spec.background == (255, 255, 255)


# --- the table decodes what it encodes: read.examples' decoder, export's features ---

def _info(spec: ExampleSpec, image: ImageSpec) -> dict:
  """What dataset_info.json says of these records, as far as readers look."""
  return {'schema': spec.schema, 'feature_spec': spec.feature_spec(image),
          'image': image.to_json(), 'label_map': list(LABELS)}


@pytest.mark.parametrize('schema,image,key', [
    ('default', IMAGES['default'], 'b-key'),
    ('default', ImageSpec(height=2, width=3), 'b-key'),
    ('seed', IMAGES['seed'], '')])
def test_the_table_decodes_what_it_encodes(schema, image, key):
  from transforms.core.records import ExampleDecoder
  loaded = _loaded(image)
  spec = ExampleSpec(schema)
  info = _info(spec, image)
  example = ExampleDecoder(info)(build_example(loaded, spec))
  assert list(example) == ['image', 'label', 'key', 'class_text']
  assert example['image'].shape == (2, 3, 3)
  if image.encoding == 'raw':
    assert example['image'].tobytes() == loaded.image.data
  else:
    assert example['image'].tolist() == [[[10, 20, 30]] * 3] * 2
  assert (example['label'], example['key'], example['class_text']) == (1, key, 'dog')
  assert ExampleDecoder(info, decode=False)(build_example(loaded, spec))['image'] == (
      loaded.image.data)


def test_label_lists_and_extra_features_decode_to_arrays_of_their_shape():
  from transforms.core.records import ExampleDecoder
  image = IMAGES['default']
  extras = (ExtraFeature('weight', 'float', ()), ExtraFeature('boxes', 'int64', (None, 2)),
            ExtraFeature('tags', 'bytes', (None,)))
  loaded = _loaded(image, (('weight', 'float', [0.5]), ('boxes', 'int64', [1, 2, 3, 4]),
                           ('tags', 'bytes', ['x', 'y'])))
  loaded = dataclasses.replace(loaded, labelled=dataclasses.replace(
      loaded.labelled, label_id=(1, 0), label_text=('dog', 'cat')))
  spec = ExampleSpec('default', extras, multi_label=True)
  example = ExampleDecoder(_info(spec, image))(build_example(loaded, spec))
  assert list(example) == ['image', 'label', 'key', 'class_text', 'weight', 'boxes', 'tags']
  assert example['label'].dtype == 'int64' and example['label'].tolist() == [1, 0]
  assert example['class_text'] == ['dog', 'cat']
  assert (example['weight'].shape, example['weight'].tolist()) == ((), 0.5)
  assert example['boxes'].tolist() == [[1, 2], [3, 4]]
  assert example['tags'].tolist() == [b'x', b'y']


def test_a_record_that_does_not_fit_is_a_record_error_naming_the_feature():
  from transforms.core.decoders import RecordError
  from transforms.core.records import ExampleDecoder
  image = IMAGES['default']
  features = example_features(_loaded(image), ExampleSpec())
  del features['image/width']
  decoder = ExampleDecoder(_info(ExampleSpec(), image))
  with pytest.raises(RecordError, match=r"^feature 'image/width' is missing or not a single "
                     r'value$'):
    decoder(serialize_example(features))
  with pytest.raises(RecordError, match=r'^not a tf\.train\.Example'):
    decoder(b'\x01\x02not a record')


class _FakeTfds:
  """tensorflow_datasets' feature classes as tuples: what export builds, without TensorFlow."""

  class features:
    Text = staticmethod(lambda: ('Text',))
    Scalar = staticmethod(lambda dtype: ('Scalar', dtype))
    ClassLabel = staticmethod(lambda names: ('ClassLabel', tuple(names)))
    Sequence = staticmethod(lambda feature: ('Sequence', feature))
    Tensor = staticmethod(lambda shape, dtype, encoding='none': ('Tensor', shape, dtype,
                                                                 encoding))
    Image = staticmethod(lambda shape, encoding_format: ('Image', shape, encoding_format))
    FeaturesDict = staticmethod(lambda nested: nested)


_FAKE_TF = type('tf', (), {'uint8': 'uint8', 'string': 'string', 'int64': 'int64',
                           'float32': 'float32'})


def test_export_builds_its_tfds_features_from_the_table():
  from pipeline import export
  image = IMAGES['default']
  text, int64 = ('Text',), ('Scalar', 'int64')
  label = ('ClassLabel', LABELS)
  nested = export.tfds_features(_info(ExampleSpec(), image), _FakeTfds, _FAKE_TF)
  # image/key/sha256 is left out: TFDS cannot have image/key a value and a folder
  assert nested == {'image': {
      'encoded': ('Image', (2, 3, 3), 'png'), 'format': text, 'height': int64,
      'width': int64, 'channels': int64, 'class': {'label': label, 'text': text},
      'filename': text, 'key': text}}
  spec = ExampleSpec('default', (ExtraFeature('boxes', 'float', (None, 4)),), multi_label=True)
  nested = export.tfds_features(_info(spec, ImageSpec(height=2, width=3)), _FakeTfds, _FAKE_TF)
  assert nested['image']['encoded'] == ('Tensor', (2, 3, 3), 'uint8', 'bytes')
  assert nested['image']['class'] == {'label': ('Sequence', label),
                                      'text': ('Sequence', text)}
  assert nested['boxes'] == ('Tensor', (None, 4), 'float32', 'none')
  assert export.tfds_features(_info(ExampleSpec('seed'), IMAGES['seed']), _FakeTfds,
                              _FAKE_TF) == {
      'img_raw': ('Tensor', (2, 3, 3), 'uint8', 'bytes'), 'label': label}


def test_a_feature_added_to_the_table_reaches_every_reader(monkeypatch):
  """One edit in the table: convert writes the feature, dataset_info.json
  declares it, validate checks it is there, read.examples decodes it and
  export describes it to TFDS (read.load: the test below)."""
  from pipeline import export
  from transforms.core.records import ExampleDecoder
  _added_source_feature(monkeypatch)
  image = IMAGES['default']
  spec = ExampleSpec()
  data = build_example(_loaded(image), spec)
  assert spec.feature_spec(image)['image/source'] == {'dtype': 'string', 'shape': []}
  assert ExampleDecoder(_info(spec, image))(data)['source'] == '/x/a/b.png'
  assert export.tfds_features(_info(spec, image), _FakeTfds, _FAKE_TF)['image']['source'] == (
      'Text',)
  assert check_record(data, _expected('default', image)) == (1, 'b-key', [])
  features = example_features(_loaded(image), spec)
  del features['image/source']
  assert [kind for kind, _ in check_record(serialize_example(features),
                                           _expected('default', image))[2]] == [
      'missing_feature']


def _added_source_feature(monkeypatch):
  """The default table with one row added: image/source, the row's path,
  read back as the field `source`."""
  from operator import attrgetter

  from transforms.core import decoders
  from transforms.core.feature_tables import Feature
  from transforms.core.feature_tables import FeatureTable
  table = FEATURE_TABLES['default']
  added = Feature('image/source', 'bytes', attrgetter('labelled.row.path'), field='source',
                  decode=decoders.text)
  monkeypatch.setitem(FEATURE_TABLES, 'default', FeatureTable(
      table.features + (added,), size=table.size, text=table.text))


@pytest.mark.slow  # imports TensorFlow (~5 s)
def test_a_feature_added_to_the_table_reaches_read_load_as_read_examples(monkeypatch, tmp_path):
  """read.load gave only image, label, key and class_text of the table's
  fields: a row added to the table reached read.examples, not read.load."""
  pytest.importorskip('tensorflow')
  from pipeline import read
  from transforms.core.tfrecord import frame
  _added_source_feature(monkeypatch)
  image = IMAGES['default']
  shard = 'train-00000-of-00001.tfrecord'
  (tmp_path / shard).write_bytes(frame(build_example(_loaded(image), ExampleSpec())))
  info = {**_info(ExampleSpec(), image), 'compression': 'none',
          'splits': {'train': {'shards': [shard], 'num_examples': 1}}}
  (loaded,) = list(read.load(tmp_path, info=info))
  (example,) = list(read.examples(tmp_path, info=info))
  assert sorted(loaded) == sorted(example) == ['class_text', 'image', 'key', 'label', 'source']
  assert loaded['source'].numpy().decode() == example['source'] == '/x/a/b.png'


def test_the_label_list_and_size_checks_of_a_record():
  """A multi-label record's ids and texts, and a record's own size, as the
  checks see them (the feature table's rows above cover one label)."""
  from transforms.core import checks
  assert checks.check_labels([0, 1], LABELS) == []
  assert checks.check_labels([1, 1], LABELS) == [
      ('label_mismatch', 'label ids [1, 1] repeat a class')]
  assert checks.check_labels([], LABELS) == [
      ('missing_label', 'image/class/label is an empty list')]
  assert checks.check_label_texts([0, 1], [b'cat', b'dog'], LABELS) == []
  for texts in ([b'cat'], [b'cat', b'dog', b'dog']):  # fewer texts than ids, and more
    assert checks.check_label_texts([0, 1], texts, LABELS) == [
        ('label_mismatch', f'2 label ids but {len(texts)} label texts')]
  # a record of no pixels: its size is refused, not its byte count taken as right
  assert checks.check_image(b'', 'raw', 0, 3, 3) == [
      ('wrong_image_size', 'image size 3x0 is not positive')]
