"""Paths that are local files or URLs (gs://, s3://, ...): the one test of
which a path is, and the one way to join under it."""

from __future__ import annotations

import os


def is_remote(path: str) -> bool:
  """A URL (gs://bucket/..., s3://..., http://...), not a local path."""
  return '://' in path


def has_glob(path: str) -> bool:
  """A pattern (*, ?, [...]) naming any number of files, not one path."""
  return any(c in path for c in '*?[')


def join(base: str, *parts: str) -> str:
  """`base`/part/...: '/' after a URL (its trailing slashes dropped), the
  local convention (os.path.join) for a local path."""
  if is_remote(base):
    for part in parts:
      base = base.rstrip('/') + '/' + part
    return base
  return os.path.join(base, *parts)
