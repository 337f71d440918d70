"""ProcessPool: calls run in child Python processes, driven by parent threads.

Each pool thread owns one child (`python -m transforms.process_worker`) and
hands it one call at a time over a pipe: the function goes by reference, the
arguments and the result pickled. The children are started afresh (not
forked), so they import only what the called function's module needs (no
Beam) and share no locks or threads with the Beam worker. A child that dies
(a decoder crash) fails only the call it was running; the next call on that
thread starts a new child.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

WORKER_MODULE = 'transforms.process_worker'
OK = 'ok'
RAISED = 'raised'


def picklable_error(error: Exception) -> Exception:
  """`error`, or a RuntimeError describing it when it cannot be pickled."""
  try:
    pickle.loads(pickle.dumps(error))
    return error
  except Exception:  # pylint: disable=broad-except
    return RuntimeError(f'{type(error).__name__}: {error!r}')


class WorkerDied(RuntimeError):
  """The child process ended while running a call."""


class _Child:
  """One child process and its pipes."""

  def __init__(self):
    self._process = subprocess.Popen(
        [sys.executable, '-m', WORKER_MODULE], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE)

  def call(self, fn: Callable, args: tuple):
    try:
      pickle.dump((fn, args), self._process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
      self._process.stdin.flush()
      status, value = pickle.load(self._process.stdout)
    except (BrokenPipeError, EOFError, pickle.UnpicklingError) as error:
      code = self._process.wait()
      raise WorkerDied(f'image worker process ended (exit code {code}) '
                       f'while running {fn.__name__}') from error
    if status == RAISED:
      raise value
    return value

  @property
  def alive(self) -> bool:
    return self._process.poll() is None

  def close(self):
    self._process.stdin.close()
    self._process.wait()
    self._process.stdout.close()


class ProcessPool:
  """submit(fn, *args) -> Future, run in one of `processes` child processes.

  `fn` must be a module-level function; its module should not import Beam
  (every child would pay that import).
  """

  def __init__(self, processes: int):
    self._executor = ThreadPoolExecutor(processes)
    self._local = threading.local()
    self._children = []
    self._lock = threading.Lock()

  def submit(self, fn: Callable, *args) -> Future:
    return self._executor.submit(self._call, fn, args)

  def _call(self, fn, args):
    child = getattr(self._local, 'child', None)
    if child is None or not child.alive:
      child = self._local.child = _Child()
      with self._lock:
        self._children.append(child)
    return child.call(fn, args)

  def shutdown(self) -> None:
    self._executor.shutdown()
    with self._lock:
      children, self._children = self._children, []
    for child in children:
      child.close()
