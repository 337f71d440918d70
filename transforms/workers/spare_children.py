"""Image worker processes started before their pool asks for them.

A local run's pool starts its children at its first call, when the first
image to convert reaches the image step: each child then takes 0.1-0.3 s to
start and import its modules, while every reused record behind that image
waits (a nightly run copies 1,024 records, ~40 ms, then stops for it). A
run that knows it will use children starts them here first (start), as Beam
builds and starts the job and reads the manifest; ProcessPool takes one
(take) instead of starting its own; discard() kills those no pool took, at
the run's end. No Beam.
"""

from __future__ import annotations

from concurrent.futures import Future
import threading
from typing import Optional

from transforms.workers.child_process import Child
from transforms.workers.child_process import WorkerDied
from transforms.workers.child_process import WorkerFailedToStart
from transforms.workers.child_process import import_module

# At most this many are started ahead, whatever the pool's size: the first
# calls find them; the pool starts the others as calls come, as before. All
# of a 12-process pool started ahead for 20 rows took the run from 2.7-2.8 s
# to 3.8-4.2 s (children started for nothing, and waited for at the end).
AT_MOST = 2

_LOCK = threading.Lock()
_KILLING = threading.Lock()  # _kill_started's: one kill at a time
# (worker module, time limit, Future of its Child), in the order started
_SPARES: list = []


def start(count: int, worker_module: str, timeout_s: Optional[float], modules: tuple) -> None:
  """Starts `count` children (AT_MOST at most) of `worker_module` (with
  `timeout_s`, as the pool's own: Child), each importing `modules`, on
  threads of their own."""
  for _ in range(min(count, AT_MOST)):
    future = Future()
    with _LOCK:
      _SPARES.append((worker_module, timeout_s, future))
    threading.Thread(target=_start_one, args=(future, worker_module, timeout_s, modules),
                     name='spare-child', daemon=True).start()


def _start_one(future: Future, worker_module: str, timeout_s: Optional[float],
               modules: tuple) -> None:
  if not future.set_running_or_notify_cancel():
    return  # discarded before it began
  try:
    child = Child(worker_module, timeout_s)
  except BaseException as error:  # the waiting pool starts its own, which says why
    future.set_exception(error)
    return
  try:
    for module in modules:
      child.call(import_module, (module,))
      child.imported.add(module)
  except BaseException as error:
    child.kill()
    future.set_exception(error)
    return
  future.set_result(child)


def take(worker_module: str, timeout_s: Optional[float]) -> Optional[Child]:
  """A started child of `worker_module` with `timeout_s` (waiting for its
  start to end), or None: none was started, or it failed to start or died
  since (the pool then starts one of its own, and reports what fails)."""
  with _LOCK:
    found = next((i for i, (module, limit, _) in enumerate(_SPARES)
                  if module == worker_module and limit == timeout_s), None)
    if found is None:
      return None
    future = _SPARES.pop(found)[2]
  try:
    child = future.result()
  except (WorkerFailedToStart, WorkerDied, OSError):
    return None
  if not child.alive:
    child.kill()
    return None
  return child


def discard() -> None:
  """Kills the children no pool took, those still starting once started;
  returns when none is left. Each is killed by its future's callback: a
  discard interrupted while it waits (a second Ctrl-C in a notebook) left
  the rest running, idle, as long as the process lived; an error other than
  a failed start, raised by the wait, replaced the run's own."""
  with _LOCK:
    spares = [future for _, _, future in _SPARES]
    _SPARES.clear()
  for future in spares:
    if not future.cancel():  # started (or starting): killed once it has
      future.add_done_callback(_kill_started)
  for future in spares:
    _kill_started(future)  # its start waited for: none is left on return


def _kill_started(future: Future) -> None:
  """Kills the child of `future` (waiting for its start), if it started. Its
  callback and discard() may both come here at once (a future wakes its
  waiters before it runs its callbacks): one kill at a time, as two closing
  its pipes together could close a descriptor another thread had reused."""
  if not future.cancelled() and future.exception() is None:
    with _KILLING:
      future.result().kill()
