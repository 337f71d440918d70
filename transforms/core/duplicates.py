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
from transforms.core.manifest_keys import split_conflict
from transforms.core.rejects import STAGE_DUPLICATE


# One row (or record) of a group of identical bytes. place: its place in
# manifest order (ManifestRow.place: across the files of a manifest pattern,
# files in path order), which orders copies before their line does: a line
# number counts within its file, so b.csv's line 2 is after a.csv's line 5
# (the copy --dedupe content keeps, keep_first_copy); 0: by line alone.
# label: its class name, a --multi_label row's tuple of them ('' for
# --schema detection, whose labels are its objects': never a conflict).
@dataclasses.dataclass(frozen=True)
class Copy:
  line: int
  key: str
  split: str
  place: int = 0
  label: object = ''


# Pairs, and copies under conflicting labels, listed in dataset_info.json
# (counts are always whole).
MAX_PAIRS = 10
MAX_CONFLICTS = 10


def label_set(label) -> object:
  """A label as two copies of one image compare it: one label as it is, a
  --multi_label row's labels as a set (the order of a cell's labels says
  nothing; a sidecar gives them as a list)."""
  return frozenset(label) if isinstance(label, (tuple, list)) else label


def content_report(sha256: str, copies: Iterable[Copy]) -> dict:
  """Copies of one content -> its report (as empty_report()): every copy
  after the first by line counted, `across` (a leak) when no earlier copy is
  in its own split, else within; and its first MAX_PAIRS pairs (_pair_order),
  each naming that earlier copy: the first copy of its split, or the first
  of all for a leak.

  Sorted by line, then one pass keeping the first copy of each split and at most
  MAX_PAIRS pairs: a placeholder image repeated 100,000 times is 100,000 steps,
  not a pair per copy each compared with every earlier copy.

  Label noise: each copy whose label (label_set) is not the first copy's
  (the one --dedupe content keeps) is counted in num_conflicting_labels, the
  first MAX_CONFLICTS of them (_conflict_order) listed with both labels;
  no more than 2 x MAX_CONFLICTS are held at once.
  """
  ordered = sorted(copies, key=_copy_order)
  report = empty_report()
  if len(ordered) < 2:
    return report
  first = ordered[0]
  first_in_split = {first.split: first}
  leaks, within = [], []  # (earlier, copy), each in line order
  first_label, conflicts = label_set(first.label), []
  for copy in ordered[1:]:
    if label_set(copy.label) != first_label:
      report['num_conflicting_labels'] += 1
      conflicts.append(copy)
      if len(conflicts) > 2 * MAX_CONFLICTS:  # memory stays flat
        conflicts = _first_conflicts(conflicts)
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
  report['conflicting_labels'] = [_conflict(sha256, first, copy)
                                  for copy in _first_conflicts(conflicts)]
  return report


def _first_conflicts(copies: list) -> list:
  return sorted(copies, key=lambda copy: (copy.line, copy.key))[:MAX_CONFLICTS]


def _conflict(sha256: str, first: Copy, duplicate: Copy) -> dict:
  return {'sha256': sha256, 'first': _labelled(first), 'duplicate': _labelled(duplicate)}


def _labelled(copy: Copy) -> dict:
  """_shown with its label: a --multi_label row's sorted (a set, as compared)."""
  label = copy.label
  return {**_shown(copy), 'label': sorted(label) if isinstance(label, (tuple, list)) else label}


def _copy_order(copy: Copy) -> tuple:
  return (copy.place, copy.line, copy.key, copy.split)


def _shown(copy: Copy) -> dict:
  return {'line': copy.line, 'key': copy.key, 'split': copy.split}


def _pair(sha256: str, first: Copy, duplicate: Copy, across: bool) -> dict:
  return {'sha256': sha256, 'first': _shown(first), 'duplicate': _shown(duplicate),
          'across': across}


def empty_report() -> dict:
  return {'num_within_split': 0, 'num_across_splits': 0, 'num_contents': 0,
          'pairs': [], 'num_conflicting_labels': 0, 'conflicting_labels': []}


def add_report(report: dict, other: dict) -> dict:
  """Adds `other`'s counts, pairs and conflicting labels to `report` (in
  place; returns it): the first MAX_PAIRS pairs and MAX_CONFLICTS conflicts of
  both, by an order of their own (what is listed is the same whatever order
  a runner adds the reports in)."""
  for name in ('num_within_split', 'num_across_splits', 'num_contents',
               'num_conflicting_labels'):
    report[name] += other[name]
  if other['pairs']:
    report['pairs'] = sorted(report['pairs'] + other['pairs'], key=_pair_order)[:MAX_PAIRS]
  if other['conflicting_labels']:
    report['conflicting_labels'] = sorted(
        report['conflicting_labels'] + other['conflicting_labels'],
        key=_conflict_order)[:MAX_CONFLICTS]
  return report


def merge_reports(reports) -> dict:
  merged = empty_report()
  for report in reports:
    add_report(merged, report)
  return merged


def _pair_order(pair: dict) -> tuple:
  """Pairs across splits first (the leaks), then by line."""
  return (not pair['across'], pair['duplicate']['line'], pair['duplicate']['key'])


def _conflict_order(conflict: dict) -> tuple:
  """By the line of the copy labelled otherwise (a key is on one row only)."""
  return (conflict['duplicate']['line'], conflict['duplicate']['key'])


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
                           f'{line_of(kept, row)}, key {kept.key!r}{_label_conflict(kept, row)}'
                           f'{split_conflict(kept, row)}: kept that line')
                for row in rows if row is not kept]


def _label_conflict(kept, row) -> str:
  """', labelled ... where this line says ...' when one image carries two
  labels (label noise a user preparing training data wants to see: the
  rejection named only the kept line); '' when the labels agree."""
  if label_set(kept.label) == label_set(row.label):  # ('a', 'b') and ('b', 'a') agree
    return ''
  return f', labelled {kept.label!r} where this line says {row.label!r} (conflicting labels)'

