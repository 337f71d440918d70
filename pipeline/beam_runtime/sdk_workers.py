"""The SDK worker processes of a local multi_processing run, stopped when the
run is interrupted.

With --direct_running_mode multi_processing, Beam's FnApiRunner starts each
SDK worker as `/bin/sh -c '<python> -m apache_beam.runners.worker.sdk_worker_main'`
and, when the run leaves its stages (an Interrupted raised by the first
SIGINT, SIGTERM or SIGHUP), waits in close_all for every worker process to end. A
worker that had not yet connected its control stream is never told to end:
its connection is closed before it opens, and the run waited for it for ever
(SIGTERM to the launcher alone in a worker's first seconds, importing Beam:
3-4 s on 2 busy cores; 4 runs of 5 signalled 1.5-5 s in hung). A terminal's
Ctrl-C reaches the workers with the launcher (its process group); a
`kill PID`, Kubernetes or systemd's KillMode=mixed does not: stop() does what
the process group's signal would have.

Linux only (/proc): elsewhere nothing is found and nothing is stopped.
Imports nothing of Beam: the command line's signal handlers use it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import threading
import time

# What each SDK worker process's command line holds (FnApiRunner's command
# string for multi_processing: tests/test_beam_runtime.py checks it).
SDK_WORKER_MODULE = 'apache_beam.runners.worker.sdk_worker_main'


def _children_by_parent() -> dict:
  """{ppid: [pid, ...]} of every process /proc shows."""
  children = {}
  try:
    names = os.listdir('/proc')
  except OSError:  # no /proc (macOS): no process to find
    return children
  for name in names:
    if not name.isdigit():
      continue
    try:
      with open(f'/proc/{name}/stat', encoding='ascii', errors='replace') as stat:
        # The name in parentheses may hold spaces and parentheses itself.
        ppid = int(stat.read().rsplit(')', 1)[1].split()[1])
    except (OSError, IndexError, ValueError):  # ended since listed
      continue
    children.setdefault(ppid, []).append(int(name))
  return children


def _command_line(pid: int) -> str:
  try:
    with open(f'/proc/{pid}/cmdline', 'rb') as cmdline:
      return cmdline.read().replace(b'\0', b' ').decode('utf-8', 'replace')
  except OSError:  # ended since listed
    return ''


def _tree(pid: int, children: dict) -> list:
  """pid and every process below it."""
  found, todo = [], [pid]
  while todo:
    found.append(todo.pop())
    todo.extend(children.get(found[-1], ()))
  return found


def sdk_worker_processes(parent: int) -> list:
  """The SDK worker processes `parent` started (Beam's `sh -c` and the
  Python under it), with everything they started."""
  children = _children_by_parent()
  return [pid for child in children.get(parent, ())
          if SDK_WORKER_MODULE in _command_line(child)
          for pid in _tree(child, children)]


def stop(parent: int | None = None) -> list:
  """SIGTERM to each SDK worker process of `parent` (default: this process),
  as a signal to its process group would have sent; -> their pids. Quiet:
  Python ends by SIGTERM without a traceback. The run's wait for them then
  ends (Beam's worker thread says the worker exited 143: the interrupted
  run's threads are quiet by then)."""
  pids = sdk_worker_processes(os.getpid() if parent is None else parent)
  for pid in pids:
    try:
      os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:  # ended already (the group's own signal, say)
      continue
  return pids


# Whether the command line's SIGINT/SIGTERM/SIGHUP handlers are installed
# (pipeline/runs/interrupts.py): they stop the SDK workers themselves.
_stopped_by_the_launcher = False


def stopped_by_the_launcher(on: bool) -> None:
  """The command line's handlers are installed (on) or restored (off)."""
  global _stopped_by_the_launcher
  _stopped_by_the_launcher = on


def worker_command(command: bytes) -> bytes:
  """Beam's SDK worker command line (a `sh -c` string), with SIGINT ignored
  in the worker while the command line's handlers are installed: a
  terminal's Ctrl-C reaches every process of its group, and an SDK worker
  still importing Beam (its first seconds) or running a bundle printed its
  KeyboardInterrupt traceback under the run's one line (`--direct_num_workers
  2`, Ctrl-C 1-2 s in: 4 runs of 8). The launcher's first signal stops its
  workers with SIGTERM (keep_stopping), which ends them without a word.
  From Python (no handlers), the worker keeps Python's SIGINT: nothing else
  would stop one that had not connected yet. `exec`: the worker is the
  process `sh` was, its command line still naming SDK_WORKER_MODULE.

  Where util-linux's setpriv exists (Linux), the worker also gets SIGKILL as
  its parent-death signal: a launcher killed outright (SIGKILL: the OOM
  killer, a scheduler's last resort, `kill -9`) runs no clean-up, and its
  workers, blocked on their control stream, ran on for ever (each Beam's
  memory, a nightly job's leak per killed night). The signal fires when the
  thread that started the worker ends: Beam's SubprocessSdkWorker.run starts
  it and waits for it on one thread (test_beam_runtime checks its source)."""
  setpriv = shutil.which('setpriv')
  if setpriv:
    command = shlex.quote(setpriv).encode() + b' --pdeathsig KILL -- ' + command
  if not _stopped_by_the_launcher:
    return same_imports() + (b'exec ' + command if setpriv else command)
  return same_imports() + b"trap '' INT; exec " + command


def same_imports() -> bytes:
  """The shell words making an SDK worker import `pipeline` and `transforms`
  (and everything else) from where this process did: Beam starts it as
  `python -m ...` in the current folder, which Python puts first on its path,
  so a user's own `transforms/` or `transforms.py` there (a common name in
  ML projects) was imported instead of the installed package's, and every
  bundle failed (ModuleNotFoundError: transforms.manifest_ranges, exit 1).
  PYTHONSAFEPATH (Python 3.11+, as -P) leaves the current folder out, and
  PYTHONPATH is this process's own path (transforms/workers/child_process.py
  does the same for its children)."""
  path = os.pathsep.join(p or os.getcwd() for p in sys.path)
  return b'export PYTHONSAFEPATH=1 PYTHONPATH=' + os.fsencode(shlex.quote(path)) + b'; '


# After the first signal, how long and how often SDK workers that start late
# are stopped too (keep_stopping). Beam's worker-starting thread may still be
# starting one when the signal comes: stopped once, a worker started a moment
# later was held for ever (the integration test's SIGTERM case hung, 1 run of 4).
KEEP_STOPPING_S = 60.0
STOP_EVERY_S = 0.1


def keep_stopping(seconds: float = KEEP_STOPPING_S, every: float = STOP_EVERY_S,
                  parent: int | None = None) -> threading.Event:
  """stop() now, then every `every` seconds for `seconds` on a daemon thread,
  so a worker that starts after the signal is stopped too; -> an Event that
  ends it sooner (set)."""
  done = threading.Event()
  stop(parent)

  def again():
    deadline = time.monotonic() + seconds
    while not done.wait(every) and time.monotonic() < deadline:
      stop(parent)

  threading.Thread(target=again, name='stop-sdk-workers', daemon=True).start()
  return done
