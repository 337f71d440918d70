"""What inspect reads of a dataset in one pass over a split: the records per
label and a uniform random sample of them (per class with --per_class),
decoded for the pictures."""

from __future__ import annotations

import dataclasses
import gzip
import os
import random
import zlib

from pipeline.looking import report
from pipeline.looking.look_detection import sample_objects
from pipeline.reading import dataset
from transforms.core import file_kinds
from transforms.core import paths
from transforms.core import records
from transforms.core import side_files
from transforms.core.decoders import RecordError
from transforms.core.store_errors import store_refused
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import read_records_skipping


class Reservoir:
  """A uniform random sample of k items per group, in one pass (algorithm R)."""

  def __init__(self, k: int, rng: random.Random):
    self._k = k
    self._rng = rng
    self._seen = {}
    self._kept = {}

  def offer(self, group, item) -> None:
    seen = self._seen.get(group, 0)
    kept = self._kept.setdefault(group, [])
    if seen < self._k:
      kept.append(item)
    else:
      slot = self._rng.randrange(seen + 1)
      if slot < self._k:
        kept[slot] = item
    self._seen[group] = seen + 1

  def items(self) -> list:
    return [item for group in self._kept.values() for item in group]


SKIPPED_SHOWN = 10  # skipped records and shards listed per split; the rest counted


@dataclasses.dataclass
class Scan:
  """What one streaming pass over a split found."""
  counts: dict = dataclasses.field(default_factory=dict)  # {label: records}
  candidates: list = dataclasses.field(default_factory=list)  # [(shard, index, data)]
  skipped: list = dataclasses.field(default_factory=list)  # ['shard record i: why']
  num_records: int = 0


def _gzipped_by_content(path: str) -> bool:
  """A local file not named .gz that is gzip (TensorFlow's GZIP TFRecordWriter
  adds no .gz), told as validate tells a shard (side_files.gzip_by_content)."""
  if path.endswith('.gz') or paths.is_remote(path) or file_kinds.not_regular(path):
    return False
  with open(path, 'rb') as handle:
    return side_files.gzip_by_content(handle.read(side_files.HEAD_BYTES))


def present(path: str) -> bool:
  """Whether the file is there: local, or an object on gs:// or s3:// (where
  os.path.exists said no: an s3 dataset's report said "Not validated yet")."""
  if not paths.is_remote(path):
    return os.path.exists(path)
  from transforms import filesystem  # imports Beam: only for gs://, s3://
  return filesystem.FileAccess().exists(path)


def records_of(path: str, skipped: list, by_content: bool = False):
  """(index, data) of every readable record of `path`; damage goes to skipped.
  by_content (--files: TFRecords convert did not write): gzip told by content."""
  shard = os.path.basename(path)
  try:
    opened = (gzip.open(path, 'rb') if by_content and _gzipped_by_content(path)
              else dataset.open_binary(path))
    with opened as stream:
      for index, data in read_records_skipping(stream):
        if isinstance(data, ShardError):
          skipped.append(f'{shard} record {index}: {data.detail}')
        else:
          yield index, data
  except (EOFError, OSError, zlib.error) as error:  # a cut-off .gz, bad deflate data, unreadable
    kind = 'damaged gzip data' if isinstance(error, zlib.error) else type(error).__name__
    skipped.append(f'{shard}: {kind}: {error}')
  except ShardError as error:  # a folder or FIFO in a shard's place: it was a traceback
    skipped.append(f'{shard}: {error.detail}')
  except Exception as error:  # the store's error reading it (S3 5xx, a body cut off): it was a traceback
    words = store_refused(error)
    if not words:
      raise
    skipped.append(f'{shard}: {words}')


def _label_ids(label) -> list:
  """A record's label ids as a list: one, or a --multi_label record's several."""
  return [label] if isinstance(label, int) else [int(i) for i in label]


def scan_split(input_dir: str, info: dict, split: str, sample_size: int, per_class: bool,
               seed: int) -> Scan:
  """One pass over a split: label counts, and a reproducible sample of
  sample_size records (per class with per_class)."""
  scan = Scan()
  reservoir = Reservoir(sample_size, random.Random(f'{seed}:{split}'))
  to_example = records.ExampleDecoder(info, decode=False)
  read, unfit = 0, 0  # records read whole, examples or not; those no example
  for path in dataset.shard_paths(input_dir, info, split):
    shard = os.path.basename(path)
    for index, data in records_of(path, scan.skipped):
      read += 1
      try:
        example = to_example(data)
      except RecordError as error:
        scan.skipped.append(f'{shard} record {index}: {error}')
        unfit += 1
        continue
      labels = _label_ids(example['label'])
      for label in labels:
        scan.counts[label] = scan.counts.get(label, 0) + 1
      scan.num_records += 1
      if sample_size:
        # per class, a --multi_label record or a detection image is offered to
        # each of its classes: under its first label alone, a class that never
        # came first (a YOLO image's second object) had no sample at all
        for group in (dict.fromkeys(labels) or [None]) if per_class else [None]:
          reservoir.offer(group, (shard, index, data))
  declared = info['splits'][split].get('num_examples')
  if declared is not None and read != declared and len(scan.skipped) == unfit:
    # No damage found, yet another count: a shard cut at a record's end reads
    # as a whole shard of fewer records (read.examples raises count_mismatch).
    scan.skipped.append(f'{read} record(s) read, dataset_info.json says {declared}: a '
                        f'shard was cut short or replaced (validate names it)')
  # a record drawn for two of its classes is exported once
  scan.candidates = sorted({c[:2]: c for c in reservoir.items()}.values(), key=lambda c: (
      info['splits'][split]['shards'].index(c[0]), c[1]))
  return scan


def skipped_lines(scans: dict) -> tuple:
  """(['split: why'] of the first SKIPPED_SHOWN skipped of each split, then a
  line of how many more; how many were skipped in all). A shard of another
  dataset (raw images of another size) printed a line per record: 30,000
  lines on the terminal and the page for a shard of 30,000 records."""
  lines = [line for split, scan in scans.items() for line in capped(scan.skipped, f'{split}: ')]
  return lines, sum(len(scan.skipped) for scan in scans.values())


def capped(skipped: list, prefix: str = '') -> list:
  """The first SKIPPED_SHOWN lines, each after prefix, then how many more."""
  more = [f'... and {len(skipped) - SKIPPED_SHOWN} more skipped'
          ] if len(skipped) > SKIPPED_SHOWN else []
  return [prefix + line for line in skipped[:SKIPPED_SHOWN] + more]


def decode_samples(split: str, scan: Scan, info: dict) -> list:
  """The sampled records decoded; one that does not decode is skipped (reported)."""
  samples = []
  to_example = records.ExampleDecoder(info)
  for shard, index, data in scan.candidates:
    try:
      example = to_example(data)
    except RecordError as error:
      scan.skipped.append(f'{shard} record {index}: {error}')
      continue
    label, class_text = example['label'], example['class_text']
    if not isinstance(label, int):  # --multi_label: ids as 1+2, texts as 'cat, dog'
      label, class_text = '+'.join(map(str, _label_ids(label))), ', '.join(class_text)
    samples.append(report.Sample(split, shard, index, example['key'] or f'{shard}#{index}',
                                 label, class_text, example['image'],
                                 sample_objects(example)))
  return samples
