"""A manifest's numbered line -> its ManifestRow, or the Rejection that says
why it is none: the parse every line-based manifest (CSV, TSV, JSONL, txt)
gets, wherever it runs (sources.ParseLineFn as lines are read; on a single
local worker, where the rows meet to be put in order)."""

from __future__ import annotations

import dataclasses
from typing import Union

from transforms.core import line_caps
from transforms.core import manifest
from transforms.core.manifest import ManifestConfig
from transforms.core.manifest import ManifestRow
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import Rejection
from transforms.core.rejects import RowError


def parse_line(config: ManifestConfig, line: int, position: int,
               raw: bytes) -> Union[ManifestRow, Rejection]:
  """The row of manifest line number `line` (`raw`, its bytes; position: see
  ManifestRow.position), or its Rejection (rejected.jsonl's `row`: the parsed
  fields once the line parsed, else the line)."""
  fields = None
  try:
    fields = manifest.line_fields(raw, line, config)
    return manifest.row_from_fields(fields, config, line, position)
  except RowError as error:
    stage, code, reason = error.stage, error.code, error.reason
  except Exception as error:
    # A line nobody foresaw is that line's problem, never the job's.
    stage, code, reason = STAGE_MANIFEST, 'unexpected_error', f'{type(error).__name__}: {error}'
  return Rejection(line_caps.shown_line(raw) if fields is None else fields, stage, code, reason,
                   config.source, line, counts_as_row=config.role != manifest.ROLE_LABELS)


@dataclasses.dataclass(frozen=True)
class LineParser:
  """parse_line for the lines of a manifest's files: (file index, line,
  position, raw) -> ManifestRow or Rejection. configs: each file's ManifestConfig."""
  configs: tuple

  def __call__(self, file: int, line: int, position: int, raw: bytes):
    return parse_line(self.configs[file], line, position, raw)
