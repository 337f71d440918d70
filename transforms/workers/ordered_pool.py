"""A bounded, order-keeping pool (threads or child processes) for DoFns."""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
import functools
from typing import Optional

from transforms.workers.child_process import WorkerDied
from transforms.workers.child_process import WorkerTimedOut
from transforms.workers.process_pool import ProcessPool


class OrderedPool:
  """Runs calls on `threads` threads (or, with processes=True, in that many
  child processes), at most 2 x threads in flight. With processes, a call
  still running after timeout_s seconds has its child killed (WorkerTimedOut).

  Results come back as (tag, future) in submission order, so memory stays
  flat and every outcome keeps the tag of the element it belongs to. With
  threads <= 1 and no processes, calls run inline (the future is already done).
  """

  def __init__(self, threads: int, processes: bool = False, prepare=None,
               timeout_s: float | None = None, executor: ProcessPool | None = None):
    """executor: a ProcessPool of `threads` processes others use too (its
    owner shuts it down), instead of a pool of this one's own; `prepare`
    then goes with each call."""
    self._threads = max(threads, 1)
    self._owned = executor is None
    self._call_options = {}
    if executor is not None:
      self._executor = executor
      self._call_options = {'prepare': prepare} if prepare else {}
    elif processes:
      self._executor = ProcessPool(self._threads, prepare, timeout_s=timeout_s)
    else:
      self._executor = ThreadPoolExecutor(threads) if threads > 1 else None
    self._pending = collections.deque()

  def submit(self, tag, fn: Callable, *args) -> list:
    """Queues fn(*args); returns the (tag, future) pairs that are now due."""
    if self._executor is None:
      return [(tag, _run_inline(fn, *args))]
    self._pending.append((tag, self._executor.submit(fn, *args, **self._call_options)))
    due = []
    while len(self._pending) > 2 * self._threads:
      due.append(self._pending.popleft())
    return due

  def call_alone(self, fn: Callable, *args) -> Future:
    """Runs fn(*args) outside the ordered queue (e.g. to retry one element)."""
    if self._executor is None:
      return _run_inline(fn, *args)
    return self._executor.submit(fn, *args, **self._call_options)

  def batch_results(self, future: Future, size: int, call_for: Callable,
                    again: bool = True) -> list:
    """The per-item results of a batched call (a list of `size`).

    If a worker process died running it, each item is rerun alone
    (call_for(i) -> (fn, *args) of item i alone), so only the item that kills
    a worker gets the WorkerDied as its result. An item whose worker died
    while it ran alone runs alone once more (again): a worker killed from
    outside (kill -9, the OOM killer choosing it for a neighbour's image) cost
    a good row, rejected as unexpected_error; an item that kills its worker
    kills the next one too. One that overran its time limit (WorkerTimedOut)
    is not run again. Other failures are raised.
    """
    try:
      return future.result()
    except WorkerDied as died:
      if size == 1:
        if again and not isinstance(died, WorkerTimedOut):
          return self.batch_results(self.call_alone(*call_for(0)), 1, call_for, again=False)
        return [died]
      results = []
      for i in range(size):
        results += self.batch_results(self.call_alone(*call_for(i)), 1,
                                      functools.partial(_item, call_for, i))
      return results

  @property
  def busy_s(self) -> float | None:
    """Seconds its child processes spent answering calls (ProcessPool.busy_s),
    None on threads."""
    return getattr(self._executor, 'busy_s', None)

  def drain(self, most: Optional[int] = None) -> Iterator[tuple]:
    """The (tag, future) pairs queued, oldest first (at most `most` of them)."""
    while self._pending and (most is None or most > 0):
      if most is not None:
        most -= 1
      yield self._pending.popleft()

  def drain_finished(self) -> Iterator[tuple]:
    """The (tag, future) pairs queued, oldest first, as long as each has
    finished (none is waited for)."""
    while self._pending and self._pending[0][1].done():
      yield self._pending.popleft()

  def shutdown(self) -> None:
    if self._executor is not None and self._owned:
      self._executor.shutdown()


def _run_inline(fn: Callable, *args) -> Future:
  future = Future()
  try:
    future.set_result(fn(*args))
  except Exception as error:  # handed to the caller through future.result()
    future.set_exception(error)
  return future


def _item(call_for: Callable, index: int, _: int) -> tuple:
  """call_for(index), whatever index it is asked for: item `index` of a batch
  is item 0 of the call that runs it alone."""
  return call_for(index)
