"""The command line: the `img2tfrecord` console script (`img2tfrecord
convert|validate|inspect|export ...`), exit codes, the one UsageError, logging
and the exit-code wrapper of every entry point. No Beam import at import time:
the console script defers Beam's cloud imports (beam_runtime/startup.py)."""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
import traceback
from typing import Optional

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


def main_with_exit_codes(run, argv=None) -> int:
  """Runs `run(argv)` and maps failures to exit codes: usage 2, crash 1."""
  argv = list(sys.argv[1:] if argv is None else argv)
  configure_logging()
  from pipeline.beam_runtime.beam_signatures import remember_method_signatures
  remember_method_signatures()
  try:
    return run(argv)
  except UsageError as error:
    print(f'error: {error}', file=sys.stderr)
    return EXIT_USAGE
  except KeyboardInterrupt:
    print('interrupted', file=sys.stderr)
    return EXIT_FAILED
  except Exception as error:  # a crash: say what failed, keep the detail
    print(f'error: the job failed: {type(error).__name__}: '
          f'{str(error).splitlines()[0] if str(error) else ""}', file=sys.stderr)
    traceback.print_exc(file=sys.stderr)
    return EXIT_FAILED


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


def console_main() -> None:
  """The console script's entry point: main() and a fast exit."""
  fast_exit.exit_now(main())


if __name__ == '__main__':
  console_main()
