"""A command's standard streams while it runs: stdout and stderr whose
failed writes (a full disk, a reader gone) are not the job's failure, and
descriptors 0-2 a command was started without. exits.exit_with uses them."""

from __future__ import annotations

import os
import select
import sys
from typing import Optional


class _KeepsGoing:
  """sys.stdout or sys.stderr while a command runs: a write that fails other
  than on a closed pipe (a full disk, an I/O error) is remembered, not
  raised. A summary or a warning that cannot be printed is not the job's
  failure: `convert ... > log` on a full disk exited 1, "the job failed", its
  dataset written; `> log 2>&1` exited 1 for any line on stderr (an
  over-budget run's, exit 3, too).

  A closed pipe is raised on stdout (exit 141, exit_with), and on stderr only
  when stdout is that pipe too (`|& head -1`); stderr's own reader gone
  (`2>&1 >log | head -1`) is remembered: an over-budget run whose line found
  no reader exited 1, "the job failed", its dataset published. A label its
  encoding cannot hold (PYTHONIOENCODING=ascii) is escaped, as on stderr."""

  def __init__(self, stream, is_stdout: bool = True):
    self.stream = stream
    self.is_stdout = is_stdout
    self.error = None  # the first write error met

  def write(self, text: str) -> int:
    try:
      self._guarded(self.stream.write, text)
    except UnicodeEncodeError:  # a label or path its encoding cannot hold: as stderr does
      encoding = getattr(self.stream, 'encoding', None) or 'ascii'
      self._guarded(self.stream.write,
                    text.encode(encoding, 'backslashreplace').decode(encoding))
    return len(text)

  def flush(self) -> None:
    self._guarded(self.stream.flush)

  def _guarded(self, call, *args) -> None:
    if self.error is not None:
      return  # what is left to write goes nowhere
    try:
      call(*args)
    except BrokenPipeError as error:
      if self.is_stdout or stdout_closed():
        raise  # its reader has gone: exit 141 (exit_with)
      self.error = error
    except OSError as error:
      self.error = error

  def __getattr__(self, name: str):
    return getattr(self.stream, name)


def keeping_going(name: str) -> Optional[_KeepsGoing]:
  """sys.<name> made a _KeepsGoing (None: started with it closed, `>&-`:
  print writes nothing)."""
  stream = getattr(sys, name)
  if stream is None:
    return None
  guard = _KeepsGoing(stream, is_stdout=name == 'stdout')
  setattr(sys, name, guard)
  return guard


def given_back(name: str, guard: Optional[_KeepsGoing]) -> None:
  """sys.<name> as it was; what it still buffers goes to /dev/null when it
  could not be written (else the interpreter's last flush fails: exit 120)."""
  if guard is None:
    return
  setattr(sys, name, guard.stream)
  if guard.error is not None:
    os.dup2(os.open(os.devnull, os.O_WRONLY), guard.stream.fileno())


def _is_open(fd: int) -> bool:
  try:
    os.fstat(fd)
  except OSError:  # EBADF: started closed
    return False
  return True


def closed_standard_streams_on_devnull() -> None:
  """Descriptors 0-2 a command was started without (`2>&-` in a crontab, a
  daemon that closes them) opened on /dev/null, and sys.stdout or sys.stderr
  made a stream on it where Python gave None. Without: a convert with stderr
  closed crashed on sys.stderr.isatty() (exit 1, "the job failed:
  AttributeError", and with stdout closed too not a word), and the files a
  run opens took those descriptors, a worker process inheriting one of them
  as its stderr."""
  for fd, name in ((0, 'stdin'), (1, 'stdout'), (2, 'stderr')):
    if _is_open(fd):
      continue
    null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
    if null != fd:
      os.dup2(null, fd)
      os.close(null)
    if getattr(sys, name) is None:
      setattr(sys, name, open(fd, 'r' if fd == 0 else 'w', encoding='utf-8', closefd=False))


def stdout_closed() -> bool:
  """Whether stdout is a pipe (or socket) whose reader has gone: writing to it
  fails with EPIPE. Told by poll, which reports an error on such a pipe; not
  by the BrokenPipeError alone, which a socket of the job's may raise too."""
  try:
    fd = sys.stdout.fileno()
  except (AttributeError, OSError, ValueError):
    return False
  poller = select.poll()
  poller.register(fd, 0)  # POLLERR and POLLHUP are reported whatever is asked
  return any(event & select.POLLERR for _, event in poller.poll(0))
