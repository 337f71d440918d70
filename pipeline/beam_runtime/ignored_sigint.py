"""An ignored SIGINT stays ignored when Beam starts a Flink or Spark job server.

Beam's StopOnExitJobServer.start installs its own SIGINT handler, which
stops the job server and then calls the handler it replaced if that one is
callable. A launcher started with SIGINT ignored (a background job of a
non-interactive shell, nohup) got a handler where it had none: a SIGINT sent
to its process group stopped the job server, and the run failed with exit 1
instead of going on as every other step of the run does. Where SIGINT was
ignored before the job server started, it is ignored again after.
"""

from __future__ import annotations

import functools
import signal
import threading

_MARK = 'keeps_an_ignored_sigint'


def keep_ignored_sigint() -> None:
  """Wraps StopOnExitJobServer.start (idempotent)."""
  from apache_beam.runners.portability import job_server
  original = getattr(job_server.StopOnExitJobServer, 'start', None)
  if original is None or getattr(original, _MARK, False):
    return

  @functools.wraps(original)
  def start(self):
    main_thread = threading.current_thread() is threading.main_thread()
    ignored = main_thread and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    endpoint = original(self)
    if ignored:
      signal.signal(signal.SIGINT, signal.SIG_IGN)
    return endpoint

  setattr(start, _MARK, True)
  job_server.StopOnExitJobServer.start = start
