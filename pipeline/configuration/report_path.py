"""Where validate writes its report, checked on the launcher before the job:
a report that cannot be written there is a usage error (exit 2, one line),
not the job failing at its end with exit 1, which reads as "the dataset has
problems"."""

from __future__ import annotations

import os
import tempfile
from typing import Optional

from pipeline.errors import UsageError
from pipeline.runs import output_dir
from transforms import filesystem
from transforms.core import file_kinds
from transforms.core import paths
from transforms.core.spec import VALIDATION_REPORT


def check_report_path(path: str, given: bool) -> None:
  """UsageError when validate could not write its report at the local `path`
  (a folder, device, FIFO or socket there, a file on the way, a read-only
  file system, a folder this user may not write in, /proc taking no new
  file): told before the job, not by it failing at its end with exit 1,
  validate's "the dataset has problems". given: --report named it, else it
  is the default in --input_dir. Leaves nothing behind (what only trying
  tells is tried with a file or folder made and removed at once)."""
  named = f'--report {path}' if given else (
      f"the report {path} (--report's default, in --input_dir)")
  name = path.rstrip('/').rsplit('/', 1)[-1]
  if (not name.startswith(VALIDATION_REPORT) and output_dir.ours(name, set(), ('*',))
          and (paths.is_remote(path) or os.path.lexists(path))):
    # `--report OUT/dataset_info.json` replaced the dataset's own file (then
    # deleted it as the report "changed"); a shard's name lost the shard.
    raise UsageError(f"{named} is a file convert writes (a dataset's {name}): not "
                     f'replaced; give --report another name')
  if paths.is_remote(path):
    return
  kind = file_kinds.not_regular(path)
  if kind == 'folder':
    raise UsageError(f'{named} is a folder: --report names the report file')
  if kind:  # the report replaces its target by a rename: never a device node's
    raise UsageError(f'{named} is a {kind}, not a regular file: not replaced')
  folder = os.path.dirname(os.path.abspath(path))
  why = filesystem.local_write_problem(folder) or _write_refused(folder)
  if why is not None:
    raise UsageError(f'{named} cannot be written: {why}' + (
        '' if given else '; give --report elsewhere'))


def _write_refused(folder: str) -> Optional[str]:
  """What only trying tells of writing in the local `folder` (/proc and /sys
  take no new file; a missing folder is made by the writer: its nearest
  existing ancestor is tried with a folder). Other errors are raised."""
  existing = paths.nearest_existing(folder)
  try:
    if existing == folder:
      handle, made = tempfile.mkstemp(prefix='.img2tfrecord-try-', dir=folder)
      os.close(handle)
      os.remove(made)
    else:
      os.rmdir(tempfile.mkdtemp(prefix='.img2tfrecord-try-', dir=existing))
  except OSError as error:
    why = filesystem.local_write_problem(folder, error)
    if why is None:
      raise
    return why
  return None
