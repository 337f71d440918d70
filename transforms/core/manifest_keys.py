"""One key of a manifest: of the rows that share it, the one kept (the first
by file and line) and the others rejected as duplicates; with a label
manifest, its label joined to the image row. Plain functions over the rows
manifest.py parses."""

from __future__ import annotations

import dataclasses
from typing import Optional

from transforms.core.manifest import ManifestRow
from transforms.core.rejects import STAGE_DUPLICATE
from transforms.core.rejects import STAGE_LABEL
from transforms.core.rejects import STAGE_LABEL_MANIFEST


def line_of(kept: ManifestRow, other: ManifestRow) -> str:
  """'line N' of `kept`, naming its file when `other` is from another of its files."""
  return f'line {kept.line}' + (f' of {kept.source}' if kept.source != other.source else '')


def split_conflict(kept: ManifestRow, row: ManifestRow) -> str:
  """', in split ... where this line's is ...' when the row kept (for a key,
  or a content with --dedupe content) is in another split than `row`, the
  duplicate rejected: that split loses the row (a copy of the image would
  otherwise have leaked across the two), and the rejection named neither
  split, the summary only duplicate_key or duplicate_content. '' when both
  are in one split."""
  if kept.split == row.split:
    return ''
  return f", in split {kept.split!r} where this line's is {row.split!r} (not written to {row.split!r})"


def resolve_key(key: str, image_rows: list, label_rows: list,
                joined: bool) -> tuple[Optional[ManifestRow], list]:
  """Keeps one row per key (the first by line) and joins its label.

  Returns (row or None, rejections). With `joined`, labels come from the
  label manifest's rows for this key.
  """
  rejections = []
  images = sorted(image_rows, key=lambda r: (r.source, r.line))
  kept = images[0] if images else None
  for duplicate in images[1:]:
    rejections.append(duplicate.reject(STAGE_DUPLICATE, 'duplicate_key',
                                       f'duplicate key {key!r}: kept {line_of(kept, duplicate)}'
                                       f'{split_conflict(kept, duplicate)}'))
  if not joined:
    return kept, rejections
  labels = sorted(label_rows, key=lambda r: (r.source, r.line))
  for duplicate in labels[1:]:
    rejections.append(duplicate.reject(
        STAGE_LABEL_MANIFEST, 'duplicate_key',
        f'duplicate key {key!r} in the label manifest: kept '
        f'{line_of(labels[0], duplicate)}',
        counts_as_row=False))
  if kept is None:
    if labels:
      rejections.append(labels[0].reject(
          STAGE_LABEL_MANIFEST, 'no_image',
          f'no row in the image manifest has key {key!r}', counts_as_row=False))
    return None, rejections
  if not labels:
    rejections.append(kept.reject(
        STAGE_LABEL, 'no_label', f'no row in the label manifest has key {key!r}'))
    return None, rejections
  return dataclasses.replace(kept, label=labels[0].label,
                             label_padded=labels[0].label_padded), rejections
