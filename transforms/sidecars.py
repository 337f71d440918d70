"""Reading a previous dataset's sidecars (--previous_dataset): one split's
SPLIT.sources.jsonl.gz -> (key, PreviousRecord) of each line, and a tally of
the sidecars damage cut short (dataset_info.json reuse.sidecars_cut_short)."""

from __future__ import annotations

import gzip
import logging
from typing import NamedTuple
from typing import Optional
import zlib

import apache_beam as beam

from transforms import filesystem
from transforms.beam_util import TALLIES
from transforms.beam_util import counter
from transforms.buckets import KEY_BUCKETS
from transforms.buckets import BufferByBucketFn
from transforms.buckets import bucket_of
from transforms.buckets import row_bytes
from transforms.core import reuse


class Sidecar(NamedTuple):
  """One split's sidecar in the previous dataset, and the shards it indexes."""
  split: str
  path: str
  shard_paths: tuple
  compressed: bool
  version: int = 2  # its sources_format_version
  num_records: Optional[int] = None  # the split's records (dataset_info.json): one line each


def read_sidecar(sidecar: Sidecar, cut_short: Optional[list] = None):
  """A previous sidecar -> (key, PreviousRecord) of each line. A line that
  does not parse, or a file cut short, ends its records there: the rows they
  would have served are encoded (counted under sidecar_lines_unread), and the
  sidecar's path is appended to `cut_short`, for the run's output to say so:
  a damaged sidecar must not pass for hundreds of new images."""
  files = filesystem.FileAccess()
  try:
    trusted = _trusted_bytes(files, sidecar.path)
    shard_paths, read, lines = list(sidecar.shard_paths), 0, 0
    with files.open_checked(sidecar.path) as stream:
      for line in reuse.read_lines(stream):
        read += len(line)
        if trusted is not None and read > trusted:
          raise ValueError(f'its gzip check fails: no line past byte {trusted} trusted')
        lines += 1
        yield reuse.parse_line(line, sidecar.split, shard_paths, sidecar.compressed,
                               sidecar.version)
    if sidecar.num_records is not None and lines < sidecar.num_records:
      # emptied, or cut at a line's end and compressed whole again: no gzip
      # check fails, yet the rows past the cut are not in it
      raise ValueError(f'{lines} line(s) for {sidecar.num_records} records')
  except (ValueError, EOFError, OSError, zlib.error) as error:
    counter('sidecar_lines_unread').inc()
    logging.warning('%s cannot be read past a damaged line: %s', sidecar.path, error)
    if cut_short is not None:
      cut_short.append(sidecar.path)


_CHECK_CHUNK = 1 << 20  # uncompressed bytes read at a time by _trusted_bytes


def _trusted_bytes(files: filesystem.FileAccess, path: str) -> Optional[int]:
  """How much of a sidecar's text can be trusted, read once through before
  any line is used: None, all of it (its gzip CRC and length check); the bytes
  before the cut of a file cut short (what was written); 0 for a bad gzip. A
  flipped byte may garble lines into other valid JSON (a scrambled SHA-256)
  and be found only by the CRC at the end: trusting the lines before it, a
  run copied records under the garbled values and put rows of --split_by
  content in the wrong split. The second read costs a few ms a 12,000-line
  sidecar."""
  read = 0
  try:
    with files.open_checked(path) as stream:
      # read1: what is inflated so far comes out before a cut raises EOFError
      # (read(n) dropped the chunk it held: a cut sidecar under 1 MiB was
      # trusted for nothing)
      read_some = getattr(stream, 'read1', stream.read)
      while chunk := read_some(_CHECK_CHUNK):
        read += len(chunk)
  except EOFError:  # cut short: the text before the cut is what was written
    return read
  except (gzip.BadGzipFile, zlib.error):  # a bad CRC or length, bad deflate data
    return 0
  return None


def cut_short_tally(count: int = 1) -> beam.pvalue.TaggedOutput:
  """The tally of `count` sidecars damage cut short (reuse.sidecars_cut_short)."""
  return beam.pvalue.TaggedOutput(TALLIES, ((reuse.TALLY, reuse.SIDECARS_CUT_SHORT), count))


class ReadSidecarFn(BufferByBucketFn):
  """Sidecar -> (bucket, [(key, PreviousRecord), ...]) as
  buffer_by_key(read_sidecar) gives them, and to TALLIES one
  SIDECARS_CUT_SHORT for a sidecar cut short. Each sidecar is one element, so
  it is counted by the one bundle that read it, whichever worker: a retried
  bundle's outputs (tallies included) are discarded, unlike a Beam counter's
  attempts."""

  def __init__(self, buckets: int = KEY_BUCKETS):
    super().__init__(
        lambda sidecar, cut_short: [(bucket_of(key, buckets), (key, record))
                                    for key, record in read_sidecar(sidecar, cut_short)],
        lambda key_record: row_bytes(key_record[1]))

  def process(self, sidecar, *side_inputs):
    cut_short = []
    yield from super().process(sidecar, cut_short)
    if cut_short:
      yield cut_short_tally()
