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
import importlib
import os
import pickle
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from transforms.workers import progress_ticks
from transforms.workers.preparer import Preparer

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


def import_module(name: str) -> None:
  """Imports module `name` in a child (ProcessPool warms a new child so)."""
  importlib.import_module(name)


def _signal_name(number: int) -> str:
  try:
    return signal.Signals(number).name
  except ValueError:  # a real-time signal has no name
    return f'signal {number}'


class WorkerDied(RuntimeError):
  """The child process ended (or garbled its reply) while running a call."""


class WorkerTimedOut(WorkerDied):
  """The child took longer than the call's time limit: it was killed."""


class WorkerFailedToStart(RuntimeError):
  """A child process could not start serving calls: a set-up problem."""


class PoolShutDown(RuntimeError):
  """A call still running when its pool was shut down (a failed or
  interrupted bundle) wanted a child: none is started, or one that started
  meanwhile is killed."""


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
    # A child starts with this thread's signal mask: SIGINT blocked until its
    # main() ignores it. A terminal's Ctrl-C (the whole process group) that
    # came while a child was still importing printed its KeyboardInterrupt
    # traceback above the parent's one line (4 of 58 runs interrupted so).
    # Python runs its handlers in the main thread: this thread needs none.
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    while True:
      started, args, kwargs = requests.get()
      try:
        started.set_result(subprocess.Popen(args, **kwargs))
      except Exception as error:
        started.set_exception(error)  # raised in the caller, by started.result()


_SPAWNER = _Spawner()


# A call whose prepare used up its whole limit still gets this long for its
# child to answer (select's timeout must be positive: 0 would mean no limit).
_MIN_CALL_S = 0.001


class _Child:
  """One child process and its pipes."""

  def __init__(self, worker_module: str, timeout_s: Optional[float] = None):
    """timeout_s: the limit its calls will get; the child then ticks as its
    rows finish (progress_ticks), on a pipe of its own."""
    self.busy = False  # a call is running in it
    self.imported = set()  # the called functions' modules it has imported
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path),
               **{PARENT_PID_ENV: str(os.getpid())})
    ticks, tick_end = progress_ticks.pipe() if timeout_s else (None, None)
    # A file object, as the reply stream: closing it twice (shutdown kills a
    # busy child while its pool thread does too) is harmless, and a closed
    # one is never read by its number (which a new file may have taken).
    self._ticks = None if ticks is None else open(ticks, 'rb', buffering=0)
    if tick_end is not None:
      env[progress_ticks.TICKS_ENV] = progress_ticks.setting(tick_end, timeout_s)
    # -P (3.11+): the current folder is not put first, so the parent's own
    # path (PYTHONPATH) alone decides which `transforms` is imported.
    safe_path = ['-P'] if sys.version_info >= (3, 11) else []
    try:
      self._process = _SPAWNER.popen(
          [sys.executable, *safe_path, '-m', worker_module], stdin=subprocess.PIPE,
          stdout=subprocess.PIPE, env=env, pass_fds=() if tick_end is None else (tick_end,))
    except BaseException:
      if self._ticks is not None:
        self._ticks.close()
      raise
    finally:
      if tick_end is not None:
        os.close(tick_end)  # the child's end: EOF here once the child is gone
    try:
      ready = pickle.load(self._process.stdout)
    except Exception as error:
      raise WorkerFailedToStart(self._start_failure()) from error
    if ready != READY:
      self.kill()
      raise WorkerFailedToStart(f'an image worker process said {ready!r} on start')

  def _start_failure(self) -> str:
    """Why the child gave no READY (it is killed): its own error, printed
    on stderr, or a signal from outside (the OOM killer), which prints none."""
    try:
      code = self._process.wait(timeout=1)  # its output ended: it is ending
    except subprocess.TimeoutExpired:
      code = None  # alive, its reply stream garbled: killed below
    self.kill()
    if code is not None and code < 0:
      return f'an image worker process was killed by {_signal_name(-code)} while starting'
    return (f'an image worker process failed to start (exit code '
            f'{self._process.returncode}); its error is printed above')

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
      if timeout_s and not self._answers_within(timeout_s):
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

  def _answers_within(self, timeout_s: float) -> bool:
    """Whether the reply starts before timeout_s pass without a tick: each
    row of a call gets the limit, from the previous row's end. poll: select
    takes no file number from 1024 up (ValueError), which a child started while
    a local run writes --num_shards 1100 shards at once gets (its rows were
    rejected as decode/unexpected_error)."""
    poller = select.poll()
    reply = self._process.stdout.fileno()
    poller.register(reply, select.POLLIN)
    if self._ticks is not None:
      poller.register(self._ticks.fileno(), select.POLLIN)
    while True:
      ready = [number for number, _ in poller.poll(timeout_s * 1000)]
      if not ready or reply in ready:
        return bool(ready)
      if not self._ticks.read(4096):  # the child is gone: its reply stream tells
        poller.unregister(self._ticks.fileno())

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
    for pipe in (self._process.stdin, self._process.stdout, self._ticks):
      try:
        if pipe is not None:
          pipe.close()
      except OSError:
        pass  # already broken: nothing left to release


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

  def _child(self) -> _Child:
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
    child = _Child(self._worker_module, self._timeout_s)
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
