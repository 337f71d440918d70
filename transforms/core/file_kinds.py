"""What a local path is when it is not a regular file. Readers ask before
they open: a FIFO waits for a writer (forever, if none comes), a device
such as /dev/zero never ends. Plain functions, no Beam."""

from __future__ import annotations

import os
import stat
from typing import Optional

_KINDS = ((stat.S_ISDIR, 'folder'), (stat.S_ISFIFO, 'FIFO (named pipe)'),
          (stat.S_ISCHR, 'character device'), (stat.S_ISBLK, 'block device'),
          (stat.S_ISSOCK, 'socket'))


def kind_of(mode: int) -> str:
  """The kind of file an st_mode that is not a regular file's names."""
  return next((name for test, name in _KINDS if test(mode)), 'special file')


def not_regular(path: str) -> Optional[str]:
  """The kind of the local `path` (symlinks followed) when it exists and is
  not a regular file: 'FIFO (named pipe)', 'character device', ...; None for
  a regular file or a path that is not there (its reader says it is missing).
  Nothing is opened."""
  try:
    mode = os.stat(path).st_mode
  except FileNotFoundError:
    return None
  return None if stat.S_ISREG(mode) else kind_of(mode)
