"""The `latest` pointer a run with --previous_dataset writes beside its
folder (pipeline/runs/previous.py): one line of UTF-8 naming the dataset
folder. Only --previous_dataset follows it (docs/incremental.md); a reader
given one (validate, inspect, export, read.load) says which folder to give."""

from __future__ import annotations

import os
from typing import Optional

from transforms.core import paths

LATEST = 'latest'
MAX_POINTER_BYTES = 64 << 10  # a `latest` pointer longer than this is no pointer


def pointer_target(data: bytes) -> Optional[str]:
  """The path a pointer's bytes hold ('' when empty), or None when they are
  no pointer (not one line of UTF-8). utf-8-sig: a pointer saved by an
  editor that starts files with a BOM named a folder whose name began with
  U+FEFF ("does not exist")."""
  try:
    target = data.decode('utf-8-sig').strip()
  except UnicodeDecodeError:
    return None
  if len(data) > MAX_POINTER_BYTES or any(c in target for c in '\n\r\x00'):
    return None
  return target


def pointer_given(path: str) -> Optional[str]:
  """For a local `latest` pointer file given where a dataset folder is read:
  the line saying so, naming the folder to give instead (a relative one is
  relative to the pointer's folder); None for any other path."""
  if paths.is_remote(path) or os.path.basename(path.rstrip('/')) != LATEST:
    return None
  if not os.path.isfile(path.rstrip('/')):
    return None
  try:
    with open(path.rstrip('/'), 'rb') as handle:
      target = pointer_target(handle.read(MAX_POINTER_BYTES + 1))
  except OSError:
    target = None
  said = (f'{path} is a `{LATEST}` pointer file (convert --previous_dataset writes it), '
          f'not a dataset folder')
  if not target:
    return f'{said}: give the dataset folder itself'
  if not paths.is_remote(target) and not os.path.isabs(target):
    target = os.path.join(os.path.dirname(path.rstrip('/')), target)
  return f'{said}: give the folder it names, {target}'
