"""The shape of dataset_info.json: INFO_SHAPE describes every field that
validate, pipeline.read (read.examples, read.load), export and inspect read,
with its type, its range and the type of what it nests; dataset_info.parse_info
checks each file against it (problem()).

A value of another shape anywhere (`"image": null`, `config.split` a string, a
count `"20"`) is then one InfoError naming its place and value, never a
traceback further on, and never a check silently left out (`"config": null`
once turned validate's wrong_split check off). Fields convert has always
written and that a check or a reader cannot do without are required; the
others are checked when present (a dataset written before they existed lacks
them). Fields no check or reader reads (label_warnings, engine, reuse, ...)
are not described.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import math
from typing import Optional

from transforms.core.spec import COMPRESSIONS
from transforms.core.spec import ENCODINGS
from transforms.core.spec import FEATURE_DTYPES
from transforms.core.spec import RESIZE_FILTERS
from transforms.core.spec import RESIZE_MODES
from transforms.core.spec import ExampleSpec

_SHOWN = 60  # characters of a value shown in a message


def _shown(value) -> str:
  text = repr(value)
  return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + '...'


def _at(where: str, name) -> str:
  return f'{where}[{name}]' if isinstance(name, int) else (f'{where}.{name}' if where else name)


class _Shape:
  """A kind of JSON value; its `what` names it in messages ('a count')."""

  def fits(self, value) -> bool:
    """Whether `value` itself is of this kind (what it nests aside)."""
    raise NotImplementedError

  def inner_problem(self, value, where: str) -> Optional[str]:
    """The first problem of what `value` (which fits) nests, or None."""
    return None

  def problem(self, value, where: str) -> Optional[str]:
    """Why `value`, at `where` (splits.train.shards[0]), is not of this
    shape, or None."""
    if not self.fits(value):
      return f'{where} {_shown(value)} is not {self.what}'
    return self.inner_problem(value, where)


@dataclasses.dataclass(frozen=True)
class _Scalar(_Shape):
  what: str
  test: Callable  # value -> bool

  def fits(self, value) -> bool:
    return self.test(value)


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _file_name(what: str) -> _Scalar:
  """A file directly in the dataset's folder, as convert names its files:
  export links and copies each to the same name in its --output_dir, so a
  '../x' or '/x' (a downloaded dataset's dataset_info.json says what it
  likes) would write outside it."""
  return _Scalar(f"{what} (a file name in the dataset's folder)", lambda v: (
      isinstance(v, str) and v not in ('', '.', '..') and not any(c in v for c in '/\\\0')))


def _whole(what: str, low: int = 0, high: float = math.inf) -> _Scalar:
  return _Scalar(what, lambda v: _is_int(v) and low <= v <= high)


def _text(what: str) -> _Scalar:
  return _Scalar(what, lambda v: isinstance(v, str))


@dataclasses.dataclass(frozen=True)
class _OneOf(_Shape):
  choices: tuple

  @property
  def what(self) -> str:
    return 'one of ' + ', '.join(map(repr, self.choices))

  def fits(self, value) -> bool:  # 1 is one of (1, 3), True is not
    return any(type(value) is type(choice) and value == choice for choice in self.choices)


@dataclasses.dataclass(frozen=True)
class _Nullable(_Shape):
  shape: _Shape

  @property
  def what(self) -> str:
    return f'{self.shape.what} or null'

  def fits(self, value) -> bool:
    return value is None or self.shape.fits(value)

  def inner_problem(self, value, where: str) -> Optional[str]:
    return None if value is None else self.shape.inner_problem(value, where)


@dataclasses.dataclass(frozen=True)
class _Either(_Shape):
  shapes: tuple
  what: str

  def fits(self, value) -> bool:
    return any(shape.problem(value, '') is None for shape in self.shapes)


@dataclasses.dataclass(frozen=True)
class _ListOf(_Shape):
  item: _Shape
  what: str
  nonempty: bool = False
  length: Optional[int] = None  # exactly this many items

  def fits(self, value) -> bool:
    return isinstance(value, list) and (bool(value) or not self.nonempty) and (
        self.length is None or len(value) == self.length)

  def inner_problem(self, value, where: str) -> Optional[str]:
    return next(filter(None, (self.item.problem(item, _at(where, i))
                              for i, item in enumerate(value))), None)


@dataclasses.dataclass(frozen=True)
class _Pair(_Shape):
  """A list of two: [first, second]."""
  first: _Shape
  second: _Shape
  what: str

  def fits(self, value) -> bool:
    return isinstance(value, list) and len(value) == 2

  def inner_problem(self, value, where: str) -> Optional[str]:
    return (self.first.problem(value[0], _at(where, 0))
            or self.second.problem(value[1], _at(where, 1)))


@dataclasses.dataclass(frozen=True)
class _MapOf(_Shape):
  """An object of any names (or of names `key` fits), each value of one shape."""
  value: _Shape
  what: str
  empty: Optional[str] = None  # said of an empty one, which is then refused
  key: Optional[_Scalar] = None

  def fits(self, value) -> bool:
    return isinstance(value, dict)

  def inner_problem(self, value, where: str) -> Optional[str]:
    if not value and self.empty:
      return f'{where} {_shown(value)} {self.empty}'
    wrong = [name for name in value if self.key and not self.key.fits(name)]
    if wrong:
      return f'{where} names {_shown(wrong[0])}, not {self.key.what}'
    return next(filter(None, (self.value.problem(item, _at(where, name))
                              for name, item in value.items())), None)


@dataclasses.dataclass(frozen=True)
class _Field:
  shape: _Shape
  required: bool = False
  missing: Optional[str] = None  # what `WHERE has no ...` names (default: the field's name)


def _required(shape: _Shape, missing: Optional[str] = None) -> _Field:
  return _Field(shape, True, missing)


def _optional(shape: _Shape) -> _Field:
  return _Field(shape)


@dataclasses.dataclass(frozen=True)
class _Object(_Shape):
  """An object of named fields (the others it holds are not looked at)."""
  fields: dict  # name -> _Field
  what: str = 'an object'

  def fits(self, value) -> bool:
    return isinstance(value, dict)

  def inner_problem(self, value, where: str) -> Optional[str]:
    for name, field in self.fields.items():
      if name in value:
        problem = field.shape.problem(value[name], _at(where, name))
        if problem:
          return problem
      elif field.required:
        return f'{where} has no {field.missing or name}'
    return None


_ANY = _Scalar('a value', lambda _: True)
_TEXT = _text('a text')
_BOOLEAN = _Scalar('true or false', lambda v: isinstance(v, bool))
_COUNT = _whole('a count')
_POSITIVE = _whole('a whole number above 0', 1)
_RATE = _Scalar('a number in 0..1', lambda v: _is_number(v) and 0 <= v <= 1)
_COUNTS = _MapOf(_COUNT, 'an object of counts')
# rejected rows by reason: {'stage/code': count}
_REASONS = _MapOf(_COUNT, 'an object of counts by reason', key=_Scalar(
    'a reason stage/code', lambda v: '/' in v))
# feature_spec's shapes: [] a scalar, [N], [null] a list, [null, N] a list of N-tuples
_FEATURE_SHAPE = _Scalar('a shape ([], [N], [null] or [null, N])', lambda v: isinstance(
    v, list) and (v in ([], [None]) or (len(v) in (1, 2) and _is_int(v[-1]) and v[-1] > 0
                                        and (len(v) == 1 or v[0] is None))))

INFO_SHAPE = _Object({
    'format_version': _required(_ANY),  # parse_info checks it first, on its own
    'schema': _required(_text('a schema name')),
    'feature_spec': _required(_MapOf(
        _Object({'dtype': _required(_OneOf(tuple(FEATURE_DTYPES.values()))),
                 'shape': _required(_FEATURE_SHAPE)}, 'an object of dtype and shape'),
        'an object of features', empty='names no feature')),
    'image': _required(_Object({
        # null: each image's own size (--resize_mode none)
        'height': _required(_Nullable(_POSITIVE)),
        'width': _required(_Nullable(_POSITIVE)),
        'channels': _required(_OneOf((1, 3))),
        'encoding': _required(_OneOf(ENCODINGS)),
        'resize_mode': _optional(_OneOf(RESIZE_MODES)),
        'resize_filter': _optional(_OneOf(RESIZE_FILTERS)),
        'jpeg_quality': _optional(_whole('a quality in 1..100', 1, 100)),
        'background': _optional(_ListOf(_whole('a colour value in 0..255', 0, 255),
                                        'an [R, G, B] colour', length=3)),
        'max_pixels': _optional(_POSITIVE),
        'formats': _optional(_Either((_OneOf(('all',)), _ListOf(_TEXT, 'a list of formats')),
                                     "'all' or a list of formats")),
        'max_image_bytes': _optional(_POSITIVE),
    }, 'an object of the image spec')),
    'compression': _required(_OneOf(COMPRESSIONS)),
    'num_classes': _optional(_COUNT),
    'label_map': _required(_ListOf(_text('a class name'), 'a list of class names')),
    'splits': _required(_MapOf(_Object({
        'num_examples': _required(_COUNT),
        'num_bytes': _required(_COUNT),
        'shards': _required(_ListOf(_file_name('a shard name'), 'a list of shards'),
                            missing='list of shards'),
        'sources': _optional(_file_name('a sidecar name')),
        'examples_per_class': _optional(_COUNTS),
        'objects_per_class': _optional(_COUNTS),  # --schema detection
        'num_objects': _optional(_COUNT),
    }), 'an object of splits')),
    'num_examples': _optional(_COUNT),
    'num_manifest_rows': _optional(_COUNT),
    'num_rejected': _optional(_COUNT),
    'rejected_by_reason': _optional(_REASONS),
    'error_rate': _optional(_RATE),
    'max_error_rate': _optional(_RATE),
    'over_budget': _optional(_BOOLEAN),
    'num_label_manifest_rows_rejected': _optional(_COUNT),
    'label_manifest_rejected_by_reason': _optional(_REASONS),
    'rejected_annotations_by_reason': _optional(_REASONS),  # --schema detection
    # record_order 'shuffled': validate checks each shard's order (wrong_record_order)
    'sink': _optional(_Object({'deterministic': _optional(_BOOLEAN),
                               'index_files': _optional(_BOOLEAN),
                               'record_order': _optional(_OneOf(
                                   ('shuffled', 'manifest', 'arrival')))})),
    'sources_format_version': _optional(_POSITIVE),
    # validate --recompute counts the rows of a manifest still at these versions
    'manifest_versions': _optional(_Object({
        role: _optional(_ListOf(_text('a file version'), 'a list of file versions'))
        for role in ('rows', 'labels')}, 'an object of manifest file versions')),
    # What the records were converted with (the wrong_split check's --split).
    'config': _required(_Object({
        # null: not split by hash; a pair per split otherwise
        'split': _required(_Nullable(_ListOf(
            _Pair(_text('a split name'),
                  _Scalar('a fraction in (0, 1]', lambda v: _is_number(v) and 0 < v <= 1),
                  'a [split name, fraction] pair'),
            'a list of [split name, fraction] pairs', nonempty=True))),
        'seed': _optional(_Scalar('a whole number', _is_int)),
        'split_by': _optional(_Nullable(_OneOf(('key', 'content')))),
    }, 'an object of the options used')),
    'options': _optional(_Object({'allow_empty': _optional(_BOOLEAN)},
                                 'an object of options')),
    'detection': _optional(_Object({  # --schema detection
        'num_objects': _optional(_COUNT),
        'objects_per_class': _optional(_COUNTS),
        'num_rejected_annotations': _optional(_COUNT),
        'dropped_boxes': _optional(_COUNTS),
        'on_bad_box': _optional(_OneOf(('drop', 'reject_row'))),
        'keypoint_values': _optional(_COUNT),  # YOLO pose: validate --recompute's
    })),
})

# The fields a file cannot lack (the message lists all it lacks).
REQUIRED = tuple(name for name, field in INFO_SHAPE.fields.items() if field.required)


def problem(info: dict) -> Optional[str]:
  """What is of another shape in `info` (a dict holding REQUIRED, its
  format_version readable) than INFO_SHAPE and its schema's table say, or
  None."""
  return INFO_SHAPE.problem(info, '') or _table_problem(info)


def _table_problem(info: dict) -> Optional[str]:
  """What feature_spec and image say against the schema's own table
  (feature_tables.feature_table), which the checks and readers go by: a feature of it
  left out, or declared with another dtype or shape; a schema whose records
  hold no size of their own (seed) without the size of all of them."""
  schema, declared = info['schema'], info['feature_spec']
  table = ExampleSpec.of_dataset(schema, declared).table()
  for feature in table.features:
    wanted = {'dtype': FEATURE_DTYPES[feature.kind], 'shape': list(feature.shape)}
    if feature.name not in declared:
      return f'feature_spec has no {feature.name}, a feature of the schema {schema!r}'
    if {key: declared[feature.name][key] for key in wanted} != wanted:
      return (f'feature_spec.{feature.name} {_shown(declared[feature.name])} is not as the '
              f'schema {schema!r} declares it: {wanted}')
  sized = table.size or any(f.name == 'image/height' for f in table.features)
  unsized = [name for name in ('height', 'width') if info['image'][name] is None]
  if unsized and not sized:  # seed: raw pixels, every record of the image's size
    return (f'image.{unsized[0]} None is not a size, and the records of the schema '
            f'{schema!r} hold none of their own (their raw pixels are all image.height x '
            f'image.width)')
  return None
