"""The rejection record and per-row errors: what every dead letter carries."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator
import dataclasses
import json
import math
from typing import Any

from transforms.core.external_sort import sorted_entries
from transforms.core.pickling import cheap_pickle
from transforms.core.redact import shown_url
from transforms.core.redact import shown_value

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


@cheap_pickle
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
        'row': shown_value(self.row),  # a URL's credentials redacted, as everywhere
        'stage': self.stage,
        'code': self.code,
        'reason': shown_url(self.reason),
        'source': self.source,
        'line': self.line,
    }
    if not self.counts_as_row:  # a label-manifest line: not in num_manifest_rows
      record['counts_as_row'] = False
    try:
      return json.dumps(record, ensure_ascii=False, sort_keys=True, default=repr,
                        allow_nan=False)
    except ValueError:  # a JSONL row's NaN or Infinity, which only Python's json reads
      record['row'] = _finite(record['row'])
      return json.dumps(record, ensure_ascii=False, sort_keys=True, default=repr)

  @property
  def counter_name(self) -> str:
    return f'rejected_{self.stage}_{self.code}'


def _finite(value):
  """`value` with each NaN or infinite float as the text JSON's extensions
  spell it ('NaN', 'Infinity', '-Infinity'): a JSON value every reader takes."""
  if isinstance(value, float) and not math.isfinite(value):
    return 'NaN' if math.isnan(value) else ('Infinity' if value > 0 else '-Infinity')
  if isinstance(value, dict):
    return {key: _finite(item) for key, item in value.items()}
  if isinstance(value, (list, tuple)):
    return [_finite(item) for item in value]
  return value


# Rejections sorted in memory at a time; beyond, sorted runs of this many go
# to temp files and are merged (~100 MB of lines in memory at most).
SORT_RUN_LINES = 200_000


def sorted_lines(rejections: Iterable[Rejection],
                 run_lines: int = SORT_RUN_LINES) -> Iterator[bytes]:
  """Every rejection as its rejected.jsonl line (UTF-8, with its newline), by
  source, then line, then the line's text: one order whatever order the
  runner delivered them in (runners differ, and so would the file's bytes).
  Any number of rejections: runs of `run_lines` are sorted on temp files and
  merged (external_sort)."""
  entries = ((rejection.source, rejection.line, rejection.to_json())
             for rejection in rejections)
  for _, _, text in sorted_entries(entries, run_lines, prefix='rejected-'):
    yield text.encode('utf-8') + b'\n'


def unexpected_error(error: Exception, stage: str = STAGE_DECODE) -> RowError:
  """The RowError for an exception nobody foresaw (a bug or a Pillow surprise)."""
  return RowError(stage, 'unexpected_error',
                  f'unexpected error {type(error).__name__}: {error!r}')


def unexpected_rejection(row, error: Exception, stage: str = STAGE_DECODE) -> Rejection:
  """A Rejection for an exception nobody foresaw (a bug or a Pillow surprise)."""
  found = unexpected_error(error, stage)
  return row.reject(found.stage, found.code, found.reason)
