"""A command's run and its exit code: logging set up for the command line, a
UsageError as one line and exit 2, a crash as one line (`failure_reason`)
and exit 1, a signal as the end of the process by that signal, stdout closed
early by its reader as exit 141. Every entry point runs its command through
these, and ends with exit_with."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import sys
import traceback

from pipeline.beam_runtime import fast_exit
from pipeline.beam_runtime.not_interactive import outside_interactive_beam
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_STDOUT_CLOSED
from pipeline.errors import EXIT_STORE_NOT_ANSWERING
from pipeline.errors import EXIT_USAGE
from pipeline.errors import PointerNotWritten
from pipeline.errors import UsageError
from pipeline.errors import refuse_optimized_python
from pipeline.runs import interrupts
from pipeline.runs import run_temp
from pipeline.runs import utf8_mode
from pipeline.runs.std_streams import closed_standard_streams_on_devnull
from pipeline.runs.std_streams import given_back
from pipeline.runs.std_streams import keeping_going
from pipeline.runs.std_streams import stdout_closed
from transforms.core import line_ranges
from transforms.core import not_answering
from transforms.core import store_errors
from transforms.core.store_errors import store_refused


def main_with_usage_errors(run, argv=None, handlers=None) -> int:
  """Runs `run(argv)` for a command that needs neither Beam nor logging set up
  (inspect, export): a UsageError is one line on stderr and exit 2.

  handlers (interrupts.Handlers, see handling_signals): a signal interrupts
  the run; whatever it unwound into, its exit status is left to
  handlers.finish(), with no line of its own."""
  argv = list(sys.argv[1:] if argv is None else argv)
  try:
    with handlers.running() if handlers else contextlib.nullcontext():
      return run(argv)
  except BaseException as error:
    if handlers is not None and handlers.interrupted:
      return 128 + handlers.signum
    if not isinstance(error, UsageError):
      raise
    print(f'error: {error}', file=sys.stderr)
    return EXIT_USAGE


def main_with_one_line_errors(run, argv, command: str, handlers=None) -> int:
  """main_with_usage_errors, and any other failure of `run` (an Exception)
  one line, `error: COMMAND failed: Type: message` (failure_reason), and exit
  1 without a traceback: for a command without a pipeline that promises a
  line per outcome (export). stdout closed by its reader is left to exit_with."""
  try:
    return main_with_usage_errors(run, argv, handlers)
  except Exception as error:
    if isinstance(error, BrokenPipeError) and stdout_closed():
      raise
    print(f'error: {command} failed: {failure_reason(error)}', file=sys.stderr)
    return EXIT_FAILED


def configure_logging() -> None:
  """For the command line only: Beam's warnings (no GCP client, ...) are noise
  for users; errors still reach stderr, but for a full disk (the command's one
  line says it). Importing our modules configures nothing."""
  logging.basicConfig(format='%(levelname)s: %(message)s')
  logging.getLogger().setLevel(logging.ERROR)
  for handler in logging.getLogger().handlers:
    handler.addFilter(_no_repeated_failures)


# A full disk or quota is the machine's state, not a bug: the run's one line
# names it, with no traceback (Beam logs its step's failure with one, then
# the command printed its own: ~100 lines for "No space left on device").
_FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT})


def full_disk(error: BaseException | None) -> bool:
  """Whether `error` is, or was raised from, a full disk or quota (Beam
  re-raises a step's error as a RuntimeError naming it: its text is checked too)."""
  seen = 0
  while error is not None and seen < 20:
    if isinstance(error, OSError) and error.errno in _FULL_DISK:
      return True
    if any(f'[Errno {number}]' in str(error) for number in _FULL_DISK):
      return True
    error, seen = error.__cause__ or (
        None if error.__suppress_context__ else error.__context__), seen + 1
  return False


# A manifest that cannot be read whole (a .gz cut short, a file changed while
# it was read) is the input's fault, not a bug: its one line names the file
# and what is wrong; the ~80 lines of Beam's and gzip's frames say nothing more.
_INPUT_FAILURES = (line_ranges.ManifestChangedError, line_ranges.ManifestCutShortError)


# The run's lock gone while its job ran (OUT deleted or emptied meanwhile,
# another run took it over): the job refuses to publish, as it must, and its
# one line says why (transforms/write_metadata.py's RunNotCurrent, known by
# its name: this module imports no Beam). Its two tracebacks (Beam's log, the
# launcher's) said nothing more.
_STATE_FAILURES = ('RunNotCurrent',)


def _input_failure_names() -> list:
  return [kind.__name__ for kind in _INPUT_FAILURES] + list(_STATE_FAILURES)


def input_failure_reason(error: BaseException | None) -> str:
  """`Type: message` of the unreadable manifest or lost lock that `error` is
  or wraps, as a local run's line says it; '' when it is none. Flink and
  Spark report it inside their job's failure (`Pipeline BeamApp-... failed in
  state FAILED: java.lang.RuntimeException: Error received from SDK harness
  for instruction 3: transforms.core.line_ranges.ManifestCutShortError:
  ...`): the same line on every runner."""
  seen = 0
  while error is not None and seen < 20:
    if type(error).__name__ in _input_failure_names():
      return failure_reason(error)
    text = str(error)
    for name in _input_failure_names():
      if f'{name}: ' in text:
        line = text[text.index(f'{name}: '):].splitlines()[0].strip()
        return re.sub(r" \[while running '[^']*'\]$", '', line)
    error, seen = error.__cause__ or (
        None if error.__suppress_context__ else error.__context__), seen + 1
  return ''


def input_failure(error: BaseException | None) -> bool:
  """Whether `error` is, or was raised from, an unreadable manifest or a
  run that lost its lock (a runner that reports the job's failure as text:
  its text names the type)."""
  return bool(input_failure_reason(error))


# An engine that failed for what it was pointed at, not for a bug: the job's
# one line says what it means, with no traceback (the launcher's frames say
# nothing; the engine's own are in its log). A --spark_master_url that takes
# connections but is no Spark master: Spark gives up registering after 3
# tries of 20 s, then the job fails with this (74 s, 55 lines, before).
_ENGINE_FAILURES = {
    'Cannot call methods on a stopped SparkContext': (
        'Spark stopped before the job could run: no Spark master took it (one is '
        'given up on after about a minute of tries); check that --spark_master_url '
        'names a running Spark master, or leave it out to run Spark inside the job server'),
    # A master left to a cluster manager (yarn, k8s://...) that the job
    # server's class path lacks: the assembled one holds Spark's core alone
    # (measured: `--spark_master_url yarn`, 13 s, then 21 lines and exit 1).
    'SparkException: Could not parse Master URL': (
        "the job server's Spark has no cluster manager for that --spark_master_url; the "
        'assembled job server takes local[N] and spark:// masters only: give one of '
        'those, or a --spark_job_server_jar built with that cluster manager'),
}


# Beam's log line at each try of a job server whose JVM ended before it
# answered (engine_runners.JobServerDidNotStart is the run's line).
_JOB_SERVER_NOT_STARTED = 'Failed to start job service with'


def engine_failure(error: BaseException | None) -> str:
  """What a job's failure means when its text is one of _ENGINE_FAILURES
  (it, or what it was raised from); '' when it is none."""
  seen = 0
  while error is not None and seen < 20:
    for text, meaning in _ENGINE_FAILURES.items():
      if text in str(error):
        return meaning
    error, seen = error.__cause__ or (
        None if error.__suppress_context__ else error.__context__), seen + 1
  return ''


def store_not_answering(error: BaseException | None) -> str:
  """The line of an object store that stopped answering that `error` is or
  was raised from, '' when it is none (transforms/core/not_answering.py): the
  store's state, not a bug; one line and exit 4, without the tracebacks of
  Beam's log and of every thread that was waiting on the store."""
  return not_answering.line_of(error)


def _no_repeated_failures(record: logging.LogRecord) -> bool:
  if record.exc_info and (full_disk(record.exc_info[1]) or input_failure(record.exc_info[1])
                          or store_not_answering(record.exc_info[1])
                          or store_refused(record.exc_info[1])):
    return False
  try:
    message = record.getMessage()
  except (TypeError, ValueError):  # a bad format: logging itself reports it
    return True
  # the engine's failure, logged whole by Beam's job service client (30 lines
  # of Spark's stack), and a job server that did not start, logged at each of
  # Beam's three tries with its whole command; a manifest that cannot be read
  # whole, as Flink's and Spark's harness and job service log it (63 lines
  # of two tracebacks); Beam's S3 upload logs its failure's traceback as
  # text, and 'HTTP error while requesting file PATH: 3': the run's one line
  # says it
  return not any(f'[Errno {number}]' in message for number in _FULL_DISK) and not any(
      text in message for text in (*_ENGINE_FAILURES, *_STATE_FAILURES, not_answering.NAME,
                                   _JOB_SERVER_NOT_STARTED,
                                   *(f'{kind.__name__}: ' for kind in _INPUT_FAILURES),
                                   f'.{store_errors.NAME}: ', 'HTTP error while requesting file '))


def main_with_exit_codes(run, argv=None, handlers=None) -> int:
  """Runs `run(argv)` and maps failures to exit codes: usage 2, crash 1.

  handlers (interrupts.Handlers, see run_command): a signal interrupts the
  run; its exit status is left to handlers.finish().
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  configure_logging()
  from pipeline.beam_runtime.beam_signatures import remember_method_signatures
  remember_method_signatures()
  try:
    with handlers.running() if handlers else contextlib.nullcontext():
      return run(argv)
  except BaseException as error:
    if isinstance(error, BrokenPipeError) and stdout_closed():
      raise  # not the job's failure: its reader has gone (exit_with)
    if handlers is not None and handlers.interrupted:
      # Whatever the signal unwound into (Beam wraps what a step raises):
      # the run was interrupted and has cleaned up; no traceback.
      return 128 + handlers.signum
    if isinstance(error, UsageError):
      print(f'error: {error}', file=sys.stderr)
      return EXIT_USAGE
    if isinstance(error, PointerNotWritten):
      print(f'error: {error}', file=sys.stderr)
      return EXIT_FAILED
    if isinstance(error, KeyboardInterrupt):
      print('interrupted', file=sys.stderr)
      return EXIT_FAILED
    if not isinstance(error, Exception):
      raise  # SystemExit (--help), ...
    store = store_not_answering(error)
    if store:
      print(f'error: the job failed: {store}', file=sys.stderr)
      return EXIT_STORE_NOT_ANSWERING
    refused = store_refused(error)
    if refused:
      print(f'error: the job failed: an object store request failed: {refused}', file=sys.stderr)
      return EXIT_FAILED
    meaning = engine_failure(error)
    print(f'error: the job failed: {input_failure_reason(error) or failure_reason(error)}'
          + (f' ({meaning})' if meaning else ''), file=sys.stderr)
    if not full_disk(error) and not input_failure(error) and not meaning:
      traceback.print_exc(file=sys.stderr)
    return EXIT_FAILED


def run_command(run, argv, interrupted_line: str, again_line: str) -> int:
  """convert's and validate's command line: run(argv) in a private temp
  folder (run_temp), with exit codes (main_with_exit_codes), and SIGINT and
  SIGTERM handled (interrupts.Handlers): the run cleans up, prints
  `interrupted_line` and the process ends by the signal (exit status 130 or
  143). The only place their handlers are installed."""
  handlers = interrupts.Handlers(interrupted_line, again_line).install()
  try:
    # A command line run is no IPython session: Beam need not import IPython
    # to ask (0.03 s where it is installed), nor swallow a signal's
    # Interrupted in the bare `except:` around that import.
    with run_temp.private_temp_dir(), outside_interactive_beam():
      code = main_with_exit_codes(run, argv, handlers)
  finally:
    handlers.finish()
  return code


def handling_signals(main, lines: tuple) -> int:
  """export's and inspect's command line: main(handlers) (main_with_usage_errors
  or main_with_one_line_errors given them) with SIGINT, SIGTERM and SIGHUP
  handled as convert's (interrupts.Handlers): the run unwinds through its
  clean-up, prints lines[0] and the process ends by the signal (exit status
  130, 143 or 129); a second signal during the clean-up, lines[1]. SIGTERM
  and SIGHUP ended them where they stood, silently. No temp folder, no
  logging set up, no Beam: neither runs a job."""
  handlers = interrupts.Handlers(*lines).install()
  try:
    return main(handlers)
  finally:
    handlers.finish()


def exit_with(main, fast: bool = False):
  """An entry point's last line: exits with main()'s code once stdout is
  flushed. stdout closed early by its reader (`... | head -1`): exit 141
  (EXIT_STDOUT_CLOSED) and no traceback, as `yes | head -1`. stdout or
  stderr that cannot be written otherwise (a full disk): main()'s code, and
  a line on stderr if it can take one. fast: leave without the
  interpreter's teardown (beam_runtime/fast_exit.py). Started with one of
  them closed: as if it were /dev/null. Under a locale that is not UTF-8, the
  command starts again in UTF-8 mode first (utf8_mode.py)."""
  utf8_mode.in_utf8_mode()
  refuse_optimized_python()  # -OO, or PYTHONOPTIMIZE=2 (some container images set it)
  closed_standard_streams_on_devnull()
  out, err = keeping_going('stdout'), keeping_going('stderr')
  try:
    try:
      try:
        code = main()
      except SystemExit as done:  # --help
        code = EXIT_FAILED if isinstance(done.code, str) else done.code or 0
      except KeyboardInterrupt:
        # Ctrl-C in a command without the run's own handlers (the demos,
        # flex_template), its clean-up done as the KeyboardInterrupt unwound: one
        # line and the end by SIGINT (130), not Python's traceback.
        interrupts.die(signal.SIGINT, 'interrupted')
      if out is not None:
        out.flush()
    except BrokenPipeError:
      if not stdout_closed():
        raise
      code = EXIT_STDOUT_CLOSED
    finally:
      given_back('stdout', out)
    if out is not None and out.error is not None and code != EXIT_STDOUT_CLOSED:
      print(f'warning: stdout could not be written ({failure_reason(out.error)}): what '
            f'the command printed there is incomplete; its exit code ({code}) stands',
            file=sys.stderr, flush=True)  # dropped when stderr fails too (`> log 2>&1`)
  finally:
    given_back('stderr', err)
  if code == EXIT_STDOUT_CLOSED:
    # What is still buffered has nowhere to go: stdout becomes /dev/null, so
    # that the interpreter's own last flush fails no more.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
  if fast:
    fast_exit.exit_now(code)
  sys.exit(code)


_TRACEBACK = 'Traceback (most recent call last):'
_CHAINED = ('During handling of the above exception', 'The above exception was the direct')


def failure_reason(error: BaseException) -> str:
  """`Type: message` in one line, never an empty reason: the message's first
  non-blank line, and when the message carries a traceback (a job service
  reports the job's failure so), the error that traceback ends with; no
  message: the cause's (`Type: CauseType: cause message`), else the type
  alone."""
  reason = _reason(str(error))
  name = type(error).__name__
  if reason:
    return f'{name}: {reason}'
  cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
  return f'{name}: {failure_reason(cause)}' if cause is not None else name


def _reason(message: str) -> str:
  lines = [line.strip() for line in message.splitlines() if line.strip()]
  if not lines:
    return ''
  first = lines[0]
  if _TRACEBACK not in message:
    return first
  # The last unindented line of a traceback names its error.
  ends = [line.strip() for line in message.splitlines()
          if line.strip() and not line[0].isspace() and _TRACEBACK not in line
          and not line.startswith(_CHAINED)]
  first = first.replace(_TRACEBACK, '').rstrip(' :.')
  error = ends[-1] if ends and ends[-1] != lines[0] else ''
  return ': '.join(part for part in (first, error) if part)
