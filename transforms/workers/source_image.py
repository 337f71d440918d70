"""A row's source file -> LoadedImage: plain functions without Beam, so that
image worker processes (transforms.workers.process_pool) can run them."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import BinaryIO
from typing import Optional
import unicodedata

from transforms.core import paths
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedExample
from transforms.core.example import LoadedImage
from transforms.core.example import build_example
from transforms.core.file_kinds import kind_of
from transforms.core.image import open_image
from transforms.core.image import prepare_pillow
from transforms.core.image import process_image
from transforms.core.image import refuse_empty
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError
from transforms.core.reuse import Known
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.workers import progress_ticks
from transforms.workers.checked_read import read_checked
from transforms.workers.child_process import picklable_error
from transforms.workers.source_refs import is_ref
from transforms.workers.source_refs import read_ref

DEFAULT_SPEC = ImageSpec()


def is_local(path: str) -> bool:
  return not paths.is_remote(path)


def _not_a_file(path: str, kind: str) -> RowError:
  return RowError(STAGE_READ, 'not_a_file', f'{path} is a {kind}, not a regular file: not read')


def stream_size(stream: BinaryIO) -> Optional[int]:
  """The size its filesystem reports for an open file (S3 and GCS: from the
  object's metadata, no byte read); None when the stream cannot tell."""
  if not stream.seekable():
    return None
  size = stream.seek(0, os.SEEK_END)
  stream.seek(0)
  return size


def _dangling(path: str) -> str:
  """What a missing file's message adds when `path` is a dangling symlink."""
  try:
    return f' (a symlink to {os.readlink(path)}, which does not exist)'
  except OSError:  # not a symlink (or gone meanwhile): nothing to add
    return ''


def _look_alike(path: str) -> str:
  """What a missing file's message adds when a file of a name that looks the
  same exists (a stat each, no listing): the name in the other Unicode form
  (macOS wrote NFD names, most tools write NFC: both print alike), or the
  path with '/' for a Windows path's '\\'."""
  if '\\' in path and os.path.isfile(path.replace('\\', '/')):
    return (f" (with '/' for each '\\' it names the file {path.replace(chr(92), '/')}: "
            f"write the manifest's paths with '/')")
  if not path.isascii():
    for form in ('NFC', 'NFD'):
      other = unicodedata.normalize(form, path)
      if other != path and os.path.isfile(other):
        return (f' (a file of this name written in Unicode {form} exists, '
                f'{other!a}; the manifest writes it {path!a}: names must match '
                f'byte for byte)')
  return ''


def _os_reason(error: OSError) -> str:
  """An OSError's words without the path its str() repeats: a 300-byte name
  read `cannot read <path>: [Errno 36] File name too long: '<path>'`, the
  path twice (10 KB for a path over PATH_MAX)."""
  return error.strerror or str(error)


def read_local_file(path: str, spec: ImageSpec = DEFAULT_SPEC) -> bytes:
  """The whole local file at `path` (see read_checked); RowError if it cannot
  be read, or is no regular file (read/not_a_file): a FIFO, a device or a
  socket, refused from its file type without reading any of it (opened
  without blocking, so a FIFO with no writer cannot stall the call)."""
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
  except FileNotFoundError:
    raise RowError(STAGE_READ, 'missing_file',
                   f'file not found: {path}{_dangling(path) or _look_alike(path)}')
  except PermissionError as error:
    raise RowError(STAGE_READ, 'unreadable', f'permission denied: {error}')
  except OSError as error:
    if error.errno == errno.ENXIO:  # what opening a Unix socket gives
      raise _not_a_file(path, 'socket')
    raise RowError(STAGE_READ, 'unreadable', f'cannot read {path}: {_os_reason(error)}')
  try:
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
      raise RowError(STAGE_READ, 'is_directory', f'{path} is a directory, not a file')
    if not stat.S_ISREG(info.st_mode):
      raise _not_a_file(path, kind_of(info.st_mode))
    os.set_blocking(fd, True)  # a regular file from here on: plain blocking reads
    with open(fd, 'rb', closefd=False) as stream:
      return read_checked(stream, path, info.st_size, spec)
  except OSError as error:
    raise RowError(STAGE_READ, 'unreadable', f'cannot read {path}: {_os_reason(error)}')
  finally:
    os.close(fd)


def read_local_source(source, spec: ImageSpec = DEFAULT_SPEC) -> bytes:
  """A local path's bytes (read_local_file), or a reference's (a Parquet cell
  of a local file: transforms/workers/source_refs.py)."""
  if is_ref(source):
    return read_ref(source, spec, read_path=read_local_file)
  return read_local_file(source, spec)


def convert_bytes(data: bytes, spec: ImageSpec) -> tuple:
  """Source bytes -> (EncodedImage, sha256 hex, source size); RowError if they
  are not a usable image. Plain values: cheap to pass between processes."""
  return process_image(data, spec), hashlib.sha256(data).hexdigest(), len(data)


def _each_source(sources: list, spec: ImageSpec, read, work) -> list:
  """work(bytes) of each source (a path or a reference, its bytes already
  read, or the error reading it), or the exception that raised.
  read(path or reference, spec) -> bytes.

  Errors are returned, not raised: one bad image never fails the others.
  In an image worker process under a time limit, each source done ticks to
  the parent (progress_ticks): the limit is each source's, not the batch's.
  """
  results = []
  for source in sources:
    try:
      if isinstance(source, Exception):
        raise source
      if isinstance(source, Known):  # (--previous_dataset) nothing to read
        results.append(source.result)
        continue
      results.append(work(source if isinstance(source, bytes) else read(source, spec)))
    except Exception as error:  # (returned per image)
      results.append(error)
    progress_ticks.row_done()
  return results


def convert_sources(sources: list, spec: ImageSpec, read=read_local_source) -> list:
  """Each source (see _each_source) -> (EncodedImage, sha256 hex, size), or
  the exception converting it raised."""
  return _each_source(sources, spec, read, lambda data: convert_bytes(data, spec))


def _content_hash(data: bytes) -> str:
  """The SHA-256 (hex) of an image's bytes. An empty file is no image: it is
  rejected as decoding would (decode/empty_file), not kept as the content
  every other empty file then duplicates (--dedupe content rejected those as
  duplicate_content of a row that was itself rejected)."""
  refuse_empty(data)
  return hashlib.sha256(data).hexdigest()


def hash_sources(sources: list, spec: ImageSpec, read=read_local_source) -> list:
  """Each source (see _each_source) -> the SHA-256 (hex) of its bytes, or the
  exception reading it raised (a file that is not read whole: too large, no
  regular file, no image by its first bytes; an empty one)."""
  return _each_source(sources, spec, read, _content_hash)


def convert_in_worker(sources: list, spec: ImageSpec) -> list:
  """convert_sources in an image worker process (local paths or bytes); the
  errors made picklable, to travel back with the other results."""
  prepare_pillow(spec.max_pixels)  # once per process; repeating it is cheap
  return [picklable_error(result) if isinstance(result, Exception) else result
          for result in convert_sources(sources, spec)]


def examples_in_worker(sources: list, spec: ImageSpec, convert, rows: list,
                       example_spec: ExampleSpec) -> list:
  """convert(sources, spec) (convert_in_worker) in an image worker process,
  and there each image's tf.train.Example serialized (build_example) for its
  LabelledRow in `rows`: (Example bytes, sha256 hex, size), or its error.
  The launcher then only writes the bytes: building them there took 14% of
  its CPU on 20,000 16x16 PNGs (py-spy), and worker processes do it in
  parallel."""
  return [(build_example(LoadedImage(row, *result), example_spec), *result[1:])
          if isinstance(result, tuple) else result
          for row, result in zip(rows, convert(sources, spec))]


def hash_in_worker(sources: list, spec: ImageSpec) -> list:
  """hash_sources in an image worker process, the errors made picklable."""
  prepare_pillow(spec.max_pixels)  # the signature checks need every plugin registered
  return [picklable_error(result) if isinstance(result, Exception) else result
          for result in hash_sources(sources, spec)]


def _hash_and_size(data: bytes, spec: ImageSpec) -> tuple:
  """(the SHA-256 of an image's bytes, its (width, height) as its header gives
  it, or None when the header does not open: the row is rejected with the
  reason when it is decoded)."""
  sha256 = _content_hash(data)
  try:
    return sha256, tuple(open_image(data, spec.max_pixels, spec.formats).size)
  except RowError:  # (decode/...: told when the image is loaded, as any row's)
    return sha256, None


def hash_sized_sources(sources: list, spec: ImageSpec, read=read_local_source) -> list:
  """hash_sources, each result with the image's header size: (SHA-256 hex,
  (width, height) or None). --schema detection's --dedupe content keeps a
  copy whose annotation's recorded size is the file's (duplicates.
  annotations.copy_fits), not one rejected later as size_mismatch."""
  return _each_source(sources, spec, read, lambda data: _hash_and_size(data, spec))


def hash_sized_in_worker(sources: list, spec: ImageSpec) -> list:
  """hash_sized_sources in an image worker process, the errors made picklable."""
  prepare_pillow(spec.max_pixels)
  return [picklable_error(result) if isinstance(result, Exception) else result
          for result in hash_sized_sources(sources, spec)]


def result_bytes(result) -> int:
  """What one result of convert_in_worker or examples_in_worker weighs: its
  image's or Example's bytes (an error: nothing)."""
  if not isinstance(result, tuple):
    return 0
  image_or_example = result[0]
  return len(image_or_example if isinstance(image_or_example, bytes) else
             image_or_example.data)


def loaded_image(labelled: LabelledRow, converted: tuple) -> LoadedImage | LoadedExample:
  """A converted image (convert_sources) or Example (examples_in_worker) with its row."""
  image_or_example, sha256, size = converted
  if isinstance(image_or_example, bytes):
    return LoadedExample(labelled, image_or_example, sha256, size)
  return LoadedImage(labelled, image_or_example, sha256, size)
