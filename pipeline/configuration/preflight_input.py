"""Whether convert's input has any row at all, checked on the launcher and read
no further than the answer needs: a manifest up to its first data line, an
--image_dir up to its first image file (its whole listing only when there is
none, to name the files skipped). No row is a UsageError."""

from __future__ import annotations

import os
from typing import Optional

from pipeline.configuration.preflight import ROWS
from pipeline.configuration.preflight import Rows
from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import image_dir
from transforms.core import line_caps
from transforms.core import manifest
from transforms.core import manifest_hints
from transforms.core import paths
from transforms.core.labels import written_out
from transforms.core.store_errors import error_text

# The empty-input message names this many skipped files, then ', ...'.
SHOWN_SKIPPED = 3


def require_input(manifests: tuple, directory: Optional[str],
                  extensions: Optional[tuple], rows: Optional[Rows] = None) -> None:
  """UsageError when the input has no row at all: a manifest without a data
  line, an --image_dir without an image file. Reads no more than it must:
  up to a manifest's first data line, a folder's listing up to its first
  image file (the whole listing only when there is none, to name what was
  skipped). rows: the first manifest holds api.convert's rows=."""
  if rows is not None and not rows.count:
    raise UsageError(f'{ROWS} has no rows')
  for flag, config in zip(('--manifest', '--label_manifest'), manifests):
    if rows is not None and config.path == rows.path:
      continue
    if config.fmt == manifest.PARQUET:  # its footers counted the rows
      if not config.layout.num_rows:
        raise UsageError(f'{flag} {config.path} has no rows')
      continue
    if config.fmt == manifest.WEBDATASET:  # samples are known once the tars are read
      continue
    # A pattern's files (config.files) are read in turn until one has a data line.
    paths_read = [path for path, _ in config.files] or [config.path]
    if not any(_has_data_line(path, config.fmt) for path in paths_read):
      raise UsageError(f'{flag} {config.path} has '
                       f'{"a header and " if manifest.has_header(config.fmt) else ""}'
                       f'no data lines')
  if directory is None:
    return
  skipped = _skipped_if_no_image(directory, extensions)
  if skipped is not None:
    shown = ', '.join(map(written_out, skipped[:SHOWN_SKIPPED])) + (', ...' if len(skipped) > SHOWN_SKIPPED
                                                 else '')
    raise UsageError(f'--image_dir {directory} has no image files' + (
        f' ({len(skipped)} file{"s" if len(skipped) != 1 else ""} skipped by extension: '
        f'{shown})' if skipped else ''))


def _has_data_line(path: str, fmt: str) -> bool:
  """Whether the manifest has a data line (as the pipeline reads them:
  manifest.iter_lines), reading up to the first one."""
  try:
    with filesystem.FileAccess().open_checked(path) as stream:
      found = next(manifest.iter_lines(stream, fmt), None)
  except filesystem.read_errors() as error:
    raise UsageError(f'cannot read manifest {path}: {type(error).__name__}: {error_text(error)}')
  # A CSV/TSV's first line was checked as its header. A UTF-16 .txt or
  # .jsonl had every line rejected (bad_encoding, and a NUL byte left as a
  # row of its own by each b'\\n'): exit 2, "all 3 rows were rejected".
  # A first .txt/JSONL line of lone-CR rows is them all, as one row or bad_json.
  problem = (found and found[0] == 1 and not isinstance(found[1], line_caps.LongLine)
             and (manifest_hints.encoding_problem(found[1])
                  or manifest_hints.first_row_cr_problem(found[1], fmt)))
  if problem:
    raise UsageError(f'manifest {path} cannot be read: {problem}')
  return found is not None


def _skipped_if_no_image(directory: str, extensions: Optional[tuple]) -> Optional[list]:
  """None once a file below `directory` is a row (image_dir.wanted_file);
  else the sorted names of the files skipped by extension (hidden ones are
  skipped silently, as the pipeline does)."""
  skipped, unreadable = [], []
  for relative in _walk(directory, unreadable):
    if image_dir.wanted_file(relative, extensions):
      return None
    if image_dir.wanted_file(relative, None):
      skipped.append(relative)
  # A folder that cannot be listed may hold images: the run says what it finds.
  return None if unreadable else sorted(skipped)


def _loops_back(target: str, real_folder: str, seen: set) -> bool:
  """Whether a folder (its real path) was listed already, or holds the
  folder being listed (a link up: a parent of it, or /)."""
  return target in seen or real_folder.startswith(target.rstrip(os.sep) + os.sep)


def _walk(directory: str, unreadable: list):
  """Relative paths of the files below `directory`, lazily where the
  filesystem allows (local: os.walk, as Beam's listing; hidden folders are
  not entered). Folders that cannot be listed are added to `unreadable`."""
  if paths.is_remote(directory):
    prefix = directory.rstrip('/') + '/'
    yield from (path[len(prefix):] for path, _ in filesystem.FileAccess().list(prefix)
                if path.startswith(prefix))
    return
  # Symlinked folders are followed, as the pipeline's listing follows them
  # (docs/manifests.md): a DIR whose class folders were all links exited 2,
  # "has no image files". A link back to a folder seen or above (a loop, DIR's
  # parents, /) is not entered, which the pipeline does not list either.
  seen = set()
  for folder, folders, names in os.walk(directory, onerror=unreadable.append,
                                        followlinks=True):
    real = os.path.realpath(folder)
    seen.add(real)
    folders[:] = [name for name in folders if not name.startswith('.')
                  and not _loops_back(os.path.realpath(os.path.join(folder, name)), real, seen)]
    below = os.path.relpath(folder, directory)
    for name in names:
      yield name if below == '.' else f'{below}/{name}'.replace(os.sep, '/')
