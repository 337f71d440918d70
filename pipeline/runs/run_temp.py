"""One private temp folder per command line run, removed when the run ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import tempfile
import threading
from typing import Optional

_PREFIX = 'img2tfrecord-run-'

# While a run's folder is in use: (the thread running it, tempfile.tempdir
# and TMPDIR as they were before it), the outermost run first.
_RUNS: list = []


def _forked_by_another_thread() -> None:
  """A child forked by a thread of the caller's while another thread ran a
  run (multiprocessing's fork, Linux's default) has no such thread: it kept
  that run's folder as tempfile's and TMPDIR, a folder the run removed when
  it ended, so the child's every temp file failed later (api.convert:
  FileNotFoundError listing it). It gets the caller's back. A fork of the
  run's own thread belongs to the run: its folder stays."""
  if _RUNS and _RUNS[0][0] != threading.get_ident():
    _put_back(*_RUNS[0][1:])
  _RUNS.clear()


if hasattr(os, 'register_at_fork'):  # not on Windows
  os.register_at_fork(after_in_child=_forked_by_another_thread)


def _put_back(previous_tempdir: Optional[str], previous_env: Optional[str]) -> None:
  tempfile.tempdir = previous_tempdir
  if previous_env is None:
    os.environ.pop('TMPDIR', None)
  else:
    os.environ['TMPDIR'] = previous_env


@contextlib.contextmanager
def private_temp_dir():
  """Points every temp file of this run, ours and Beam's, into one fresh folder
  under the system temp dir, and removes that folder on success and failure.

  Why not clean up after each maker: Beam's runners call tempfile.mkdtemp()
  and never remove the result (e.g. its environments' dependency staging, a
  job server's beam-temp* root, the stager's beam-requirements-cache), and so
  can any runner or filesystem we do not control. Child processes inherit the
  folder through TMPDIR. Both settings are restored afterwards (tests call
  main() in-process).
  """
  # Read before mkdtemp, which caches the system's folder in tempfile.tempdir.
  previous_tempdir, previous_env = tempfile.tempdir, os.environ.get('TMPDIR')
  host = socket.gethostname()
  remove_killed_runs(tempfile.gettempdir(), host)
  directory = tempfile.mkdtemp(prefix=f'{_PREFIX}{host}-{os.getpid()}-')
  tempfile.tempdir = directory
  os.environ['TMPDIR'] = directory
  _RUNS.append((threading.get_ident(), previous_tempdir, previous_env))
  try:
    yield directory
  finally:
    _RUNS.pop()
    _put_back(previous_tempdir, previous_env)
    try:
      shutil.rmtree(directory)
    except OSError as error:  # e.g. a child still writing: say so, the run stands
      print(f'note: could not remove the temp folder {directory}: {error}', file=sys.stderr)


def remove_killed_runs(parent: str, host: str) -> list:
  """Removes the temp folders that runs of this host left in `parent` when
  they were killed (SIGKILL, a lost machine: nothing else leaves one), named
  by a process that is gone; -> their names. Without it each killed run's
  folder stayed, whatever ran next. A folder of a live process (a run going
  on, or a reused process id) or of another host stays; one that cannot be
  removed is named on stderr and stays."""
  removed = []
  for name in sorted(os.listdir(parent)):
    owner = killed_run_owner(name, host)
    path = os.path.join(parent, name)
    # another user's is not ours to remove (nor could we, in a sticky /tmp)
    try:
      if owner is None or _alive(owner) or os.lstat(path).st_uid != os.getuid():
        continue
      shutil.rmtree(path)
      removed.append(name)
    except FileNotFoundError:  # another run starting at once removed it first
      continue
    except OSError as error:
      print(f"note: could not remove a killed run's temp folder: {error}", file=sys.stderr)
  return removed


def killed_run_owner(name: str, host: str) -> Optional[int]:
  """The process id in a run temp folder's name (img2tfrecord-run-HOST-PID-
  RANDOM) when HOST is `host`; None for any other name."""
  if not name.startswith(_PREFIX):
    return None
  owner, _, _random = name[len(_PREFIX):].rpartition('-')
  named_host, _, pid = owner.rpartition('-')
  return int(pid) if named_host == host and pid.isdigit() else None


def _alive(pid: int) -> bool:
  """Whether process `pid` runs. A zombie (state Z or X: ended, not yet
  collected by its parent, as after `timeout -s KILL` or in a container whose
  first process collects none) does not: its temp folder was kept for ever."""
  with contextlib.suppress(OSError, IndexError):
    with open(f'/proc/{pid}/stat', encoding='ascii', errors='replace') as stat:
      if stat.read().rsplit(')', 1)[1].split()[0] in ('Z', 'X'):
        return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process
    return True
  return True
