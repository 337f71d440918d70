"""Byte ranges of a manifest and their line numbers, without Beam: every way
of cutting a file into ranges (and of splitting a range while it is read)
gives exactly the lines, and line numbers, of reading it whole."""

from __future__ import annotations

import gzip
import io
import random

import pytest

from transforms.core import line_ranges
from transforms.core import manifest
from transforms.core.line_ranges import LineNumbers
from transforms.core.line_ranges import RangeRead
from transforms.core.line_ranges import Read

MANIFESTS = {
    'plain': b'image,label\na.png,cat\nb.png,dog\nc.png,cat\n',
    'crlf': b'image,label\r\na.png,cat\r\n\r\nb.png,dog\r\nc.png,cat\r\n',
    'no_final_newline': b'image,label\na.png,cat\nb.png,dog',
    'blank_lines': b'image,label\n\n\na.png,cat\n \n\nb.png,dog\n\n',
    'utf8': 'image,label\nk\u00e4fer.png,\u7f8e\u3057\u3044\n\U0001f600.png,\u00e9t\u00e9\nz.png,x\n'
            .encode('utf-8'),
    'quoted_newline': b'image,label\n"a\nb.png",cat\nc.png,"multi\nline"\nd.png,dog\n',
    'bom': b'\xef\xbb\xbfimage,label\na.png,cat\n',
    'one_line': b'image,label',
    'empty': b'',
    'only_newlines': b'\n\n\n',
}


def serial(data: bytes, has_header: bool = True) -> list:
  """(line number, line) of each data line, read whole (the reference)."""
  return list(manifest.iter_lines(io.BytesIO(data), 'csv' if has_header else 'txt'))


class Tracker:
  """An offset range's claims, as OffsetRestrictionTracker grants them."""

  def __init__(self, start: int, stop: int):
    self.start, self.stop = start, stop
    self.last = None

  def claim(self, offset: int) -> bool:
    assert self.last is None or offset > self.last, 'claims must increase'
    self.last = offset
    return offset < self.stop


def read_ranges(data: bytes, cuts: list, has_header: bool = True,
                splits: dict | None = None) -> list:
  """Reads `data` in the ranges between `cuts`; splits: {range index: (after
  this many claims, split point)}, the runner splitting the rest of a range
  off while it is read (the residual is read as a range of its own)."""
  bounds = [0, *cuts, len(data)]
  pending = list(zip(bounds, bounds[1:]))
  lines, reads = [], []
  number = 0
  while pending:
    start, stop = pending.pop(0)
    tracker = Tracker(start, stop)
    read = RangeRead()
    split = (splits or {}).pop(number, None)
    number += 1
    claims = 0
    claim = tracker.claim
    if split is not None:
      after, point = split

      def claim(offset, tracker=tracker, after=after, point=point):
        nonlocal claims
        if claims == after and point < tracker.stop:
          last = tracker.start - 1 if tracker.last is None else tracker.last
          pending.append((max(point, last + 1), tracker.stop))
          tracker.stop = pending[-1][0]
        claims += 1
        return tracker.claim(offset)
    for index, raw in read.lines_of(io.BytesIO(data), start, claim, has_header,
                                    size=len(data)):
      lines.append((0, read.first_offset, index, raw))
    if read.lines:
      reads.append(Read(0, read.first_offset, read.lines, read.data_lines))
  numbers = LineNumbers(reads)
  return sorted((numbers.line(f, first, index), raw) for f, first, index, raw in lines)


@pytest.mark.parametrize('name', sorted(MANIFESTS))
def test_every_cut_gives_the_lines_of_a_whole_read(name):
  data = MANIFESTS[name]
  expected = serial(data)
  # every single cut, every pair of cuts, and ranges of every size
  for cut in range(len(data) + 1):
    assert read_ranges(data, [cut]) == expected, f'cut at {cut}'
  for first in range(len(data) + 1):
    for second in range(first, len(data) + 1):
      assert read_ranges(data, [first, second]) == expected, (first, second)
  for size in range(1, len(data) + 1):
    cuts = list(range(size, len(data), size))
    assert read_ranges(data, cuts) == expected, f'ranges of {size} bytes'


@pytest.mark.parametrize('name', sorted(MANIFESTS))
def test_splits_while_reading_keep_line_numbers(name):
  data = MANIFESTS[name]
  expected = serial(data)
  rng = random.Random(7)
  for _ in range(300):
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 3))))
    splits = {i: (rng.randint(0, 4), rng.randint(0, len(data))) for i in range(6)}
    assert read_ranges(data, cuts, splits=splits) == expected, (cuts, splits)


def test_header_is_a_line_only_in_the_first_range():
  data = b'image,label\na.png,cat\n'
  assert read_ranges(data, [12]) == [(2, b'a.png,cat')]
  assert read_ranges(data, [12], has_header=False) == [(1, b'image,label'), (2, b'a.png,cat')]


def test_a_range_inside_one_line_claims_nothing():
  read = RangeRead()
  data = b'image,label\n' + b'x' * 100 + b',cat\nb,dog\n'
  tracker = Tracker(20, 60)
  assert list(read.lines_of(io.BytesIO(data), 20, tracker.claim, True, len(data))) == []
  assert (read.first_offset, read.lines, read.data_lines) == (None, 0, 0)


def test_first_line_start_reads_the_byte_before():
  data = b'ab\ncd\n\nef'
  starts = [line_ranges.first_line_start(io.BytesIO(data), start)
            for start in range(len(data) + 1)]
  assert starts == [0, 3, 3, 3, 6, 6, 6, 7, 9, 9]


def test_a_gz_stream_is_one_claim_of_every_line():
  data = MANIFESTS['blank_lines']
  read = RangeRead()
  tracker = Tracker(0, 1)
  lines = list(read.lines_of(gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data))), 0,
                             tracker.claim, True, whole_stream=True))
  assert lines == [(3, b'a.png,cat'), (6, b'b.png,dog')]
  assert (read.first_offset, read.lines, read.data_lines) == (0, 8, 2)
  numbers = LineNumbers([Read(0, 0, read.lines, read.data_lines)])
  assert [numbers.line(0, 0, i) for i, _ in lines] == [n for n, _ in serial(data)]


def test_a_gz_stream_checkpointed_before_its_claim_reads_nothing():
  read = RangeRead()
  lines = read.lines_of(io.BytesIO(b'a\n'), 0, lambda offset: False, False, whole_stream=True)
  assert list(lines) == [] and read.lines == 0


@pytest.mark.parametrize('data, size, message', [
    (b'image,label\na,b\n', 30, 'ends at byte 16, before the 30 bytes'),
    (b'image,label\na,b\nc,d\n', 16, 'holds more than the 16 bytes'),
    (b'image,label\na,b\nc,d\n', 14, 'holds more than the 14 bytes'),
])
def test_a_file_that_changed_since_it_was_listed_fails(data, size, message):
  tracker = Tracker(0, size)
  with pytest.raises(line_ranges.ManifestChangedError, match=message):
    list(RangeRead().lines_of(io.BytesIO(data), 0, tracker.claim, True, size))


@pytest.mark.parametrize('damage, cause', [
    (lambda data: data[:len(data) // 2], 'EOFError: Compressed file ended'),
    (lambda data: data[:10] + bytes(b ^ 0xff for b in data[10:40]) + data[40:], 'error: '),
])
def test_a_gz_stream_that_breaks_off_names_the_last_whole_line(damage, cause):
  data = b'image,label\n' + b''.join(b'%d.png,cat\n' % i for i in range(5000))
  read = RangeRead()
  lines = []
  stream = gzip.GzipFile(fileobj=io.BytesIO(damage(gzip.compress(data))))
  with pytest.raises(line_ranges.ManifestCutShortError,
                     match=r'breaks off after line (\d+): the lines after it are lost') as caught:
    for line in read.lines_of(stream, 0, lambda offset: True, True, whole_stream=True):
      lines.append(line)
  assert cause in str(caught.value)
  assert isinstance(caught.value, line_ranges.ManifestReadError)
  # Every line yielded is whole, and the message names the last of them.
  assert [raw for _, raw in lines] == [b'%d.png,cat' % i for i in range(len(lines))]
  assert f'after line {read.lines}:' in str(caught.value)
  assert read.lines == len(lines) + (1 if read.lines else 0)  # + the header


def test_a_range_ending_before_the_end_does_not_check_the_size():
  data = b'image,label\na,b\nc,d\n'
  tracker = Tracker(0, 13)
  lines = list(RangeRead().lines_of(io.BytesIO(data), 0, tracker.claim, True, len(data)))
  assert lines == [(1, b'a,b')]


def test_line_numbers_and_positions_over_files():
  reads = [Read(1, 0, 4, 3), Read(0, 50, 2, 2), Read(0, 0, 3, 2), Read(2, 7, 5, 5)]
  numbers = LineNumbers(reads)
  assert numbers.line(0, 0, 0) == 1
  assert numbers.line(0, 50, 1) == 5  # after file 0's first read's 3 lines
  assert numbers.line(1, 0, 3) == 4
  assert numbers.line(2, 7, 0) == 1
  # positions: the files one after another (5 lines, 4 lines, then file 2)
  assert [numbers.position(f, 1) for f in (0, 1, 2)] == [1, 6, 10]


def test_a_read_reported_twice_counts_once_and_a_conflict_fails():
  numbers = LineNumbers([Read(0, 0, 3, 2), Read(0, 0, 3, 2), Read(0, 9, 2, 2)])
  assert (numbers.line(0, 9, 0), numbers.data_lines) == (4, 4)
  with pytest.raises(ValueError, match='two reads of file 0 began at byte 0'):
    LineNumbers([Read(0, 0, 3, 2), Read(0, 0, 4, 2)])


@pytest.mark.parametrize('size, expected', [
    (0, 1 << 20), (10_000_000, 1 << 20), (100 << 20, (100 << 20) // 16),
    (1 << 30, 64 << 20), (100 << 30, 64 << 20)])
def test_range_bytes(size, expected):
  assert line_ranges.range_bytes(size) == expected


def test_byte_ranges_cover_the_file():
  assert line_ranges.byte_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
  assert line_ranges.byte_ranges(8, 4) == [(0, 4), (4, 8)]
  assert line_ranges.byte_ranges(0, 4) == [(0, 0)]
