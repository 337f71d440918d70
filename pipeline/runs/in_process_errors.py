"""A run in a caller's process (pipeline.api): what Beam raises and logs on
the way, as the caller wants it. A step's Ctrl-C raised as KeyboardInterrupt
however Beam wrapped it, the errors Beam logs of a step held until the run's
outcome is known (interruptible), and the worker logs Beam's local job
service relays kept to its ERRORs, as on the command line
(worker_errors_only)."""

from __future__ import annotations

import contextlib
import logging


def _interrupted(error: BaseException) -> bool:
  """Whether `error` is what a KeyboardInterrupt became: Beam raises a step's
  interruption as a RuntimeError raised while handling it."""
  seen = set()
  while error is not None and id(error) not in seen:
    if isinstance(error, KeyboardInterrupt):
      return True
    seen.add(id(error))
    error = error.__cause__ or error.__context__
  return False


class _HeldStepErrors(logging.Filter):
  """Beam logs what a step raises as an ERROR, traceback and all, before
  raising it wrapped: the caller gets that exception, with the same traceback
  (a full disk printed 14 lines on stderr above it). Held during the run:
  dropped when the run raises, logged after a run that ends well (a runner
  that retried the bundle); a KeyboardInterrupt's never (the caller gets it)."""

  def __init__(self):
    super().__init__()
    self.held = []

  def filter(self, record):
    if not record.exc_info:
      return True
    if not isinstance(record.exc_info[1], KeyboardInterrupt):
      self.held.append(record)
    return False


# The logger of Beam's DoFnRunner, which logs what a step raises.
_STEP_LOGGER = 'apache_beam.runners.common'


@contextlib.contextmanager
def interruptible():
  """Ctrl-C (SIGINT's KeyboardInterrupt) raised as KeyboardInterrupt, however
  Beam wrapped it; what a step raised not logged by Beam on the way
  (_HeldStepErrors); the run's clean-up (the with blocks around it) runs first."""
  held = _HeldStepErrors()
  logger = logging.getLogger(_STEP_LOGGER)
  logger.addFilter(held)
  try:
    yield
  except Exception as error:
    if _interrupted(error):
      raise KeyboardInterrupt(str(error)) from error
    raise
  finally:
    logger.removeFilter(held)
  for record in held.held:  # reached when the run ended well only
    logger.handle(record)


class _ErrorsOnly(logging.Filter):
  """Beam's local job service relays its worker processes' logs at their own
  level (direct_running_mode='multi_processing'): 2 WARNINGs per worker and
  run ('No semi_persistent_directory found', 'Discarding unparseable args').
  The command line shows Beam's ERRORs only (exits.configure_logging): so does this."""

  def filter(self, record):
    return record.levelno >= logging.ERROR


# The logger of Beam's local job service, which relays its workers' logs.
_WORKER_LOGS_LOGGER = 'apache_beam.runners.portability.local_job_service'


@contextlib.contextmanager
def worker_errors_only():
  """Beam's relayed worker logs below ERROR not shown during the run (_ErrorsOnly)."""
  quiet = _ErrorsOnly()
  logging.getLogger(_WORKER_LOGS_LOGGER).addFilter(quiet)
  try:
    yield
  finally:
    logging.getLogger(_WORKER_LOGS_LOGGER).removeFilter(quiet)
