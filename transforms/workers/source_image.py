"""A row's source file -> LoadedImage: plain functions without Beam, so that
image worker processes (transforms.workers.process_pool) can run them."""

from __future__ import annotations

import hashlib

from transforms.core import paths
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedImage
from transforms.core.image import prepare_pillow
from transforms.core.image import process_image
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.workers.process_pool import picklable_error


def is_local(path: str) -> bool:
  return not paths.is_remote(path)


def read_local_file(path: str) -> bytes:
  """The whole local file at `path`; RowError if it cannot be read."""
  try:
    with open(path, 'rb') as f:
      return f.read()
  except IsADirectoryError:
    raise RowError(STAGE_READ, 'is_directory', f'{path} is a directory, not a file')
  except FileNotFoundError:
    raise RowError(STAGE_READ, 'missing_file', f'file not found: {path}')
  except PermissionError as error:
    raise RowError(STAGE_READ, 'unreadable', f'permission denied: {error}')
  except OSError as error:
    raise RowError(STAGE_READ, 'unreadable', f'cannot read {path}: {error}')


def convert_bytes(data: bytes, spec: ImageSpec) -> tuple:
  """Source bytes -> (EncodedImage, sha256 hex, source size); RowError if they
  are not a usable image. Plain values: cheap to pass between processes."""
  return process_image(data, spec), hashlib.sha256(data).hexdigest(), len(data)


def convert_sources(sources: list, spec: ImageSpec, read=read_local_file) -> list:
  """Each source (a path, its bytes already read, or the error reading it) ->
  (EncodedImage, sha256 hex, size), or the exception converting it raised.

  Errors are returned, not raised: one bad image never fails the others.
  """
  results = []
  for source in sources:
    try:
      if isinstance(source, Exception):
        raise source
      data = source if isinstance(source, bytes) else read(source)
      results.append(convert_bytes(data, spec))
    except Exception as error:  # (returned per image)
      results.append(error)
  return results


def convert_in_worker(sources: list, spec: ImageSpec) -> list:
  """convert_sources in an image worker process (local paths or bytes); the
  errors made picklable, to travel back with the other results."""
  prepare_pillow(spec.max_pixels)  # once per process; repeating it is cheap
  return [picklable_error(result) if isinstance(result, Exception) else result
          for result in convert_sources(sources, spec)]


def loaded_image(labelled: LabelledRow, converted: tuple) -> LoadedImage:
  image, sha256, size = converted
  return LoadedImage(labelled, image, sha256, size)
