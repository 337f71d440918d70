"""Writing a dataset: TFRecord shards per split, rejected rows, dataset_info.json."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import filesystem
from transforms.core import dataset_info
from transforms.core import tally
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import LABEL_MAP
from transforms.core.spec import REJECTED_FILE
from transforms.core.spec import SHARD_TEMPLATE


class _WriteToTFRecordCapped(beam.io.WriteToTFRecord):
  """WriteToTFRecord whose per-bundle shards roll over at a byte size.

  Beam's file sink supports the cap but WriteToTFRecord does not expose it;
  it applies only with num_shards=0, where shards are written per bundle
  without a GroupByKey of the records.
  """

  def __init__(self, *args, max_bytes_per_shard=None, **kwargs):
    super().__init__(*args, **kwargs)
    self._sink.max_bytes_per_shard = max_bytes_per_shard
    # A split with no example gets no shard (and Beam's S3 writer cannot
    # create a 0-byte object: apache/beam#21427).
    self._sink.skip_if_empty = True


class WriteShards(beam.PTransform):
  """Serialized Examples -> `PREFIX-00000-of-0000N.tfrecord[.gz]` files.

  num_shards=0: written per bundle, rolled over at max_bytes_per_shard (memory
  stays flat). num_shards=N: exactly N shards, through a GroupByKey.
  Out: the final shard paths.
  """

  def __init__(self, file_path_prefix: str, suffix: str, compression: str,
               num_shards: int = 0, max_bytes_per_shard: int | None = None):
    super().__init__()
    self._prefix = file_path_prefix
    self._suffix = suffix
    self._compression = (CompressionTypes.GZIP if compression == 'gzip'
                         else CompressionTypes.UNCOMPRESSED)
    self._num_shards = num_shards
    self._max_bytes = max_bytes_per_shard if not num_shards else None

  def expand(self, serialized):
    return serialized | 'WriteToTFRecord' >> _WriteToTFRecordCapped(
        self._prefix,
        file_name_suffix=self._suffix,
        num_shards=self._num_shards,
        shard_name_template=SHARD_TEMPLATE,
        compression_type=self._compression,
        max_bytes_per_shard=self._max_bytes)


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

  def process(self, _, shard_paths, tally_sums, label_map, rejected_files):
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
        label_rows_rejected=counts.label_rows_rejected)
    filesystem.write_text(
        filesystem.join(self._output_dir, LABEL_MAP), label_map.to_text())
    filesystem.write_text(
        filesystem.join(self._output_dir, DATASET_INFO),
        json.dumps(info, indent=2, ensure_ascii=False) + '\n')
    yield info
