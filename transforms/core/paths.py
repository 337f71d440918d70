"""Paths that are local files or URLs (gs://, s3://, ...): the one test of
which a path is, and the one way to join under it."""

from __future__ import annotations

import os
from typing import Optional


def is_remote(path: str) -> bool:
  """A URL (gs://bucket/..., s3://..., http://...), not a local path."""
  return '://' in path


def has_glob(path: str) -> bool:
  """A pattern (*, ?, [...]) naming any number of files, not one path."""
  return any(c in path for c in '*?[')


def stays_inside(relative: str) -> bool:
  """Whether a path an annotation file gives (relative to --image_dir) names
  something inside that folder: not absolute, not a URL, and no `..` that
  climbs above it (`a/../b.jpg` stays inside)."""
  if not relative or is_remote(relative) or relative.startswith('/'):
    return False
  depth = 0
  for part in relative.split('/'):
    if part == '..':
      depth -= 1
      if depth < 0:
        return False
    elif part not in ('', '.'):
      depth += 1
  return True


def join(base: str, *parts: str) -> str:
  """`base`/part/...: '/' after a URL (its trailing slashes dropped), the
  local convention (os.path.join) for a local path."""
  if is_remote(base):
    for part in parts:
      base = base.rstrip('/') + '/' + part
    return base
  return os.path.join(base, *parts)


def image_problem(path: str) -> Optional[str]:
  """Why an image path names no file a run can read (a NUL byte), or None."""
  if '\x00' in path:
    return 'holds a NUL byte: no file name can'
  return None
