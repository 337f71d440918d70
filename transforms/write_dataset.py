"""Writing a dataset: TFRecord shards per split, rejected rows, dataset_info.json."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.tfrecordio import _TFRecordSink

from transforms import filesystem
from transforms.core import dataset_info
from transforms.core import tally
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import INDEX_SUFFIX
from transforms.core.spec import LABEL_MAP
from transforms.core.spec import REJECTED_FILE
from transforms.core.spec import SHARD_TEMPLATE


class _WriteToTFRecordCapped(beam.io.WriteToTFRecord):
  """WriteToTFRecord whose per-bundle shards roll over at a byte size.

  Beam's file sink supports the cap but WriteToTFRecord does not expose it;
  it applies only with num_shards=0, where shards are written per bundle
  without a GroupByKey of the records. write_index: `<shard>.index` files too.
  """

  def __init__(self, *args, max_bytes_per_shard=None, write_index=False, **kwargs):
    super().__init__(*args, **kwargs)
    if write_index:
      self._sink.__class__ = _IndexingTFRecordSink  # same state, the indexing methods
    self._sink.max_bytes_per_shard = max_bytes_per_shard
    # A split with no example gets no shard (and Beam's S3 writer cannot
    # create a 0-byte object: apache/beam#21427).
    self._sink.skip_if_empty = True


class _IndexingHandle:
  """A shard's file handle that notes where each record starts and how long it
  is (header + data + footer), as the bytes pass through."""

  def __init__(self, handle, temp_path: str):
    self.handle = handle
    self.temp_path = temp_path
    self.position = 0
    self.lines = []

  def write(self, data: bytes) -> None:
    self.handle.write(data)
    self.position += len(data)

  def flush(self) -> None:
    self.handle.flush()

  def close(self) -> None:
    self.handle.close()


class _IndexingTFRecordSink(_TFRecordSink):
  """Beam's TFRecord sink, also writing `<shard>.index` beside each
  uncompressed shard: one `offset length` line per record (the format of the
  tfrecord package's and DALI's index tools), from the offsets seen while
  writing, so no second pass over the shard.

  The index is written next to the shard's temp file on close and renamed with
  it in finalize: Beam names shard i of n after the i-th of its sorted temp
  files (FileBasedSink.finalize_windowed_write); the index follows that map.
  """

  def open(self, temp_path):
    return _IndexingHandle(super().open(temp_path), temp_path)

  def write_encoded_record(self, file_handle, value):
    start = file_handle.position
    super().write_encoded_record(file_handle, value)
    file_handle.lines.append(f'{start} {file_handle.position - start}\n')

  def close(self, file_handle):
    super().close(file_handle)
    with FileSystems.create(file_handle.temp_path + INDEX_SUFFIX) as index:
      index.write(''.join(file_handle.lines).encode('ascii'))

  def finalize_windowed_write(self, init_result, writer_results, pre_finalize_results,
                              w=None):
    ordered = sorted(writer_results)
    for shard_num, temp_path in enumerate(ordered):
      index = temp_path + INDEX_SUFFIX
      if FileSystems.exists(index):  # absent: renamed by an earlier attempt
        final = self._get_final_name(shard_num, len(ordered), w) + INDEX_SUFFIX
        if FileSystems.exists(final):
          FileSystems.delete([final])
        FileSystems.rename([index], [final])
    yield from super().finalize_windowed_write(init_result, writer_results,
                                               pre_finalize_results, w)


class WriteShards(beam.PTransform):
  """Serialized Examples -> `PREFIX-00000-of-0000N.tfrecord[.gz]` files.

  num_shards=0: written per bundle, rolled over at max_bytes_per_shard (memory
  stays flat). num_shards=N: exactly N shards, through a GroupByKey.
  write_index: an `<shard>.index` beside each (uncompressed) shard.
  Out: the final shard paths.
  """

  def __init__(self, file_path_prefix: str, suffix: str, compression: str,
               num_shards: int = 0, max_bytes_per_shard: int | None = None,
               write_index: bool = False):
    super().__init__()
    self._prefix = file_path_prefix
    self._suffix = suffix
    self._compression = (CompressionTypes.GZIP if compression == 'gzip'
                         else CompressionTypes.UNCOMPRESSED)
    self._num_shards = num_shards
    self._max_bytes = max_bytes_per_shard if not num_shards else None
    if write_index and compression == 'gzip':
      raise ValueError('gzip shards cannot be indexed (offsets are in the compressed stream)')
    self._write_index = write_index

  def expand(self, serialized):
    return serialized | 'WriteToTFRecord' >> _WriteToTFRecordCapped(
        self._prefix,
        file_name_suffix=self._suffix,
        num_shards=self._num_shards,
        shard_name_template=SHARD_TEMPLATE,
        compression_type=self._compression,
        max_bytes_per_shard=self._max_bytes,
        write_index=self._write_index)


@beam.ptransform_fn
def WriteRejected(rejections, output_dir: str):  # pylint: disable=invalid-name
  """Rejection -> OUT/rejected.jsonl (one JSON object per line; empty if none)."""
  return (rejections
          | 'ToJson' >> beam.Map(lambda r: r.to_json())
          | 'WriteJsonl' >> beam.io.WriteToText(
              filesystem.join(output_dir, REJECTED_FILE), shard_name_template='',
              # Object stores: only when a row was rejected (no 0-byte objects).
              skip_if_empty='://' in output_dir))


def shard_sizes(paths: list) -> dict:
  if not paths:
    return {}
  results = FileSystems.match(paths)
  return {m.path: m.size_in_bytes for r in results for m in r.metadata_list}


class WriteInfoFn(beam.DoFn):
  """Runs once, after every shard and reject file exists: writes the label map
  and, last, dataset_info.json. Splits that got no example (and so, with
  skip_if_empty, no shard) are left out."""

  def __init__(self, output_dir: str, split_names: tuple, has_label_manifest: bool,
               settings: dataset_info.InfoSettings):
    self._output_dir = output_dir
    self._split_names = split_names
    self._has_label_manifest = has_label_manifest
    self._settings = settings

  def process(self, _, shard_paths, tally_sums, label_map, rejected_files,
              skipped_files=None):
    """skipped_files: with --image_dir, the first skipped file names."""
    del rejected_files  # only orders this step after the reject file is written
    counts = tally.read_counts(tally_sums)
    splits = {}
    for split in self._split_names:
      paths = sorted(p for s, p in shard_paths if s == split)
      count = counts.examples.get(split, 0)
      if not count:
        continue
      sizes = shard_sizes(paths)
      splits[split] = {
          'num_examples': count,
          'num_bytes': sum(sizes.values()),
          'shards': [filesystem.basename(p) for p in paths],
      }
    info = dataset_info.build_info(
        self._settings, label_names=list(label_map.names), splits=splits,
        num_manifest_rows=counts.manifest_rows, rejected=counts.rejected,
        num_label_rows=counts.label_manifest_rows if self._has_label_manifest else None,
        label_rows_rejected=counts.label_rows_rejected,
        skipped=None if skipped_files is None else (counts.skipped_files, skipped_files))
    filesystem.write_text(
        filesystem.join(self._output_dir, LABEL_MAP), label_map.to_text())
    filesystem.write_text(
        filesystem.join(self._output_dir, DATASET_INFO),
        json.dumps(info, indent=2, ensure_ascii=False) + '\n')
    yield info
