"""convert with a SIGKILL or a pause at a chosen point (for tests/test_run_lock.py).

  python -m tests.lock_helpers POINT [GO_FILE] -- CONVERT FLAGS

POINT is one of POINTS. With GO_FILE, convert starts only once that file
exists (Beam is imported by then), so several runs reach the lock together.
`hold:DIR` pauses the run holding the lock: it writes DIR/holding-PID and
goes on once DIR/release exists.
"""

import os
import pathlib
import signal
import sys
import time

from pipeline import convert
from pipeline.runs import locked_run
from pipeline.runs import output_dir
from transforms import filesystem
from transforms import write_metadata

POINTS = ('none', 'locked', 'clearing', 'shards', 'written')


def _die(*_, **__):
  os.kill(os.getpid(), signal.SIGKILL)


def _wait_for(path: pathlib.Path) -> None:
  deadline = time.monotonic() + 120
  while not path.exists():
    if time.monotonic() > deadline:
      raise SystemExit(f'{path} never appeared')
    time.sleep(0.005)


def _hold(folder: pathlib.Path):
  prepare = locked_run.prepare_output_dir

  def holding(*args, **kwargs):
    (folder / f'holding-{os.getpid()}').write_text('')
    _wait_for(folder / 'release')
    return prepare(*args, **kwargs)

  return holding


def _after_first(function):
  calls = []

  def once_then_die(*args, **kwargs):
    if calls:
      _die()
    calls.append(args)
    return function(*args, **kwargs)

  return once_then_die


def main(argv: list) -> int:
  split = argv.index('--')
  point, options, flags = argv[0], argv[1:split], argv[split + 1:]
  if point.startswith('hold:'):
    locked_run.prepare_output_dir = _hold(pathlib.Path(point[len('hold:'):]))
  elif point == 'locked':  # the lock is held, nothing else is touched yet
    locked_run.prepare_output_dir = _die
  elif point == 'clearing':  # --overwrite removed dataset_info.json, then died
    output_dir._delete = _after_first(output_dir._delete)
  elif point == 'shards':  # every shard is written, dataset_info.json is not
    write_metadata.WriteInfoFn.process = _die
  elif point == 'written':  # dataset_info.json is written, the lock still held
    filesystem.read_info = _die
  elif point != 'none':
    raise SystemExit(f'unknown point {point}')
  if options:
    _wait_for(pathlib.Path(options[0]))
  return convert.main(flags)


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
