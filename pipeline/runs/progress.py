"""A live progress line for local runs.

Workers of the local runner are processes on this machine: each writes how
many rows it has processed to its own small file in a temp folder, and a
thread of the launcher sums them into `done/total, rate, ETA` on stderr.
The total of a manifest's rows is counted by the pipeline as it reads the
manifest, before any image is read, and left in the same folder: the
launcher reads no more of a manifest than its header line.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Optional

from pipeline.engines import runners
from transforms.core import image_dir
from transforms.core import paths
from transforms.core.local_files import walk_local_files
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
    if name.startswith(TOTAL_FILE) or name.endswith('.tmp'):
      continue  # the total, or a count being replaced (ProgressFile.flush): its file still holds it
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


class LineDisplay:
  """The command line's progress: one line on stderr, rewritten in place."""

  def __init__(self, total: Optional[int]):
    self._total = total
    self._started = time.time()

  def set_total(self, total: int) -> None:
    self._total = total

  def update(self, done: int) -> None:
    line = format_line(done, self._total, time.time() - self._started)
    sys.stderr.write('\r' + line + '   ')
    sys.stderr.flush()

  def close(self, done: Optional[int]) -> None:
    del done  # the line goes: the summary follows
    sys.stderr.write('\r' + ' ' * 70 + '\r')


def in_notebook() -> bool:
  """Whether this process is a Jupyter kernel (IPython's ZMQ shell)."""
  ipython = sys.modules.get('IPython')
  shell = getattr(ipython, 'get_ipython', lambda: None)()
  return type(shell).__name__ == 'ZMQInteractiveShell'


class BarDisplay:
  """tqdm's bar over the rows done, for pipeline.api in a notebook: a widget
  where ipywidgets is installed (tqdm.auto), else tqdm's text bar (tqdm.auto
  would warn, then fall back to it). tqdm is no dependency: it is used where
  it is installed."""

  def __init__(self, total: Optional[int]):
    if importlib.util.find_spec('ipywidgets') is not None:
      from tqdm.auto import tqdm
    else:
      from tqdm import tqdm
    self._bar = tqdm(total=total, unit='img', desc='convert')

  def set_total(self, total: int) -> None:
    self._bar.total = total
    self._bar.refresh()

  def update(self, done: int) -> None:
    self._bar.update(done - self._bar.n)

  def close(self, done: Optional[int]) -> None:
    if done is not None:
      self.update(done)
    self._bar.close()


class Reporter:
  """Context manager showing progress while a local pipeline runs.

  display(total) -> an object with update(done) and close(done) (done: the
  rows done; None at close when the run failed); LineDisplay by default.
  """

  def __init__(self, directory: Optional[str], total: Optional[int], display=LineDisplay):
    self.directory = directory
    self._total = total
    self._display = display
    self._shown = None
    self._stop = threading.Event()
    self._thread = None

  @classmethod
  def for_run(cls, mode: str, options, image_dir: Optional[str] = None, extensions=None,
              display=None):
    """The total is the --image_dir's image files, or the manifest's data
    lines once the pipeline has read them."""
    # sys.stderr is None in a process started with it closed (`2>&-`)
    wanted = mode == 'on' or (mode == 'auto' and sys.stderr is not None and sys.stderr.isatty())
    if not wanted or not runners.is_local(options):
      return cls(None, None)
    total = count_image_files(image_dir, extensions) if image_dir else None
    return cls(tempfile.mkdtemp(prefix='img2tfrecord-progress-'), total,
               display or LineDisplay)

  def __enter__(self):
    if self.directory:
      self._shown = self._display(self._total)
      self._thread = threading.Thread(target=self._loop, daemon=True)
      self._thread.start()
    return self

  def _loop(self):
    while not self._stop.wait(0.5):
      self._read_total()
      self._shown.update(read_total_done(self.directory))

  def _read_total(self) -> None:
    if self._total is None:  # a manifest's rows: known once the pipeline read them
      self._total = read_total(self.directory)
      if self._total is not None:
        self._shown.set_total(self._total)

  def __exit__(self, exc_type, *exc):
    if self.directory:
      self._stop.set()
      self._thread.join()
      self._read_total()  # a run shorter than a tick: its last line has the total too
      self._shown.close(None if exc_type else read_total_done(self.directory))
      shutil.rmtree(self.directory, ignore_errors=True)
    return False
