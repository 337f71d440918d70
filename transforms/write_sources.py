"""The ordered writer's sidecar per split, SPLIT.sources.jsonl.gz: one line
per record in write order (core/reuse.sidecar_line), from the offsets the
shard writers see while writing (as the index files are): what a later
--previous_dataset run copies unchanged records by."""

from __future__ import annotations

import contextlib
import zlib

import apache_beam as beam

from transforms import filesystem
from transforms.buckets import BufferByBucketFn
from transforms.buckets import ExactKeyFn
from transforms.core.example import BuiltExample
from transforms.core.reuse import sidecar_line
from transforms.workers.write_behind import IN_PLACE
from transforms.workers.write_behind import WriteBehind
from transforms.workers.write_behind import WriteInPlace


def line_of(example: BuiltExample, shard: int, ordinal: int, span: tuple) -> bytes:
  """The sidecar line of `example`, written as record `ordinal` of shard
  number `shard` at span (offset, framed length, data CRC)."""
  return sidecar_line(example.key, shard, ordinal, span[0], span[1], span[2],
                      example.fingerprint, example.sha256, example.image, example.label_id,
                      example.label_text, example.option_digest)


# The sidecar's deflate level. Compressing its lines was the largest single
# cost of the launcher's per-row work on 20,000 16x16 PNGs (cProfile: 14 us a
# line at zlib's default, 6); level 1 takes 2.7 against 7.0 us a ~400-byte
# line alone (timeit, 20,000 real lines), for a file ~16% larger (1.98
# against 1.71 MB): a line a record, read once a night.
SIDECAR_LEVEL = 1


class SidecarFile:
  """A split's sidecar written line by line (gzip at SIDECAR_LEVEL, no
  timestamp or name in its header), as the shard writers write their records;
  with `behind`, lines are compressed and written on its thread (zlib lets
  the GIL go while it deflates)."""

  # Lines are compressed this many at a time: the same bytes as one by one
  # (a deflate stream is the same however its input is cut), at 2.3 against
  # 2.6 us a line alone, and in a run, where other work evicts zlib's state
  # between lines, 7.9 us a line one by one (20,000 16x16 PNGs).
  LINES_AT_ONCE = 64

  def __init__(self, path: str, files: filesystem.FileAccess,
               behind: WriteBehind | WriteInPlace = IN_PLACE):
    self.path = path
    self._behind = behind
    self._deflating = _Deflating(files.create(path))
    self._lines = []

  def add(self, line: bytes) -> None:
    self._lines.append(line)
    if len(self._lines) >= self.LINES_AT_ONCE:
      self._compress()

  def _compress(self) -> None:
    lines, self._lines = b''.join(self._lines), []
    self._behind.write(self._deflating, lines)

  def abandon(self) -> None:
    """Closes the file after a failed write (see shard_file.abandoned_on_error)."""
    self._behind.drop()  # its thread no longer writes to the file
    with contextlib.suppress(OSError):  # flushing the rest fails as the write did
      self._deflating.handle.close()

  def close(self) -> None:
    if self._lines:
      self._compress()
    self._behind.drain()
    self._deflating.close()


class _Deflating:
  """A gzip stream's handle and its compressor: the bytes given to write()
  reach the file deflated."""

  def __init__(self, handle):
    self.handle = handle
    self._compressor = zlib.compressobj(SIDECAR_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS | 16)

  def write(self, data: bytes) -> None:
    compressed = self._compressor.compress(data)
    if compressed:
      self.handle.write(compressed)

  def close(self) -> None:
    self.handle.write(self._compressor.flush())
    self.handle.close()


class _WriteSortedFn(beam.DoFn):
  """(None, (order, line) pairs) -> the sidecar, lines in write order; out: its path."""

  def __init__(self, path: str):
    self._path = path

  def process(self, grouped):
    sidecar = SidecarFile(self._path, filesystem.FileAccess())
    for _, line in sorted(grouped[1]):
      sidecar.add(line)
    sidecar.close()
    yield self._path


@beam.ptransform_fn
def WriteSidecar(lines, path: str):
  """(order, line) of every record of a split, from the shard writers of a
  distributed runner -> its sidecar at `path` (out: the path; none for a
  split without records). The lines (~250 bytes a record) meet in one worker,
  which sorts them into write order; they cross the shuffle in lists, a few
  a bundle (buckets.py)."""
  return (lines
          # (None, [(order, line), ...]) per bundle
          | 'One' >> beam.ParDo(BufferByBucketFn(_in_one, _line_bytes))
          | 'GroupAll' >> beam.GroupByKey()
          | 'WriteSorted' >> beam.ParDo(ExactKeyFn(_WriteSortedFn(path))))


def _in_one(order_line: tuple) -> list:
  return [(None, order_line)]


def _line_bytes(order_line: tuple) -> int:
  return len(order_line[1]) + 100  # the tuple, the order and the bytes object
