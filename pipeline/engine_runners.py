"""Beam's FlinkRunner and SparkRunner, with the job server a run starts
stopped when its job ends, and without the harness's tracebacks when the
runner hangs up on it.

engines.prepare names these classes as the runner (Beam makes a runner from
its dotted name; the name the job server sees is none: the portable runner
sends no runner option). Beam stops the job server it starts only at
interpreter exit (atexit), which a command-line run skips (fast_exit), and by
then the run's temp folder, which holds the job server's files, is gone:
every run left its JVM, an embedded Flink or a local Spark, running.
"""

from __future__ import annotations

import logging
import threading

from apache_beam.runners.portability import flink_runner
from apache_beam.runners.portability import spark_runner
import grpc

# The loggers of the SDK harness's streams: with LOOPBACK the harness runs in
# this process.
_HARNESS_LOGGERS = ('apache_beam.runners.worker.data_plane',
                    'apache_beam.runners.worker.sdk_worker')
# Set once a job has ended: the harness's streams close with the job server.
_job_over = threading.Event()


class _StopsItsJobServer:
  """Mixin: the job server is stopped with the job's own clean-up (the
  PipelineResult runs it when the job reaches a terminal state: done, failed
  or cancelled), or at once when submitting the job fails."""

  def default_job_server(self, options):
    server = super().default_job_server(options)
    self._job_servers.append(server)
    return server

  def run_portable_pipeline(self, pipeline, options):
    _quiet_hang_ups()
    _job_over.clear()
    self._job_servers = []
    try:
      result = super().run_portable_pipeline(pipeline, options)
    except BaseException:
      for server in self._job_servers:
        server.stop()
      raise
    # Read by the result's state observer, which starts in wait_until_finish.
    result._cleanup_callbacks = [_job_over.set, *result._cleanup_callbacks,
                                 *(server.stop for server in self._job_servers)]
    return result


class FlinkRunner(_StopsItsJobServer, flink_runner.FlinkRunner):
  pass


class SparkRunner(_StopsItsJobServer, spark_runner.SparkRunner):
  pass


def _hung_up(error) -> bool:
  """A gRPC stream the runner closed: Flink ends each stage's environment
  (CANCELLED), and any stream of the harness ends once the job is over and
  its job server stops."""
  return isinstance(error, grpc.RpcError) and callable(getattr(error, 'code', None)) and (
      _job_over.is_set() or error.code() == grpc.StatusCode.CANCELLED)


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


def without_hang_ups(excepthook):
  """threading.excepthook `excepthook`, except for a hung-up stream."""
  def hook(args):
    if not _hung_up(args.exc_value):
      excepthook(args)
  return hook
