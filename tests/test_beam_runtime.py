"""What each hook of pipeline/beam_runtime/ relies on in the pinned Beam: after
a Beam upgrade, a failure here names the hook to revisit."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import types

import pytest


def _require(hook: str, condition: bool, what: str) -> None:
  if not condition:
    pytest.fail(f'pipeline/beam_runtime/{hook}.py is stale: the pinned Beam {what}')


def test_beam_signatures_hook():
  """It replaces apache_beam.transforms.core.get_function_args_defaults, which
  Beam's DoFn inspection calls through the module, with a cached one."""
  from apache_beam.transforms import core
  function = getattr(core, 'get_function_args_defaults', None)
  _require('beam_signatures', callable(function),
           'has no apache_beam.transforms.core.get_function_args_defaults')
  original = inspect.unwrap(function)
  _require('beam_signatures', list(inspect.signature(original).parameters) == ['f'],
           'changed the parameters of get_function_args_defaults (expected f)')

  class Fn:
    def process(self, element, extra=3):
      del element, extra

  answer = original(Fn().process)
  _require('beam_signatures', isinstance(answer, tuple) and len(answer) == 2
           and list(answer[0]) == ['element', 'extra'] and list(answer[1]) == [3],
           f'get_function_args_defaults(bound method) gives {answer!r}, not '
           "(['element', 'extra'], [3])")
  source = inspect.getsource(core)
  _require('beam_signatures', 'get_function_args_defaults(' in source,
           'no longer calls get_function_args_defaults inside apache_beam.transforms.core')


def test_startup_hook():
  """It hides DEFERRED packages while Beam is imported: Beam's module among them
  must exist, and Beam must import them under try/except ImportError."""
  from pipeline.beam_runtime import startup
  for name in startup.DEFERRED:
    if name.startswith('apache_beam.'):
      _require('startup', importlib.util.find_spec(name) is not None, f'has no module {name}')
  import apache_beam.io
  source = inspect.getsource(apache_beam.io)
  _require('startup', 'except ImportError' in source,
           'apache_beam.io no longer imports its optional IOs under try/except ImportError')


def test_local_runner_hook():
  """It runs FnApiRunner itself, with ExtendedProvisionInfo built from the
  pipeline options, and skips the runner-API round trip with
  Pipeline.run(test_runner_api=False)."""
  from apache_beam.pipeline import Pipeline
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  from apache_beam.runners.portability.portable_runner import JobServiceHandle
  from apache_beam.runners.runner import PipelineRunner
  _require('local_runner', hasattr(beam_provision_api_pb2, 'ProvisionInfo'),
           'has no beam_provision_api_pb2.ProvisionInfo')
  _require('local_runner', isinstance(getattr(fn_runner, 'ExtendedProvisionInfo', None), type),
           'has no fn_runner.ExtendedProvisionInfo')
  runner_init = inspect.signature(getattr(fn_runner, 'FnApiRunner', object).__init__)
  _require('local_runner', 'provision_info' in runner_init.parameters,
           'has no FnApiRunner(provision_info=...)')
  _require('local_runner', callable(getattr(JobServiceHandle, 'encode_pipeline_options', None)),
           'has no JobServiceHandle.encode_pipeline_options')
  _require('local_runner', callable(getattr(PipelineRunner, 'is_fnapi_compatible', None)),
           'has no PipelineRunner.is_fnapi_compatible')
  _require('local_runner', 'test_runner_api' in inspect.signature(Pipeline.run).parameters,
           'has no Pipeline.run(test_runner_api=...)')
  from apache_beam.options.pipeline_options import PipelineOptions

  from pipeline.beam_runtime import local_runner
  made = local_runner.for_options(PipelineOptions(['--runner', 'DirectRunner']))
  _require('local_runner', isinstance(made, PipelineRunner), 'PipelineRunner changed')
  # _dead_workers_fail_bundles: its start_worker is Beam's but for the thread's target.
  from apache_beam.runners.portability.fn_api_runner import worker_handlers
  handler = getattr(worker_handlers, 'SubprocessSdkWorkerHandler', None)
  source = inspect.getsource(handler.start_worker) if handler else ''
  _require('local_runner', all(part in source for part in (
      'local_job_service.SubprocessSdkWorker(', 'self._worker_command_line',
      'self.control_address', 'self.provision_info', 'self.worker_id',
      "name='run_worker', target=self.worker.run")),
           'starts SubprocessSdkWorkerHandler workers otherwise')
  _require('local_runner', callable(getattr(handler, 'stop_worker', None)),
           'has no SubprocessSdkWorkerHandler.stop_worker')
  conn = worker_handlers.ControlConnection()
  _require('local_runner', isinstance(getattr(conn, '_futures_by_id', None), dict)
           and hasattr(worker_handlers.BeamFnControlServicer, '_DONE_MARKER'),
           'has no ControlConnection._futures_by_id or BeamFnControlServicer._DONE_MARKER')


def test_sdk_workers_hook():
  """A multi_processing run starts each SDK worker with a command line
  naming sdk_workers.SDK_WORKER_MODULE (how stop() finds them), and waits in
  close_all for each worker process to end (why they must be stopped)."""
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  from apache_beam.runners.portability.fn_api_runner import worker_handlers

  from pipeline.beam_runtime import sdk_workers
  runner_source = inspect.getsource(fn_runner.FnApiRunner)
  _require('sdk_workers', f'-m {sdk_workers.SDK_WORKER_MODULE}' in runner_source,
           f'FnApiRunner no longer starts workers with -m {sdk_workers.SDK_WORKER_MODULE}')
  stop = inspect.getsource(worker_handlers.SubprocessSdkWorkerHandler.stop_worker)
  _require('sdk_workers', 'join()' in stop,
           'SubprocessSdkWorkerHandler.stop_worker no longer waits for its worker: '
           'sdk_workers.stop may be needless now')
  # worker_command's parent-death signal fires when the thread that started
  # the worker ends: it must be the thread that waits for it.
  from apache_beam.runners.portability import local_job_service
  run = inspect.getsource(local_job_service.SubprocessSdkWorker.run)
  _require('sdk_workers', 'subprocess.Popen(self._worker_command_line, shell=True' in run
           and 'p.wait()' in run,
           'SubprocessSdkWorker.run no longer starts its worker (a shell command) and '
           'waits for it on one thread: its parent-death signal may end it early')


def test_fast_exit_hook():
  """It leaves through os._exit once streams and logging are flushed: no Beam
  internals, but it is only safe while Beam's threads need no teardown (every
  file is written and closed before the command line ends)."""
  from pipeline.beam_runtime import fast_exit
  _require('fast_exit', isinstance(getattr(os, '_exit', None), types.BuiltinFunctionType),
           'runs on a Python without os._exit')
  _require('fast_exit', callable(fast_exit.exit_now), 'lost exit_now')
  _require('fast_exit', callable(getattr(importlib.import_module('logging'), 'shutdown', None)),
           'runs on a Python without logging.shutdown')


def test_not_interactive_hook():
  """It swaps apache_beam.pipeline's is_in_ipython and alter_label_if_ipython,
  which Pipeline.apply and Pipeline.run call through that module's names."""
  from apache_beam import pipeline as beam_pipeline

  from pipeline.beam_runtime import not_interactive
  for name in not_interactive.PATCHED:
    _require('not_interactive', callable(getattr(beam_pipeline, name, None)),
             f'has no apache_beam.pipeline.{name}')
  source = inspect.getsource(beam_pipeline.Pipeline)
  _require('not_interactive', 'alter_label_if_ipython(transform, pvalueish)' in source,
           'no longer hands applied transforms to alter_label_if_ipython in Pipeline')
  _require('not_interactive', 'is_in_ipython()' in source,
           'no longer asks is_in_ipython() in Pipeline')
  before = [getattr(beam_pipeline, name) for name in not_interactive.PATCHED]
  with not_interactive.outside_interactive_beam():
    assert beam_pipeline.is_in_ipython() is False
  assert [getattr(beam_pipeline, name) for name in not_interactive.PATCHED] == before


class _FakeServer:
  def start(self):
    return 'localhost:8099'

  def stop(self):
    pass


@pytest.mark.parametrize('before', ['ignored', 'handled'])
def test_job_server_sigint_hook(before):
  """It wraps apache_beam.runners.portability.job_server.StopOnExitJobServer.start,
  which installs Beam's SIGINT handler: whatever handled SIGINT before (the
  command line's handler, or none: ignored) handles it after."""
  import signal

  from apache_beam.runners.portability import job_server

  from pipeline.beam_runtime.job_server_sigint import keep_sigint_handler
  _require('job_server_sigint', callable(getattr(job_server.StopOnExitJobServer, 'start', None)),
           'has no StopOnExitJobServer.start')
  _require('job_server_sigint', 'signal.signal(signal.SIGINT' in inspect.getsource(
      job_server.StopOnExitJobServer), 'no longer installs a SIGINT handler in StopOnExitJobServer')
  saved_start, saved_handler = job_server.StopOnExitJobServer.start, signal.getsignal(signal.SIGINT)

  def mine(signum, frame):
    del signum, frame

  signal.signal(signal.SIGINT, signal.SIG_IGN if before == 'ignored' else mine)
  try:
    server = job_server.StopOnExitJobServer(_FakeServer())
    server.start()
    # Beam's own handler, which stops the job server first (what the hook undoes)
    assert getattr(signal.getsignal(signal.SIGINT), '__func__', None) is (
        job_server.StopOnExitJobServer._sigint_handler)
    server.stop()
    signal.signal(signal.SIGINT, signal.SIG_IGN if before == 'ignored' else mine)
    keep_sigint_handler()
    keep_sigint_handler()  # idempotent: wrapped once
    server = job_server.StopOnExitJobServer(_FakeServer())
    assert server.start() == 'localhost:8099'
    assert signal.getsignal(signal.SIGINT) is (signal.SIG_IGN if before == 'ignored' else mine)
    server.stop()
  finally:
    job_server.StopOnExitJobServer.start = saved_start
    signal.signal(signal.SIGINT, saved_handler)
