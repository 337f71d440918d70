"""Beam's FlinkRunner and SparkRunner, with the job server a run starts
stopped when its job ends (a job still running when the launcher is
interrupted is cancelled first), and without the harness's tracebacks when the
runner hangs up on it, or printed to stderr besides the log.

runners.prepare names these classes as the runner (Beam makes a runner from
its dotted name; the name the job server sees is none: the portable runner
sends no runner option). Beam stops the job server it starts only at
interpreter exit (atexit), which a command-line run skips (fast_exit), and by
then the run's temp folder, which holds the job server's files, is gone:
every run left its JVM, an embedded Flink or a local Spark, running.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
import logging
import os
import sys
import threading
import time
from typing import Optional

from apache_beam.options.pipeline_options import JobServerOptions
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.runners.portability import flink_runner
from apache_beam.runners.portability import spark_runner
from apache_beam.runners.runner import PipelineState
from apache_beam.runners.worker import sdk_worker
from apache_beam.utils.sentinel import Sentinel
import grpc

from pipeline.beam_runtime.job_server_sigint import keep_sigint_handler
from pipeline.engines import job_server_launcher
from pipeline.errors import UsageError

# The loggers of the SDK harness's streams: with LOOPBACK the harness runs in
# this process.
_HARNESS_LOGGERS = ('apache_beam.runners.worker.data_plane',
                    'apache_beam.runners.worker.sdk_worker')
# Set once a job has ended: the harness's streams close with the job server.
_job_over = threading.Event()
# How long an interrupted job is given to end once cancelled, before its job
# server is stopped all the same (an embedded Flink cancelled in about 1 s).
CANCEL_WAIT_S = 30.0
_POLL_S = 0.5


class _StopsItsJobServer:
  """Mixin: the job server is stopped with the job's own clean-up (the
  PipelineResult runs it when the job reaches a terminal state: done, failed
  or cancelled), or at once when submitting the job fails; its JVM ends with
  this process if that is killed outright, where setpriv exists
  (job_server_launcher.py)."""

  def default_job_server(self, options):
    java = options.view_as(JobServerOptions)
    if os.path.basename(java.job_server_java_launcher) != job_server_launcher.WRAPPER:
      java.job_server_java_launcher = job_server_launcher.dying_with_launcher(
          java.job_server_java_launcher)
    server = super().default_job_server(options)
    # Beam's hook for its job server's output (logged line by line): kept
    # for the one line of a job server that does not start
    jar_server = getattr(server, '_job_server', None)
    if hasattr(jar_server, '_log_filter'):
      jar_server._log_filter = self._output = _LastLines()
    self._job_servers.append(server)
    return server

  def run_portable_pipeline(self, pipeline, options):
    _quiet_hang_ups()
    keep_sigint_handler()
    _job_over.clear()
    self._job_servers = []
    self._output = None
    try:
      result = super().run_portable_pipeline(pipeline, options)
    except BaseException as error:
      for server in self._job_servers:
        server.stop()
      if isinstance(error, RuntimeError) and str(error).startswith(_NOT_STARTED):
        raise JobServerDidNotStart(self._label(), str(error), self._output) from error
      raise
    # Read by the result's state observer, which starts in wait_until_finish,
    # and runs them when the job ends, or when the wait is interrupted.
    result._cleanup_callbacks = [_job_over.set, *result._cleanup_callbacks,
                                 _cancel_then_stop(result, self._job_servers)]
    return result

  def _label(self) -> str:
    return type(self).__name__[:-len('Runner')]


# Beam's SubprocessServer, when the job server's process has ended before it
# answered (after three tries): `Service failed to start up with error 1`.
_NOT_STARTED = 'Service failed to start up with error'
LAST_LINES = 3  # of the job server's output, in its one line (a JVM's error is 2-3 lines)


class _LastLines(logging.Filter):
  """Keeps the last lines the job server printed (Beam logs each at INFO,
  to a logger of its own, which it sets to INFO when given this filter): a
  JVM that did not start says why in them (`Could not find or load main
  class`, `Too small maximum heap`), which the run's line needs. Each goes
  on only where the logging in force takes it (not the command line's
  ERROR level), as before Beam lowered the level."""

  def __init__(self):
    super().__init__()
    self.lines = collections.deque(maxlen=LAST_LINES)

  def filter(self, record):
    line = record.getMessage().strip()
    if line:
      self.lines.append(line[:300])
    parent = logging.getLogger(record.name).parent
    return parent is None or parent.isEnabledFor(record.levelno)


class JobServerDidNotStart(UsageError):
  """The job server's JVM ended before it answered: one line with what it
  printed last, exit 2, instead of Beam's three `Failed to start job service`
  lines and a traceback ending `Service failed to start up with error 1`."""

  def __init__(self, label: str, beams: str, output: Optional[_LastLines]):
    status = beams[len(_NOT_STARTED):].strip()
    # each of Beam's three tries printed the same: each line once
    lines = list(dict.fromkeys(reversed(output.lines if output else ())))[::-1]
    said = '; '.join(lines) or 'it printed nothing'
    super().__init__(f'the {label} job server ended as it started (Java exited with '
                     f'status {status}): {said}')


def _cancel_then_stop(result, servers: list) -> Callable[[], None]:
  """The job's last clean-up: a job not seen ending (its wait was
  interrupted: SIGINT, SIGTERM, KeyboardInterrupt) is cancelled through its
  job server first; then the job servers stop, and the result says so
  (job_server_stopped: RunGuard has nothing left to ask). A job that ended
  by itself first has its LOOPBACK harnesses stopped."""
  def clean_up():
    try:
      if not PipelineState.is_terminal(getattr(result, '_state', None) or PipelineState.UNKNOWN):
        _cancel(result)
      else:  # an interrupted run does not wait for its harness's steps
        _stop_loopback_harnesses()
    finally:
      result.job_server_stopped = True
      for server in servers:
        server.stop()
  return clean_up


# How long a LOOPBACK harness is given to tear its steps down once told to stop.
HARNESS_STOP_WAIT_S = 30.0


def _stop_loopback_harnesses(wait_s: float = HARNESS_STOP_WAIT_S) -> None:
  """Stops the SDK harnesses that LOOPBACK runs in this process's threads
  while their job server still answers, as Beam's worker pool does when a
  runner stops its environment (StopWorker: the harness's request stream
  ends, it shuts its bundle processors down, tearing down the steps: their
  image processes end). Flink stops its environments as its job ends; Spark
  caches them (--environment_cache_millis) and never did before its job server
  was stopped: the harness's stream broke, no step was torn down, and an
  api.convert(runner='SparkRunner') returned with its image processes still
  running (until Beam's idle clean-up, 1-2 minutes later)."""
  harnesses = [(thread, getattr(thread, '_target', None)) for thread in threading.enumerate()
               if thread.name.startswith('run_worker_')]
  harnesses = [(thread, getattr(run, '__self__', None)) for thread, run in harnesses]
  harnesses = [(t, h) for t, h in harnesses if isinstance(h, sdk_worker.SdkHarness)]
  for _, harness in harnesses:
    harness._responses.put(Sentinel.sentinel)
  deadline = time.monotonic() + wait_s
  for thread, _ in harnesses:
    thread.join(max(0.0, deadline - time.monotonic()))


def _cancel(result, wait_s: float = CANCEL_WAIT_S) -> None:
  """Cancels the job and waits up to wait_s for it to end. Not through
  PipelineResult.cancel(), which runs the job's clean-up, stopping the job
  server before the job has ended."""
  try:
    result._job_service.Cancel(beam_job_api_pb2.CancelJobRequest(job_id=result._job_id))
    deadline = time.monotonic() + wait_s
    while not PipelineState.is_terminal(result.state) and time.monotonic() < deadline:
      time.sleep(_POLL_S)
  except (grpc.RpcError, ValueError) as error:  # ValueError: its channel closed
    # The job server is gone already (a Ctrl-C in a terminal reaches its JVM
    # too), and the job it ran with it; a Flink cluster's job is cancelled
    # by name (flink_jobs.cancelled_if_abandoned).
    logging.getLogger(__name__).info('the job server is gone; no job to cancel: %s', error)


class FlinkRunner(_StopsItsJobServer, flink_runner.FlinkRunner):
  pass


class SparkRunner(_StopsItsJobServer, spark_runner.SparkRunner):
  pass


# Flink ends each stage's environment (CANCELLED); a runner gone (UNAVAILABLE)
# is what a Ctrl-C in a terminal does to its JVM, racing the launcher's own
# handler (once seen in ten such runs: a traceback above the `interrupted:`
# line). A runner that really died says so through the job's state stream,
# in the main thread: the harness's copies of it add only a traceback.
_HANG_UPS = (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)


def _hung_up(error) -> bool:
  """A gRPC stream the runner closed (_HANG_UPS), or any stream of the
  harness once the job is over and its job server stops."""
  return isinstance(error, grpc.RpcError) and callable(getattr(error, 'code', None)) and (
      _job_over.is_set() or error.code() in _HANG_UPS)


class _NoHangUps(logging.Filter):
  def filter(self, record):
    return not (record.exc_info and _hung_up(record.exc_info[1]))


_quieted = []


def _quiet_hang_ups() -> None:
  """Silences the harness's tracebacks when the runner hangs up on it. Its
  threads, still reading, log and raise the closed stream ("Multiplexer
  hanging up", "Socket closed"): tracebacks on stderr of runs that succeed.
  A job that does fail says so through the runner."""
  if _quieted:
    return
  _quieted.append(True)
  for name in _HARNESS_LOGGERS:
    logging.getLogger(name).addFilter(_NoHangUps())
  threading.excepthook = without_hang_ups(threading.excepthook)
  sdk_worker.print = _logged_instead


def _logged_instead(*args, file=None, **kwargs) -> None:
  """The harness's print: it prints a failed instruction's traceback to
  stderr, then logs the same text at ERROR (`Error processing instruction
  ...`). With LOOPBACK the harness runs in the launcher: a job failing on a
  full disk printed 134 lines of it above the run's one line, which the
  command line's log filter (runs/exits.py) leaves out of the log. The log
  keeps it; the print goes, on stderr only."""
  if file is sys.stderr:
    return
  print(*args, file=file, **kwargs)


def without_hang_ups(excepthook):
  """threading.excepthook `excepthook`, except for a hung-up stream."""
  def hook(args):
    if not _hung_up(args.exc_value):
      excepthook(args)
  return hook
