"""Preparer: runs the `prepare` calls of one ProcessPool thread (reads of
remote files) on a thread of its own, so that a call's time limit covers them."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait
import queue
import threading
from typing import Optional


class Preparer:
  """One daemon thread running a pool thread's `prepare` calls (remote reads),
  so that a call's time limit covers them: a thread blocked in a read cannot
  be stopped, but it can be left behind. A prepare still running at the limit
  goes on until its read returns or fails, its result dropped, and its thread
  then ends; the pool thread gets a new Preparer. Daemon: a read that never
  returns does not hold up the interpreter's exit."""

  def __init__(self):
    self._requests = queue.SimpleQueue()
    threading.Thread(target=self._serve, args=(self._requests,), name='worker-prepare',
                     daemon=True).start()

  def run(self, prepare: Callable, args: tuple, timeout_s: float) -> Optional[Future]:
    """prepare(args) as a done Future, or None if it is still running after
    timeout_s seconds."""
    done = Future()
    self._requests.put((done, prepare, args))
    wait([done], timeout=timeout_s)
    return done if done.done() else None

  def close(self) -> None:
    """Ends the thread once the prepare it is running, if any, returns."""
    self._requests.put(None)

  @staticmethod
  def _serve(requests: queue.SimpleQueue) -> None:
    while True:
      request = requests.get()
      if request is None:
        return
      done, prepare, args = request
      try:
        done.set_result(prepare(args))
      except Exception as error:
        done.set_exception(error)  # raised in the pool thread, by done.result()
