"""Cheap pickling for the frozen slots dataclasses every row travels as.

A row is pickled several times on its way: at each Beam shuffle (Beam's
FastPrimitivesCoder falls back to PickleCoder, pickle.dumps at the highest
protocol, for a type it does not know) and through the pipes to the image
worker processes. The __getstate__/__setstate__ Python generates for a frozen
dataclass with slots call dataclasses.fields() on every pickle and every
unpickle: a cProfile of a DirectRunner convert of 20,000 16x16 PNGs spent 1.1 s
of 15 s in fields() and 1.06 s in the generated __setstate__.

`cheap_pickle` keeps the same state (the field values, in field order; no
__init__ or __post_init__ run on unpickling, as before), the same type, and
the same equality, with each class's field getter and setters made once.
Measured (timeit of pickle.dumps + loads at the highest protocol, CPU time,
best of 15, Python 3.11 on 2 shared cores, typical rows of a 16x16 PNG run),
us per round trip before -> after: ManifestRow 13.1 -> 7.1, LabelledRow
19.1 -> 10.8, LoadedImage (a 768-byte image) 35.6 -> 20.3; 256 of them in one
pickle: 2,484 -> 1,116, 3,704 -> 1,531, 7,297 -> 2,945. (BuiltExample, a
NamedTuple, already pickles as a tuple: 4.9 us, unchanged.) In the launcher
of a DirectRunner convert of 2,001 rows, fields() ran 11,033 times before, 19 after.
"""

from __future__ import annotations

from collections.abc import Callable
import copyreg
import dataclasses
import io
import operator
import pickle
import types
from typing import Any
from typing import NamedTuple
from typing import TypeVar

_Class = TypeVar('_Class', bound=type)


class _Plan(NamedTuple):
  """How one class pickles, made once: its fields' values as one tuple, and
  one setter per field."""
  values: Callable[[Any], tuple]
  setters: tuple  # (obj, value) -> None, in field order
  index: dict  # field name -> its place in field order
  # replaced() may pass every value by place: every field is a positional
  # __init__ argument and no __post_init__ runs (else dataclasses.replace)
  plain: bool


# {class: _Plan}: filled by cheap_pickle, and on first use for a subclass (with
# its own fields).
_PLANS: dict[type, _Plan] = {}


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
  """The slot's own __set__ (it skips the frozen class's __setattr__ and its
  name lookup: 7.4 against 8.6 us a ManifestRow round trip, object.__setattr__
  by name; 1,116 against 1,428 us for 256 of them in one pickle), or
  object.__setattr__ by name for a field a slot does not hold (a subclass
  without slots keeps its fields in __dict__)."""
  slot = getattr(cls, name, None)
  if isinstance(slot, types.MemberDescriptorType):
    return slot.__set__
  return lambda obj, value: object.__setattr__(obj, name, value)


def _plan(cls: type) -> _Plan:
  plan = _PLANS.get(cls)
  if plan is None:
    names = tuple(field.name for field in dataclasses.fields(cls))
    if len(names) > 1:  # one C call for all values, instead of a comprehension
      values = operator.attrgetter(*names)
    else:  # attrgetter of one name returns the value, not a 1-tuple
      values = lambda obj: tuple(getattr(obj, name) for name in names)  # noqa: E731
    plain = not hasattr(cls, '__post_init__') and all(
        field.init and not field.kw_only for field in dataclasses.fields(cls))
    plan = _PLANS[cls] = _Plan(values, tuple(_setter(cls, name) for name in names),
                               {name: i for i, name in enumerate(names)}, plain)
  return plan


def replaced(obj: Any, **changes) -> Any:
  """dataclasses.replace(obj, **changes) for an instance of a cheap_pickle
  class: the same new object (made by its __init__ from every value, given
  by place, when that only assigns them), at 1.5 against 4.2 us for a
  ManifestRow (timeit), which several per-row steps replace a field of."""
  cls = type(obj)
  plan = _PLANS.get(cls) or _plan(cls)
  if not plan.plain:
    return dataclasses.replace(obj, **changes)
  values = list(plan.values(obj))
  index = plan.index
  for name, value in changes.items():
    place = index.get(name)
    if place is None:
      raise TypeError(f'{cls.__name__} has no field {name!r}')
    values[place] = value
  return cls(*values)  # its __init__ only assigns (plan.plain): cheap_pickle's own


def _getstate(self: Any) -> tuple:
  """The field values in field order: what the generated __getstate__ gives
  (as a tuple, not a list)."""
  return (_PLANS.get(type(self)) or _plan(type(self))).values(self)


def _setstate(self: Any, state: tuple | list) -> None:
  # A list is taken too: what the generated __getstate__ gave, in a pickle
  # made before cheap_pickle.
  for setter, value in zip((_PLANS.get(type(self)) or _plan(type(self))).setters, state):
    setter(self, value)


def _unrolled_setstate(cls: type, plan: _Plan) -> Callable:
  """_setstate for `cls` with its loop unrolled (one setter call a field,
  the state unpacked at once): 1.3 against 1.6 us a ManifestRow unpickled in
  a batch of 256 (timeit), which every row pays at each shuffle and each
  image worker's reply. A state of another length (a subclass's) goes
  through _setstate."""
  count = len(plan.setters)
  namespace = {f'_set{i}': setter for i, setter in enumerate(plan.setters)}
  namespace['_setstate'] = _setstate
  names = ', '.join(f'value{i}' for i in range(count))
  source = ('def __setstate__(self, state):\n'
            f'  if len(state) != {count}:\n'
            '    return _setstate(self, state)\n'
            f'  {names}, = state\n'
            + ''.join(f'  _set{i}(self, value{i})\n' for i in range(count)))
  exec(source, namespace)  # setter names only
  setstate = namespace['__setstate__']
  setstate.__qualname__ = f'{cls.__qualname__}.__setstate__'
  return setstate


def _reduce(self: Any) -> tuple:
  """(copyreg.__newobj__, (class,), values): pickle writes NEWOBJ and BUILD,
  as with the generated methods, without object.__reduce_ex__'s detour
  through __getnewargs_ex__, __getstate__ and the slot names. type(self): a
  subclass pickles as itself, with its own fields."""
  cls = type(self)
  return copyreg.__newobj__, (cls,), (_PLANS.get(cls) or _plan(cls)).values(self)


def _fast_init(cls: type, plan: _Plan) -> Callable:
  """The generated __init__ of a frozen dataclass whose __init__ only
  assigns (plan.plain, plain defaults): the same signature and defaults,
  each field set through its slot's own setter, not object.__setattr__ by
  name: 1.3 against 2.1 us a ManifestRow (timeit, 9 of its 18 fields given),
  which every manifest line makes."""
  namespace, parameters, body = {}, [], []
  for i, field in enumerate(dataclasses.fields(cls)):
    namespace[f'_set{i}'] = plan.setters[i]
    if field.default is dataclasses.MISSING:
      parameters.append(field.name)
    else:
      namespace[f'_default{i}'] = field.default
      parameters.append(f'{field.name}=_default{i}')
    body.append(f'  _set{i}(self, {field.name})')
  source = f'def __init__(self, {", ".join(parameters)}):\n' + '\n'.join(body or ['  pass']) + '\n'
  exec(source, namespace)  # its field names only, from the class itself
  init = namespace['__init__']
  init.__qualname__ = f'{cls.__qualname__}.__init__'
  init.__doc__ = cls.__init__.__doc__
  init.__annotations__ = dict(cls.__init__.__annotations__)
  return init


def cheap_pickle(cls: _Class) -> _Class:
  """Class decorator, above @dataclasses.dataclass(frozen=True, slots=True)
  (which makes a new class: the one to give these methods to). Instances hold,
  compare and pickle to the same values as before; only the cost changes. A
  subclass pickles as itself, with its fields; one with slots unpickles
  through its generated __setstate__ (fields() again) unless decorated too."""
  if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
    raise TypeError(f'cheap_pickle wants a dataclass, not {cls!r}')
  plan = _plan(cls)
  if len(plan.setters) > 1:
    cls.__setstate__ = _unrolled_setstate(cls, plan)
  else:
    cls.__setstate__ = _setstate
  if plan.plain and not any(field.default_factory is not dataclasses.MISSING
                            for field in dataclasses.fields(cls)):
    cls.__init__ = _fast_init(cls, plan)
  cls.__reduce__ = _reduce
  cls.__getstate__ = _getstate
  return cls


class _ViewsAsBytes(pickle.Pickler):
  """Pickles a memoryview as the bytes it shows."""

  def reducer_override(self, obj):
    if isinstance(obj, memoryview):
      return bytes, (obj.tobytes(),)
    return NotImplemented


def pickled(value) -> bytes:
  """value pickled; a memoryview in it (a copied record's data, a view into
  its framed bytes: core/copies.Copied) as its bytes. Tried only after the
  plain pickle fails: the override is a Python call per object pickled."""
  try:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
  except TypeError:  # anything else unpicklable fails the same way again
    stream = io.BytesIO()
    _ViewsAsBytes(stream, pickle.HIGHEST_PROTOCOL).dump(value)
    return stream.getvalue()
