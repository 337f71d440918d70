"""convert's command line paused at a moment no outside means can hold it
at, for tests/test_interrupts.py to signal it there.

  python -m tests.signal_helpers MOMENT MARKER -- CONVERT FLAGS

MOMENT:
  renaming  the size-capped writer has renamed its first shard into place;
            the second rename writes MARKER and waits (up to 120 s) for a
            signal.
  cleaning  as renaming; then the interrupted run's clean-up writes
            MARKER.cleaning before deleting its first file and waits there,
            for a second signal.

Everything else is convert's own command line, as `python -m
pipeline.convert` runs it (convert.main: its signal handlers, its temp
folder), ending with the same fast exit.
"""

import pathlib
import sys
import time

from pipeline import convert
from pipeline.beam_runtime import fast_exit
from pipeline.runs import output_dir
from transforms import filesystem

WAIT_S = 120.0


def _wait(marker: pathlib.Path) -> None:
  """Writes marker, then sleeps in short steps: a signal's handler runs
  between them (and raises, or ends the process)."""
  marker.write_text('')
  deadline = time.monotonic() + WAIT_S
  while time.monotonic() < deadline:
    time.sleep(0.01)
  raise SystemExit(f'no signal came in {WAIT_S:.0f} s at {marker.name}')


def _pause_second_shard_rename(marker: pathlib.Path) -> None:
  rename = filesystem.FileAccess.rename
  shard_renames = []

  def pausing(self, sources, destinations):
    if any('-of-' in d for d in destinations):
      shard_renames.append(destinations)
      if len(shard_renames) == 2:
        _wait(marker)
    return rename(self, sources, destinations)

  filesystem.FileAccess.rename = pausing


def _pause_clean_up(marker: pathlib.Path) -> None:
  delete = output_dir._delete

  def pausing(*args, **kwargs):
    _wait(marker)
    return delete(*args, **kwargs)

  output_dir._delete = pausing


def main(argv: list) -> int:
  split = argv.index('--')
  (moment, marker), flags = argv[:split], argv[split + 1:]
  marker = pathlib.Path(marker)
  if moment not in ('renaming', 'cleaning'):
    raise SystemExit(f'unknown moment {moment}')
  _pause_second_shard_rename(marker)
  if moment == 'cleaning':
    _pause_clean_up(marker.with_name(marker.name + '.cleaning'))
  return convert.main(flags)


if __name__ == '__main__':
  fast_exit.exit_now(main(sys.argv[1:]))
