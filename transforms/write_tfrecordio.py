"""--sink tfrecordio: a split's Examples written by Beam's WriteToTFRecord."""

from __future__ import annotations

import fnmatch

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes

from transforms import filesystem
from transforms.core.spec import SHARD_NUMBERS_GLOBS


def _written_shards(_, prefix: str, suffix: str, reported: list, num_examples: int) -> list:
  """The shards WriteToTFRecord wrote: the names it reported, and those on
  disk (a retried finalize reports only the files it renamed itself). A
  split without examples gets no shard, as with the ordered sink: Beam's sink
  writes one empty shard for it, deleted here."""
  files = filesystem.FileAccess()
  patterns = [filesystem.basename(prefix) + numbers + suffix for numbers in SHARD_NUMBERS_GLOBS]
  shards = sorted(set(reported) | {
      path for path, _ in files.list(prefix)
      if any(fnmatch.fnmatchcase(filesystem.basename(path), p) for p in patterns)})
  if not num_examples and shards:
    files.delete(shards)
    return []
  return shards


class WriteTFRecordIO(beam.PTransform):
  """Batches of BuiltExamples of one split -> Beam's WriteToTFRecord shards,
  `PREFIX-00000-of-0000N.tfrecord[.gz]` (--sink tfrecordio).

  Records go in the order they reach the sink, which the runner decides:
  not the same bytes from run to run, no index files. num_shards=0: the
  runner chooses how many (one per bundle it writes); N: exactly N (Beam
  pads with empty shards). Beam writes in `beam-temp-<split>-<uuid>/` beside
  the shards and renames them when all are written.
  Out: the shard paths.
  """

  def __init__(self, file_path_prefix: str, suffix: str, compression: str,
               num_shards: int = 0):
    super().__init__()
    self._prefix = file_path_prefix
    self._suffix = suffix
    self._compression = (CompressionTypes.GZIP if compression == 'gzip'
                         else CompressionTypes.UNCOMPRESSED)
    self._num_shards = num_shards

  def expand(self, examples):
    side = beam.pvalue
    reported = (examples
                | 'Serialized' >> beam.FlatMap(lambda batch: [example.data for example in batch])
                | 'WriteToTFRecord' >> beam.io.WriteToTFRecord(
                    self._prefix, file_name_suffix=self._suffix,
                    num_shards=self._num_shards, compression_type=self._compression))
    count = (examples | 'Sizes' >> beam.Map(len)
             | 'Count' >> beam.CombineGlobally(sum))
    return (examples.pipeline
            | 'Once' >> beam.Impulse()
            | 'ListShards' >> beam.FlatMap(
                _written_shards, self._prefix, self._suffix, side.AsList(reported),
                side.AsSingleton(count)))
