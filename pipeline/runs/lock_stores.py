"""Where the run lock lives: a local folder (exclusive create by hard link),
GCS and S3 (conditional writes) or another Beam filesystem."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Optional
import uuid

from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import paths

# Every lock file's name starts so (pipeline/runs/run_lock.py: OUT/.convert.lock.<generation>).
LOCK_PREFIX = '.convert.lock.'


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
    with self._usable():
      return os.listdir(self._directory)

  @contextlib.contextmanager
  def _usable(self):
    """The first touches of OUT: an OSError that says OUT cannot be made or
    written where it is (a file on the way, no permission, a read-only file
    system) becomes a UsageError saying so; any other is raised."""
    try:
      yield
    except OSError as error:
      why = filesystem.local_write_problem(self._directory, error)
      if why is None:
        raise
      raise UsageError(f'--output_dir {self._directory} cannot be created or written: '
                       f'{why}') from error

  def _temp(self, text: str) -> str:
    temp = os.path.join(self._directory, f'{LOCK_PREFIX}tmp-{uuid.uuid4().hex}')
    try:
      with open(temp, 'w', encoding='utf-8') as handle:
        handle.write(text)
    except OSError:
      # e.g. ENOSPC on a full disk: the name is created, its bytes are not;
      # leaving it would add one orphan per try.
      self.delete(os.path.basename(temp))
      raise
    return temp

  def create(self, name: str, text: str) -> bool:
    with self._usable():
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
    except Exception:  # gone: BeamIOError/FileNotFoundError
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
    from botocore.exceptions import ClientError
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
