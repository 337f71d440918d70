"""cheap_pickle (transforms/core/pickling.py): the per-row dataclasses round
trip through pickle, Beam's coders and Beam's pickler to equal values of the
same type, without calling dataclasses.fields() per row."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import pickle
import pkgutil

import pytest

import transforms.core
from transforms.core import pickling
from transforms.core.annotations import ImageAnnotation
from transforms.core.annotations import ObjectAnnotation
from transforms.core.detect import DetectedImage
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedCopy
from transforms.core.example import LoadedExample
from transforms.core.example import LoadedImage
from transforms.core.image import EncodedImage
from transforms.core.manifest import ManifestRow
from transforms.core.parquet import ParquetCell
from transforms.core.rejects import Rejection
from transforms.core.rejects import RowError
from transforms.core.reuse import PreviousRecord

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)
SHA = 'ab' * 32


def _row(**changes) -> ManifestRow:
  values = {'image': 'img/a.png', 'path': '/data/img/a.png', 'key': 'a', 'label': 'cat'}
  fields = {'image': 'img/a.png', 'label': 'cat', 'key': 'a'}
  return ManifestRow(fields, '/data/m.csv', 7, **{**values, **changes})


def _annotation() -> ImageAnnotation:
  objects = (ObjectAnnotation(2, (1.0, 2.0, 10.0, 12.5), area=90.5, shown={'id': 4},
                              source='ann.json', line=3, category='dog'),
             ObjectAnnotation(0, (0, 0, 4, 4), is_crowd=1,
                              segmentation=('polygons', [[0, 0, 4, 0, 4, 4]])))
  return ImageAnnotation(17, (640, 480), objects, normalized=True)


def _image() -> EncodedImage:
  return EncodedImage(bytes(range(256)) * 3, 16, 16, 3, 'png', (20, 16), 6)


def _detected() -> DetectedImage:
  return DetectedImage(LabelledRow(_row(annotation=_annotation()), 0, ''), _image(), SHA,
                       b'17', (0.1,), (0.2,), (0.5,), (0.6,), (2,), (b'dog',), (0,), (90.5,),
                       (0,), (0,), masks=(b'\x89PNG',), dropped=1,
                       rejected=(Rejection({'id': 5}, 'annotation', 'empty_box', 'no area',
                                           'ann.json', 9, counts_as_row=False),))


# One of each per-row class, with None, tuples, dicts, bytes and nested
# dataclasses and NamedTuples in its fields.
VALUES = {
    'ManifestRow, defaults (None in label, read_error, annotation, previous, ref)':
        ManifestRow({'image': 'x.png'}, 'm.csv', 2),
    'ManifestRow, every field set': _row(
        split='validation', extras=(('weight', 'float', (0.5,)), ('tags', 'bytes', (b'a', b'b'))),
        label_padded=True, content_sha256=SHA, position=12, annotation=_annotation(),
        fingerprint='sha256:' + SHA,
        previous=PreviousRecord('train', 'out/train-00000-of-00001.tfrecord', False, 3, 1024, 900,
                                'sha256:' + SHA, SHA, [1, 2], ['cat', 'dog'], 'digest', 123,
                                'img/a.png'),
        reuse='changed', ref=ParquetCell('/data/p.parquet', 0, 5, 'image.bytes', 5)),
    'LabelledRow': LabelledRow(_row(), 3, 'cat'),
    'LabelledRow, multi-label (tuples)': LabelledRow(_row(label=None), (1, 4), ('cat', 'dog')),
    'EncodedImage': _image(),
    'LoadedImage': LoadedImage(LabelledRow(_row(), 3, 'cat'), _image(), SHA, 900, 'reuse_fallback'),
    'LoadedCopy': LoadedCopy(LabelledRow(_row(), 3, 'cat'), b'\n\x00serialized', SHA),
    'LoadedExample': LoadedExample(LabelledRow(_row(), 3, 'cat'), b'\n\x01built', SHA, 900,
                                   'reuse_fallback'),
    'Rejection': Rejection({'image': 'b.png', 'label': None}, 'decode', 'bad_image', 'not an image',
                           'm.csv', 8),
    'ObjectAnnotation': _annotation().objects[0],
    'ImageAnnotation': _annotation(),
    'DetectedImage': _detected(),
}


def _fields(value) -> dict:
  return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}


def _assert_same(copied, original) -> None:
  assert type(copied) is type(original)
  assert copied == original
  assert _fields(copied) == _fields(original)
  for name, value in _fields(original).items():  # types too: a tuple stays a tuple
    assert type(getattr(copied, name)) is type(value), name


def test_every_slots_dataclass_of_core_is_cheap_to_pickle():
  # A per-row class added later without @cheap_pickle would call fields() per row again.
  slotted = []
  for info in pkgutil.iter_modules(transforms.core.__path__):
    module = importlib.import_module(f'transforms.core.{info.name}')
    for value in vars(module).values():
      if (isinstance(value, type) and value.__module__ == module.__name__
          and dataclasses.is_dataclass(value) and '__slots__' in vars(value)):
        slotted.append(value.__name__)
        assert vars(value).get('__reduce__') is pickling._reduce, value.__qualname__
        setstate = vars(value).get('__setstate__')  # _setstate, or its loop unrolled
        assert setstate is pickling._setstate or '_set0' in setstate.__code__.co_names, (
            value.__qualname__)
  assert sorted(slotted) == ['DetectedImage', 'EncodedImage', 'ImageAnnotation', 'LabelledRow',
                             'LoadedCopy', 'LoadedExample', 'LoadedImage', 'ManifestRow',
                             'ObjectAnnotation',
                             'Rejection']


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize('name', VALUES)
def test_round_trip_at_every_protocol(name, protocol):
  original = VALUES[name]
  _assert_same(pickle.loads(pickle.dumps(original, protocol)), original)


def test_nested_values_come_back_whole():
  row = VALUES['ManifestRow, every field set']
  copied = pickle.loads(pickle.dumps(LoadedImage(LabelledRow(row, 3, 'cat'), _image(), SHA),
                                     pickle.HIGHEST_PROTOCOL))
  back = copied.labelled.row
  assert back.annotation.objects[1].segmentation == ('polygons', [[0, 0, 4, 0, 4, 4]])
  assert back.annotation.recorded_size == (640, 480)
  assert back.previous.label_id == [1, 2] and back.previous.data_crc == 123
  assert type(back.previous) is PreviousRecord and type(back.ref) is ParquetCell
  assert back.extras[1] == ('tags', 'bytes', (b'a', b'b'))
  assert back.label == 'cat' and back.read_error is None and back.label_padded is True
  assert copied.image.data == bytes(range(256)) * 3 and copied.image.orientation == 6


def test_a_read_error_comes_back_with_its_stage_code_and_reason():
  # RowError is an exception: equal only to itself, so compared by its parts.
  copied = pickle.loads(pickle.dumps(
      _row(read_error=RowError('read', 'missing_file', 'no such file')), pickle.HIGHEST_PROTOCOL))
  error = copied.read_error
  assert type(error) is RowError
  assert (error.stage, error.code, error.reason) == ('read', 'missing_file', 'no such file')


def test_the_state_is_the_field_values_in_field_order():
  row = VALUES['ManifestRow, every field set']
  callable_, args, state = row.__reduce__()
  assert (callable_, args) == (pickling.copyreg.__newobj__, (ManifestRow,))
  assert state == tuple(_fields(row).values()) == row.__getstate__()
  assert state[:3] == ({'image': 'img/a.png', 'label': 'cat', 'key': 'a'}, '/data/m.csv', 7)


def test_a_pickle_made_by_the_generated_methods_still_loads(monkeypatch):
  # What Python's own __getstate__ wrote (a list of the values), before cheap_pickle.
  original = VALUES['LoadedImage']
  monkeypatch.setattr(LoadedImage, '__reduce__', object.__reduce__)
  monkeypatch.setattr(LoadedImage, '__getstate__', dataclasses._dataclass_getstate)
  old = pickle.dumps(original, pickle.HIGHEST_PROTOCOL)
  monkeypatch.undo()
  assert isinstance(LoadedImage.__getstate__(original), tuple)
  _assert_same(pickle.loads(old), original)


def test_pickling_calls_fields_once_per_class_not_per_row(monkeypatch):
  calls = []
  fields = dataclasses.fields
  monkeypatch.setattr(dataclasses, 'fields', lambda value: calls.append(value) or fields(value))
  batch = [VALUES['DetectedImage'], VALUES['LoadedImage'], VALUES['LoadedCopy']] * 50
  for protocol in PROTOCOLS:
    assert pickle.loads(pickle.dumps(batch, protocol)) == batch
  assert calls == []  # Python's generated methods: 2 calls per dataclass per round trip


def test_copy_and_deepcopy_keep_the_values():
  original = VALUES['DetectedImage']
  for copied in (copy.copy(original), copy.deepcopy(original)):
    _assert_same(copied, original)
  assert copy.deepcopy(original).labelled.row.fields is not original.labelled.row.fields


@dataclasses.dataclass(frozen=True, slots=True)
class _TaggedRow(LabelledRow):
  """A slots subclass not decorated: pickles through the inherited __reduce__
  and its own generated __setstate__."""
  tag: str = ''


@pickling.cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class _CheapTaggedRow(LabelledRow):
  tag: str = ''


@dataclasses.dataclass(frozen=True)
class _DictTaggedImage(LoadedImage):
  """Without slots: its own field lives in __dict__, set by name."""
  tag: tuple = ()


@pytest.mark.parametrize('value', [
    _TaggedRow(_row(), 1, 'dog', 'extra'),
    _CheapTaggedRow(_row(), 1, 'dog', 'extra'),
    _DictTaggedImage(LabelledRow(_row(), 1, 'dog'), _image(), SHA, 5, '', ('a', None)),
], ids=['slots', 'slots, decorated', 'dict'])
def test_a_subclass_keeps_its_type_and_its_own_fields(value):
  for protocol in PROTOCOLS:
    copied = pickle.loads(pickle.dumps(value, protocol))
    _assert_same(copied, value)
    assert copied.tag == value.tag and copied != LabelledRow(_row(), 1, 'dog')


def test_a_one_field_dataclass_pickles_its_value_as_a_tuple():
  @dataclasses.dataclass(frozen=True, slots=True)
  class One:
    value: object
  pickling.cheap_pickle(One)
  assert One((1, None)).__getstate__() == ((1, None),)
  copied = copy.copy(One((1, None)))
  assert copied == One((1, None)) and copied.value == (1, None)


def test_only_a_dataclass_is_taken():
  with pytest.raises(TypeError, match='wants a dataclass'):
    pickling.cheap_pickle(RowError)


@pytest.mark.parametrize('name', VALUES)
def test_beam_coders_round_trip(name):
  # A shuffle's coder for these: FastPrimitivesCoder, falling back to
  # PickleCoder (pickle.dumps at the highest protocol); the deterministic
  # one (a grouping key) encodes a frozen dataclass field by field itself.
  from apache_beam.coders import coders
  original = VALUES[name]
  fast = coders.FastPrimitivesCoder()
  for coder in (fast, coders.PickleCoder()):
    _assert_same(coder.decode(coder.encode(original)), original)
  if name.startswith('ManifestRow') or name == 'LabelledRow':
    deterministic = fast.as_deterministic_coder('test')
    encoded = deterministic.encode(original)
    assert deterministic.encode(original) == encoded
    _assert_same(deterministic.decode(encoded), original)


@pytest.mark.parametrize('module', ['cloudpickle_pickler', 'dill_pickler'])
def test_beams_picklers_round_trip(module):
  # Beam's picklers (a DoFn's or side input's values): cloudpickle by default.
  if module == 'dill_pickler':
    pytest.importorskip('dill')
  pickler = importlib.import_module(f'apache_beam.internal.{module}')
  for original in VALUES.values():
    _assert_same(pickler.loads(pickler.dumps(original)), original)


@pytest.mark.parametrize('name', VALUES)
def test_replaced_gives_what_dataclasses_replace_gives(name):
  original = VALUES[name]
  first = dataclasses.fields(original)[0].name
  for changes in ({}, {first: None}):
    made = pickling.replaced(original, **changes)
    _assert_same(made, dataclasses.replace(original, **changes))
    assert made is not original
  row = pickling.replaced(_row(), fingerprint='local:1:2:3:4', split='test')
  assert (row.fingerprint, row.split, row.key, row.line) == ('local:1:2:3:4', 'test', 'a', 7)


def test_replaced_refuses_a_field_the_class_lacks():
  with pytest.raises(TypeError, match="no field 'colour'"):
    pickling.replaced(_row(), colour='red')


@pickling.cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
  """A class whose __init__ does more than assign (its __post_init__ checks)."""
  size: int

  def __post_init__(self):
    if self.size < 0:
      raise ValueError('negative size')


def test_replaced_runs_post_init_as_dataclasses_replace_does():
  assert pickling.replaced(_Checked(1), size=2) == _Checked(2)
  with pytest.raises(ValueError, match='negative size'):
    pickling.replaced(_Checked(1), size=-1)


def _twins():
  """The same frozen slots dataclass, with and without cheap_pickle."""
  made = []
  for decorate in (lambda cls: cls, pickling.cheap_pickle):
    @decorate
    @dataclasses.dataclass(frozen=True, slots=True)
    class Row:
      fields: dict
      line: int
      key: str = ''
      extras: tuple = ()
      previous: object = None
    made.append(Row)
  return made


def test_a_cheap_pickle_init_takes_what_the_generated_one_takes():
  import inspect
  plain, cheap = _twins()
  # its own: each field set through its slot's setter, not object.__setattr__ by name
  assert '_set0' in cheap.__init__.__code__.co_names
  assert '_set0' not in plain.__init__.__code__.co_names
  assert str(inspect.signature(cheap)) == str(inspect.signature(plain))
  for args, kwargs in [(({'a': 1}, 7), {}), (({}, 3, 'k'), {'previous': 'p'}),
                       ((), {'fields': {}, 'line': 2, 'extras': (1,), 'key': 'x'})]:
    assert dataclasses.astuple(cheap(*args, **kwargs)) == dataclasses.astuple(
        plain(*args, **kwargs))
  for args, kwargs, message in [(({},), {}, "missing 1 required positional argument: 'line'"),
                                (({}, 1), {'colour': 'red'}, 'unexpected keyword argument'),
                                (({}, 1, 'k', (), None, 'x'), {}, 'takes from 3 to 6'),
                                (({}, 1), {'fields': {}}, 'multiple values for argument')]:
    with pytest.raises(TypeError, match=message):
      cheap(*args, **kwargs)
  row = cheap({}, 1)
  with pytest.raises(dataclasses.FrozenInstanceError):
    row.key = 'changed'
  assert row == cheap({}, 1) and row != cheap({}, 2)


def test_a_class_whose_init_does_more_than_assign_keeps_the_generated_one():
  @pickling.cheap_pickle
  @dataclasses.dataclass(frozen=True, slots=True)
  class Listed:
    items: list = dataclasses.field(default_factory=list)

  assert Listed().items == [] and Listed().items is not Listed().items
  with pytest.raises(ValueError, match='negative size'):
    _Checked(-1)
  assert ManifestRow({'image': 'a'}, 'm.csv', 3, image='a').split == 'train'


def test_replaced_passes_values_by_place_only_when_every_field_takes_one():
  @pickling.cheap_pickle
  @dataclasses.dataclass(frozen=True, slots=True)
  class Keyworded:
    size: int
    name: str = dataclasses.field(default='', kw_only=True)

  made = pickling.replaced(Keyworded(1, name='a'), size=2)
  assert (made.size, made.name) == (2, 'a')
  assert not pickling._plan(Keyworded).plain
  assert pickling._plan(ManifestRow).plain
