"""Progress ticks: how a call in an image worker process tells its parent,
row by row, that it is still moving, so that a call's time limit
(--image_timeout_s) is each row's, not the whole batch's.

A call converts a batch of rows (8, up to 64). Timed as a whole, a batch of 8
images of 0.08 s each overran a 0.3 s limit, although no image came near it:
every batch of the run was killed and redone row by row, its child started
again (32 PNGs of 3000x3000, 2 processes: 4 of 4 calls killed, 36 calls
instead of 4). With ticks, the parent waits the limit from the last sign of
progress: a row that finishes sends one, so only a row that itself takes the
limit stops its call.

A child writes one byte to a pipe of its own (not its reply stream: the
parent reads replies through a buffered reader, which may hold a tick select
would not see) after a row, at most once a tick interval: a row that ends
less than that after the last tick sends none. So the gap between two ticks
is at most the interval plus one row's time, and a row gets the limit less
the interval at worst (TICK_S, or a tenth of a shorter limit).
"""

from __future__ import annotations

from collections.abc import Callable
import fcntl
import os
import threading
import time
from typing import Optional

# "FD INTERVAL_S": the write end of the child's tick pipe, and the least time
# between two ticks. Set only by a parent that times its calls.
TICKS_ENV = 'IMG2TFRECORD_WORKER_TICKS'
# Ticks of a long limit: 10 a second at most, a byte each (a pipe write in the
# child, a select and a read on the parent's pool thread).
TICK_S = 0.1

_fd: Optional[int] = None
_interval_s = TICK_S
_last = 0.0
# In the parent: what a row done on this thread calls (a Preparer's reads of
# remote files, timed as a child's rows are).
_hooks = threading.local()


def interval_for(timeout_s: float) -> float:
  """The least time between ticks under a limit of timeout_s."""
  return min(TICK_S, timeout_s / 10)


def pipe() -> tuple:
  """A tick pipe (read end, write end), each numbered 3 or more. A parent
  started with stdin and stdout closed (`cmd <&- >&-`) got 0 and 1 from
  os.pipe(): the child's stdout (its reply stream) took the write end's
  number, so its ticks went into its replies and stderr, the read end saw
  EOF at once (no per-row limit), and start() made the reply stream
  non-blocking: a reply over the 64 KiB a pipe holds failed with
  BlockingIOError, its rows decode/unexpected_error WorkerDied (2 of 12
  400x400 PNGs, exit 3)."""
  ends = []
  for fd in os.pipe():
    if fd < 3:  # close-on-exec, as os.pipe's; pass_fds makes the child's inheritable
      moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
      os.close(fd)
      fd = moved
    ends.append(fd)
  return tuple(ends)


def setting(fd: int, timeout_s: float) -> str:
  """TICKS_ENV's value for a child writing to `fd` under this limit."""
  return f'{fd} {interval_for(timeout_s):g}'


def start(value: Optional[str]) -> None:
  """In a child: tick to the pipe TICKS_ENV names (none: no ticks). Writes
  never block: a parent that does not read them (it lost interest in the
  call) never holds the child up."""
  global _fd, _interval_s
  if not value:
    return
  fd, interval_s = value.split()
  _fd, _interval_s = int(fd), float(interval_s)
  os.set_blocking(_fd, False)
  os.set_inheritable(_fd, False)  # not held open by a program Pillow runs


def on_this_thread(hook: Callable[[], None]) -> None:
  """row_done() on this thread calls hook() (a thread of the parent)."""
  _hooks.row_done = hook


def row_done() -> None:
  """A row of the current call is done: a tick to the parent, unless one went
  within the interval; on a thread with a hook (on_this_thread), the hook.
  Nothing elsewhere (pool threads)."""
  global _last
  if _fd is None:
    hook = getattr(_hooks, 'row_done', None)
    if hook is not None:
      hook()
    return
  now = time.monotonic()
  if now - _last < _interval_s:
    return
  _last = now
  try:
    os.write(_fd, b'.')
  except (BlockingIOError, BrokenPipeError):
    # A full pipe already holds ticks the parent has not read (they tell it
    # no more than this one would); a closed one: the parent is gone, and
    # the child ends with it (process_worker.die_with_parent).
    return
