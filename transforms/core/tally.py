"""Every count dataset_info.json reports, as one keyed sum.

Each step that counts emits (tally key, 1); a single CombinePerKey adds them
up, so the counts cost one small stage instead of one per count.
"""

from __future__ import annotations

from typing import NamedTuple

from transforms.core.rejects import Rejection

_LINES = 'lines'
_EXAMPLES = 'examples'
_REJECTED = 'rejected'
_SKIPPED = 'skipped'


def lines_key(is_label_manifest: bool) -> tuple:
  """Lines (or listed files) read from the image or the label manifest."""
  return (_LINES, is_label_manifest)


def skipped_key() -> tuple:
  """Files below --image_dir skipped for their extension (not rows)."""
  return (_SKIPPED,)


def example_key(split: str) -> tuple:
  return (_EXAMPLES, split)


def rejection_key(rejection: Rejection) -> tuple:
  return (_REJECTED, rejection.stage, rejection.code, rejection.counts_as_row)


class Counts(NamedTuple):
  """The summed tallies, read back by name."""
  manifest_rows: int
  label_manifest_rows: int
  examples: dict  # split -> examples
  rejected: dict  # 'stage/code' -> image-manifest rows rejected
  label_rows_rejected: dict  # 'stage/code' -> label-manifest rows rejected
  skipped_files: int = 0  # --image_dir files that are not images by name


def read_counts(sums: dict) -> Counts:
  """{tally key: sum} -> Counts (absent keys are 0)."""
  examples, rejected, label_rows_rejected = {}, {}, {}
  for key, count in sums.items():
    if key[0] == _EXAMPLES:
      examples[key[1]] = count
    elif key[0] == _REJECTED:
      _, stage, code, counts_as_row = key
      into = rejected if counts_as_row else label_rows_rejected
      into[f'{stage}/{code}'] = into.get(f'{stage}/{code}', 0) + count
  return Counts(sums.get(lines_key(False), 0), sums.get(lines_key(True), 0),
                examples, rejected, label_rows_rejected, sums.get(skipped_key(), 0))
