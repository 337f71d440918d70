"""Beam's DoFn method inspection, remembered per function (pipeline/beam_runtime/beam_signatures.py)."""

from __future__ import annotations

import gc
import importlib
import os
import pkgutil
import subprocess
import sys
import types
import weakref

import apache_beam as beam
from apache_beam.transforms import core
import pytest

import pipeline
from pipeline.beam_runtime import beam_signatures
import transforms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def remembering():
  """-> (the remembering get_function_args_defaults, Beam's own)."""
  beam_signatures.remember_method_signatures()
  return core.get_function_args_defaults, core.get_function_args_defaults.__wrapped__


def _our_dofns() -> list:
  for package in (pipeline, transforms):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):
      importlib.import_module(module.name)
  found, todo = [], [beam.DoFn]
  while todo:
    cls = todo.pop()
    todo += cls.__subclasses__()
    if cls.__module__.split('.')[0] in ('pipeline', 'transforms'):
      found.append(cls)
  return found


def test_every_method_of_our_dofns_gets_beams_answer(remembering):
  remembered, beams = remembering
  dofns = _our_dofns()
  assert len(dofns) >= 8, dofns  # LoadImageFn, ReadShardFn, the shard writers, ...
  methods = 0
  for cls in dofns + [beam.DoFn]:
    instance = object.__new__(cls)  # no __init__: only the methods are looked at
    for name in dir(cls):
      method = getattr(instance, name, None)
      if isinstance(method, types.MethodType):
        assert remembered(method) == beams(method), (cls, name)
        assert remembered(method) == beams(method), (cls, name)  # the remembered answer
        methods += 1
  # every class's methods were looked at: at least the 28 each inherits from DoFn
  base = object.__new__(beam.DoFn)
  inherited = sum(isinstance(getattr(base, name, None), types.MethodType)
                  for name in dir(beam.DoFn))
  assert inherited >= 20 and methods > inherited * (len(dofns) + 1)


def test_callers_get_lists_of_their_own(remembering):
  remembered, _ = remembering

  class WithDefaults(beam.DoFn):
    def process(self, element, window=beam.DoFn.WindowParam):
      yield element, window

  method = WithDefaults().process
  args, defaults = remembered(method)
  assert (args, defaults) == (['element', 'window'], [beam.DoFn.WindowParam])
  args.append('spoiled')
  defaults.clear()
  assert remembered(method) == (['element', 'window'], [beam.DoFn.WindowParam])


def test_a_method_is_inspected_once_and_a_plain_function_every_time(remembering):
  remembered, _ = remembering

  class Once(beam.DoFn):
    def process(self, element, extra=1):
      yield element + extra

  def plain(element, extra=1):
    return element + extra

  assert remembered(Once().process) == (['element', 'extra'], [1])
  assert remembered(plain) == (['element', 'extra'], [1])
  Once.process.__defaults__ = (2,)  # only an inspection would see it
  plain.__defaults__ = (2,)
  assert remembered(Once().process) == (['element', 'extra'], [1])
  assert remembered(plain) == (['element', 'extra'], [2])


def test_installing_twice_wraps_beams_function_once(remembering):
  remembered, beams = remembering
  beam_signatures.remember_method_signatures()
  assert core.get_function_args_defaults is remembered
  assert not hasattr(beams, '__wrapped__')


@pytest.mark.slow  # Beam in a subprocess
def test_every_command_run_remembers_signatures():
  """exits.main_with_exit_codes, which convert, validate and the Flex Template
  entry run through, installs it (a fresh interpreter: here it already is)."""
  script = ('from apache_beam.transforms import core\n'
            'from pipeline.runs import exits\n'
            'before = hasattr(core.get_function_args_defaults, "__wrapped__")\n'
            'code = exits.main_with_exit_codes(lambda argv: 0, [])\n'
            'print(before, code, hasattr(core.get_function_args_defaults, "__wrapped__"))\n')
  done = subprocess.run([sys.executable, '-c', script], cwd=ROOT, capture_output=True,
                        text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT))
  assert done.stdout.split() == ['False', '0', 'True']


def test_a_dofn_class_that_goes_away_is_not_kept(remembering):
  remembered, _ = remembering

  def make_class():
    class ForOnePipeline(beam.DoFn):
      def process(self, element):
        yield element
    return ForOnePipeline

  cls = make_class()
  assert remembered(cls().process) == (['element'], [])
  function = weakref.ref(cls.process)
  del cls
  gc.collect()
  assert function() is None
