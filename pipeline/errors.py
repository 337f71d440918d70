"""The bottom of pipeline/: the exit codes, the one UsageError and the
argument parser that raises it, and PointerNotWritten (a published nightly
run's one failure after it). Every module of pipeline/ may import this one;
it imports nothing of the project.

Exit codes of every command (docs/convert.md, docs/validate.md):
0 OK, 1 failed (convert: crashed; validate: the dataset has problems),
2 usage or input error, 3 over the error budget, 4 an object store (S3)
stopped answering while the run used it (transforms/s3_client.py), 130/143/129 ended by SIGINT,
SIGTERM or SIGHUP, 141 stdout closed before the output was all written (a reader such
as `| head -1` gone: 128 + SIGPIPE, as `yes | head -1`), with no traceback.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Optional

EXIT_OK = 0
EXIT_FAILED = 1  # convert: crashed; validate: the dataset has problems
EXIT_USAGE = 2
EXIT_OVER_BUDGET = 3
EXIT_STORE_NOT_ANSWERING = 4  # an s3:// store gave no answer within the bounded waits
EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`'s yes

PROGRAM = 'img2tfrecord'  # the console script (setup.py's entry point)


def command_prog(command: str) -> str:
  """A subcommand's name in its usage line, 'img2tfrecord convert': the line a
  user copies works with the console script, however the command was started
  (`python -m pipeline.convert` too)."""
  return f'{PROGRAM} {command}'


class UsageError(Exception):
  """Bad flags or unusable input: exit 2 with one line, before any work."""


class PointerNotWritten(Exception):
  """A nightly run's dataset is complete and published; only its `latest`
  pointer could not be written (a disk filled, a permission changed as the
  run ended): exit 1 with this one line, not "the job failed" and a
  traceback (runs/previous.write_latest)."""


# Said by every command and by `import pipeline.api` under -OO, whose
# stripped docstrings Beam builds its options from.
OPTIMIZED_PYTHON = ('Python runs with -OO (or PYTHONOPTIMIZE=2), which strips the docstrings '
                    'Apache Beam builds its options from: run it without -OO (unset '
                    'PYTHONOPTIMIZE)')


def refuse_optimized_python() -> None:
  """Under -OO: OPTIMIZED_PYTHON on stderr and exit 2. Each entry point calls
  it before it imports Beam: importing Beam's io under -OO raised a
  TypeError with a traceback (`python -OO -m pipeline.convert` with an s3://
  manifest or --runner FlinkRunner, the demos, the Flex Template's launch)."""
  if sys.flags.optimize >= 2:
    print(f'error: {OPTIMIZED_PYTHON}', file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


class UsageParser(argparse.ArgumentParser):
  """argparse's errors as UsageErrors: one line and exit 2, not argparse's exit."""

  def error(self, message):
    raise UsageError(message)

  def _print_message(self, message, file=None):
    """argparse's, without its `except OSError: pass`: --help whose reader
    has gone ends the command with exit 141, as any other output does."""
    if message:
      (file or sys.stderr).write(message)


def did_you_mean(name: str, *candidates: list) -> str:
  """'; did you mean X?' for the closest of the first group holding a close
  match (a command's own flags before Beam's), or ''."""
  for group in candidates:
    close = difflib.get_close_matches(name, group, n=1, cutoff=0.75)
    if close:
      return f'; did you mean {close[0]}?'
  return ''


def one_dash_hint(name: str, *candidates: list) -> str:
  """'; did you mean --X?' for `-manifest`, a long flag given one dash (as
  some tools spell them) when `--manifest` or a name close to it is a flag;
  else ''. argparse reported it as unrecognized, with no hint."""
  if name.startswith('--') or not name.startswith('-') or len(name) < 3:
    return ''
  return did_you_mean('-' + name, *candidates)


def unknown_flag(parser, argv: list) -> Optional[str]:
  """The usage error of the first --flag in argv that `parser` (an argparse
  parser without abbreviations) does not know, with a did-you-mean, or of a
  long flag given one dash (-input_dir); None if it knows them all. Checked
  before parsing: argparse would first report a required flag as missing
  when its misspelling is right there."""
  known = [flag for flag in parser._option_string_actions if flag.startswith('--')]
  for arg in argv:
    if arg == '--':
      break
    name = arg.split('=', 1)[0]
    if arg.startswith('--') and name not in known:
      return f'unrecognized argument {arg!r}{did_you_mean(name, known)}'
    hint = '' if name in parser._option_string_actions else one_dash_hint(name, known)
    if hint:
      return f'unrecognized argument {arg!r}{hint}'
  return None
