"""Images whose bytes are identical under different keys: plain functions.

A copy of a file (`a.png` and `./a.png`, a relative and an absolute path, two
names) is two keys, so a key-based --split may put it in train and in test: a
leak a model can memorise. Convert finds such rows by the SHA-256 of each
source file; validate by `image/key/sha256` of each record.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses

from transforms.core.rejects import STAGE_DUPLICATE

# Pairs listed in dataset_info.json (counts are always whole).
MAX_PAIRS = 10


@dataclasses.dataclass(frozen=True, order=True)
class Copy:
  """One row (or record) of a group of identical bytes."""
  line: int
  key: str
  split: str


def duplicate_pairs(sha256: str, copies: list) -> list:
  """Copies of one content -> a pair dict for every copy after the first (by
  line): `across` when no earlier copy is in its own split."""
  copies = sorted(copies)
  pairs = []
  for i, copy in enumerate(copies[1:], 1):
    earlier = copies[:i]
    same_split = [c for c in earlier if c.split == copy.split]
    first = same_split[0] if same_split else earlier[0]
    pairs.append({'sha256': sha256, 'first': dataclasses.asdict(first),
                  'duplicate': dataclasses.asdict(copy), 'across': not same_split})
  return pairs


def empty_report() -> dict:
  return {'num_within_split': 0, 'num_across_splits': 0, 'num_contents': 0,
          'pairs': []}


def add_pairs(report: dict, pairs: list) -> dict:
  """Adds the pairs of one content to a report (in place; returns it)."""
  if not pairs:
    return report
  report['num_contents'] += 1
  for pair in pairs:
    report['num_across_splits' if pair['across'] else 'num_within_split'] += 1
  report['pairs'] = sorted(report['pairs'] + pairs, key=_pair_order)[:MAX_PAIRS]
  return report


def merge_reports(reports) -> dict:
  merged = empty_report()
  for report in reports:
    for name in ('num_within_split', 'num_across_splits', 'num_contents'):
      merged[name] += report[name]
    merged['pairs'] = sorted(merged['pairs'] + report['pairs'], key=_pair_order)[:MAX_PAIRS]
  return merged


def _pair_order(pair: dict) -> tuple:
  """Pairs across splits first (the leaks), then by line."""
  return (not pair['across'], pair['duplicate']['line'], pair['duplicate']['key'])


def keep_first_copy(rows: list, usable: Callable = lambda row: True) -> tuple:
  """Rows with identical bytes -> (the first by manifest line that is
  `usable`, i.e. whose label resolves; the first of all if none is,
  [Rejection of every other as duplicate/duplicate_content]). A copy with a
  usable label is not lost to an earlier one rejected at the label stage."""
  rows = sorted(rows, key=lambda r: (r.source, r.line))
  kept = next((row for row in rows if usable(row)), rows[0])
  return kept, [row.reject(STAGE_DUPLICATE, 'duplicate_content',
                           f'same bytes (SHA-256 {row.content_sha256[:12]}...) as line '
                           f'{kept.line}, key {kept.key!r}: kept that line')
                for row in rows if row is not kept]
