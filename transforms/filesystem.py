"""Paths and whole files on any Beam filesystem (local, gs://, s3://)."""

from __future__ import annotations

import contextlib
import gzip
import importlib
import posixpath

from apache_beam.io.filesystems import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.core.dataset_info import InfoError
from transforms.core.dataset_info import parse_info
from transforms.core.spec import DATASET_INFO

# Filesystems a command line run may have left out of Beam's import
# (pipeline/startup.py); importing the module registers the filesystem.
_DEFERRED_FILESYSTEMS = {
    'gs': 'apache_beam.io.gcp.gcsfilesystem',
    's3': 'apache_beam.io.aws.s3filesystem',
}


def load_filesystem(path: str) -> None:
  """Makes sure Beam's filesystem for `path`'s scheme is registered."""
  module = _DEFERRED_FILESYSTEMS.get(path.split('://', 1)[0]) if '://' in path else None
  if module:
    importlib.import_module(module)


def join(directory: str, name: str) -> str:
  if '://' in directory:
    return directory.rstrip('/') + '/' + name
  return posixpath.join(directory, name)


def basename(path: str) -> str:
  return path.rstrip('/').rsplit('/', 1)[-1]


@contextlib.contextmanager
def replacing(path: str):
  """A binary handle whose bytes replace `path` (any Beam filesystem) once the
  block ends: written under a temp name, then renamed."""
  temp = path + '.tmp'
  with FileSystems.create(temp) as handle:
    yield handle
  if FileSystems.exists(path):
    FileSystems.delete([path])
  FileSystems.rename([temp], [path])


def write_text(path: str, text: str) -> None:
  """Writes `text` to `path` on any Beam filesystem, via a temp name + rename."""
  with replacing(path) as handle:
    handle.write(text.encode('utf-8'))


@contextlib.contextmanager
def open_checked(path: str):
  """Opens any Beam path for reading; a .gz through Python's gzip, which,
  unlike Beam's decompressor, raises EOFError on a truncated file instead of
  ending early."""
  with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
    if path.endswith('.gz'):
      with gzip.GzipFile(fileobj=raw) as stream:
        yield stream
    else:
      yield raw


def read_errors() -> tuple:
  """What reading a path can raise when the path, not our code, is the problem:
  missing or unreadable (OSError, Beam's BeamIOError), or refused by the object
  store (S3 or GCS client errors, e.g. access denied). Use in an except clause:
  it is only evaluated when something was raised."""
  errors = [OSError]
  for module, name in (('apache_beam.io.aws.clients.s3.messages', 'S3ClientError'),
                       ('google.api_core.exceptions', 'GoogleAPIError')):
    try:
      errors.append(getattr(importlib.import_module(module), name))
    except ImportError:
      continue  # Beam without that cloud extra: its paths cannot be read anyway
  return tuple(errors)


def read_text(path: str) -> str:
  with FileSystems.open(path) as handle:
    return handle.read().decode('utf-8')


def read_info(output_dir: str) -> dict:
  """dataset_info.json of the dataset in `output_dir`; InfoError if unusable."""
  path = join(output_dir, DATASET_INFO)
  try:
    text = read_text(path)
  except Exception as error:  # missing file: FileNotFoundError or BeamIOError
    raise InfoError(f'{path} is missing or unreadable ({type(error).__name__}): '
                    f'the dataset is incomplete or was never written')
  return parse_info(text, path)
