"""Images whose bytes are identical under different keys: plain functions.

A copy of a file (`a.png` and `./a.png`, a relative and an absolute path, two
names) is two keys, so a key-based --split may put it in train and in test: a
leak a model can memorise. Convert finds such rows by the SHA-256 of each
source file; validate by `image/key/sha256` of each record.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
import dataclasses

from transforms.core.manifest_keys import line_of
from transforms.core.rejects import STAGE_DUPLICATE


# One row (or record) of a group of identical bytes. place: its place in
# manifest order (ManifestRow.place: across the files of a manifest pattern,
# files in path order), which orders copies before their line does: a line
# number counts within its file, so b.csv's line 2 is after a.csv's line 5
# (the copy --dedupe content keeps, keep_first_copy); 0: by line alone.
@dataclasses.dataclass(frozen=True)
class Copy:
  line: int
  key: str
  split: str
  place: int = 0


# Pairs listed in dataset_info.json (counts are always whole).
MAX_PAIRS = 10


def content_report(sha256: str, copies: Iterable[Copy]) -> dict:
  """Copies of one content -> its report (as empty_report()): every copy
  after the first by line counted, `across` (a leak) when no earlier copy is
  in its own split, else within; and its first MAX_PAIRS pairs (_pair_order),
  each naming that earlier copy: the first copy of its split, or the first
  of all for a leak.

  Sorted by line, then one pass keeping the first copy of each split and at most
  MAX_PAIRS pairs: a placeholder image repeated 100,000 times is 100,000 steps,
  not a pair per copy each compared with every earlier copy.
  """
  ordered = sorted(copies, key=_copy_order)
  report = empty_report()
  if len(ordered) < 2:
    return report
  first = ordered[0]
  first_in_split = {first.split: first}
  leaks, within = [], []  # (earlier, copy), each in line order
  for copy in ordered[1:]:
    earlier = first_in_split.get(copy.split)
    if earlier is None:
      first_in_split[copy.split] = copy
      report['num_across_splits'] += 1
      if len(leaks) < MAX_PAIRS:
        leaks.append((first, copy))
        if len(leaks) + len(within) > MAX_PAIRS:
          within.pop()  # a leak is listed before any copy within a split
    else:
      report['num_within_split'] += 1
      if len(leaks) + len(within) < MAX_PAIRS:
        within.append((earlier, copy))
  report['num_contents'] = 1
  report['pairs'] = ([_pair(sha256, earlier, copy, True) for earlier, copy in leaks]
                     + [_pair(sha256, earlier, copy, False) for earlier, copy in within])
  return report


def _copy_order(copy: Copy) -> tuple:
  return (copy.place, copy.line, copy.key, copy.split)


def _shown(copy: Copy) -> dict:
  return {'line': copy.line, 'key': copy.key, 'split': copy.split}


def _pair(sha256: str, first: Copy, duplicate: Copy, across: bool) -> dict:
  return {'sha256': sha256, 'first': _shown(first), 'duplicate': _shown(duplicate),
          'across': across}


def empty_report() -> dict:
  return {'num_within_split': 0, 'num_across_splits': 0, 'num_contents': 0,
          'pairs': []}


def add_report(report: dict, other: dict) -> dict:
  """Adds `other`'s counts and pairs to `report` (in place; returns it): the
  first MAX_PAIRS pairs of both."""
  for name in ('num_within_split', 'num_across_splits', 'num_contents'):
    report[name] += other[name]
  if other['pairs']:
    report['pairs'] = sorted(report['pairs'] + other['pairs'], key=_pair_order)[:MAX_PAIRS]
  return report


def merge_reports(reports) -> dict:
  merged = empty_report()
  for report in reports:
    add_report(merged, report)
  return merged


def _pair_order(pair: dict) -> tuple:
  """Pairs across splits first (the leaks), then by line."""
  return (not pair['across'], pair['duplicate']['line'], pair['duplicate']['key'])


def keep_first_copy(rows: list, usable: Callable = lambda row: True) -> tuple:
  """Rows with identical bytes -> (the first by manifest line that is
  `usable`, i.e. whose label resolves (--schema detection: whose file fits
  its annotation, annotations.copy_fits); the first of all if none is, [Rejection
  of every other as duplicate/duplicate_content]). A copy with a usable
  label is not lost to an earlier one rejected at the label stage, nor a
  detection copy to an earlier one rejected as size_mismatch or bad_box
  (all of them were rejected, the image in no record)."""
  rows = sorted(rows, key=lambda r: (r.source, r.line))
  kept = next((row for row in rows if usable(row)), rows[0])
  return kept, [row.reject(STAGE_DUPLICATE, 'duplicate_content',
                           f'same bytes (SHA-256 {row.content_sha256[:12]}...) as '
                           f'{line_of(kept, row)}, key {kept.key!r}{_label_conflict(kept, row)}: '
                           f'kept that line')
                for row in rows if row is not kept]


def _label_conflict(kept, row) -> str:
  """', labelled ... where this line says ...' when one image carries two
  labels (label noise a user preparing training data wants to see: the
  rejection named only the kept line); '' when the labels agree."""
  if kept.label == row.label:
    return ''
  return f', labelled {kept.label!r} where this line says {row.label!r} (conflicting labels)'

