"""validate: the rows of rejected.jsonl told apart, to find a row with more
than one line (a line overwritten by a copy of another: the counts still add
up, one row has two lines and another none). Plain functions.

A row's line names it by `source` and `line`, which no two rows share:
- a CSV, TSV, JSONL or .txt manifest: the file (each file of a pattern its
  own) and the line's number in it;
- a Parquet manifest: the file and the row's index in it; WebDataset: the
  tar and the sample's number in it (a tar cut short, or no tar, one more);
- --image_dir: the folder and the file's number in the sorted listing;
- --schema detection: COCO, the JSON and the image record's position in it
  (a repeated image id at its own); VOC and YOLO, the annotation file (''
  for a YOLO image without one) and the image's ordinal in the listing.
Rows rejected later (read, decode, duplicate, --dedupe content) keep the
row's. Lines that do not count as rows share them with rows, and are not
compared: a label-manifest line's line is its own file's; an annotation's
(counts_as_row false) is its place in the COCO JSON or its YOLO label file,
the number of another image's row.
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import itertools
import sys
from typing import Optional

from transforms.core.external_sort import sorted_entries

# Row lines sorted in memory at a time; a longer rejected.jsonl is sorted in
# runs of this many on temp files. Measured on 1M lines: +35 MB of peak
# memory (one source), +68 MB (a source of 38 characters per line), the same
# for 2M; +1-2 s over the 2.6-4.4 s of reading and counting them.
RUN_ENTRIES = 250_000
# The rows with more than one line named one by one; the others are counted.
SHOWN_ROWS = 10
# The rejected.jsonl line numbers kept of one such row.
SHOWN_NUMBERS = 3


@dataclasses.dataclass(frozen=True)
class RepeatedRow:
  """A row (source, line) with more than one line of rejected.jsonl."""
  source: str
  line: int
  numbers: tuple  # the first SHOWN_NUMBERS of its lines' numbers in rejected.jsonl
  lines: int  # how many lines name it

  def detail(self) -> str:
    shown = [str(number) for number in self.numbers]
    if self.lines > len(shown):
      shown.append(f'{self.lines - len(shown)} more')
    numbers = ', '.join(shown[:-1]) + ' and ' + shown[-1]
    return (f"lines {numbers} {'both' if self.lines == 2 else 'all'} name the row of source "
            f'{self.source!r}, line {self.line}; a row is one example or one line, so '
            f"another row's line is missing (overwritten by a copy of one of these)")


def row_identity(record: dict) -> Optional[tuple]:
  """(source, line) of a rejected.jsonl line that counts as a row; None when
  it lacks either: not compared (convert has written both on every line
  since its first version; a line made by other means may lack them)."""
  source, line = record.get('source'), record.get('line')
  if isinstance(source, str) and type(line) is int:
    return source, line
  return None


def repeated_rows(identities: Iterable[tuple], run_entries: int = RUN_ENTRIES,
                  shown: int = SHOWN_ROWS) -> tuple:
  """(source, line, number in rejected.jsonl) of each row line -> ([the
  first `shown` RepeatedRow by source and line], how many rows have more
  than one line). Memory: `run_entries` entries (external_sort)."""
  found, repeated = [], 0
  # One str object per source while its lines are in memory, not one per
  # line (interned strings go once nothing holds them: after a run's spill).
  shared = ((sys.intern(source), line, number) for source, line, number in identities)
  ordered = sorted_entries(shared, run_entries, prefix='rejected-rows-')
  for (source, line), entries in itertools.groupby(ordered, key=lambda e: e[:2]):
    numbers = [number for _, _, number in itertools.islice(entries, SHOWN_NUMBERS)]
    if len(numbers) < 2:
      continue
    repeated += 1
    if len(found) < shown:
      found.append(RepeatedRow(source, line, tuple(numbers),
                               len(numbers) + sum(1 for _ in entries)))
  return found, repeated
