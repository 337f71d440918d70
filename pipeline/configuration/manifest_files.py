"""The files of a --manifest: the file itself, or each file a pattern
matches, listed on the launcher (preflight.py, preflight_tars.py); and the
check every file a flag names passes before the launcher reads it
(require_file)."""

from __future__ import annotations

import os

from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import file_kinds
from transforms.core import paths


def manifest_files(path: str) -> tuple:
  """(path, size in bytes) of each file of a --manifest, sorted by path: the
  file itself, or each file a pattern (*, ?, [...]) matches on any Beam
  filesystem. Lists, reads nothing."""
  try:
    if not is_pattern(path):
      require_file('manifest', path)
      return ((path, filesystem.FileAccess().size(path)),)
    files = tuple((p, size) for p, size in _match(path)
                  if paths.is_remote(p) or os.path.isfile(p))
  except filesystem.read_errors() as error:
    raise UsageError(f'cannot read manifest {path}: {type(error).__name__}: {error}')
  if not files:
    raise UsageError(f'manifest {path} matches no file')
  return files


def _match(pattern: str) -> list:
  """FileAccess.match, and a relative local pattern matched from `./`: Beam's
  local match lists the folder before the first wildcard, which is '' for
  `*.csv` and `sub` for `sub*/*.csv`, and found no file in either."""
  files = filesystem.FileAccess()
  if paths.is_remote(pattern) or os.path.isabs(pattern) or pattern.startswith('./'):
    return files.match(pattern)
  return [(p[2:] if p.startswith('./') else p, size) for p, size in files.match('./' + pattern)]


def require_file(named: str, path: str) -> None:
  """UsageError unless the local `path` is a regular file (file_kinds.require_file)."""
  file_kinds.require_file(named, path, UsageError)


def is_pattern(path: str) -> bool:
  """Glob characters, and not the name of a local file that has them."""
  return paths.has_glob(path) and (paths.is_remote(path) or not os.path.isfile(path))
