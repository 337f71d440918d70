"""Beam's look at a DoFn method's parameters, done once per method, not ~8 times per ParDo.

Beam finds a DoFn's special parameters (DoFn.ElementParam, state, timers) by
calling inspect.signature on every method of the DoFn (`dir(dofn)`: ~30 with
the base class's), through MethodWrapper and get_dofn_specs, each time it
builds, checks, translates or runs a ParDo: 6,289 inspect.signature calls for a
10-image convert. The answer depends only on the function behind the bound
method, so it is kept per function. Measured on 2 cores, a 10-image convert
run in a process that had already run one (median of 5, twice, interleaved):
1.15-1.18 s -> 0.80-0.83 s; the first run in a process 1.40-1.57 -> 0.96-1.10 s.
"""

from __future__ import annotations

import contextlib
import functools
import types
import weakref

from apache_beam.transforms import core

_MARK = 'remembers_method_signatures'


def remember_method_signatures() -> None:
  """Makes Beam's get_function_args_defaults (-> (argument names, defaults))
  remember its answer for a bound method's function: the signature of a bound
  method is its function's minus the first parameter, whatever the instance.
  Plain functions (Map, FlatMap lambdas) are inspected every time, as before.
  The functions are held weakly: a DoFn class made per pipeline is not kept
  alive. Idempotent. Callers get new lists."""
  original = getattr(core, 'get_function_args_defaults', None)
  if original is None or getattr(original, _MARK, False):
    return  # another Beam than requirements.txt pins: it runs as it is, only slower
  remembered = weakref.WeakKeyDictionary()

  @functools.wraps(original)  # and __wrapped__: Beam's own, for the tests
  def get_function_args_defaults(f):
    if not (isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType)):
      return original(f)
    if f.__func__ not in remembered:
      remembered[f.__func__] = original(f)
    args, defaults = remembered[f.__func__]
    return list(args), list(defaults)

  setattr(get_function_args_defaults, _MARK, True)
  core.get_function_args_defaults = get_function_args_defaults


@contextlib.contextmanager
def method_signatures_remembered():
  """remember_method_signatures() for one with block, Beam's own function put
  back after it (pipeline.api: a run leaves Beam as it found it). Already
  remembered (by the command line): left so."""
  original = getattr(core, 'get_function_args_defaults', None)
  remember_method_signatures()
  try:
    yield
  finally:
    if original is not None:
      core.get_function_args_defaults = original
