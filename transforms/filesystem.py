"""Paths and whole files on any Beam filesystem (local, gs://, s3://)."""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import errno
import gzip
import importlib
import os
import sys
import threading
from typing import Optional

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystem import CompressedFile
from apache_beam.io.filesystems import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.value_provider import RuntimeValueProvider

from transforms.core import file_kinds
from transforms.core import local_files
from transforms.core import paths
from transforms.core.dataset_info import MAX_INFO_BYTES
from transforms.core.dataset_info import InfoError
from transforms.core.dataset_info import parse_info
from transforms.core.spec import DATASET_INFO

# Filesystems a command line run may have left out of Beam's import
# (pipeline/beam_runtime/startup.py); importing the module registers the filesystem.
_DEFERRED_FILESYSTEMS = {
    'gs': 'apache_beam.io.gcp.gcsfilesystem',
    's3': 'apache_beam.io.aws.s3filesystem',
}


def load_filesystem(path: str) -> None:
  """Makes sure Beam's filesystem for `path`'s scheme is registered, with its
  client library."""
  scheme = path.split('://', 1)[0] if paths.is_remote(path) else None
  module = _DEFERRED_FILESYSTEMS.get(scheme)
  if module:
    importlib.import_module(module)
  if scheme == 's3':
    # Beam's S3 client module is imported with Beam, and it keeps `boto3 =
    # None` when boto3 was left out then: a local run with s3:// images in
    # its manifest would reject every one ("Missing boto3 requirement").
    client = sys.modules.get('apache_beam.io.aws.clients.s3.boto3_client')
    if client is not None and client.boto3 is None:
      importlib.reload(client)


def beam_options():
  """The options Beam gives its own filesystems (FileSystems.get_filesystem:
  the pipeline's, or the worker's runtime ones); empty ones when there are
  neither: a command that takes no Beam options (inspect, export,
  read.examples in a notebook) leaves boto3 its own configuration (the AWS_*
  variables, ~/.aws). Beam's S3IO refused None with a ValueError, which
  inspect and export reported as a dataset "incomplete or never written".
  The one place that supplies them: not set globally (FileSystems.set_options),
  which outlived the command in a notebook's process."""
  from apache_beam.options.pipeline_options import PipelineOptions
  return (FileSystems._pipeline_options or RuntimeValueProvider.runtime_options
          or PipelineOptions([]))


def _beam_s3io():
  """Beam's S3IO, made with beam_options(). Its client waits a bounded time
  for a store that stops answering (transforms/s3_client.py)."""
  from apache_beam.io.aws import s3io

  from transforms.s3_client import BoundedClient
  return s3io.S3IO(client=BoundedClient(beam_options()))


def _beam_filesystem(path: str):
  """Beam's filesystem of `path`'s scheme, made with beam_options() (Beam's
  own lookup makes S3's with None when no pipeline set any: every call
  failed)."""
  load_filesystem(path)
  return type(FileSystems.get_filesystem(path))(pipeline_options=beam_options())


class FileAccess:
  """Reads and writes files on any Beam filesystem, with one S3 client per
  thread for every s3:// path.

  Beam's S3 filesystem builds a new boto3 client for each call: 0.12-0.48 s
  of CPU each (botocore parses the S3 service model again; measured on 2
  cores). convert paid that for every image it read from s3:// and 18 more
  times per run (lock, listing, shards, renames, dataset_info.json; counted
  on a 5-image run). One per thread, not one for all: Beam's client wrapper
  keeps its current download in the client, so threads sharing one read each
  other's bytes (seen with 8 threads reading 2 MB objects from a local S3
  server). Make one per step (in DoFn.setup, or one per command run) and
  pass it on. Other paths go through Beam's FileSystems, as before.
  make_s3io: what builds an S3 client (tests count the calls).
  """

  def __init__(self, make_s3io: Callable = _beam_s3io):
    self._make_s3io = make_s3io
    self._local = threading.local()

  def open(self, path: str):
    """A binary stream of the file's bytes as stored (no decompression).
    A local path that is not a regular file raises file_kinds.NotRegularFile
    unopened: a FIFO (say a rejected.jsonl or dataset_info.json made one) waits
    for a writer forever, a device never ends. Remote paths are objects."""
    if _is_s3(path):
      return self._s3().open(path, 'rb')
    if not paths.is_remote(path):
      file_kinds.require_regular(path, file_kinds.NotRegularFile)
    load_filesystem(path)
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)

  def create(self, path: str, gzip_compressed: bool = False):
    """A binary write handle for `path` (replaced if it exists) whose bytes
    are gzip-compressed on the way with gzip_compressed."""
    compression = CompressionTypes.GZIP if gzip_compressed else CompressionTypes.UNCOMPRESSED
    if not _is_s3(path):
      load_filesystem(path)
      return FileSystems.create(path, 'application/octet-stream', compression)
    raw = self._s3().open(path, 'wb', mime_type=CompressionTypes.mime_type(
        compression, 'application/octet-stream'))
    return CompressedFile(raw, compression_type=compression) if gzip_compressed else raw

  def exists(self, path: str) -> bool:
    if _is_s3(path):
      return self._s3().exists(path)
    load_filesystem(path)
    return FileSystems.exists(path)

  def rename(self, sources: list, destinations: list) -> None:
    """Each source renamed over its destination (BeamIOError if any fails)."""
    if not sources or not _is_s3(sources[0]):
      load_filesystem(sources[0] if sources else '')
      FileSystems.rename(sources, destinations)
      return
    failed = {(source, destination): error for source, destination, error
              in self._s3().rename_files(list(zip(sources, destinations))) if error}
    if failed:
      raise BeamIOError('Rename operation failed', failed)

  def delete(self, paths: list) -> None:
    """Deletes files, and folders given with a trailing '/' (BeamIOError if
    any fails). Local paths are taken as written, never as globs (local_files)."""
    if paths and _is_s3(paths[0]):
      failed = {path: error for path, error in self._s3().delete_paths(paths).items() if error}
    elif paths and _is_remote(paths[0]):
      load_filesystem(paths[0])
      return FileSystems.delete(paths)
    else:
      failed = local_files.delete(paths)
    if failed:
      raise BeamIOError('Delete operation failed', failed)

  def list(self, prefix: str) -> list:
    """(path, size in bytes) of every file whose path starts with `prefix`
    (a folder's with a trailing '/'), in any order (local: no glob either)."""
    if _is_s3(prefix):
      return [(path, size) for path, (size, _) in
              self._s3().list_files(prefix, with_metadata=True)]
    if not paths.is_remote(prefix):
      return local_files.list_prefix(prefix)
    load_filesystem(prefix)
    pattern = prefix + '**' if prefix.endswith('/') else prefix + '*'
    return [(m.path, m.size_in_bytes) for r in FileSystems.match([pattern])
            for m in r.metadata_list]

  def sizes(self, paths: list) -> dict:
    """{path: size in bytes} of those of `paths` that exist (one listing per
    folder on S3)."""
    if not paths:
      return {}
    if not _is_remote(paths[0]):
      return local_files.sizes(paths)
    if not _is_s3(paths[0]):
      load_filesystem(paths[0])
      return {m.path: m.size_in_bytes for r in FileSystems.match(paths)
              for m in r.metadata_list}
    wanted = set(paths)
    folders = sorted({path.rsplit('/', 1)[0] + '/' for path in paths})
    return {path: size for folder in folders for path, size in self.list(folder)
            if path in wanted}

  def size(self, path: str) -> int:
    """The size in bytes of one file (OSError or BeamIOError if it is missing)."""
    if not paths.is_remote(path):
      return os.path.getsize(path)
    sizes = self.sizes([path])
    if not sizes:
      raise FileNotFoundError(f'{path} does not exist')
    return next(iter(sizes.values()))

  def match(self, pattern: str) -> list:
    """(path, size in bytes) of every file a glob (*, ?, [...]) matches, sorted
    by path (none: an empty list)."""
    if not paths.is_remote(pattern):
      return sorted((m.path, m.size_in_bytes) for r in FileSystems.match([pattern])
                    for m in r.metadata_list)
    return sorted((m.path, m.size_in_bytes) for r in _beam_filesystem(pattern).match([pattern])
                  for m in r.metadata_list)

  def s3_client(self):
    """The boto3 client of this thread's S3 connection (for requests Beam's
    S3IO does not offer, e.g. a conditional put)."""
    return self._s3().client.client

  @contextlib.contextmanager
  def replacing(self, path: str, temp: Optional[str] = None):
    """A binary handle whose bytes replace `path` once the block ends: written
    under a temp name no other writer picks (paths.temp_name, or `temp`), then
    renamed over it, so two writers at once each publish a whole file. The
    rename replaces an existing file by itself (os.replace locally, at once; a
    copy over it on S3 and GCS), so `path` is never missing in between: an
    exists + delete before it cost two more S3 calls per file. A local `path`
    that is no regular file raises file_kinds.NotReplaced, asked again just
    before the rename: a rename over /dev/full replaces the device node, and
    a FIFO made there since is left as it is. Raising leaves no temp file.
    """
    temp = temp or paths.temp_name(path)
    local = not paths.is_remote(path)
    if local:
      file_kinds.require_regular(path, file_kinds.NotReplaced, refused='not replaced')
    try:
      with self.create(temp) as handle:
        yield handle
      if local:
        file_kinds.require_regular(path, file_kinds.NotReplaced, refused='not replaced')
        os.replace(temp, path)
      else:
        self.rename([temp], [path])
    except BaseException:
      with contextlib.suppress(*read_errors()):  # none made: the error raised tells
        self.delete([temp])
      raise

  def write_text(self, path: str, text: str, temp: Optional[str] = None) -> None:
    """Writes `text` to `path`, via a temp name (`temp`: this one) + rename."""
    with self.replacing(path, temp) as handle:
      handle.write(text.encode('utf-8'))

  def read_text(self, path: str) -> str:
    """The file's text (a .gz decompressed)."""
    return self.read_bytes(path).decode('utf-8')

  def read_bytes(self, path: str) -> bytes:
    """The file's bytes (a .gz decompressed)."""
    with self.open_checked(path) as handle:
      return handle.read()

  def read_at_most(self, path: str, max_bytes: int) -> bytes:
    """The file's first max_bytes + 1 bytes (a .gz decompressed): more than
    max_bytes says the file is larger than its caller takes, never read whole."""
    with self.open_checked(path) as handle:
      return handle.read(max_bytes + 1)

  @contextlib.contextmanager
  def open_checked(self, path: str):
    """Opens a file for reading; a .gz through Python's gzip, which, unlike
    Beam's decompressor, raises EOFError on a truncated file instead of
    ending early."""
    with self.open(path) as raw:
      if paths.is_gzip_name(path):
        with gzip.GzipFile(fileobj=raw) as stream:
          yield stream
      else:
        yield raw

  def _s3(self):
    s3io = getattr(self._local, 's3io', None)
    if s3io is None:
      load_filesystem('s3://')
      s3io = self._local.s3io = self._make_s3io()
    return s3io


def _is_s3(path: str) -> bool:
  return path.startswith('s3://')


def _is_remote(path: str) -> bool:  # (a method's `paths` argument hides the module)
  return paths.is_remote(path)


def join(directory: str, name: str) -> str:
  return paths.join(directory, name)


def basename(path: str) -> str:
  return path.rstrip('/').rsplit('/', 1)[-1]


def write_text(path: str, text: str, temp: Optional[str] = None) -> None:
  """Writes `text` to `path` on any Beam filesystem (one call: FileAccess for more)."""
  FileAccess().write_text(path, text, temp)


def read_errors() -> tuple:
  """What reading a path can raise when the path, not our code, is the problem:
  missing or unreadable (OSError, Beam's BeamIOError), or refused by the object
  store (S3 or GCS client errors, e.g. access denied). Use in an except clause:
  it is only evaluated when something was raised."""
  errors = [OSError, EOFError]  # EOFError: a cut-off .gz (Python's gzip)
  for module, name in (('apache_beam.io.aws.clients.s3.messages', 'S3ClientError'),
                       ('google.api_core.exceptions', 'GoogleAPIError')):
    try:
      errors.append(getattr(importlib.import_module(module), name))
    except ImportError:
      continue  # Beam without that cloud extra: its paths cannot be read anyway
  return tuple(errors)


def local_write_problem(folder: str, error: Optional[OSError] = None) -> Optional[str]:
  """Why nothing can be written in the local `folder` (made first if
  missing), in a few words naming the path at fault; None when nothing is
  found wrong.

  Without `error`, what can be told before trying (checks that write
  nothing): a file where a folder is needed, a read-only file system, a
  folder this user may not write in. With `error` (an OSError raised making
  `folder` or writing in it), also what only the try tells, such as /proc
  refusing new entries; None for an error of another kind (a full disk, an
  I/O error), which the caller raises on.
  """
  folder = os.path.abspath(folder)
  existing = paths.nearest_existing(folder)
  if not os.path.isdir(existing):
    return (f'{existing} exists and is not a folder' if existing == folder else
            f'{existing} is on the way and is not a folder')
  if error is None or error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
      return f'{existing} is on a read-only file system'
    if not os.access(existing, os.W_OK | os.X_OK):
      return f'permission denied: this user may not write in {existing}'
  if error is None:
    return None
  if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):  # e.g. an ACL, a security module
    return f'{error.strerror} in {existing}'
  if error.errno == errno.ENAMETOOLONG:  # a part over the file system's 255 bytes
    return f'a name in it is too long for the file system under {existing} ({error.strerror})'
  if error.errno == errno.ENOENT:  # /proc, /sys: no new folders, nor files
    return (f'{existing} takes no new {"folder" if existing != folder else "file"} '
            f'({error.strerror})')
  return None


def read_text(path: str) -> str:
  """The text of `path` on any Beam filesystem (one call: FileAccess for more)."""
  return FileAccess().read_text(path)


def read_info(output_dir: str, files: Optional[FileAccess] = None) -> dict:
  """dataset_info.json of the dataset in `output_dir`; InfoError if unusable."""
  path = join(output_dir, DATASET_INFO)
  try:
    # parse_info tells bytes not UTF-8, and refuses MAX_INFO_BYTES + 1
    text = (files or FileAccess()).read_at_most(path, MAX_INFO_BYTES)
  except file_kinds.NotRegularFile as error:  # its message names what it is
    raise InfoError(str(error))
  except Exception as error:  # missing file: FileNotFoundError or BeamIOError
    raise InfoError(f'{path} is missing or unreadable ({type(error).__name__}): '
                    f'the dataset is incomplete or was never written')
  return parse_info(text, path)
