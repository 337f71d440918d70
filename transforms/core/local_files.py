"""Local paths as they are written: listing, sizing, deleting, and the walk
of an --image_dir.

Beam's local filesystem takes every path given to match() and delete() as a
glob: an --output_dir such as `runs [v2]` or `out*` matched nothing ('[v2]'
is one character of a class), so convert could not delete its temp folder
and failed (exit 1) after writing every shard, leaving them behind. These
never read a name as a pattern. Plain functions, no Beam."""

from __future__ import annotations

from collections.abc import Iterator
import os
import shutil
import stat

from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError


def delete(paths: list) -> dict:
  """Deletes each file, and each folder with what it holds (a trailing '/'
  or not); a symlink is removed, never followed. -> {path: OSError} of those
  that could not be deleted (one not there among them)."""
  failed = {}
  for path in paths:
    target = path.rstrip('/') or path
    try:
      if os.path.isdir(target) and not os.path.islink(target):
        shutil.rmtree(target)
      else:
        os.remove(target)
    except OSError as error:
      failed[path] = error
  return failed


def list_prefix(prefix: str) -> list:
  """(path, size in bytes) of every file whose path starts with `prefix`:
  below a folder given with a trailing '/', at any depth; else the files of
  prefix's folder whose names start with its last part. Folders are not
  listed, nor followed through symlinks (as Beam's listing did)."""
  folder, start = os.path.split(prefix)
  if not start:
    return [(path, size) for path in _files_below(prefix)
            if (size := _size(path)) is not None]
  try:
    with os.scandir(folder or '.') as listing:
      names = [entry.name for entry in listing
               if entry.name.startswith(start) and entry.is_file()]
  except (FileNotFoundError, NotADirectoryError):
    return []
  found = [(os.path.join(folder, name), _size(os.path.join(folder, name))) for name in names]
  return [(path, size) for path, size in found if size is not None]


def sizes(paths: list) -> dict:
  """{path: size in bytes} of those of `paths` that exist."""
  return {path: size for path in paths if (size := _size(path)) is not None}


def _files_below(folder: str):
  for directory, _, names in os.walk(folder):
    yield from (os.path.join(directory, name) for name in names)


def _size(path: str):
  try:
    return os.path.getsize(path)
  except OSError:  # gone since it was listed, or never there: not a file here
    return None


def walk_local_files(directory: str) -> Iterator[tuple]:
  """(path relative to `directory`, None) of every file below a local folder,
  and (folder path relative to it + '/', RowError) for every folder that
  cannot be listed, in no particular order. Nothing is left out silently,
  unlike Beam's listing (os.walk skips what it cannot list, and Beam what it
  cannot stat).

  - A folder that cannot be listed (no permission, an I/O error): one
    read/unreadable entry, its path as key (the root: './').
  - A symlink to a folder is followed, unless it leads back to a folder it
    is in (a loop): one read/unreadable entry for the link.
  - Any other entry is a file, whatever it is: a dangling symlink, a loop of
    file symlinks, a FIFO. Reading it says what is wrong with it
    (read/missing_file, read/unreadable, read/not_a_file).
  - Names starting with '.' are neither listed nor entered: hidden files are
    never rows.
  """
  root = directory.rstrip('/') or '/'
  try:
    top = os.stat(root)
  except OSError as error:
    yield './', _unlistable(root, error)
    return
  # (folder, its path relative to root, (device, inode) of it and the folders
  # above it, those above `directory` on disk included: a link to / or to
  # `directory`'s parent leads back to a folder it is in, and following it
  # walked the whole file system, /sys's web of links too)
  pending = [(root, '', ((top.st_dev, top.st_ino), *_folders_above(root)))]
  while pending:
    folder, relative, above = pending.pop()
    try:
      with os.scandir(folder) as listing:
        entries = list(listing)
    except OSError as error:
      yield relative or './', _unlistable(folder, error)
      continue
    for entry in entries:
      if entry.name.startswith('.'):
        continue
      path = relative + entry.name
      if entry.is_dir(follow_symlinks=False):
        try:
          info = entry.stat(follow_symlinks=False)
        except OSError as error:
          yield path + '/', _unlistable(entry.path, error)
          continue
      elif entry.is_symlink():
        try:
          info = os.stat(entry.path)
        except OSError:
          yield path, None  # dangling, or a loop of file links: reading it says which
          continue
        if not stat.S_ISDIR(info.st_mode):
          yield path, None
          continue
      else:
        yield path, None
        continue
      if (info.st_dev, info.st_ino) in above:  # a link (or a bind mount) back up the tree
        yield path + '/', RowError(
            STAGE_READ, 'unreadable', f'{entry.path} leads to '
            f'{os.path.realpath(entry.path)}, a folder it is in (a loop): not followed')
        continue
      pending.append((entry.path, path + '/', above + ((info.st_dev, info.st_ino),)))


def _folders_above(root: str) -> tuple:
  """(device, inode) of every folder that holds `root`, up to /, along the
  path as written and along its real path (`root` may be a link)."""
  found = []
  for path in {os.path.abspath(root), os.path.realpath(root)}:
    while os.path.dirname(path) != path:
      path = os.path.dirname(path)
      try:
        info = os.stat(path)
      except OSError:  # a folder above that cannot be looked at: no link leads to it
        continue
      found.append((info.st_dev, info.st_ino))
  return tuple(found)


def _unlistable(folder: str, error: OSError) -> RowError:
  return RowError(STAGE_READ, 'unreadable', f'cannot list folder {folder}: '
                  f'{error.strerror or error}; its files are not converted')
