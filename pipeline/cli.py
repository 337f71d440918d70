"""The command line: the `img2tfrecord` console script (`img2tfrecord
convert|validate|inspect|export ...`), exit codes, the one UsageError, logging
and the exit-code wrapper of every entry point. No Beam import at import time:
the console script defers Beam's cloud imports (beam_runtime/startup.py)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import sys
import traceback
from typing import Optional

from pipeline import interrupts
from pipeline import run_temp
from pipeline.beam_runtime import fast_exit
from pipeline.beam_runtime import startup

EXIT_OK = 0
EXIT_FAILED = 1  # convert: crashed; validate: the dataset has problems
EXIT_USAGE = 2
EXIT_OVER_BUDGET = 3


class UsageError(Exception):
  """Bad flags or unusable input: exit 2 with one line, before any work."""


class UsageParser(argparse.ArgumentParser):
  """argparse's errors as UsageErrors: one line and exit 2, not argparse's exit."""

  def error(self, message):
    raise UsageError(message)


def main_with_usage_errors(run, argv=None) -> int:
  """Runs `run(argv)` for a command that needs neither Beam nor logging set up
  (inspect, export): a UsageError is one line on stderr and exit 2."""
  argv = list(sys.argv[1:] if argv is None else argv)
  try:
    return run(argv)
  except UsageError as error:
    print(f'error: {error}', file=sys.stderr)
    return EXIT_USAGE


def configure_logging() -> None:
  """For the command line only: Beam's warnings (no GCP client, ...) are noise
  for users; errors still reach stderr. Importing our modules configures nothing."""
  logging.basicConfig(format='%(levelname)s: %(message)s')
  logging.getLogger().setLevel(logging.ERROR)


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
    if handlers is not None and handlers.interrupted:
      # Whatever the signal unwound into (Beam wraps what a step raises):
      # the run was interrupted and has cleaned up; no traceback.
      return 128 + handlers.signum
    if isinstance(error, UsageError):
      print(f'error: {error}', file=sys.stderr)
      return EXIT_USAGE
    if isinstance(error, KeyboardInterrupt):
      print('interrupted', file=sys.stderr)
      return EXIT_FAILED
    if not isinstance(error, Exception):
      raise  # SystemExit (--help), ...
    print(f'error: the job failed: {failure_reason(error)}', file=sys.stderr)
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
    with run_temp.private_temp_dir():
      code = main_with_exit_codes(run, argv, handlers)
  finally:
    handlers.finish()
  return code


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


def did_you_mean(name: str, *candidates: list) -> str:
  """'; did you mean X?' for the closest of the first group holding a close
  match (a command's own flags before Beam's), or ''."""
  for group in candidates:
    close = difflib.get_close_matches(name, group, n=1, cutoff=0.75)
    if close:
      return f'; did you mean {close[0]}?'
  return ''


def unknown_flag(parser, argv: list) -> Optional[str]:
  """The usage error of the first --flag in argv that `parser` (an argparse
  parser without abbreviations) does not know, with a did-you-mean; None if it
  knows them all. Checked before parsing: argparse would first report a
  required flag as missing when its misspelling is right there."""
  known = [flag for flag in parser._option_string_actions if flag.startswith('--')]
  for arg in argv:
    if arg == '--':
      break
    name = arg.split('=', 1)[0]
    if arg.startswith('--') and name not in known:
      return f'unrecognized argument {arg!r}{did_you_mean(name, known)}'
  return None


COMMANDS = ('convert', 'validate', 'inspect', 'export')
USAGE = ('usage: img2tfrecord {convert,validate,inspect,export} [options]\n'
         '  convert   images + manifest -> sharded TFRecords (see convert --help)\n'
         '  validate  read a converted dataset back and check it (see validate --help)\n'
         '  inspect   look at a dataset: counts, samples, a report page (see inspect --help)\n'
         '  export    --format tfds: make it loadable by other readers (see export --help)')


def main(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ('-h', '--help'):
    print(USAGE)
    return EXIT_OK if argv else EXIT_USAGE
  command, rest = argv[0], argv[1:]
  if command == 'convert':
    with startup.deferred_cloud_imports(rest):
      from pipeline import convert
    return convert.main(rest)
  if command == 'validate':
    with startup.deferred_cloud_imports(rest):
      from pipeline import validate
    return validate.main(rest)
  if command == 'inspect':
    from pipeline import look
    return look.main(rest)
  if command == 'export':
    from pipeline import export
    return export.main(rest)
  hint = did_you_mean(command, COMMANDS) or f'; give one of {", ".join(COMMANDS)}'
  print(f'error: unknown command {command!r}{hint}', file=sys.stderr)
  return EXIT_USAGE


_LINES = {'convert': interrupts.CONVERT_LINES, 'validate': interrupts.VALIDATE_LINES}


def console_main() -> None:
  """The console script's entry point: main() and a fast exit."""
  command = sys.argv[1] if len(sys.argv) > 1 else ''
  if command in _LINES:  # a signal during the imports: see interrupts.before_run
    interrupts.before_run(_LINES[command][0])
  fast_exit.exit_now(main())


if __name__ == '__main__':
  console_main()
