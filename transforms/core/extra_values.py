"""Extra feature values from a manifest cell (--extra_features): a CSV/TSV
cell's space-separated values or a JSON value, checked against the declared
type and shape."""

from __future__ import annotations

import json
import math
from typing import Optional

from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import RowError


# What a row without the column gives parse_extra (cells.get(name, ABSENT)):
# a cell that is there but null (JSON null; NaN, None or pandas' NA in
# api.convert's rows) is an empty cell, not a missing column.
class _Absent:

  def __repr__(self) -> str:
    return 'ABSENT'


ABSENT = _Absent()


def is_null(value) -> bool:
  """None, or JSON's NaN (what json.dumps writes for a pandas gap): an empty
  cell, as in api.convert's rows (pipeline/api.py), never the text 'nan'."""
  return value is None or (isinstance(value, float) and math.isnan(value))


def shape_problem(count: int, shape) -> Optional[str]:
  """Why `count` values do not fit a declared shape ((), (N,), (None,),
  (None, N), or the same as JSON lists), or None when they do."""
  shape = tuple(shape)
  if shape == ():
    return None if count == 1 else f'has {count} values, a scalar holds exactly 1'
  if len(shape) == 1 and shape[0] is not None:
    return None if count == shape[0] else f'has {count} values, expected {shape[0]}'
  if len(shape) == 2 and shape[1]:
    return None if count % shape[1] == 0 else (
        f'has {count} values, not a whole number of {shape[1]}-tuples')
  return None


def parse_extra(value, kind: str, column: str, fmt: str, shape: tuple = (None,)) -> list:
  """A CSV/TSV cell of space-separated values (a scalar bytes cell: the whole
  text), or a JSON value or list (of N-lists for shape (None, N)) -> the values,
  flattened; RowError when they are not `kind` or do not fit `shape`.
  value: ABSENT when the row has no such column, None for a null cell."""
  if value is ABSENT:
    raise RowError(STAGE_MANIFEST, 'missing_feature', f'column {column!r} is missing')
  if is_null(value):  # a JSON line's NaN is an empty cell, as null (docs/manifests.md)
    value = None
  if shape == () and value in (None, ''):
    raise RowError(STAGE_MANIFEST, 'missing_feature',
                   f'column {column!r} is empty; it holds one value (a scalar)')
  if value is None:
    raise RowError(STAGE_MANIFEST, 'missing_feature',
                   f'column {column!r} is empty (null); [] holds no values')
  if isinstance(value, list):
    items = value
    if len(shape) == 2 and all(isinstance(item, list) for item in items):
      if any(len(item) != shape[1] for item in items):
        raise RowError(STAGE_MANIFEST, 'bad_feature',
                       f'column {column!r} value {value!r} is not a list of '
                       f'{shape[1]}-lists')
      items = [v for item in items for v in item]
    if any(isinstance(item, list) for item in items):
      raise RowError(STAGE_MANIFEST, 'bad_feature',
                     f'column {column!r} value {value!r} is nested deeper than its shape '
                     f'{list(shape)}')
  elif fmt != 'jsonl' and not (shape == () and kind == 'bytes'):
    items = value.split()
  else:
    items = [value]
  try:
    if kind == 'float':
      values = [_as_float32(item) for item in items]
    elif kind == 'int64':
      values = [_as_int(item) for item in items]
    else:
      values = [item if isinstance(item, str) else json.dumps(_not_null(item)) for item in items]
  except (TypeError, ValueError) as error:
    raise RowError(STAGE_MANIFEST, 'bad_feature',
                   f'column {column!r} value {value!r} is not {kind}: {error}')
  problem = shape_problem(len(values), shape)
  if problem:
    if shape == () and not values:
      raise RowError(STAGE_MANIFEST, 'missing_feature',
                     f'column {column!r} is empty; it holds one value (a scalar)')
    raise RowError(STAGE_MANIFEST, 'bad_feature', f'column {column!r} value {value!r} '
                   f'{problem}')
  return values


def _not_null(item):
  """A list's item, unless null: as a float or int64 item is (json.dumps
  had stored a null of a bytes list, [1, null], as the text 'null')."""
  if is_null(item):
    raise ValueError(f'{item!r} is no value (a null in the list)')
  return item


FLOAT32_MAX = 3.4028234663852886e38


def _as_float32(item) -> float:
  if isinstance(item, bool):
    raise ValueError(f'{item!r} is not a number')
  value = float(item)
  if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
    raise ValueError(f'{item!r} is not a finite float32')
  return value


def _as_int(item) -> int:
  if isinstance(item, bool) or (isinstance(item, float) and not item.is_integer()):
    raise ValueError(f'{item!r} is not an integer')
  value = int(item)
  if not -2**63 <= value < 2**63:
    raise ValueError(f'{item!r} is out of int64 range')
  return value
