"""inspect --export_dir's folder and files: made, cleared of a previous
export's images, the sample images and samples.csv, and each file written
whole or not at all. A file that
cannot be written (no permission, a folder in its place, a full disk) is one
line and exit 2, naming it."""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import os

from PIL import Image

from pipeline.errors import UsageError
from pipeline.looking import report

SAMPLES_CSV = 'samples.csv'
SAMPLE_COLUMNS = ('file', 'split', 'shard', 'record', 'key', 'label', 'class_text')


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
  that fails names its file: writing() words it. A signal (the command
  line's Interrupted, KeyboardInterrupt) between the open and the close
  removes the file too: it left an empty or cut-off image."""
  path = os.path.join(export_dir, name)
  try:
    with open(path, 'wb') as handle:
      handle.write(data)
  except BaseException as error:
    if isinstance(error, OSError) and error.filename:
      raise
    with contextlib.suppress(FileNotFoundError):  # removed meanwhile: nothing left to remove
      os.remove(path)
    if isinstance(error, OSError):
      raise _cannot_write(export_dir, name, error) from error
    raise


def write_samples(export_dir: str, samples: list) -> list:
  """Writes `{i}_Label_{label}.jpg` per sample and samples.csv; -> the csv rows."""
  rows = []
  for i, sample in enumerate(samples):
    name = sample.file_name(i)
    write_file(export_dir, name, image_bytes(report.picture(sample), 'JPEG', quality=95))
    rows.append([name, sample.split, sample.shard, sample.record, sample.key,
                 '' if sample.label is None else sample.label, sample.class_text])
  text = io.StringIO(newline='')
  writer = csv.writer(text)
  writer.writerow(SAMPLE_COLUMNS)
  writer.writerows(rows)
  # --files' file names as the filesystem gives them, UTF-8 or not
  write_file(export_dir, SAMPLES_CSV, text.getvalue().encode('utf-8', 'surrogateescape'))
  return rows
