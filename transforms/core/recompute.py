"""validate --recompute N: which records are converted again from their
sources, and what differs between a record and its source converted again.
Plain functions."""

from __future__ import annotations

import hashlib
import math

from google.protobuf.message import DecodeError

from transforms.core.example_proto import parse_example
from transforms.core.validation import Problem

RECOMPUTE_MISMATCH = 'recompute_mismatch'  # a problem: same source, other bytes
# a problem: a manifest unchanged since the run holds other rows than counted
ROW_COUNT = 'recompute_row_count'
SOURCE_CHANGED = 'recompute_source_changed'  # a warning: the source changed or is gone
# a warning: another version of img2tfrecord encoded the record (its options
# digest, which holds the version of the pixels' code, is not this one's)
OTHER_VERSION = 'recompute_other_version'
# The warnings of a sampled record not compared, and what the summary says of each.
SKIPPED = {SOURCE_CHANGED: 'their source changed since the run or is gone',
           OTHER_VERSION: 'another version of img2tfrecord encoded them'}

# What a difference in these features is called in a finding.
_NAMED = {'image/encoded': 'image bytes', 'img_raw': 'image bytes',
          'image/class/label': 'label', 'image/class/text': 'label', 'label': 'label'}


def how_many(amount, total: int) -> int:
  """--recompute N of `total` records: an int, that many (at most all); a
  float, that fraction, rounded up (1.0: all)."""
  if isinstance(amount, float):
    return min(total, math.ceil(amount * total))
  return min(total, amount)


def sample(entries: list, amount) -> list:
  """The records to convert again: entries ((split, key, ...) tuples) in the
  order of the SHA-256 of split and key, the first how_many(amount). The same
  dataset and N give the same sample on every run; no order the writer chose
  (shards, shuffling) decides which."""
  def order(entry):
    return hashlib.sha256(f'{entry[0]}/{entry[1]}'.encode()).digest()
  return sorted(entries, key=order)[:how_many(amount, len(entries))]


def in_shard_order(sampled: list, reader):
  """(index, entry) of the sampled (split, key, PreviousRecord)s by shard and
  offset, `reader` (a copies.ShardReader) closed as each shard is done: one
  shard open at a time, a gzip shard inflated once. In the sample's order
  (by SHA-256) the reader kept every shard open: a dataset of 2,000 shards
  at ulimit -n 1,024 had its sources then fail to open, each a false
  recompute_mismatch (`Too many open files`), and validate exit 1. The
  caller reports the findings in the sample's order (by index)."""
  current = None
  for index in sorted(range(len(sampled)),
                      key=lambda i: (sampled[i][2].shard_path, sampled[i][2].offset)):
    shard = sampled[index][2].shard_path
    if shard != current:
      reader.close()
      current = shard
    yield index, sampled[index]


def in_sample_order(found_at: list, problems: list, warnings: list) -> None:
  """Each sampled record's ([problems], [warnings]), kept by index, added in
  the sample's order (in_shard_order)."""
  for mine, theirs in found_at:
    problems.extend(mine)
    warnings.extend(theirs)


def differences(expected: dict, found: dict) -> list:
  """What differs between two parsed Examples ({name: (kind, values)}):
  'image bytes', 'label', or 'feature NAME', each once, in name order."""
  named = []
  for name in sorted(set(expected) | set(found)):
    if expected.get(name) != found.get(name):
      what = _NAMED.get(name, f'feature {name}')
      if what not in named:
        named.append(what)
  return named


def record_differences(found: bytes, expected: bytes, split: str, converted_split: str,
                       giver: str) -> list:
  """What differs between a record as read (`found`, in `split`) and its
  source converted again (`expected`, in `converted_split`): differences(),
  'the bytes (every feature the same)' when only the bytes do (a field
  Example does not have appended, a feature map in another order: readers
  see the same values, but the run did not write these bytes), and the split
  (giver: what gave it, 'its row gives')."""
  differ = [] if found == expected else differences(
      parse_example(expected), _parsed(found)) or ['the bytes (every feature the same)']
  if converted_split != split:
    differ.append(f'split ({split}, {giver} {converted_split})')
  return differ


def _parsed(data: bytes) -> dict:
  """The record's features; none (every feature differs) when it is no Example."""
  try:
    return parse_example(data)
  except DecodeError:
    return {}


def add_finding(found, where: tuple, key: str, problems: list, warnings: list) -> None:
  """A sampled record's finding ((kind, what), or None: the same bytes) to
  the warnings (SKIPPED: not compared) or the problems; where: (shard, record)."""
  if found is not None:
    (warnings if found[0] in SKIPPED else problems).append(
        Problem(found[0], *where, f'key {key!r}: {found[1]}'))


def findings(problems: list, warnings: list, sampled: int) -> tuple:
  """(problems, warnings, records compared, records skipped) of `sampled` records."""
  skipped = sum(1 for warning in warnings if warning.kind in SKIPPED)
  return problems, warnings, sampled - skipped, skipped
