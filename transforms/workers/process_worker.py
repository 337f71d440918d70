"""The child side of ProcessPool: reads (fn, args), writes (status, value).

Runs until its stdin closes, or its parent process ends. Its replies go to
the stdout it was started with; everything else that writes to stdout
(Python code, C libraries, a program Pillow runs) lands on stderr, so it
cannot garble a reply.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import threading
import time
import types
from typing import BinaryIO

from transforms.workers import progress_ticks
from transforms.workers.child_process import OK
from transforms.workers.child_process import PARENT_PID_ENV
from transforms.workers.child_process import RAISED
from transforms.workers.child_process import READY
from transforms.workers.child_process import picklable_error

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_WATCH_INTERVAL_S = 0.25


def die_with_parent(parent_pid: int) -> None:
  """Ends this process when the process `parent_pid` (its parent) ends, even
  while a call holds it (a FIFO opened for reading, a decoder that never
  returns): a closed stdin is seen only between calls.

  Two ways, as either can miss: on Linux the kernel's parent-death signal
  (SIGKILL), which needs nothing of this process; and on every platform a
  thread that ends the process once getppid() is no longer `parent_pid` (an
  orphan is adopted by init or a subreaper). The signal fires when the
  *thread* that started this process ends, so ProcessPool starts its
  children from a thread that lives as long as its process.
  """
  _set_parent_death_signal(signal.SIGKILL)
  # Started after the signal is set, the watchdog also ends a child whose
  # parent was gone before it could be set.
  threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name='parent-watchdog',
                   daemon=True).start()


def _set_parent_death_signal(signum: int) -> bool:
  """prctl(PR_SET_PDEATHSIG, signum) on Linux: whether it was set."""
  if not sys.platform.startswith('linux'):
    return False  # no such call: the watchdog alone
  return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0


def _exit_when_orphaned(parent_pid: int) -> None:
  while os.getppid() == parent_pid:
    time.sleep(_WATCH_INTERVAL_S)
  # Silent: no one is left to read a reply, and a line per worker would land
  # on the terminal after the shell's prompt.
  os._exit(1)


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
  """Answers every (fn, args) request with (OK, result) or (RAISED, error).

  Returns when its input ends, or when its parent is gone: a request cut
  off, or a reply nobody reads (the parent ended by a signal while this
  call ran), ends the child quietly, never with a traceback per worker.
  """
  if not _send(replies, READY):
    return
  while True:
    try:
      fn, args = pickle.load(requests)
    except EOFError:
      return
    except pickle.UnpicklingError:
      return  # a request cut off mid-way: its sender is gone
    try:
      reply = _dumps((OK, fn(*args)))
    except Exception as error:
      reply = _dumps((RAISED, picklable_error(error)))
    if not _send(replies, reply, dumped=True):
      return


def _send(replies: BinaryIO, value, dumped: bool = False) -> bool:
  """Whether the reply went out (not when the parent's end of the pipe is
  closed)."""
  try:
    for part in (value if dumped else _dumps(value)):
      replies.write(part)
    replies.flush()
  except BrokenPipeError:
    return False
  return True


def _dumps(reply) -> list:
  """The reply's pickle, whole before any of it is sent (a result that does
  not pickle is a RAISED reply, never half a reply), as the pickler's parts:
  a large bytes value (an image's pixels) is a part of its own, not copied
  into one growing buffer (pickle.dumps: 18-73 against 0.7 us a raw 300x300
  image)."""
  parts = []
  file = types.SimpleNamespace(write=parts.append)  # its writes kept, in order
  pickle.Pickler(file, protocol=pickle.HIGHEST_PROTOCOL).dump(reply)
  return parts


def main() -> None:
  die_with_parent(int(os.environ.get(PARENT_PID_ENV) or os.getppid()))
  progress_ticks.start(os.environ.get(progress_ticks.TICKS_ENV))
  replies = os.fdopen(os.dup(1), 'wb')
  os.dup2(2, 1)  # from here on, anything printed goes to stderr
  sys.stdout = sys.stderr
  # Ctrl-C is for the parent, which stops its children by closing their input.
  # (The pool starts its children with SIGINT blocked: one that came while
  # this process imported is pending, and dropped here.)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
  serve(sys.stdin.buffer, replies)
  # Every reply is flushed; the interpreter's teardown (Pillow's modules)
  # only delayed the parent's shutdown of the pool.
  sys.stderr.flush()
  os._exit(0)


if __name__ == '__main__':
  main()
