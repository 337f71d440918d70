"""The run lock: one run at a time writes an output folder. The lock's
protocol (RunInfo, generations, staleness) and RunLock; the stores that hold
the lock file are in pipeline/runs/lock_stores.py."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import datetime
import errno
import json
import os
import re
import socket
import sys
import threading
import time
from typing import Optional
import uuid

from pipeline.errors import UsageError
from pipeline.runs.lock_stores import LOCK_PREFIX
from pipeline.runs.lock_stores import lock_store
from transforms import filesystem

# OUT/.convert.lock.<generation>: one JSON object naming the run that writes
# OUT. A run creates generation N+1 (0 when there is none) with an exclusive
# create, so of two runs that try at once exactly one succeeds; the holder
# rewrites its own file with a fresh heartbeat, and deletes it when it ends.
# Taking over a stale lock creates the next generation rather than deleting
# the stale one first, so two runs taking over at once still race on one
# exclusive create, and a heartbeat never overwrites another run's lock.

_LOCK_NAME = re.compile(re.escape(LOCK_PREFIX) + r'(\d+)$')
HEARTBEAT_SECONDS = 60.0
# A lock from another host (or pid namespace) is stale after this long
# without a heartbeat: ten missed heartbeats, so a launcher busy for minutes
# is not mistaken for a dead one.
STALE_AFTER_SECONDS = 600.0


# The run ids of the locks this process holds (made by acquire, not yet
# released). A lock naming this very process but none of these is the lock of
# one of its runs that is over, whose release was cut short: pipeline.api's
# caller pressed Ctrl-C again during the clean-up (a notebook's interrupt,
# twice). The process being alive, that lock was held for good: every later
# run into that folder was refused as "being written", --overwrite too.
_HELD_HERE: set = set()


def lock_name(generation: int) -> str:
  return f'{LOCK_PREFIX}{generation:06d}'


def lock_generation(name: str) -> Optional[int]:
  match = _LOCK_NAME.match(name)
  return int(match.group(1)) if match else None


def _utc(seconds: float) -> str:
  return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
      '%Y-%m-%dT%H:%M:%SZ')


def _unix(text: str) -> float:
  return datetime.datetime.fromisoformat(text.replace('Z', '+00:00')).timestamp()


def process_start(pid: int) -> Optional[str]:
  """When process `pid` started (Linux: clock ticks after boot), '' when this
  system cannot tell, None when there is no such process or it has ended: a
  zombie (state Z or X) is an ended process no parent has collected yet (a
  run killed by `timeout -s KILL`, which kills itself with it; a container
  whose first process collects none), and its lock was held for good."""
  try:
    with open(f'/proc/{pid}/stat', encoding='ascii', errors='replace') as stat:
      fields = stat.read().rsplit(')', 1)[1].split()
    return None if fields[0] in ('Z', 'X') else fields[19]
  except FileNotFoundError:
    return None
  except (OSError, IndexError):
    pass
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return None
  except PermissionError:  # exists, owned by someone else
    pass
  return ''


def pid_namespace() -> str:
  """Two containers may share a host name but not their process ids."""
  try:
    return os.readlink('/proc/self/ns/pid')
  except OSError:
    return ''


@dataclasses.dataclass(frozen=True)
class RunInfo:
  """What a lock file says about the run holding it."""
  run_id: str
  host: str
  pid: int
  started: str  # UTC, ISO 8601
  heartbeat: str  # UTC, ISO 8601
  pid_start: str = ''
  pid_namespace: str = ''
  # The splits whose shards this run, and the dead runs it took over, may have
  # written: what the next --overwrite clears whatever splits it writes itself.
  splits: tuple = ()

  @classmethod
  def this_process(cls, now: float, splits: tuple = ()) -> RunInfo:
    pid = os.getpid()
    return cls(run_id=uuid.uuid4().hex[:12], host=socket.gethostname(), pid=pid,
               started=_utc(now), heartbeat=_utc(now), pid_start=process_start(pid) or '',
               pid_namespace=pid_namespace(), splits=tuple(splits))

  @classmethod
  def from_text(cls, text: str) -> Optional[RunInfo]:
    """None for anything that is not a lock written by this module."""
    try:
      fields = json.loads(text)
      info = cls(**{f.name: fields[f.name] for f in dataclasses.fields(cls)
                    if f.name in fields})
      _unix(info.heartbeat)
      listed = info.splits if isinstance(info.splits, (list, tuple)) else ()
      info = dataclasses.replace(info, splits=tuple(str(name) for name in listed))
    except (ValueError, TypeError, KeyError, AttributeError):
      return None
    return info

  def to_text(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + '\n'

  def describe(self) -> str:
    return (f'run {self.run_id} (host {self.host}, pid {self.pid}, started {self.started}, '
            f'last heartbeat {self.heartbeat})')


def stale_reason(holder: Optional[RunInfo], now: float, host: str, namespace: str,
                 start_of: Callable[[int], Optional[str]] = process_start) -> Optional[str]:
  """Why the run holding a lock is no longer running, or None if it may be.

  On the same host and pid namespace the answer is exact: the holder's process
  is gone, or its pid now belongs to a process that started later. From
  anywhere else only the heartbeat tells: older than STALE_AFTER_SECONDS.
  """
  if holder is None:
    return 'its lock file is not a lock this program wrote'
  if holder.host == host and holder.pid_namespace == namespace:
    start = start_of(holder.pid)
    if start is None:
      return f'its process {holder.pid} on this host is gone'
    if start and holder.pid_start and start != holder.pid_start:
      return f'its process id {holder.pid} now belongs to another process'
    if holder.pid == os.getpid() and holder.run_id not in _HELD_HERE:
      return (f'it was a run of this process {holder.pid} that is over, '
              f'its clean-up cut short')
    return None
  silent = now - _unix(holder.heartbeat)
  if silent > STALE_AFTER_SECONDS:
    return (f'no heartbeat for {silent:.0f} s (more than {STALE_AFTER_SECONDS:.0f} s; '
            f'its process on host {holder.host} cannot be checked from here)')
  return None


def live_holder(folder: str, options=None,
                files: Optional[filesystem.FileAccess] = None) -> Optional[RunInfo]:
  """The run writing `folder` now (its lock's holder, not stale), or None:
  what validate asks before and after it reads a dataset, since a convert
  running there is replacing it (a fresh one has not published it yet)."""
  store = lock_store(folder, options, files)
  try:
    generations = sorted(g for g in map(lock_generation, store.names()) if g is not None)
  except UsageError:  # not a folder, or not listable: the read that follows says so
    return None
  text = store.read(lock_name(generations[-1])) if generations else None
  holder = RunInfo.from_text(text) if text else None
  if holder is None or stale_reason(holder, time.time(), socket.gethostname(),
                                    pid_namespace()) is not None:
    return None
  return holder


class RunLock:
  """`with RunLock.acquire(OUT, overwrite, options):` -- the one run writing OUT.

  UsageError (exit 2) when another run holds OUT; a stale lock (see
  stale_reason) is taken over with --overwrite only, since its run left a
  partial dataset behind.
  """

  def __init__(self, store, output_dir: str, generation: int, me: RunInfo):
    self._store = store
    self._output_dir = output_dir
    self.generation = generation
    self.me = me
    self._stop = threading.Event()
    self._beats = threading.Thread(target=self._beat, name='run-lock-heartbeat', daemon=True)

  @classmethod
  def acquire(cls, output_dir: str, overwrite: bool, options, store=None,
              files: Optional[filesystem.FileAccess] = None, splits: tuple = (),
              make_room: Optional[Callable[[tuple], None]] = None) -> RunLock:
    """files: what reaches a remote OUT (one per command run: see FileAccess).
    splits: the splits this run writes (recorded in its lock, with those of a
    stale lock it takes over: RunInfo.splits).
    make_room(splits): with --overwrite, when the lock cannot be written for
    lack of space, clears what a previous run left (the splits named); then
    the lock is written once more.
    """
    store = store or lock_store(output_dir, options, files)
    host, namespace = socket.gethostname(), pid_namespace()
    for _ in range(3):  # a lock released between listing and reading: list again
      generations = sorted(g for g in map(lock_generation, store.names()) if g is not None)
      top = generations[-1] if generations else -1
      holder = None
      if top >= 0:
        text = store.read(lock_name(top))
        if text is None:
          continue
        holder = RunInfo.from_text(text)
        why = stale_reason(holder, time.time(), host, namespace)
        if why is None:
          raise UsageError(cls._busy(output_dir, holder))
        if not overwrite:
          raise UsageError(
              f'--output_dir {output_dir} holds the lock of a run that is no longer running '
              f'({holder.describe() if holder else lock_name(top)}: {why}); pass --overwrite '
              f'to take it over and replace what that run left')
      left = holder.splits if holder else ()
      me = RunInfo.this_process(time.time(), tuple(dict.fromkeys((*splits, *left))))
      _HELD_HERE.add(me.run_id)  # before its file exists: never stale to this process
      created = False
      try:
        created = cls._create(store, output_dir, lock_name(top + 1), me,
                              make_room if overwrite else None)
      finally:
        if not created:
          _HELD_HERE.discard(me.run_id)
      if not created:
        text = store.read(lock_name(top + 1))
        holder = RunInfo.from_text(text) if text else None
        raise UsageError(cls._busy(output_dir, holder))
      lock = cls(store, output_dir, top + 1, me)
      try:
        for stale in generations:  # taken over: nothing of the dead run's lock is left
          store.delete(lock_name(stale))
        store.delete_orphans()
        lock._beats.start()
      except BaseException:
        # A signal here (its Interrupted) or an error: the caller's `with`
        # was never entered, so nothing else releases it. SIGTERM 0.4 s into
        # a 32-image nightly run left .convert.lock.000000 once in ~20 runs.
        lock.release()
        raise
      return lock
    raise UsageError(f'--output_dir {output_dir}: its run lock keeps changing hands; '
                     f'another run is starting there')

  @staticmethod
  def _create(store, output_dir: str, name: str, me: RunInfo,
              make_room: Optional[Callable[[tuple], None]]) -> bool:
    """store.create, and on a full disk (ENOSPC: a failed or killed run's
    shards may fill it) make_room then one more try. The lock was found free
    or stale just before, so no live run writes OUT while room is made."""
    try:
      return store.create(name, me.to_text())
    except OSError as error:
      if error.errno != errno.ENOSPC:
        raise
      full = error
    if make_room is None:
      raise UsageError(f'--output_dir {output_dir}: no space left on the device to write '
                       f'the run lock ({full.strerror}); free space there, or pass '
                       f'--overwrite to remove what a previous run left')
    make_room(me.splits)
    store.delete_orphans()
    try:
      return store.create(name, me.to_text())
    except OSError as error:
      if error.errno != errno.ENOSPC:
        raise
    raise UsageError(f'--output_dir {output_dir}: no space left on the device to write '
                     f'the run lock, even after removing what a previous run left '
                     f'({full.strerror}); free space there')

  @staticmethod
  def _busy(output_dir: str, holder: Optional[RunInfo]) -> str:
    who = holder.describe() if holder else 'another run'
    return (f'--output_dir {output_dir} is being written by {who}; wait for it to finish '
            f'or stop it (a killed run is taken over with --overwrite)')

  def _beat(self) -> None:
    while not self._stop.wait(HEARTBEAT_SECONDS):
      self.me = dataclasses.replace(self.me, heartbeat=_utc(time.time()))
      try:
        self._store.replace(lock_name(self.generation), self.me.to_text())
      except Exception as error:
        # A missed beat must not fail the run: the next one may get through,
        # and only STALE_AFTER_SECONDS of silence lets another host take over.
        # One line: a store's error may carry a multi-line message.
        lines = str(error).strip().splitlines()
        print(f'warning: run lock heartbeat on {self._output_dir} failed: '
              f'{type(error).__name__}: {lines[0] if lines else ""}', file=sys.stderr)

  def release(self) -> None:
    _HELD_HERE.discard(self.me.run_id)  # first: a lock left by a release cut short is stale
    self._stop.set()
    if self._beats.is_alive():
      self._beats.join()
    self._store.delete(lock_name(self.generation))

  def __enter__(self) -> RunLock:
    return self

  def __exit__(self, *exc) -> bool:
    self.release()
    return False
