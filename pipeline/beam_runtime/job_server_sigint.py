"""The run's own SIGINT handling is kept when Beam starts a Flink or Spark
job server.

Beam's StopOnExitJobServer.start installs a SIGINT handler of its own, which
stops the job server and then calls the handler it found when it was made.
Three things went wrong with it, each seen on a Flink run:
- a Ctrl-C in a terminal (SIGINT to the launcher and its JVM) hung the
  launcher for good: the JVM died, the job's clean-up started stopping the
  job server under its lock, and Beam's handler, run in the middle of that,
  waited for the same lock on the same thread;
- a SIGINT to the launcher stopped the job server before the run's own
  handler could cancel the job through it: `note: could not cancel the job`
  and the harness's gRPC tracebacks;
- a launcher started with SIGINT ignored (a background job of a
  non-interactive shell, nohup) got a handler where it had none, and failed.

So whatever handled SIGINT before the job server started handles it after:
the command line's (pipeline/runs/interrupts.py), Python's KeyboardInterrupt for
a caller of pipeline.api, or none where it was ignored. The job server
still stops: with the job's clean-up, after a job still running is
cancelled (pipeline/engines/engine_runners.py), or at exit (Beam's atexit).
"""

from __future__ import annotations

import functools
import signal
import threading

_MARK = 'keeps_the_sigint_handler'


def keep_sigint_handler() -> None:
  """Wraps StopOnExitJobServer.start (idempotent)."""
  from apache_beam.runners.portability import job_server
  original = getattr(job_server.StopOnExitJobServer, 'start', None)
  if original is None or getattr(original, _MARK, False):
    return

  @functools.wraps(original)
  def start(self):
    if threading.current_thread() is not threading.main_thread():
      return original(self)  # off the main thread, Beam's own signal.signal raises ValueError
    before = signal.getsignal(signal.SIGINT)
    endpoint = original(self)
    if before is not None:  # None: not set from Python, nothing to put back
      signal.signal(signal.SIGINT, before)
    return endpoint

  setattr(start, _MARK, True)
  job_server.StopOnExitJobServer.start = start
