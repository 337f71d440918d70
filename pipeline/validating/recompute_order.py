"""validate --recompute: the record order sink.record_order 'manifest'
(--shuffle off) promises, checked against the run's manifest read again.
Such a dataset's records are in manifest order: each shard's in the order
of their rows, and with --num_shards N the record of rank r in shard r % N
as its record r // N. Nothing in the records or their sidecar says a row's
line, so records swapped within or across shards, their index and sidecar
lines made to match, passed every check, --recompute 1.0 too (each record
is still its row's); a reader that does not shuffle (evaluation predictions
matched to the manifest by position) got them in the wrong order."""

from __future__ import annotations

import os

from pipeline.configuration import configs
from pipeline.validating import recompute_sources
from transforms.core.side_files import WRONG_RECORD_ORDER
from transforms.core.side_files import fixed_num_shards
from transforms.core.validation import Problem


def checks_order(info: dict, config, as_read: bool) -> bool:
  """Whether the manifest order can be checked: dataset_info.json says
  'manifest', the run read one manifest file by line (no --label_manifest,
  no --image_dir), and it is unchanged since the run (as_read). A row's
  place is then its line, as recompute reads it (a pattern's files,
  Parquet rows and WebDataset samples are placed otherwise)."""
  sink = info.get('sink')
  manifests = config.manifests
  return (isinstance(sink, dict) and sink.get('record_order') == 'manifest' and as_read
          and len(manifests) == 1 and manifests[0].fmt not in recompute_sources.NOT_BY_LINE
          and len(configs.manifest_paths(manifests[0])) == 1)


def order_problems(info: dict, sampled: list, rows: dict) -> list:
  """The sampled records ((split, key, PreviousRecord)) whose rows (`rows`:
  {key: ManifestRow}) are known, against manifest order: one
  wrong_record_order a shard at its first sampled record whose row comes
  before the one of the sampled record before it; with --num_shards N and
  a split sampled whole, one a split at its first record out of the place
  round robin deals it."""
  by_split = {}
  for split, key, record in sampled:
    if key in rows:
      by_split.setdefault(split, []).append(
          ((rows[key].place, key), os.path.basename(record.shard_path), record.ordinal))
  problems = []
  for split, places in sorted(by_split.items()):
    problems += _shard_order(places)
    declared = info['splits'][split]
    if not problems and len(places) == declared.get('num_examples'):
      problems += _placement(split, declared['shards'], places, fixed_num_shards(info))
  return problems


_PROMISE = ("dataset_info.json's sink.record_order says 'manifest' (--shuffle off: "
            'records in the order of their rows)')


def _shard_order(places: list) -> list:
  problems, shards = [], {}
  for place in places:
    shards.setdefault(place[1], []).append(place)
  for shard, records in sorted(shards.items()):
    records.sort(key=lambda place: place[2])
    for before, here in zip(records, records[1:]):
      if here[0] < before[0]:
        problems.append(Problem(WRONG_RECORD_ORDER, shard, here[2], (
            f'record {here[2]} (key {here[0][1]!r}, line {here[0][0]} of the manifest) comes '
            f'after record {before[2]} (key {before[0][1]!r}, line {before[0][0]}): '
            + _PROMISE)))
        break
  return problems


def _placement(split: str, shards: list, places: list, num_shards: int) -> list:
  if not num_shards or len(shards) != num_shards:
    return []
  for rank, (order, shard, ordinal) in enumerate(sorted(places)):
    expected = (shards[rank % num_shards], rank // num_shards)
    if (shard, ordinal) != expected:
      return [Problem(WRONG_RECORD_ORDER, shard, ordinal, (
          f'record {ordinal} (key {order[1]!r}, line {order[0]} of the manifest) is record '
          f'{rank} of split {split!r} in manifest order, which --num_shards {num_shards} '
          f'deals to {expected[0]} as its record {expected[1]}: ' + _PROMISE))]
  return []
