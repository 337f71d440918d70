"""What a local path is when it is not a regular file. Readers ask before
they open: a FIFO waits for a writer (forever, if none comes), a device
such as /dev/zero never ends. Plain functions, no Beam."""

from __future__ import annotations

from collections.abc import Callable
import os
import stat
from typing import Optional

from transforms.core import paths

_KINDS = ((stat.S_ISDIR, 'folder'), (stat.S_ISFIFO, 'FIFO (named pipe)'),
          (stat.S_ISCHR, 'character device'), (stat.S_ISBLK, 'block device'),
          (stat.S_ISSOCK, 'socket'))


class NotRegularFile(OSError):
  """A local path that exists and is not a regular file, refused before it
  is opened (require_regular(path, NotRegularFile)). An OSError, so that every
  reader's handling of an unreadable file (filesystem.read_errors) covers it."""


class NotReplaced(NotRegularFile):
  """A local path a writer will not replace because it is not a regular file:
  a rename over a device node or a FIFO replaces the node itself (as root,
  /dev/full gone), and creating a FIFO waits for a reader."""


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
  except (FileNotFoundError, NotADirectoryError):  # not there: a file on its way, say
    return None
  return None if stat.S_ISREG(mode) else kind_of(mode)


def require_regular(path: str, error: Callable[..., Exception], *args,
                    refused: str = 'not read') -> None:
  """Raises error(*args, why) unless the local `path` is a regular file (or
  missing: its opening says so): opening a FIFO waits for a writer (a run
  hung on a previous shard that was one), a device never ends. refused: what
  the message says is not done to it."""
  kind = not_regular(path)
  if kind:
    raise error(*args, f'{path} is a {kind}, not a regular file: {refused}')


def require_file(named: str, path: str, error: Callable[[str], Exception]) -> None:
  """Raises error(why) unless the local `path` is a regular file (or a symlink
  to one): a folder, a device (/dev/zero: reading it never ends), a FIFO
  (reading it waits for a writer) or a socket is refused before any byte is
  read. named: what the message calls the file ('manifest', '--label_map').
  A remote path is an object, never one of those: its read says if it is
  missing."""
  if not paths.is_remote(path) and not os.path.isfile(path):
    raise error(f'{named} {path} does not exist or is not a file')
