"""A folder built beside its target and renamed into place once complete
(export's --output_dir). A process killed while building it, even by
SIGKILL, leaves no half target (a folder holding some shard links and no
metadata, which the rerun refused with or without --overwrite), only the
folder it was building, `.NAME.partial-export-XXXXXXXX` beside the target,
which the next build removes (and so does convert --overwrite of the folder
it is in: pipeline/runs/output_dir.py).

The staging folder is in the target's parent: relative symlinks made in it
stay right after the rename, and the rename is atomic. Its process holds an
flock on it for as long as it lives, and the kernel drops that lock however
the process ends: a folder of a build still under way (another export to the
same place) is never taken for a leftover.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
from typing import Optional

from pipeline.runs import interrupts

PARTIAL = 'partial-export'  # being built
REPLACED = 'replaced-export'  # the previous target, moved aside to be removed


def _sibling(target: str, kind: str) -> str:
  parent, name = os.path.split(target)
  return os.path.join(parent, f'.{name}.{kind}-{secrets.token_hex(4)}')


# A staging or replaced folder of target NAME: `.NAME.partial-export-1a2b3c4d`.
# DOTALL: a NAME may hold a line break.
_LEFTOVER = re.compile(rf'\.(?P<name>.+)\.(?:{PARTIAL}|{REPLACED})-[0-9a-f]{{8}}', re.DOTALL)
# What remove_unheld's caller says of each folder it removed.
REMOVED_NOTE = 'note: removed {path}, left by an export that did not finish'


def leftovers_in(folder: str) -> list:
  """The paths of the staging and replaced folders in `folder`, of any target
  (any build's, finished or not), sorted. A symlink or a file of such a name
  is no build's (Staging makes a folder) and is left out."""
  try:
    names = os.listdir(folder)
  except OSError:  # no folder yet (nothing left there), or not listable: the build says so
    return []
  found = [os.path.join(folder, n) for n in sorted(names) if _LEFTOVER.fullmatch(n)]
  return [path for path in found if os.path.isdir(path) and not os.path.islink(path)]


def leftovers(target: str) -> list:
  """The paths of the staging and replaced folders beside `target` (any
  build's, finished or not), sorted."""
  parent, name = os.path.split(target)
  return [path for path in leftovers_in(parent)
          if _LEFTOVER.fullmatch(os.path.basename(path))['name'] == name]


def _lock(path: str) -> Optional[int]:
  """A descriptor of folder `path` holding its exclusive flock; None when
  another process holds it, or the folder is gone."""
  try:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
  except FileNotFoundError:
    return None
  try:
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:  # held (EWOULDBLOCK), or no flock on this filesystem: cannot tell, left alone
    os.close(descriptor)
    return None
  return descriptor


def remove_leftovers(target: str) -> list:
  """Removes what killed builds of `target` left beside it (leftovers() that
  no live process holds); -> their paths."""
  return remove_unheld(leftovers(target))


def remove_unheld(found: list) -> list:
  """Removes the folders of `found` (leftovers(), leftovers_in()) that no live
  process holds: a build under way holds its folder's flock. -> their paths."""
  removed = []
  for path in found:
    descriptor = _lock(path)
    if descriptor is None:
      continue
    try:
      shutil.rmtree(path)
    finally:
      os.close(descriptor)
    removed.append(path)
  return removed


class Staging:
  """`with Staging.beside(target) as staging:` build in staging.path, then
  staging.put_in_place(line). Leaving the block any other way (an error,
  KeyboardInterrupt, interrupts.Interrupted) removes staging.path."""

  def __init__(self, target: str, path: str, descriptor: int):
    self.target = target
    self.path = path
    self._descriptor = descriptor
    self.placed = False

  @classmethod
  def beside(cls, target: str) -> Staging:
    """Makes the staging folder (and the target's parent); OSError (as
    os.mkdir's) when they cannot be made."""
    path = _sibling(target, PARTIAL)
    try:
      os.mkdir(path)
    except FileNotFoundError:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      os.mkdir(path)
    descriptor = _lock(path)
    if descriptor is None:  # no flock here: built all the same, unprotected from another build
      descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    return cls(target, path, descriptor)

  def __enter__(self) -> Staging:
    return self

  def __exit__(self, kind, error, trace) -> None:
    os.close(self._descriptor)
    if not self.placed:
      # Best effort: the error that ended the build is the one to tell.
      shutil.rmtree(self.path, ignore_errors=True)

  def put_in_place(self, published_line: str) -> None:
    """Renames the staging folder to the target, replacing a previous one
    (moved aside, then removed). The renames are made with the command
    line's signals held, and the output counts as published with them
    (interrupts.published(published_line)): a signal that came meanwhile
    finds the new folder complete and in place, or the old one untouched."""
    previous = None
    with interrupts.held():
      if os.path.isdir(self.target) and os.listdir(self.target):
        previous = _sibling(self.target, REPLACED)
        os.rename(self.target, previous)
      try:
        os.rename(self.path, self.target)  # over an empty folder too
      except OSError:
        if previous is not None:  # the previous export back where it was
          os.rename(previous, self.target)
        raise
      self.placed = True
      interrupts.published(published_line)
    if previous is not None:
      shutil.rmtree(previous)
