"""Preparing the output folder: one run at a time (the run lock), then refuse a
non-empty folder or clear our own files."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import datetime
import fnmatch
import json
import os
import re
import shutil
import socket
import sys
import threading
import time
from typing import Optional
import uuid

from pipeline.cli import UsageError
from transforms import filesystem
from transforms.core import paths
from transforms.core.spec import COMPRESSIONS
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import INDEX_SUFFIX
from transforms.core.spec import LABEL_MAP
from transforms.core.spec import REJECTED_FILE
from transforms.core.spec import SHARD_NUMBERS_GLOB
from transforms.core.spec import VALIDATION_REPORT
from transforms.core.spec import shard_suffix

# Files convert writes besides shards (and their temp names while writing).
OUR_FILES = tuple(name + suffix
                  for name in (DATASET_INFO, LABEL_MAP, VALIDATION_REPORT, REJECTED_FILE)
                  for suffix in ('', '.tmp'))


def our_patterns(split_names: tuple) -> tuple:
  """Names a finished or killed run with these splits may have left."""
  patterns = ['beam-temp-*']  # Beam's own temp folders, never a user's
  for split in split_names:
    patterns += [f'{split}{SHARD_NUMBERS_GLOB}{shard_suffix(compression)}'
                 for compression in COMPRESSIONS]
    patterns.append(f'{split}{SHARD_NUMBERS_GLOB}{shard_suffix("none")}{INDEX_SUFFIX}')
  return tuple(patterns)


def list_entries(output_dir: str, files: Optional[filesystem.FileAccess] = None) -> list:
  """Names directly inside output_dir (for a remote bucket: top-level names),
  run locks left out."""
  if not paths.is_remote(output_dir):
    if not os.path.exists(output_dir):
      return []
    if not os.path.isdir(output_dir):
      raise UsageError(f'--output_dir {output_dir} exists and is not a folder')
    names = os.listdir(output_dir)
  else:
    prefix = output_dir.rstrip('/') + '/'
    names = {path[len(prefix):].split('/', 1)[0]
             for path, _ in (files or filesystem.FileAccess()).list(prefix)}
  return sorted(n for n in names if not n.startswith(LOCK_PREFIX))


def _previous_shards(output_dir: str, files: filesystem.FileAccess) -> set:
  try:
    info = json.loads(files.read_text(filesystem.join(output_dir, DATASET_INFO)))
    return {name for split in info.get('splits', {}).values()
            for s in split.get('shards', []) for name in (s, s + INDEX_SUFFIX)}
  except Exception:  # no previous (or a damaged) dataset_info: patterns only
    return set()


def ours(name: str, previous_shards: set, split_names: tuple) -> bool:
  return (name in OUR_FILES or name in previous_shards or
          any(fnmatch.fnmatchcase(name, p) for p in our_patterns(split_names)))


def _delete(output_dir: str, name: str, files: filesystem.FileAccess) -> None:
  path = filesystem.join(output_dir, name)
  if not paths.is_remote(output_dir) and os.path.isdir(path):
    shutil.rmtree(path)
  elif paths.is_remote(output_dir) and name.startswith('beam-temp-'):
    files.delete([path + '/'])
  else:
    files.delete([path])


def prepare_output_dir(output_dir: str, overwrite: bool, split_names: tuple = (),
                       files: Optional[filesystem.FileAccess] = None) -> None:
  """Creates output_dir, or clears a previous dataset from it with --overwrite.

  dataset_info.json goes first, so an interrupted clean-up never leaves a
  folder that looks complete. Only the previous dataset's files (as its
  dataset_info.json lists them) and what a killed run with the same splits
  leaves go; other files are left alone.
  """
  files = files or filesystem.FileAccess()
  entries = list_entries(output_dir, files)
  if entries and not overwrite:
    raise UsageError(f'--output_dir {output_dir} is not empty ({len(entries)} entries, '
                     f'e.g. {entries[0]!r}); pass --overwrite to replace a previous dataset')
  if entries:
    previous = _previous_shards(output_dir, files)
    doomed = [n for n in entries if ours(n, previous, split_names)]
    doomed.sort(key=lambda n: n != DATASET_INFO)
    for name in doomed:
      _delete(output_dir, name, files)
  if not paths.is_remote(output_dir):
    os.makedirs(output_dir, exist_ok=True)


# ---------------------------------------------------------------- the run lock
#
# OUT/.convert.lock.<generation>: one JSON object naming the run that writes
# OUT. A run creates generation N+1 (0 when there is none) with an exclusive
# create, so of two runs that try at once exactly one succeeds; the holder
# rewrites its own file with a fresh heartbeat, and deletes it when it ends.
# Taking over a stale lock creates the next generation rather than deleting
# the stale one first, so two runs taking over at once still race on one
# exclusive create, and a heartbeat never overwrites another run's lock.

LOCK_PREFIX = '.convert.lock.'
_LOCK_NAME = re.compile(re.escape(LOCK_PREFIX) + r'(\d+)$')
HEARTBEAT_SECONDS = 60.0
# A lock from another host (or pid namespace) is stale after this long
# without a heartbeat: ten missed heartbeats, so a launcher busy for minutes
# is not mistaken for a dead one.
STALE_AFTER_SECONDS = 600.0


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
  system cannot tell, None when there is no such process."""
  try:
    with open(f'/proc/{pid}/stat', encoding='ascii', errors='replace') as stat:
      return stat.read().rsplit(')', 1)[1].split()[19]
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

  @classmethod
  def this_process(cls, now: float) -> RunInfo:
    pid = os.getpid()
    return cls(run_id=uuid.uuid4().hex[:12], host=socket.gethostname(), pid=pid,
               started=_utc(now), heartbeat=_utc(now), pid_start=process_start(pid) or '',
               pid_namespace=pid_namespace())

  @classmethod
  def from_text(cls, text: str) -> Optional[RunInfo]:
    """None for anything that is not a lock written by this module."""
    try:
      fields = json.loads(text)
      info = cls(**{f.name: fields[f.name] for f in dataclasses.fields(cls)
                    if f.name in fields})
      _unix(info.heartbeat)
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
    return None
  silent = now - _unix(holder.heartbeat)
  if silent > STALE_AFTER_SECONDS:
    return (f'no heartbeat for {silent:.0f} s (more than {STALE_AFTER_SECONDS:.0f} s; '
            f'its process on host {holder.host} cannot be checked from here)')
  return None


class _LocalLocks:
  """Exclusive create: the lock is written under a temp name, then hard-linked
  to its name; link(2) fails if the name exists and never shows a half-written
  file."""

  atomic = True

  def __init__(self, directory: str):
    self._directory = directory

  def names(self) -> list:
    if not os.path.exists(self._directory):
      return []
    if not os.path.isdir(self._directory):
      raise UsageError(f'--output_dir {self._directory} exists and is not a folder')
    return os.listdir(self._directory)

  def _temp(self, text: str) -> str:
    temp = os.path.join(self._directory, f'{LOCK_PREFIX}tmp-{uuid.uuid4().hex}')
    with open(temp, 'w', encoding='utf-8') as handle:
      handle.write(text)
    return temp

  def create(self, name: str, text: str) -> bool:
    os.makedirs(self._directory, exist_ok=True)
    temp = self._temp(text)
    try:
      os.link(temp, os.path.join(self._directory, name))
      return True
    except FileExistsError:
      return False
    finally:
      os.unlink(temp)

  def replace(self, name: str, text: str) -> None:
    os.replace(self._temp(text), os.path.join(self._directory, name))

  def read(self, name: str) -> Optional[str]:
    try:
      with open(os.path.join(self._directory, name), encoding='utf-8') as handle:
        return handle.read()
    except FileNotFoundError:
      return None

  def delete(self, name: str) -> None:
    try:
      os.unlink(os.path.join(self._directory, name))
    except FileNotFoundError:
      pass

  def delete_orphans(self) -> None:
    """Temp files of a run killed inside create(); a live one is younger
    than a second."""
    for name in self.names():
      if not name.startswith(LOCK_PREFIX + 'tmp-'):
        continue
      try:
        modified = os.path.getmtime(os.path.join(self._directory, name))
      except FileNotFoundError:  # a live create() of another run removed it after listing
        continue
      if time.time() - modified > 60:
        self.delete(name)


class _BeamLocks:
  """Any Beam filesystem. create() is exclusive where the store offers a
  conditional write (`_put_if_absent`), else an existence check followed by
  a write: two runs starting in the same instant can both pass it."""

  atomic = False

  def __init__(self, directory: str, options, files: Optional[filesystem.FileAccess] = None):
    self._directory = directory.rstrip('/')
    self._options = options
    self._files = files or filesystem.FileAccess()

  def _path(self, name: str) -> str:
    return f'{self._directory}/{name}'

  def names(self) -> list:
    prefix = self._path(LOCK_PREFIX)
    return [path.rsplit('/', 1)[-1] for path, _ in self._files.list(prefix)
            if '/' not in path[len(prefix):]]

  def _put_if_absent(self, name: str, data: bytes) -> bool:
    if self._files.exists(self._path(name)):
      return False
    self.replace(name, data.decode('utf-8'))
    return True

  def create(self, name: str, text: str) -> bool:
    return self._put_if_absent(name, text.encode('utf-8'))

  def replace(self, name: str, text: str) -> None:
    with self._files.create(self._path(name)) as handle:
      handle.write(text.encode('utf-8'))

  def read(self, name: str) -> Optional[str]:
    try:
      return self._files.read_text(self._path(name))
    except Exception:  # pylint: disable=broad-except  # gone: BeamIOError/FileNotFoundError
      if self._files.exists(self._path(name)):
        raise
      return None

  def delete(self, name: str) -> None:
    if self._files.exists(self._path(name)):
      self._files.delete([self._path(name)])

  def delete_orphans(self) -> None:
    """Object stores write a lock in one request: no temp files."""


class _S3Locks(_BeamLocks):
  """S3 conditional write: PutObject with `If-None-Match: *` fails with 412
  when the key exists (AWS since 2024-08; moto; S3-compatible stores that
  ignore the header make this an unconditional put)."""

  atomic = True

  def _put_if_absent(self, name: str, data: bytes) -> bool:
    from botocore.exceptions import ClientError  # pylint: disable=import-outside-toplevel
    bucket, key = self._path(name)[len('s3://'):].split('/', 1)
    try:
      self._files.s3_client().put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch='*')
      return True
    except ClientError as error:
      if error.response.get('Error', {}).get('Code') in (
          'PreconditionFailed', 'ConditionalRequestConflict', '412', '409'):
        return False
      raise


class _GcsLocks(_BeamLocks):
  """GCS conditional write: an upload with ifGenerationMatch=0 succeeds only
  if no live object has the name. Not exercised by the tests here (no GCS
  server)."""

  atomic = True

  def _put_if_absent(self, name: str, data: bytes) -> bool:
    # pylint: disable=import-outside-toplevel
    from apache_beam.io.gcp.gcsio import GcsIO
    from google.api_core.exceptions import PreconditionFailed
    bucket, blob = self._path(name)[len('gs://'):].split('/', 1)
    try:
      GcsIO(pipeline_options=self._options).client.bucket(bucket).blob(blob).upload_from_string(
          data, content_type='application/json', if_generation_match=0)
      return True
    except PreconditionFailed:
      return False


def lock_store(output_dir: str, options, files: Optional[filesystem.FileAccess] = None):
  if not paths.is_remote(output_dir):
    return _LocalLocks(output_dir)
  if output_dir.startswith('s3://'):
    return _S3Locks(output_dir, options, files)
  if output_dir.startswith('gs://'):
    return _GcsLocks(output_dir, options, files)
  return _BeamLocks(output_dir, options, files)


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
              files: Optional[filesystem.FileAccess] = None) -> RunLock:
    """files: what reaches a remote OUT (one per command run: see FileAccess)."""
    store = store or lock_store(output_dir, options, files)
    host, namespace = socket.gethostname(), pid_namespace()
    for _ in range(3):  # a lock released between listing and reading: list again
      generations = sorted(g for g in map(lock_generation, store.names()) if g is not None)
      top = generations[-1] if generations else -1
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
      me = RunInfo.this_process(time.time())
      if not store.create(lock_name(top + 1), me.to_text()):
        text = store.read(lock_name(top + 1))
        holder = RunInfo.from_text(text) if text else None
        raise UsageError(cls._busy(output_dir, holder))
      lock = cls(store, output_dir, top + 1, me)
      for stale in generations:  # taken over: nothing of the dead run's lock is left
        store.delete(lock_name(stale))
      store.delete_orphans()
      lock._beats.start()
      return lock
    raise UsageError(f'--output_dir {output_dir}: its run lock keeps changing hands; '
                     f'another run is starting there')

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
      except Exception as error:  # pylint: disable=broad-except
        # A missed beat must not fail the run: the next one may get through,
        # and only STALE_AFTER_SECONDS of silence lets another host take over.
        print(f'warning: run lock heartbeat on {self._output_dir} failed: '
              f'{type(error).__name__}: {error}', file=sys.stderr)

  def release(self) -> None:
    self._stop.set()
    if self._beats.is_alive():
      self._beats.join()
    self._store.delete(lock_name(self.generation))

  def __enter__(self) -> RunLock:
    return self

  def __exit__(self, *exc) -> bool:
    self.release()
    return False
