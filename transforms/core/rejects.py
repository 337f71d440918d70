"""The rejection record and per-row errors: what every dead letter carries."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

# Stages a row can be rejected at (the `stage` key of rejected.jsonl).
STAGE_MANIFEST = 'manifest'
STAGE_LABEL_MANIFEST = 'label_manifest'
STAGE_DUPLICATE = 'duplicate'
STAGE_LABEL = 'label'
STAGE_READ = 'read'
STAGE_DECODE = 'decode'


class RowError(Exception):
  """An expected, per-row failure: the row is rejected with this reason."""

  def __init__(self, stage: str, code: str, reason: str):
    super().__init__(reason)
    self.stage = stage
    self.code = code
    self.reason = reason

  def __reduce__(self):  # crosses process boundaries (image worker processes)
    return type(self), (self.stage, self.code, self.reason)


@dataclasses.dataclass(frozen=True, slots=True)
class Rejection:
  """One rejected row: what was read, where it failed and why.

  `counts_as_row` is False for rows of the label manifest, which are reported
  but are not image-manifest rows.
  """
  row: Any
  stage: str
  code: str
  reason: str
  source: str = ''
  line: int = 0
  counts_as_row: bool = True

  def to_json(self) -> str:
    record = {
        'row': self.row,
        'stage': self.stage,
        'code': self.code,
        'reason': self.reason,
        'source': self.source,
        'line': self.line,
    }
    if not self.counts_as_row:  # a label-manifest line: not in num_manifest_rows
      record['counts_as_row'] = False
    return json.dumps(record, ensure_ascii=False, sort_keys=True, default=repr)

  @property
  def counter_name(self) -> str:
    return f'rejected_{self.stage}_{self.code}'



def unexpected_error(error: Exception, stage: str = STAGE_DECODE) -> RowError:
  """The RowError for an exception nobody foresaw (a bug or a Pillow surprise)."""
  return RowError(stage, 'unexpected_error',
                  f'unexpected error {type(error).__name__}: {error!r}')


def unexpected_rejection(row, error: Exception, stage: str = STAGE_DECODE) -> Rejection:
  """A Rejection for an exception nobody foresaw (a bug or a Pillow surprise)."""
  found = unexpected_error(error, stage)
  return row.reject(found.stage, found.code, found.reason)
