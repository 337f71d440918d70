"""One child process of a ProcessPool, from the parent's side: started from
the one spawner thread (so that it dies with the parent process, not with the
thread that asked for it), a call sent over its pipe and answered within its
limit, stopped or killed; the words the parent and the child
(process_worker.py) say on that pipe, and how a child fails (WorkerDied,
WorkerTimedOut, WorkerFailedToStart)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
import importlib
import os
import pickle
import queue
import select
import signal
import subprocess
import sys
import threading
from typing import Optional

from transforms.workers import progress_ticks

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


def _signal_name(number: int) -> str:
  try:
    return signal.Signals(number).name
  except ValueError:  # a real-time signal has no name
    return f'signal {number}'


def import_module(name: str) -> None:
  """Imports module `name` in a child (a new child is warmed so: ProcessPool,
  spare_children)."""
  importlib.import_module(name)


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


class Child:
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
