"""ProcessPool: calls run in child Python processes, driven by parent threads.

Each pool thread owns one child (`python -m transforms.workers.process_worker`) and
hands it one call at a time over a pipe: the function goes by reference, the
arguments and the result pickled. The children are started afresh (not
forked), with the parent's sys.path, so they import only what the called
function's module needs (no Beam) and share no locks or threads with the Beam
worker. A child that dies (a decoder crash) fails only the call it was
running (WorkerDied); the next call on that thread starts a new child. A child
that cannot even start fails the job (WorkerFailedToStart).

Why not concurrent.futures.ProcessPoolExecutor or multiprocessing.Pool:
- crash isolation per task: when one of their children dies (a decoder
  segfault), ProcessPoolExecutor breaks the whole pool (BrokenProcessPool:
  every pending call fails) and multiprocessing.Pool waits forever for the
  lost result; here only the call that child was running fails, and the row
  or record behind it is named.
- children that must not import Beam: their spawn start method re-imports the
  parent's __main__ (a Beam worker or the convert entry point) in every
  child; here a child runs `python -m transforms.workers.process_worker`,
  which imports only the called function's module (core/ and workers/).
- fork safety: their default start method on Linux (before Python 3.14)
  forks the Beam worker, with its gRPC and logging threads and their locks
  held mid-flight; here every child is a fresh interpreter sharing nothing
  with the parent.

Children die with the parent process, even one killed with SIGKILL while a
call holds its child (process_worker.die_with_parent). One child, its start,
its pipe and how it fails: child_process.py.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
import threading
import time
from typing import Optional

from transforms.workers import spare_children
from transforms.workers.child_process import Child
from transforms.workers.child_process import WorkerTimedOut
from transforms.workers.child_process import import_module
from transforms.workers.preparer import Preparer

WORKER_MODULE = 'transforms.workers.process_worker'


class PoolShutDown(RuntimeError):
  """A call still running when its pool was shut down (a failed or
  interrupted bundle) wanted a child: none is started, or one that started
  meanwhile is killed."""


# A call whose prepare used up its whole limit still gets this long for its
# child to answer (select's timeout must be positive: 0 would mean no limit).
_MIN_CALL_S = 0.001


class ProcessPool:
  """submit(fn, *args) -> Future, run in one of `processes` child processes.

  `fn` must be a module-level function; its module should not import Beam
  (every child would pay that import). `prepare`, if given, maps the
  arguments in the parent before they are sent (e.g. reads remote files,
  which children cannot). `worker_module`: what the children run (a test
  gives one that cannot start). `timeout_s`: the limit of a call, prepare
  included, renewed by each tick of the child (progress_ticks: a row done,
  so that the limit is each row's): a prepare still running at the limit is
  left behind (see Preparer), a child silent that long is killed
  (WorkerTimedOut either way); the next call starts a new one.
  """

  def __init__(self, processes: int, prepare: Optional[Callable] = None,
               worker_module: str = WORKER_MODULE, timeout_s: Optional[float] = None):
    self._executor = ThreadPoolExecutor(processes)
    self._worker_module = worker_module
    self._prepare = prepare
    self._timeout_s = timeout_s
    self._local = threading.local()
    self._children = []
    self._preparers = []
    self._lock = threading.Lock()
    self._shut_down = False
    # Seconds the children spent answering calls, all added up (what a
    # PooledStep sizes its batches by): from each call's send to its reply.
    self.busy_s = 0.0

  def submit(self, fn: Callable, *args, prepare: Optional[Callable] = None) -> Future:
    """prepare: this call's, instead of the pool's (a pool several steps share)."""
    return self._executor.submit(self._call, fn, args, prepare or self._prepare)

  def _call(self, fn: Callable, args: tuple, prepare: Optional[Callable]):
    timeout_s = self._timeout_s
    if prepare is not None and timeout_s:
      args, progressed = self._prepared(prepare, fn, args, timeout_s)
      timeout_s = max(timeout_s - (time.monotonic() - progressed), _MIN_CALL_S)
    elif prepare is not None:
      args = prepare(args)
    child = self._child()
    if fn.__module__ not in child.imported:
      # Part of a child's start, not of the call's time limit: a new child's
      # first call imported Pillow and the project's modules (0.2 s idle,
      # more on a busy machine), so with a limit of a second or less the
      # first image after a killed child was rejected as decode/timeout.
      child.call(import_module, (fn.__module__,))
      child.imported.add(fn.__module__)
    started = time.monotonic()
    try:
      return child.call(fn, args, timeout_s)
    finally:
      with self._lock:
        self.busy_s += time.monotonic() - started

  def _prepared(self, prepare: Callable, fn: Callable, args: tuple, timeout_s: float) -> tuple:
    """(prepare(args), when it last showed progress) on this pool thread's
    Preparer, within timeout_s of each source."""
    preparer = getattr(self._local, 'preparer', None)
    if preparer is None:
      preparer = self._local.preparer = Preparer()
      with self._lock:
        self._preparers.append(preparer)
    done = preparer.run(prepare, args, timeout_s)
    if done is None:
      self._local.preparer = None
      with self._lock:
        self._preparers.remove(preparer)
      preparer.close()
      raise WorkerTimedOut(f'reading the files of a {fn.__name__} call took longer than '
                           f'{timeout_s:g} s: left behind')
    return done.result(), preparer.progressed

  def _child(self) -> Child:
    child = getattr(self._local, 'child', None)
    if child is not None and child.alive:
      return child
    if child is not None:  # died: release its pipes now, not at shutdown
      with self._lock:
        self._children.remove(child)
      child.kill()
    self._local.child = None
    if self._shut_down:
      raise PoolShutDown('the image worker pool is shut down')
    # one the run started ahead (spare_children), else a new one
    child = (spare_children.take(self._worker_module, self._timeout_s)
             or Child(self._worker_module, self._timeout_s))
    with self._lock:
      shut_down = self._shut_down
      if not shut_down:
        self._children.append(child)
    if shut_down:
      # Started while the pool shut down (an interrupt during the first
      # calls): shutdown() did not see it, so it would have stayed, idle.
      child.kill()
      raise PoolShutDown('the image worker pool was shut down while a child started')
    self._local.child = child
    return child

  def shutdown(self) -> None:
    """Stops the children and the pool's threads. Calls still running (the
    pool is shut down by a failed or interrupted bundle) are abandoned:
    their children are killed at once, rather than waited for up to their
    time limit (a child stuck on a FIFO would hold the run for it)."""
    self._executor.shutdown(wait=False, cancel_futures=True)
    with self._lock:
      self._shut_down = True
      children, self._children = self._children, []
      preparers, self._preparers = self._preparers, []
    for preparer in preparers:
      preparer.close()
    for child in children:  # all told first, so they end side by side
      if child.busy:
        child.kill()  # its pool thread sees it gone: WorkerDied, and ends
      else:
        child.stop()
    for child in children:
      child.close()
    self._executor.shutdown(wait=True)
