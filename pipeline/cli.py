"""The `img2tfrecord` console script (`img2tfrecord
convert|validate|inspect|export ...`): an entry point at the top, it only
dispatches to the commands. No Beam import at import time: the console script
defers Beam's cloud imports (beam_runtime/startup.py)."""

from __future__ import annotations

from importlib import metadata
import sys

from pipeline.beam_runtime import startup
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.errors import PROGRAM
from pipeline.errors import did_you_mean
from pipeline.runs import exits
from pipeline.runs import interrupts
from pipeline.runs import utf8_mode

COMMANDS = ('convert', 'validate', 'inspect', 'export')
USAGE = (f'usage: {PROGRAM} {{{",".join(COMMANDS)}}} [options]\n'
         '  convert   images + manifest -> sharded TFRecords (see convert --help)\n'
         '  validate  read a converted dataset back and check it (see validate --help)\n'
         '  inspect   look at a dataset: counts, samples, a report page (see inspect --help)\n'
         '  export    --format tfds: make it loadable by other readers (see export --help)\n'
         f'{PROGRAM} --version prints the installed version')


def main(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv:  # a usage error: one line on stderr, as every other
    print(f'error: no command given; give one of {", ".join(COMMANDS)} '
          f'({PROGRAM} --help says what each does)', file=sys.stderr)
    return EXIT_USAGE
  if argv[0] in ('-h', '--help'):
    print(USAGE)
    return EXIT_OK
  if argv[0] in ('-V', '--version'):
    print(f'{PROGRAM} {installed_version()}')
    return EXIT_OK
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


def installed_version() -> str:
  """The version pip installed (setup.py's), or 'unknown (not installed)'
  when the code runs from a checkout nobody installed."""
  try:
    return metadata.version(PROGRAM)
  except metadata.PackageNotFoundError:
    return 'unknown (not installed)'


_LINES = {'convert': interrupts.CONVERT_LINES, 'validate': interrupts.VALIDATE_LINES,
          'inspect': interrupts.INSPECT_LINES, 'export': interrupts.EXPORT_LINES}


def console_main() -> None:
  """The console script's entry point: main() and a fast exit."""
  utf8_mode.in_utf8_mode()  # first: it may start the command again
  command = sys.argv[1] if len(sys.argv) > 1 else ''
  if command in _LINES:  # a signal during the imports: see interrupts.before_run
    interrupts.before_run(_LINES[command][0])
  exits.exit_with(main, fast=True)


if __name__ == '__main__':
  console_main()
