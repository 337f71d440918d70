"""Worker side of the local progress line (see pipeline/progress.py)."""

from __future__ import annotations

import os
import time
from typing import Optional


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
