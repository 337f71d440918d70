"""The `img2tfrecord` console script: `img2tfrecord convert|validate|inspect|export ...`."""

from __future__ import annotations

import sys

from pipeline import fast_exit
from pipeline import startup

USAGE = ('usage: img2tfrecord {convert,validate,inspect,export} [options]\n'
         '  convert   images + manifest -> sharded TFRecords (see convert --help)\n'
         '  validate  read a converted dataset back and check it (see validate --help)\n'
         '  inspect   look at a dataset: counts, samples, a report page (see inspect --help)\n'
         '  export    --format tfds: make it loadable by other readers (see export --help)')


def main(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ('-h', '--help'):
    print(USAGE)
    return 0 if argv else 2
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
    from pipeline import inspect
    return inspect.main(rest)
  if command == 'export':
    from pipeline import export
    return export.main(rest)
  print(f'error: unknown command {command!r}\n{USAGE}', file=sys.stderr)
  return 2


def console_main() -> None:
  """The console script's entry point: main() and a fast exit."""
  fast_exit.exit_now(main())


if __name__ == '__main__':
  console_main()
