"""SharedProcesses: one ProcessPool for every DoFn instance of a process that
uses it.

A runner may run several bundles of one step at once in one SDK harness
process (Flink's slots and Spark's tasks with LOOPBACK workers, Dataflow's
threads): each bundle's DoFn instance starting its own image processes would
put a multiple of the machine's cores to work. Beam's Shared
(apache_beam.utils.shared) hands every instance the same SharedProcesses; the
first to open it starts the pool, the last to close it stops it.
"""

from __future__ import annotations

import threading
from typing import Optional

from transforms.workers.process_pool import ProcessPool


class SharedProcesses:
  """A ProcessPool of `processes` children, opened and closed by its users
  (each passes its own `prepare` with its calls)."""

  def __init__(self, processes: int, timeout_s: Optional[float] = None):
    self.processes = processes
    self._timeout_s = timeout_s
    self._lock = threading.Lock()
    self._users = 0
    self._pool: Optional[ProcessPool] = None

  def open(self) -> ProcessPool:
    """The pool, started by the first user; each open() needs a close()."""
    with self._lock:
      if self._pool is None:
        self._pool = ProcessPool(self.processes, timeout_s=self._timeout_s)
      self._users += 1
      return self._pool

  def close(self) -> None:
    """One user done; the last one stops the children."""
    with self._lock:
      self._users -= 1
      if self._users > 0 or self._pool is None:
        return
      pool, self._pool = self._pool, None
    pool.shutdown()

  @property
  def users(self) -> int:
    return self._users
