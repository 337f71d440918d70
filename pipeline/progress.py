"""A live progress line for local runs.

Workers of the local runner are processes on this machine: each writes how
many rows it has processed to its own small file in a temp folder, and a
thread of the launcher sums them into `done/total, rate, ETA` on stderr.
The total of a manifest's rows is counted by the pipeline as it reads the
manifest, before any image is read, and left in the same folder: the
launcher reads no more of a manifest than its header line.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Optional

from pipeline import engines
from transforms.core import image_dir
from transforms.core import paths
from transforms.filesystem import walk_local_files
from transforms.workers.progress_file import TOTAL_FILE


def count_image_files(directory: Optional[str], extensions) -> Optional[int]:
  """Rows of a local --image_dir: its files that are images by name."""
  if not directory or paths.is_remote(directory):
    return None
  # The listing convert's rows come from (symlinked folders followed).
  return sum(problem is None and image_dir.wanted_file(relative, extensions)
             for relative, problem in walk_local_files(directory))


def read_total_done(directory: str) -> int:
  done = 0
  for name in os.listdir(directory):
    if name.startswith(TOTAL_FILE):
      continue
    try:
      with open(os.path.join(directory, name)) as handle:
        done += int(handle.read() or 0)
    except (OSError, ValueError):
      continue  # a file being replaced right now; next tick reads it
  return done


def read_total(directory: str) -> Optional[int]:
  """The rows to do, once the pipeline has read the manifest (else None)."""
  try:
    with open(os.path.join(directory, TOTAL_FILE)) as handle:
      return int(handle.read())
  except (OSError, ValueError):
    return None  # not read yet, or being replaced right now


def format_line(done: int, total: Optional[int], seconds: float) -> str:
  rate = done / seconds if seconds > 0 else 0.0
  text = f'{done}' + (f'/{total}' if total else '') + f' images  {rate:.1f} img/s'
  if total and rate > 0 and done < total:
    eta = int((total - done) / rate)
    text += f'  ETA {eta // 60}:{eta % 60:02d}'
  return text


class Reporter:
  """Context manager printing progress while a local pipeline runs."""

  def __init__(self, directory: Optional[str], total: Optional[int]):
    self.directory = directory
    self._total = total
    self._stop = threading.Event()
    self._thread = None
    self._started = time.time()

  @classmethod
  def for_run(cls, mode: str, options, image_dir: Optional[str] = None, extensions=None):
    """The total is the --image_dir's image files, or the manifest's data
    lines once the pipeline has read them."""
    wanted = mode == 'on' or (mode == 'auto' and sys.stderr.isatty())
    if not wanted or not engines.is_local(options):
      return cls(None, None)
    total = count_image_files(image_dir, extensions) if image_dir else None
    return cls(tempfile.mkdtemp(prefix='img2tfrecord-progress-'), total)

  def __enter__(self):
    if self.directory:
      self._thread = threading.Thread(target=self._loop, daemon=True)
      self._thread.start()
    return self

  def _loop(self):
    while not self._stop.wait(0.5):
      total = self._total or read_total(self.directory)
      line = format_line(read_total_done(self.directory), total,
                         time.time() - self._started)
      sys.stderr.write('\r' + line + '   ')
      sys.stderr.flush()

  def __exit__(self, *exc):
    if self.directory:
      self._stop.set()
      self._thread.join()
      sys.stderr.write('\r' + ' ' * 70 + '\r')
      shutil.rmtree(self.directory, ignore_errors=True)
    return False
