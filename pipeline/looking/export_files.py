"""inspect --export_dir's folder and files: made, cleared of a previous
export's images, and each file written whole or not at all. A file that
cannot be written (no permission, a folder in its place, a full disk) is one
line and exit 2, naming it."""

from __future__ import annotations

import contextlib
import glob
import io
import os

from PIL import Image

from pipeline.errors import UsageError


def prepare_export_dir(export_dir: str) -> None:
  """Creates export_dir; clears the images of a previous export (their
  number may differ), nothing else. A folder that cannot be made (a file on
  its path, no permission) is a usage error, not a crash's traceback."""
  try:
    os.makedirs(export_dir, exist_ok=True)
  except OSError as error:
    raise UsageError(f'--export_dir {export_dir} cannot be created: '
                     f'{error.strerror or error}') from error
  for path in glob.glob(os.path.join(export_dir, '*_Label_*.jpg')):
    if os.path.basename(path).split('_', 1)[0].isdigit():
      os.remove(path)


def _cannot_write(export_dir: str, name: str, error: OSError) -> UsageError:
  return UsageError(f'--export_dir {export_dir}: cannot write {name}: '
                    f'{error.strerror or error}')


@contextlib.contextmanager
def writing(export_dir: str):
  """A file of the export that cannot be written (a folder root may not write
  in, a folder in the file's place) is bad input, one line and exit 2 as a
  folder that cannot be made; it ended in a traceback."""
  try:
    yield
  except OSError as error:
    name = os.path.abspath(str(error.filename or ''))
    if not error.filename or os.path.dirname(name) != os.path.abspath(export_dir):
      raise
    raise _cannot_write(export_dir, os.path.basename(name), error) from error


def image_bytes(image: Image.Image, fmt: str, **params) -> bytes:
  """The image saved as `fmt`, in memory: Pillow's JPEG writer writes to the
  file's descriptor itself and takes a short write (the last free block of a
  disk) for a whole one, leaving a cut-off image and no error when nothing
  is written after it. The bytes go through write_file's plain write."""
  buffer = io.BytesIO()
  image.save(buffer, fmt, **params)
  return buffer.getvalue()


def write_file(export_dir: str, name: str, data: bytes) -> None:
  """data into export_dir/name, whole or not at all. A write that fails (a
  full disk or quota: raised by a write or by the close that flushes, naming
  no file) removes what was written and is one line naming the file, exit
  2: it was a traceback, and a cut-off image left in the folder. An open
  that fails names its file: writing() words it."""
  path = os.path.join(export_dir, name)
  try:
    with open(path, 'wb') as handle:
      handle.write(data)
  except OSError as error:
    if error.filename:
      raise
    with contextlib.suppress(FileNotFoundError):  # removed meanwhile: nothing left to remove
      os.remove(path)
    raise _cannot_write(export_dir, name, error) from error
