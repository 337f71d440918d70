"""SIGINT, SIGTERM and SIGHUP on the command line (convert, validate, export
and inspect): the run unwinds, cleans up after itself, says so in one line
and ends by the signal.

Only the command line installs these handlers (pipeline/runs/exits.py
run_command, and handling_signals for export and inspect):
a function called from Python (convert.run, validate.run, anything built on
them) installs none; its clean-up is in context managers that also run on
KeyboardInterrupt and errors (pipeline/runs/run_guard.py, RunLock, run_temp).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from typing import Optional

from pipeline.beam_runtime import sdk_workers

# SIGHUP: the terminal or ssh session the run was started from went away.
# Its default action ended the process where it stood, as SIGKILL does: the
# shards written so far, the run's lock and its temp folder stayed, and the
# rerun needed --overwrite. A run started under nohup (SIGHUP ignored) keeps
# running, as Handlers.install leaves an ignored signal ignored.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A repeat of the first signal within this many seconds is the same
# interruption: GNU timeout signals the process and then its process group,
# the process included (`timeout -s INT 3 convert ...`: 2 runs of 7 said
# "interrupted again" and left its lock). Ctrl-C pressed again later still
# cuts the clean-up short.
REPEAT_S = 0.5

# (the line after a signal, the line after a second one during the clean-up)
CONVERT_LINES = ('interrupted: nothing was published; rerun to convert again',
                 'interrupted again: clean-up was cut short; nothing was published; '
                 'rerun with --overwrite')
VALIDATE_LINES = ('interrupted: nothing was checked; rerun to validate again',
                  'interrupted again: clean-up was cut short; nothing was checked; '
                  'rerun to validate again')
# export builds its folder beside --output_dir and renames it into place
# when complete (staged_dir.py): interrupted, a previous export is as it was.
EXPORT_LINES = ('interrupted: nothing was exported (a previous export is as it was); '
                'rerun to export again',
                'interrupted again: clean-up was cut short; nothing was exported; '
                'rerun to export again')
# inspect: an --export_dir keeps the files written before the signal (each
# file whole or not at all: looking/export_files.py).
INSPECT_LINES = ('interrupted', 'interrupted again: clean-up was cut short')
# A signal after convert published its dataset, validate wrote its report
# or export put its folder in place: the run finishes first.
CONVERT_PUBLISHED_LINE = 'interrupted after the dataset was published: it is complete'
VALIDATE_REPORTED_LINE = 'interrupted after the report was written: the check is complete'
EXPORT_PLACED_LINE = 'interrupted after the export was put in place: it is complete'

# The command line's Handlers while installed (run_command), else None.
_installed: Optional[Handlers] = None
# What a signal means once the run's output is complete (published()): also
# for before_run's handlers, which are back once the run is over.
_published_line: Optional[str] = None


class Interrupted(BaseException):
  """Raised in the main thread by the first signal of SIGNALS while a run is
  under way. A BaseException, as KeyboardInterrupt, so that `except
  Exception` clauses let it through to the context managers that clean up."""


def die(signum: int, line: Optional[str] = None) -> None:
  """Ends this process by `signum` with its default action (the shell then
  reports 128 + signum: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), after writing
  `line` to stderr. Skips the interpreter's teardown: worker processes end
  with this one (transforms/workers/process_worker.py die_with_parent)."""
  for stream in (sys.stdout, sys.stderr):
    try:
      if stream is not None:  # None: started with it closed (`>&-`)
        stream.flush()
    except (OSError, ValueError, RuntimeError):
      pass  # gone (a closed pipe) or mid-write in the interrupted frame: the line still goes
  if line:
    # os.write, not print: the signal may have come in the middle of a print.
    try:
      os.write(2, (line + '\n').encode('utf-8', 'replace'))
    except OSError:
      pass  # no stderr left to tell: the exit status still says it
  signal.signal(signum, signal.SIG_DFL)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
  os.kill(os.getpid(), signum)
  os._exit(128 + signum)  # only if the signal could not end the process


def before_run(line: str) -> None:
  """For an entry point's first lines, before its imports (Beam's take a
  second or two): a signal ends the process at once with `line`, nothing
  having started (Python's own SIGINT handler would print a traceback of
  the import it interrupted). Handlers.install takes over from these."""
  if threading.current_thread() is not threading.main_thread():
    return
  for signum in SIGNALS:
    if signal.getsignal(signum) is not signal.SIG_IGN:
      signal.signal(signum, lambda number, frame: die(number, _published_line or line))


class Handlers:
  """The SIGINT/SIGTERM/SIGHUP handlers of one command line run.

  Until running() is entered, and again once it is left (the run returned
  and only the temp folder is left to remove), a signal is remembered and
  finish() ends the process by it. Inside running(), the first signal raises
  Interrupted in the main thread: the run unwinds through its clean-up (the
  job cancelled, its files in OUT deleted, the lock released), then the
  temp folder goes, then finish() prints `line` and ends the process by the
  signal. A second signal while that clean-up runs ends the process at once,
  with `again_line` (not the first one repeated within REPEAT_S).

  A signal the process was started ignoring (a background job of a
  non-interactive shell, nohup) stays ignored, as Python itself does for
  SIGINT. Not installed outside the main thread (Python allows it only there).
  """

  def __init__(self, line: str, again_line: str):
    self.line = line
    self.again_line = again_line
    self.signum: Optional[int] = None
    self.interrupted = False  # the signal came while the run was under way
    self._running = False
    self._previous = {}
    self._late_line: Optional[str] = None  # for a signal after published()
    self._first_at = 0.0  # time.monotonic() of the first signal
    self.held: Optional[list] = None  # the signals that came inside held()

  def install(self) -> Handlers:
    global _installed, _published_line
    if threading.current_thread() is not threading.main_thread():
      return self
    _installed, _published_line = self, None
    # The handler's Interrupted, raised where Python cannot pass it on (a
    # weakref callback, a __del__: 2 of 14 SIGTERMs as the job ended), is
    # printed as "Exception ignored in ..." with a traceback. Not printed:
    # the run still learns of the signal (raise_if_interrupted).
    self._unraisable_hook = sys.unraisablehook
    sys.unraisablehook = self._unraisable
    for signum in SIGNALS:
      previous = signal.getsignal(signum)
      if previous is signal.SIG_IGN:
        continue
      self._previous[signum] = previous
      signal.signal(signum, self._handle)
    sdk_workers.stopped_by_the_launcher(signal.SIGINT in self._previous)
    return self

  def restore(self) -> None:
    global _installed
    sdk_workers.stopped_by_the_launcher(False)
    for signum, previous in self._previous.items():
      signal.signal(signum, previous)
    self._previous = {}
    if sys.unraisablehook == self._unraisable:
      sys.unraisablehook = self._unraisable_hook
    if _installed is self:
      _installed = None

  def _unraisable(self, unraisable) -> None:
    if not isinstance(unraisable.exc_value, Interrupted):
      self._unraisable_hook(unraisable)

  @contextlib.contextmanager
  def running(self):
    """The run itself: a signal raises Interrupted here (at once, if one came
    before)."""
    if self.signum is not None:
      self.interrupted = True
      raise Interrupted(self.signum)
    self._running = True
    try:
      yield self
    finally:
      self._running = False

  def _handle(self, signum, frame) -> None:
    del frame
    if self.held is not None:
      self.held.append(signum)
      return
    if self._late_line is not None:
      # The output is complete: the run finishes its last steps (`latest`,
      # the summary), however many signals come, then finish() says so.
      self.signum = self.signum or signum
      return
    if self.signum is not None:
      if signum == self.signum and time.monotonic() - self._first_at < REPEAT_S:
        return  # the same signal sent twice at once (REPEAT_S)
      # A second signal: the clean-up under way is cut short.
      die(signum, self.again_line if self.interrupted else None)
    self.signum, self._first_at = signum, time.monotonic()
    if self._running:
      self.interrupted = True
      self._running = False
      # From here the run only unwinds: Beam logs the error it wraps ours in
      # (with its traceback), and threads of the interrupted job may report
      # their broken calls; the one line says what happened.
      logging.disable(logging.CRITICAL)
      threading.excepthook = _quiet_thread_exception
      # Beam's SDK harness (a Flink or Spark run's LOOPBACK workers, in this
      # process) prints each failed instruction's traceback straight to
      # sys.stderr, past logging; the run's own notes come from this thread.
      sys.stderr = MainThreadOnly(sys.stderr)
      # A local multi_processing run waits for its SDK worker processes as
      # it unwinds, and one still starting is never told to end: without
      # this, SIGTERM to this process alone hung the run (sdk_workers.py);
      # one starting after the signal is stopped too (keep_stopping).
      sdk_workers.keep_stopping()
      raise Interrupted(signum)

  def published(self, line: str) -> None:
    """The run's output is complete: see published()."""
    global _published_line
    self._running = False
    self._late_line = _published_line = line

  def published_before_signal(self, line: str) -> None:
    """The signal's Interrupted unwound a run whose output was complete
    already: the run finishes as after published(line)."""
    self.interrupted = False
    self.published(line)

  def finish(self) -> None:
    """After the run and its clean-up: ends the process by the signal that
    came, if one did (with the one line if it interrupted the run);
    otherwise puts the previous handlers back."""
    if self.signum is not None:
      die(self.signum, self.line if self.interrupted else self._late_line)
    self.restore()


class MainThreadOnly:
  """A text stream that passes on what the main thread writes and drops what
  other threads write (the broken calls of a job going away)."""

  def __init__(self, stream):
    self._stream = stream

  def write(self, text: str) -> int:
    if threading.current_thread() is threading.main_thread():
      return self._stream.write(text)
    return len(text)

  def writelines(self, lines) -> None:
    for line in lines:
      self.write(line)

  def __getattr__(self, name):
    return getattr(self._stream, name)


def raise_if_interrupted() -> None:
  """For a run whose job has just ended well, before it counts as done:
  Interrupted if a signal came while it was under way but its Interrupted
  never reached the run, so that it unwinds through its clean-up as any
  interrupted run (nothing published, as its line says). Beam swallows
  exceptions in places: e.g. a bare `except:` in apache_beam.utils
  .interactive_utils.is_in_ipython, which re-raises only KeyboardInterrupt
  and SystemExit; a SIGTERM while the pipeline was built (~0.5 s into a
  run) was lost there, and the run published its dataset, moved `latest`,
  then said it had published nothing. Nothing without the command line's handlers."""
  if swallowed():
    raise Interrupted(_installed.signum)


def swallowed() -> bool:
  """Whether a signal interrupted the command line's run (raise_if_interrupted)."""
  return _installed is not None and _installed.interrupted


def published(line: str) -> None:
  """The run's output is complete and published: a signal from here on is
  remembered, the run finishes (its last steps, its summary), and then the
  process ends by the signal with `line`. Nothing without the command line's handlers."""
  if _installed is not None and not _installed.interrupted:
    _installed.published(line)


def published_before_signal(line: str) -> None:
  """For a run a signal interrupted (swallowed() True) whose output had
  been published all the same: the job wrote it last, just before the signal
  came (convert's dataset_info.json, which readers take as the dataset being
  complete). The run finishes as after published(line), and then ends by the
  signal with `line`. Nothing without the command line's handlers."""
  if _installed is not None and _installed.interrupted:
    _installed.published_before_signal(line)


@contextlib.contextmanager
def held():
  """For steps that must be done together (export's renames into place, and
  published()): a signal that comes meanwhile is handled after them.
  Blocking the signals would not do: a mask is the thread's own, and another
  thread (TensorFlow has dozens) takes the signal for Python's handler.
  Nothing without the command line's handlers."""
  handlers = _installed
  if handlers is None:
    yield
    return
  handlers.held = []
  try:
    yield
  finally:
    came, handlers.held = handlers.held, None
    for signum in came:
      handlers._handle(signum, None)


def _quiet_thread_exception(args) -> None:
  del args  # a thread of the interrupted job failing as the job goes away
