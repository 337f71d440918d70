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
call holds its child (process_worker.die_with_parent).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
import os
import pickle
import queue
import select
import subprocess
import sys
import threading
from typing import Optional

WORKER_MODULE = 'transforms.workers.process_worker'
# The parent's process id, for the child to watch (it may be gone before the
# child can ask getppid()).
PARENT_PID_ENV = 'IMG2TFRECORD_WORKER_PARENT'
READY = 'ready'
OK = 'ok'
RAISED = 'raised'
_CLOSE_TIMEOUT_S = 10


def picklable_error(error: Exception) -> Exception:
  """`error`, or a RuntimeError describing it when it cannot be pickled."""
  try:
    pickle.loads(pickle.dumps(error))
    return error
  except Exception:
    return RuntimeError(f'{type(error).__name__}: {error!r}')


class WorkerDied(RuntimeError):
  """The child process ended (or garbled its reply) while running a call."""


class WorkerTimedOut(WorkerDied):
  """The child took longer than the call's time limit: it was killed."""


class WorkerFailedToStart(RuntimeError):
  """A child process could not start serving calls: a set-up problem."""


class _Spawner:
  """Starts processes from one thread that lives as long as this process.

  A child's parent-death signal (PR_SET_PDEATHSIG, which process_worker
  sets) fires when the *thread* that started it ends, not the process: pool
  threads end at shutdown, and a pool may be used from a short-lived thread.
  """

  def __init__(self):
    self._lock = threading.Lock()
    self._pid = None  # the process whose thread serves _requests (a fork has none)
    self._requests = None

  def popen(self, args: list, **kwargs) -> subprocess.Popen:
    with self._lock:
      if self._pid != os.getpid():
        self._pid, self._requests = os.getpid(), queue.SimpleQueue()
        threading.Thread(target=self._serve, args=(self._requests,), name='worker-spawner',
                         daemon=True).start()
      requests = self._requests
    started = Future()
    requests.put((started, args, kwargs))
    return started.result()

  @staticmethod
  def _serve(requests: queue.SimpleQueue) -> None:
    while True:
      started, args, kwargs = requests.get()
      try:
        started.set_result(subprocess.Popen(args, **kwargs))
      except Exception as error:
        started.set_exception(error)  # raised in the caller, by started.result()


_SPAWNER = _Spawner()


class _Child:
  """One child process and its pipes."""

  def __init__(self, worker_module: str):
    self.busy = False  # a call is running in it
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path),
               **{PARENT_PID_ENV: str(os.getpid())})
    # -P (3.11+): the current folder is not put first, so the parent's own
    # path (PYTHONPATH) alone decides which `transforms` is imported.
    safe_path = ['-P'] if sys.version_info >= (3, 11) else []
    self._process = _SPAWNER.popen(
        [sys.executable, *safe_path, '-m', worker_module], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, env=env)
    try:
      ready = pickle.load(self._process.stdout)
    except Exception as error:
      self.kill()
      raise WorkerFailedToStart(
          f'an image worker process failed to start (exit code '
          f'{self._process.returncode}); its error is printed above') from error
    if ready != READY:
      self.kill()
      raise WorkerFailedToStart(f'an image worker process said {ready!r} on start')

  def call(self, fn: Callable, args: tuple, timeout_s: Optional[float] = None):
    """fn(*args) in the child; WorkerTimedOut (the child killed) if no reply
    came within timeout_s seconds."""
    self.busy = True
    try:
      return self._call(fn, args, timeout_s)
    finally:
      self.busy = False

  def _call(self, fn: Callable, args: tuple, timeout_s: Optional[float]):
    request = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
    try:
      self._process.stdin.write(request)
      self._process.stdin.flush()
      if timeout_s and not select.select([self._process.stdout], [], [], timeout_s)[0]:
        self.kill()
        raise WorkerTimedOut(f'image worker process still running {fn.__name__} after '
                             f'{timeout_s:g} s: killed')
      status, value = pickle.load(self._process.stdout)
    except WorkerTimedOut:
      raise
    except Exception as error:
      # Dead, or its reply stream can no longer be trusted: either way it goes.
      self.kill()
      raise WorkerDied(f'image worker process ended (exit code '
                       f'{self._process.returncode}) while running {fn.__name__}: '
                       f'{type(error).__name__}') from error
    if status == RAISED:
      raise value
    return value

  @property
  def alive(self) -> bool:
    return self._process.poll() is None

  def kill(self) -> None:
    if self._process.poll() is None:
      self._process.kill()
    self._process.wait()
    self._close_pipes()

  def stop(self) -> None:
    """Asks the child to stop: the end of its input."""
    try:
      self._process.stdin.close()
    except OSError:
      pass  # a dead child's broken pipe: close() kills what is left

  def close(self) -> None:
    """Stops the child (see stop); kills it if it does not end in time."""
    self.stop()
    try:
      self._process.wait(timeout=_CLOSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
      pass  # a stuck child: killed below
    self.kill()

  def _close_pipes(self) -> None:
    for pipe in (self._process.stdin, self._process.stdout):
      try:
        pipe.close()
      except OSError:
        pass  # already broken: nothing left to release


class ProcessPool:
  """submit(fn, *args) -> Future, run in one of `processes` child processes.

  `fn` must be a module-level function; its module should not import Beam
  (every child would pay that import). `prepare`, if given, maps the
  arguments on the pool thread before they are sent (e.g. reads remote files,
  which children cannot). `worker_module`: what the children run (a test
  gives one that cannot start). `timeout_s`: a call still running after that
  long kills its child (WorkerTimedOut); the next call starts a new one.
  """

  def __init__(self, processes: int, prepare: Optional[Callable] = None,
               worker_module: str = WORKER_MODULE, timeout_s: Optional[float] = None):
    self._executor = ThreadPoolExecutor(processes)
    self._worker_module = worker_module
    self._prepare = prepare
    self._timeout_s = timeout_s
    self._local = threading.local()
    self._children = []
    self._lock = threading.Lock()

  def submit(self, fn: Callable, *args) -> Future:
    return self._executor.submit(self._call, fn, args)

  def _call(self, fn: Callable, args: tuple):
    if self._prepare is not None:
      args = self._prepare(args)
    return self._child().call(fn, args, self._timeout_s)

  def _child(self) -> _Child:
    child = getattr(self._local, 'child', None)
    if child is not None and child.alive:
      return child
    if child is not None:  # died: release its pipes now, not at shutdown
      with self._lock:
        self._children.remove(child)
      child.kill()
    child = self._local.child = _Child(self._worker_module)
    with self._lock:
      self._children.append(child)
    return child

  def shutdown(self) -> None:
    """Stops the children and the pool's threads. Calls still running (the
    pool is shut down by a failed or interrupted bundle) are abandoned:
    their children are killed at once, rather than waited for up to their
    time limit (a child stuck on a FIFO would hold the run for it)."""
    self._executor.shutdown(wait=False, cancel_futures=True)
    with self._lock:
      children, self._children = self._children, []
    for child in children:  # all told first, so they end side by side
      if child.busy:
        child.kill()  # its pool thread sees it gone: WorkerDied, and ends
      else:
        child.stop()
    for child in children:
      child.close()
    self._executor.shutdown(wait=True)
