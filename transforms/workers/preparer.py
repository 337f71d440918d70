"""Preparer: runs the `prepare` calls of one ProcessPool thread (reads of
remote files) on a thread of its own, so that a call's time limit covers them."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait
import queue
import threading
import time
from typing import Optional

from transforms.workers import progress_ticks


class Preparer:
  """One daemon thread running a pool thread's `prepare` calls (remote reads),
  so that a call's time limit covers them: a thread blocked in a read cannot
  be stopped, but it can be left behind. A prepare still running at the limit
  goes on until its read returns or fails, its result dropped, and its thread
  then ends; the pool thread gets a new Preparer. Daemon: a read that never
  returns does not hold up the interpreter's exit."""

  def __init__(self):
    self._requests = queue.SimpleQueue()
    # When the prepare running last showed progress: its start, or its last
    # source read (progress_ticks.row_done on this Preparer's thread).
    self.progressed = time.monotonic()
    threading.Thread(target=self._serve, args=(self._requests,), name='worker-prepare',
                     daemon=True).start()

  def run(self, prepare: Callable, args: tuple, timeout_s: float) -> Optional[Future]:
    """prepare(args) as a done Future, or None if it still runs timeout_s
    seconds after its start or its last source read: the limit is each
    source's, as in a child (8 reads of 0.4 s overran a limit of 1 s as a
    batch, which was then read again one source at a time)."""
    done = Future()
    self.progressed = time.monotonic()
    self._requests.put((done, prepare, args))
    while not done.done():
      left = self.progressed + timeout_s - time.monotonic()
      if left <= 0:
        return None
      wait([done], timeout=left)
    return done

  def close(self) -> None:
    """Ends the thread once the prepare it is running, if any, returns."""
    self._requests.put(None)

  def _progress(self) -> None:
    self.progressed = time.monotonic()

  def _serve(self, requests: queue.SimpleQueue) -> None:
    progress_ticks.on_this_thread(self._progress)
    while True:
      request = requests.get()
      if request is None:
        return
      done, prepare, args = request
      try:
        done.set_result(prepare(args))
      except Exception as error:
        done.set_exception(error)  # raised in the pool thread, by done.result()
