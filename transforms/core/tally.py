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
_LABEL_ROWS = 'label_rows'
_PADDED_LABELS = 'padded_labels'
# dataset_info.json lists this many names of skipped files (the first by
# name): --image_dir's skipped_files, VOC's detection.skipped_unlisted.
SHOWN_SKIPPED_FILES = 10


def lines_key(is_label_manifest: bool) -> tuple:
  """Lines (or listed files) read from the image or the label manifest."""
  return (_LINES, is_label_manifest)


def skipped_key() -> tuple:
  """Files below --image_dir skipped for their extension (not rows)."""
  return (_SKIPPED,)


def example_key(split: str, label_id=None) -> tuple:
  """label_id: an int, a multi-label example's tuple of ids, or None."""
  return (_EXAMPLES, split, label_id)


def label_keys(row) -> list:
  """A row's label as read (after normalisation), and whether its cell had
  surrounding spaces (stripped since ever: label_map.txt cannot hold them)."""
  texts = row.label if isinstance(row.label, tuple) else (row.label or '',)  # --multi_label
  keys = [(_LABEL_ROWS, text) for text in texts]
  if row.label_padded:
    keys += [(_PADDED_LABELS, text) for text in texts]
  return keys


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
  class_counts: dict = {}  # split -> {label id: examples}
  label_rows: dict = {}  # label text -> rows (before the label map)
  padded_labels: dict = {}  # label text -> rows whose cell had surrounding spaces


def read_counts(sums: dict) -> Counts:
  """{tally key: sum} -> Counts (absent keys are 0)."""
  examples, rejected, label_rows_rejected = {}, {}, {}
  class_counts, label_rows, padded_labels = {}, {}, {}
  for key, count in sums.items():
    if key[0] == _EXAMPLES:
      _, split, label_id = key
      examples[split] = examples.get(split, 0) + count
      per_class = class_counts.setdefault(split, {}) if label_id is not None else {}
      for one in label_id if isinstance(label_id, tuple) else (label_id,):
        per_class[one] = per_class.get(one, 0) + count
    elif key[0] == _LABEL_ROWS:
      label_rows[key[1]] = count
    elif key[0] == _PADDED_LABELS:
      padded_labels[key[1]] = count
    elif key[0] == _REJECTED:
      _, stage, code, counts_as_row = key
      into = rejected if counts_as_row else label_rows_rejected
      into[f'{stage}/{code}'] = into.get(f'{stage}/{code}', 0) + count
  return Counts(sums.get(lines_key(False), 0), sums.get(lines_key(True), 0),
                examples, rejected, label_rows_rejected, sums.get(skipped_key(), 0),
                class_counts, label_rows, padded_labels)
