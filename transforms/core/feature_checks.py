"""A parsed record's declared features: each there, of its declared kind and
shape, and each float of a feature its schema does not check itself finite."""

from __future__ import annotations

import math

from transforms.core.example_proto import KIND_OF_DTYPE
from transforms.core.extra_values import shape_problem

NON_FINITE_VALUE = 'non_finite_value'


def non_finite(values) -> list:
  """The values (floats) that are NaN or infinite."""
  return [value for value in values if not math.isfinite(value)]


def check_features(features: dict, spec: dict, own: frozenset = frozenset()) -> list:
  """(kind, detail) problems with presence, kind and shape of the declared
  features, and a NaN or infinity in a float feature not in `own` (the
  schema's features, whose checks see their values: a detection box's own
  kinds). convert never writes one: it rejects such a cell
  (extra_values._as_float32), and a reader would train on it."""
  details = []
  for name, declared in spec.items():
    if name not in features:
      details.append(('missing_feature', f'feature {name!r} is missing'))
      continue
    kind, values = features[name]
    if kind != KIND_OF_DTYPE[declared['dtype']]:
      details.append(('wrong_type', f'feature {name!r} is {kind}, expected '
                      f'{KIND_OF_DTYPE[declared["dtype"]]}'))
    elif shape_problem(len(values), declared['shape']):
      details.append(('wrong_shape', f'feature {name!r} '
                      f'{shape_problem(len(values), declared["shape"])}'))
    elif kind == 'float_list' and name not in own and non_finite(values):
      bad = non_finite(values)
      details.append((NON_FINITE_VALUE, f'feature {name!r} holds {len(bad)} value(s) that '
                      f'are not finite numbers (first: {bad[0]!r})'))
  return details
