"""Worker side of the local progress line (see pipeline/runs/progress.py)."""

from __future__ import annotations

import os
import time
from typing import Optional

# The file holding the number of rows to do, once the manifest is read.
TOTAL_FILE = 'total'


def write_total(directory: Optional[str], total: int) -> None:
  """Worker side: the rows the run will process (every worker that numbers
  manifest lines writes the same number)."""
  if directory is None or not os.path.isdir(directory):
    return
  temp = os.path.join(directory, f'{TOTAL_FILE}.{os.getpid()}.tmp')
  try:
    with open(temp, 'w') as handle:
      handle.write(str(total))
    os.replace(temp, os.path.join(directory, TOTAL_FILE))
  except OSError:
    pass  # progress is cosmetic: a full or vanished temp folder must not cost a row


class ProgressFile:
  """Worker side: this process's processed-row count, flushed twice a second."""

  def __init__(self, directory: Optional[str]):
    self._path = (os.path.join(directory, f'{os.getpid()}-{id(self)}')
                  if directory else None)
    self._done = 0
    self._flushed_at = 0.0

  def tick(self):
    if self._path is None:
      return
    self._done += 1
    if time.time() - self._flushed_at > 0.5:
      self.flush()

  def flush(self):
    if self._path is None or not os.path.isdir(os.path.dirname(self._path)):
      return
    temp = self._path + '.tmp'
    try:
      with open(temp, 'w') as handle:
        handle.write(str(self._done))
      os.replace(temp, self._path)
    except OSError:
      pass  # progress is cosmetic: a full or vanished temp folder must not cost a row
    self._flushed_at = time.time()
