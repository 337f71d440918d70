"""Writes that go on while the writer does: one call at a time on a thread of
its own (the ordered writer's shards and sidecars, shard_file.py and
write_sources.py).

A local file's write() and zlib's compress() release the GIL, so on a thread
they run beside the step that makes the next records. On a nightly run that
copies 12,000 31 KB records (2 cores), the shard writes and the sidecar's
compression were 10 of the 62 us a reused row cost in the launching process
(py-spy). One call runs while the caller gathers the next: a second waits
for the first (never more than one gathered chunk waiting), in order.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
import contextlib
from typing import Optional


class WriteBehind:
  """run(fn, *args): fn(*args) on this object's thread, after the call
  before it; its error is raised in the caller by the next run(), wait() or
  close(). in_caller: every call runs in the caller instead (a remote file,
  whose client is not shared between threads here)."""

  def __init__(self, in_caller: bool = False):
    self._in_caller = in_caller
    self._executor: Optional[ThreadPoolExecutor] = None
    self._running: Optional[Future] = None

  def run(self, fn: Callable, *args) -> None:
    if self._in_caller:
      fn(*args)
      return
    self.wait()
    if self._executor is None:
      self._executor = ThreadPoolExecutor(1, thread_name_prefix='write-behind')
    self._running = self._executor.submit(fn, *args)

  def wait(self) -> None:
    """Returns once the call running, if any, is done; raises its error."""
    running, self._running = self._running, None
    if running is not None:
      running.result()

  def close(self) -> None:
    """wait(), then the thread ends (it ends too, if the error is raised)."""
    try:
      self.wait()
    finally:
      if self._executor is not None:
        self._executor.shutdown(wait=True)
        self._executor = None

  def abandon(self) -> None:
    """close() after a failed write: the call running is waited for, its
    OSError dropped (the write's error raised already is the run's)."""
    with contextlib.suppress(OSError):
      self.close()
