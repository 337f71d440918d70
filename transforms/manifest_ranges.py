"""ReadManifestLines: a manifest's files -> numbered lines, read in byte
ranges by every worker (a splittable DoFn over offset ranges).

The plain logic (where a range's lines start, how reads become line numbers)
is transforms/core/line_ranges.py. Here: the files are cut into ranges
(line_ranges.range_bytes), which a Reshuffle spreads over the workers
whatever the runner does with a splittable DoFn's initial splits; each range
is read by ReadRangeFn, which claims line starts on an
OffsetRestrictionTracker, so a runner that splits work while it runs
(Dataflow) can split a range further. A .gz file is one range, read whole by
one worker (a compressed stream cannot be entered mid-way): a restriction
[0, 1) whose one offset claims the file.
"""

from __future__ import annotations

import os
from typing import NamedTuple
from typing import Optional

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.transforms.core import RestrictionProvider

from transforms.beam_util import AnyOutput
from transforms.beam_util import counter
from transforms.core import line_ranges
from transforms.core import paths
from transforms.core.line_ranges import LineNumbers
from transforms.core.line_ranges import Read
from transforms.filesystem import FileAccess
from transforms.workers.progress_file import write_total

LINES = 'lines'  # (file index, line number, position, raw line)
# Lines leave a read in chunks of this many: one element per line cost ~25 us
# a line on the way to the numbering step (measured: 100,000 lines on the
# local runner, 1.8 s read, +2.5 s numbered one by one).
CHUNK_LINES = 1000
READS = 'reads'  # line_ranges.Read: one per read of a range


class ManifestFile(NamedTuple):
  index: int  # place among the manifest's files, sorted by path
  path: str
  size: int  # bytes when listed (of the compressed stream for a .gz)

  @property
  def whole(self) -> bool:
    """Read whole by one worker: a compressed stream."""
    return paths.is_gzip_name(self.path)


def manifest_files(config) -> list:
  """A ManifestConfig's files as ManifestFile, numbered in order (its
  `files`, listed on the launcher; else its one `path`, sized now)."""
  files = config.files or ((config.path, FileAccess().size(config.path)),)
  return [ManifestFile(i, path, size) for i, (path, size) in enumerate(files)]


def file_ranges(files: list, range_bytes: Optional[int] = None) -> list:
  """(ManifestFile, start, stop) of each initial range of each file.
  range_bytes: force a range size (tests); else line_ranges.range_bytes."""
  ranges = []
  for file in files:
    if file.whole:
      ranges.append((file, 0, 1))
      continue
    step = range_bytes or line_ranges.range_bytes(file.size)
    ranges += [(file, start, stop) for start, stop in line_ranges.byte_ranges(file.size, step)]
  return ranges


class _RangeProvider(RestrictionProvider):
  """The restriction of a (file, start, stop) element is [start, stop); the
  initial ranges are already cut (file_ranges), so it is not split again
  before reading."""

  def initial_restriction(self, element):
    _, start, stop = element
    return OffsetRange(start, stop)

  def create_tracker(self, restriction):
    return OffsetRestrictionTracker(restriction)

  def restriction_size(self, element, restriction):
    file = element[0]
    return file.size if file.whole else restriction.size()

  def split(self, element, restriction):
    yield restriction


_RESTRICTION = beam.DoFn.RestrictionParam(_RangeProvider())


class ReadRangeFn(AnyOutput, beam.DoFn):
  """(file, start, stop) -> its data lines under LINES in chunks (file index,
  first offset of this read, [(index of the line in this read, raw line),
  ...]), and one line_ranges.Read under READS at the end of each read that
  claimed a line.

  has_header: the first line of each file is a header (a line, not a row).
  """

  def __init__(self, has_header: bool):
    self._has_header = has_header
    self._ranges = counter('manifest_ranges_read')

  def setup(self):
    self._files = FileAccess()

  def process(self, element, tracker=_RESTRICTION):
    file = element[0]
    start = tracker.current_restriction().start
    read = line_ranges.RangeRead()
    chunk = []
    try:
      with self._files.open_checked(file.path) as stream:
        for line in read.lines_of(stream, start, tracker.try_claim, self._has_header,
                                  size=None if file.whole else file.size,
                                  whole_stream=file.whole):
          chunk.append(line)
          if len(chunk) == CHUNK_LINES:
            yield file.index, read.first_offset, chunk
            chunk = []
    except line_ranges.ManifestReadError as error:
      raise type(error)(f'manifest {file.path}: {error}') from None
    if chunk:
      yield file.index, read.first_offset, chunk
    if read.lines:
      self._ranges.inc()
      _log_range(file.path, start, read)
      yield beam.pvalue.TaggedOutput(
          READS, Read(file.index, read.first_offset, read.lines, read.data_lines))


# Tests set this to a folder: each read of a range then leaves a file there
# naming the process that read it (the proof that several workers did).
RANGE_LOG_ENV = 'IMG2TFRECORD_RANGE_LOG'


def _log_range(path: str, start: int, read: line_ranges.RangeRead) -> None:
  folder = os.environ.get(RANGE_LOG_ENV)
  if folder:
    name = f'{os.getpid()}-{read.first_offset}-{os.path.basename(path)}'
    with open(os.path.join(folder, name), 'w') as handle:
      handle.write(f'{os.getpid()} {path} {start} {read.first_offset} {read.lines}\n')


class NumberLinesFn(beam.DoFn):
  """(file index, first offset, [(index, raw), ...]) -> (file index, line,
  position, raw) each, from every read's report (a side input, `reads`).

  A subclass turns each numbered line into its own outputs (`numbered`): the
  parse then runs in this step, one Beam step less per line.
  """

  def __init__(self, progress_dir: Optional[str] = None):
    self._progress_dir = progress_dir
    self._seen = None
    self._numbers = None

  def process(self, tagged, reads):
    if reads is not self._seen:  # one table per side input value (per bundle at most)
      self._seen, self._numbers = reads, LineNumbers(reads)
      # The progress line's total: known before any image is read.
      write_total(self._progress_dir, self._numbers.data_lines)
    file, first_offset, chunk = tagged
    numbers = self._numbers
    for index, raw in chunk:
      line = numbers.line(file, first_offset, index)
      yield from self.numbered(file, line, numbers.position(file, line), raw)

  def numbered(self, file: int, line: int, position: int, raw: bytes):
    yield file, line, position, raw


class ReadManifestLines(beam.PTransform):
  """A manifest's files -> {LINES: (file index, line number, position, raw
  line) for each data line, READS: line_ranges.Read}.

  files: ManifestFile of each file, numbered in their order. Lines are
  numbered only once every range has been read: the numbering step waits for
  the side input of every read's count. number: the numbering step (a
  NumberLinesFn; its subclass's outputs are then LINES and `tags`).
  """

  def __init__(self, files: list, has_header: bool, range_bytes: Optional[int] = None,
               number: Optional[NumberLinesFn] = None, tags: tuple = ()):
    super().__init__()
    self._files = files
    self._has_header = has_header
    self._range_bytes = range_bytes
    self._number = number or NumberLinesFn()
    self._tags = tags

  def expand(self, pbegin):
    ranges = file_ranges(self._files, self._range_bytes)
    read = (pbegin
            | 'Once' >> beam.Impulse()
            | 'Ranges' >> beam.FlatMap(lambda _, ranges: ranges, ranges)
            | 'Spread' >> beam.Reshuffle()
            | 'ReadRanges' >> beam.ParDo(ReadRangeFn(self._has_header))
            .with_outputs(READS, main=LINES))
    numbered = read[LINES] | 'NumberLines' >> beam.ParDo(
        self._number, beam.pvalue.AsList(read[READS])).with_outputs(*self._tags, main=LINES)
    return {LINES: numbered[LINES], READS: read[READS],
            **{tag: numbered[tag] for tag in self._tags}}
