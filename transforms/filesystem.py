"""Paths and whole files on any Beam filesystem (local, gs://, s3://)."""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import gzip
import importlib
import posixpath
import threading

from apache_beam.io.filesystems import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.value_provider import RuntimeValueProvider

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


def _beam_s3io():
  """Beam's S3IO, made with the options Beam gives its own filesystems
  (FileSystems.get_filesystem: the pipeline's, or the worker's runtime ones)."""
  from apache_beam.io.aws import s3io  # pylint: disable=import-outside-toplevel
  options = FileSystems._pipeline_options or RuntimeValueProvider.runtime_options  # pylint: disable=protected-access
  return s3io.S3IO(options=options)


class FileReader:
  """Opens files for reading on any Beam filesystem, with one S3 client per
  thread for every s3:// file.

  Beam's S3 filesystem builds a new boto3 client for each call: ~0.27 s of
  CPU (botocore parses the S3 service model again; measured on 2 cores), which
  convert paid for every image it read from s3://. One per thread, not one
  for all: Beam's client wrapper keeps its current download in the client, so
  threads sharing one read each other's bytes (seen with 8 threads reading
  2 MB objects from a local S3 server). Make it in DoFn.setup.
  make_s3io: what builds an S3 client (tests count the calls).
  """

  def __init__(self, make_s3io: Callable = _beam_s3io):
    self._make_s3io = make_s3io
    self._local = threading.local()

  def open(self, path: str):
    """A binary stream of the file's bytes as stored (no decompression)."""
    if path.startswith('s3://'):
      return self._s3().open(path, 'rb')
    load_filesystem(path)
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)

  def _s3(self):
    s3io = getattr(self._local, 's3io', None)
    if s3io is None:
      load_filesystem('s3://')
      s3io = self._local.s3io = self._make_s3io()
    return s3io


def join(directory: str, name: str) -> str:
  if '://' in directory:
    return directory.rstrip('/') + '/' + name
  return posixpath.join(directory, name)


def basename(path: str) -> str:
  return path.rstrip('/').rsplit('/', 1)[-1]


@contextlib.contextmanager
def replacing(path: str):
  """A binary handle whose bytes replace `path` (any Beam filesystem) once the
  block ends: written under a temp name, then renamed over it.

  The rename replaces an existing file by itself (os.rename locally, at once;
  a copy over it on S3 and GCS), so `path` is never missing in between. An
  exists + delete before it cost two more S3 clients per file (~0.27 s of CPU
  each: see FileReader).
  """
  temp = path + '.tmp'
  with FileSystems.create(temp) as handle:
    yield handle
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
