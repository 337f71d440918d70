"""An object store's own answer refusing a request, after its client's tries
(an S3 5xx, a 403 to a write, a body that broke off each time: Beam's
S3ClientError, or botocore's ClientError), known without Beam: the store's state, not a bug. The
command line says it in one line (pipeline/runs/exits.py), inspect skips the
shard it was reading with it (pipeline/looking/look_sample.py); both printed
tracebacks, with the error's tuple, "('An error occurred ...', 500)".
"""

from __future__ import annotations

from typing import Optional

# Known by its name: Beam re-raises a step's error as a new one of its type.
NAME = 'S3ClientError'
# botocore's own, from the requests made without Beam's S3IO (the run's lock:
# pipeline/runs/lock_stores.py's conditional put); its str() is its message.
BOTOCORE_NAME = 'ClientError'


def error_text(error: BaseException) -> str:
  """What an error says: an S3ClientError(message, code) its message (its
  str() is the tuple's), any other its str()."""
  message = getattr(error, 'message', None)
  return message if isinstance(message, str) and message else str(error)


def store_refused(error: Optional[BaseException]) -> str:
  """The store's words of the S3ClientError that `error` is or was raised
  from (its message, first line), or that a BeamIOError holds for a path (a
  rename's copy, a delete), with the path; '' when it is none."""
  seen = 0
  while error is not None and seen < 20:
    if type(error).__name__ == NAME or (type(error).__name__ == BOTOCORE_NAME
                                        and type(error).__module__.startswith('botocore')):
      lines = [line.strip() for line in error_text(error).splitlines() if line.strip()]
      return lines[0] if lines else NAME
    details = getattr(error, 'exception_details', None)  # BeamIOError's {path(s): error}
    for where, failure in (details.items() if isinstance(details, dict) else ()):
      words = store_refused(failure) if isinstance(failure, BaseException) else ''
      if words:
        what = f'renaming {where[0]} to {where[1]}' if isinstance(where, tuple) else str(where)
        return f'{what}: {words}'
    error, seen = error.__cause__ or (
        None if error.__suppress_context__ else error.__context__), seen + 1
  return ''
