"""Reading a manifest in byte ranges, and numbering its lines: plain functions.

A manifest is read as byte ranges [start, stop) that workers read side by
side, and that a runner may split again while one is being read. A line
belongs to the range in which it starts: a range that starts mid-file skips
to the first line start at or after `start` (it reads the byte at start-1 to
tell whether `start` is one), and reads on past `stop` to finish the last
line it started. Only b'\\n' ends a line (CRLF lines keep their b'\\r' until
the row is parsed; a lone b'\\r' is text), so a range boundary inside a
multi-byte UTF-8 character or between b'\\r' and b'\\n' is just another
mid-line boundary.

Line numbers: each read of a range (one call, which may stop early when the
runner splits the rest off) claims the lines that start in it, one by one,
and counts every physical line it claimed: the header and blank lines too.
It tags its data lines with (first offset it claimed, index among its
claimed lines) and reports (file, first offset, lines claimed) once at the
end. The reads of one file claim disjoint runs of consecutive lines, so,
sorted by first offset, a prefix sum of their counts gives the line number
of each read's first line: exact however the runner split the ranges,
including splits it makes while a range is being read. Fixed blocks with a
newline count per block would need a second pass over any block a runner
splits mid-way.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
import gzip
import math
from typing import NamedTuple
from typing import Optional
import zlib

from transforms.core.line_caps import is_blank
from transforms.core.line_caps import line_size
from transforms.core.line_caps import read_line
from transforms.core.line_caps import without_break

# Initial split size: Beam's text source splits at 64 MiB; a file of less
# than TARGET_RANGES * 64 MiB is cut into TARGET_RANGES ranges (no smaller
# than MIN_RANGE_BYTES), so a few workers share a mid-sized manifest too (a
# 10 MB one gives 10 ranges). A range costs one open and one seek: nothing
# next to parsing 1 MiB of rows (~15,000 lines). Runners that split ranges
# further while they run (Dataflow) balance what is left.
MAX_RANGE_BYTES = 64 << 20
MIN_RANGE_BYTES = 1 << 20
TARGET_RANGES = 16

def range_bytes(size: int) -> int:
  """The initial range size for a file of `size` bytes."""
  return min(MAX_RANGE_BYTES, max(MIN_RANGE_BYTES, math.ceil(size / TARGET_RANGES)))


def byte_ranges(size: int, step: int) -> list:
  """[(start, stop), ...] covering [0, size) in ranges of `step` bytes (the
  last shorter); one empty range for an empty file."""
  if size <= 0:
    return [(0, 0)]
  return [(start, min(start + step, size)) for start in range(0, size, step)]


def first_line_start(stream, start: int) -> int:
  """Seeks a seekable binary stream to the first line start at or after
  `start` and returns that offset (the stream's length if there is none)."""
  if start == 0:
    stream.seek(0)
    return 0
  stream.seek(start - 1)
  if stream.read(1) == b'\n':
    return start
  return start + line_size(read_line(stream))  # a long line's rest, never held whole


class ManifestReadError(OSError):
  """A manifest that cannot be read whole: the job fails (exit 1), its
  message naming the file; the input's fault, so no traceback is printed."""


class ManifestChangedError(ManifestReadError):
  """A manifest's bytes are not those of the size it was listed with: it
  changed while the run read it (a row could be lost or read twice)."""


class ManifestCutShortError(ManifestReadError):
  """A compressed manifest whose stream breaks off (cut short, or damaged):
  its rows past the break are lost, so the job fails rather than drop them."""


class RangeRead:
  """One read of a range: the lines it claimed and where they start.

  lines: physical lines claimed (header and blank lines too);
  data_lines: those that are rows (not the header, not blank);
  first_offset: where the first claimed line starts (None before any).
  """

  def __init__(self):
    self.first_offset: Optional[int] = None
    self.lines = 0
    self.data_lines = 0

  def lines_of(self, stream, start: int, claim: Callable[[int], bool], has_header: bool,
               size: Optional[int] = None, whole_stream: bool = False
               ) -> Iterator[tuple]:
    """(index among this read's claimed lines, line without its line break;
    a line_caps.LongLine past its MAX_LINE_BYTES) for each data line of the lines that start at or after `start` and that
    `claim(offset)` grants, in order; it stops at the first claim refused.
    size: the file's size when it was listed; ManifestChangedError if the
    file ends before it, or goes on past it.

    whole_stream: `stream` cannot seek (a decompressed .gz); one claim of
    offset 0 takes every line of it.
    """
    if whole_stream:
      if not claim(0):
        return
      self.first_offset = 0
      lines: Iterable = self._whole(stream)
      offset = 0
    else:
      offset = first_line_start(stream, start)
      lines = self._claimed(stream, offset, claim, size)
    header = has_header and offset == 0
    for raw in lines:
      index = self.lines
      self.lines += 1
      if header:
        header = False  # a line, never a row
        continue
      if not is_blank(raw):
        self.data_lines += 1
        yield index, without_break(raw)

  def _whole(self, stream) -> Iterator:
    while True:
      try:
        raw = read_line(stream)
      except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        # Which file of a pattern and where: Python's EOFError names neither.
        raise ManifestCutShortError(
            f'its compressed stream breaks off after line {self.lines}: the lines after '
            f'it are lost ({type(error).__name__}: {error})') from error
      if not raw:
        return
      yield raw

  def _claimed(self, stream, offset: int, claim: Callable[[int], bool],
               size: Optional[int]) -> Iterator:
    while claim(offset):
      raw = read_line(stream)
      if not raw:
        raise ManifestChangedError(
            f'it ends at byte {offset}, before the {size} bytes it was listed with: '
            f'it changed while it was being read')
      if self.first_offset is None:
        self.first_offset = offset
      yield raw
      offset += line_size(raw)
    # Refused at or past the listed end: the file must end right there (one
    # byte read by the read that reaches the end), or lines would go unread.
    if size is not None and offset >= size and (offset > size or stream.read(1)):
      raise ManifestChangedError(
          f'it holds more than the {size} bytes it was listed with: it changed while '
          f'it was being read')


class Read(NamedTuple):
  """What one read of a range reports at its end."""
  file: int  # the file's place among the manifest's files (sorted by path)
  first_offset: int
  lines: int
  data_lines: int


class LineNumbers:
  """Every read's report -> the true line number of each claimed line, and
  its position: its line number in all of the manifest's files read one
  after another, in their order (the order of rows in manifest order).
  data_lines: the rows of all files (data lines)."""

  def __init__(self, reads: Iterable[Read]):
    # No two reads claim one line, so (file, first offset) names a read. A
    # report seen twice is one read: Beam 2.77's in-process runner gives a
    # side input the first read of a range twice when the runner split that
    # range while it was read (seen in tests/test_manifest_ranges.py).
    unique: dict = {}
    for read in reads:
      seen = unique.setdefault((read.file, read.first_offset), read)
      if seen != read:
        raise ValueError(f'two reads of file {read.file} began at byte '
                         f'{read.first_offset}: {seen} and {read}')
    per_file: dict = {}
    self.data_lines = 0
    for read in unique.values():
      per_file.setdefault(read.file, []).append((read.first_offset, read.lines))
      self.data_lines += read.data_lines
    self._before = {}
    totals = {}
    for file, calls in per_file.items():
      before = 0
      for first_offset, lines in sorted(calls):
        self._before[(file, first_offset)] = before
        before += lines
      totals[file] = before
    self._file_start = {}
    start = 0
    for file in sorted(totals):
      self._file_start[file] = start
      start += totals[file]

  def line(self, file: int, first_offset: int, index: int) -> int:
    """The 1-based line number of line `index` of the read that began at
    `first_offset` in `file`."""
    return self._before[(file, first_offset)] + index + 1

  def position(self, file: int, line: int) -> int:
    return self._file_start[file] + line
