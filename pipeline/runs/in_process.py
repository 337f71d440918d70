"""Running convert or validate inside another program's process (pipeline.api):
what a run changes process-wide is put back when it ends, however it ends.

The command line may leave these changed: its process ends with the run
(exits.configure_logging, beam_runtime/startup.py and fast_exit are the command
line's alone). A run in process changes, and this puts back:
- Beam's get_function_args_defaults, remembered for the run only
  (beam_runtime/beam_signatures.py), and apache_beam.pipeline's look for
  IPython, which sees none during the run (beam_runtime/not_interactive.py:
  the run's pipelines stay out of Interactive Beam);
- the root logger's level and handlers: Beam logs through logging's module
  functions, which give a root logger without handlers one on stderr;
- logging.disable, and the finders of sys.meta_path (the command line's
  deferral of Beam's cloud imports is one);
- the warnings filters (prepare_pillow silences Pillow's decompression bomb
  warning), and Pillow's own pixel limit (prepare_pillow raises it to
  --max_pixels);
- Beam's filesystem options (the parse hands them the run's Beam options,
  credentials included, for reads on the launcher);
- the SIGINT and SIGTERM handlers: Beam's job server for Flink and Spark
  (StopOnExitJobServer) installs its own SIGINT handler and never removes it;
- the limit of open files, which a local run of many shards raises (open_files.py);
- the state of the random module's global generator: Beam's Reshuffle draws
  from it for each element in this process, so a caller's `random.seed(0)`
  gave other numbers after a convert than before it (numpy's is untouched).
  The run draws from it seeded afresh (os.urandom): put back as it was, the
  caller's state gave again every number drawn during the run, by the run
  and by the caller's other threads (ids a thread drew, twice);
- sys.stderr, when the caller's is closed: the run's notes go nowhere (_Nowhere).
What a module imported for the first time during the run adds on import
(warnings filters, finders) stays, as the module does. The run's private temp
folder puts tempfile's folder and TMPDIR back itself (run_temp.py).

Runs in process go one at a time (calls from several threads: the next waits
for the one running to end). All of the above is one per process, TMPDIR
and tempfile's folder too: two runs at once each saved what the other had
set, and the one ending last put the other's back (its removed temp folder
left as tempfile's and TMPDIR for good), while the other's temp folder was
pulled from under it (FileNotFoundError) or nested in the first's.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import io
import logging
import os
import random
import signal
import sys
import threading
import warnings

from apache_beam.io.filesystems import FileSystems

from pipeline.beam_runtime.beam_signatures import method_signatures_remembered
from pipeline.beam_runtime.not_interactive import outside_interactive_beam
from pipeline.runs import open_files


def _defined_in(value, modules: set) -> bool:
  """Whether the class of a finder, or a warnings filter's category, comes
  from one of `modules`."""
  cls = value[2] if isinstance(value, tuple) else type(value)
  return getattr(cls, '__module__', None) in modules


# Held by the run in process going on (re-entrant: a run's own thread may
# nest these blocks).
_ONE_RUN_AT_A_TIME = threading.RLock()


def _no_run_in_this_child() -> None:
  """A child forked while a thread ran a convert (multiprocessing's fork, the
  default start method on Linux) has no such thread: the lock it inherited,
  held by that thread, was never released, and the child's first call waited
  for ever. The child starts with a free one."""
  global _ONE_RUN_AT_A_TIME
  _ONE_RUN_AT_A_TIME = threading.RLock()


if hasattr(os, 'register_at_fork'):  # not on Windows
  os.register_at_fork(after_in_child=_no_run_in_this_child)


@contextlib.contextmanager
def restored_process_state() -> Iterator[None]:
  """Runs the with block, then puts back what the module docstring lists; a
  block of another thread waits for it to end (the module docstring)."""
  with _ONE_RUN_AT_A_TIME:
    yield from _restored()


class _Nowhere(io.TextIOBase):
  """sys.stderr during a run whose caller closed theirs (or the StringIO it
  put there): the run's notes (e.g. --previous_dataset_missing full's
  warning) raised ValueError from print and failed the call; they go nowhere."""

  def write(self, text: str) -> int:
    return len(text)


def _closed(stream) -> bool:
  return stream is not None and bool(getattr(stream, 'closed', False))


def _restored() -> Iterator[None]:
  modules = set(sys.modules)
  stderr = sys.stderr
  if _closed(stderr):
    sys.stderr = _Nowhere()
  root = logging.getLogger()
  level, handlers = root.level, list(root.handlers)
  disabled = logging.root.manager.disable
  finders = list(sys.meta_path)
  filters = list(warnings.filters)
  pillow = sys.modules.get('PIL.Image')
  max_pixels = getattr(pillow, 'MAX_IMAGE_PIXELS', None)
  filesystem_options = FileSystems._pipeline_options
  # Handlers can be set (and so put back) only from the main thread.
  main_thread = threading.current_thread() is threading.main_thread()
  handlers_before = {number: signal.getsignal(number)
                     for number in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
  files_limit = open_files.limit()
  random_state = random.getstate()
  random.seed()  # the run's own numbers: none of them comes again once put back
  try:
    with method_signatures_remembered(), outside_interactive_beam():
      yield
  finally:
    random.setstate(random_state)
    open_files.set_limit(files_limit)
    for number, handler in handlers_before.items():
      if handler is not None and signal.getsignal(number) is not handler:
        signal.signal(number, handler)
    FileSystems.set_options(filesystem_options)
    if pillow is not None:
      pillow.MAX_IMAGE_PIXELS = max_pixels
    imported = [f for f in warnings.filters if f not in filters and not _defined_in(f, modules)]
    warnings.filters[:] = imported + filters
    # warnings caches its decisions per call site until told the filters
    # changed, as filterwarnings and catch_warnings tell it (Python 3.10-3.13)
    getattr(warnings, '_filters_mutated', lambda: None)()
    sys.meta_path[:] = finders + [f for f in sys.meta_path
                                  if f not in finders and not _defined_in(f, modules)]
    logging.disable(disabled)
    root.setLevel(level)
    root.handlers[:] = handlers
    if _closed(stderr) and isinstance(sys.stderr, _Nowhere):
      sys.stderr = stderr
