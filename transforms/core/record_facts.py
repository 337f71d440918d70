"""What validate gathers of the checked records for its report: plain
functions. The tallies (records per shard and per label, problems and
warnings per kind), the names no two records may share and the copies of one
source across splits, the first findings kept; and RecordFacts, all of them
gathered in one place on a single local worker."""

from __future__ import annotations

import dataclasses

from transforms.core.validation import Problem
from transforms.core.validation import RecordSummary

_SHARD, _LABEL, _KIND = 'shard', 'label', 'kind'


def summary_tallies(summary: RecordSummary) -> list:
  """The counts one checked record adds to: its shard and its label(s) in its split."""
  labels = summary.label if isinstance(summary.label, tuple) else (summary.label,)
  return [((_SHARD, (summary.split, summary.shard)), 1)] + [
      ((_LABEL, (summary.split, label)), 1) for label in labels]


def problem_tally(problem: Problem) -> tuple:
  return (_KIND, problem.kind), 1


# Warnings: findings that do not make a dataset invalid (exit 1 only with --strict).
_WARNING = 'warning'


def warning_tally(warning: Problem) -> tuple:
  return (_WARNING, warning.kind), 1


def duplicate_key_problems(name: tuple, places: list) -> list:
  """The records [(shard, record), ...] of one name (RecordSummary.names:
  (problem kind, what, value)) -> a Problem of that kind for every repeat
  (none for a name seen once)."""
  kind, what, value = name
  places = sorted(places)
  if len(places) < 2:
    return []
  first = f'{places[0][0]}#{places[0][1]}'
  return [Problem(kind, shard, record,
                  f'{what} {value!r} appears {len(places)} times; first at {first}')
          for shard, record in places[1:]]


def cross_split_copies(sha256: str, places: list) -> list:
  """Records with the same source bytes: [(split, shard, record, key), ...]
  -> a cross_split_duplicate warning for each record in another split than
  the first copy (by split, shard, record); none when all are in one split."""
  places = sorted(places)
  splits = sorted({split for split, _, _, _ in places})
  if len(splits) < 2:
    return []
  first = places[0]
  return [Problem('cross_split_duplicate', shard, record,
                  f'key {key!r} ({split}) has the same bytes (SHA-256 {sha256[:12]}...) '
                  f'as {len(places) - 1} other record(s) (copies in {", ".join(splits)}); '
                  f'first: key {first[3]!r} ({first[0]}) at {first[1]}#{first[2]}')
          for split, shard, record, key in places if split != first[0]]


@dataclasses.dataclass
class RecordFacts:
  """What the report needs of checked records, gathered in one place (a
  single local worker): their tallies, where each key and each source digest
  was seen, and the problems found (every one tallied, the first
  max_problems kept). It holds every key, as grouping by key on one worker
  would; distributed runners group by key instead (check_shards)."""
  max_problems: int = 100
  tallies: dict = dataclasses.field(default_factory=dict)  # tally key -> count
  # RecordSummary.names' name -> [(shard, record)]
  key_places: dict = dataclasses.field(default_factory=dict)
  # source SHA-256 -> [(split, shard, record, key)]
  content_places: dict = dataclasses.field(default_factory=dict)
  problems: list = dataclasses.field(default_factory=list)  # the first (Problem.sort_key)
  warnings: list = dataclasses.field(default_factory=list)  # records' own, the first
  # split -> [RecordPlace]: what the index files and sidecars are checked
  # against (check_side_files), for a summary with its framing
  places: dict = dataclasses.field(default_factory=dict)

  def add_problem(self, problem: Problem) -> None:
    tally, count = problem_tally(problem)
    self.tallies[tally] = self.tallies.get(tally, 0) + count
    self.problems.append(problem)
    if len(self.problems) > 2 * self.max_problems:  # memory stays flat
      self.problems = first_findings(self.problems, self.max_problems)

  def add_warning(self, warning: Problem) -> None:
    tally, count = warning_tally(warning)
    self.tallies[tally] = self.tallies.get(tally, 0) + count
    self.warnings.append(warning)
    if len(self.warnings) > 2 * self.max_problems:
      self.warnings = first_findings(self.warnings, self.max_problems)

  def add(self, summary: RecordSummary) -> None:
    for tally, count in summary_tallies(summary):
      self.tallies[tally] = self.tallies.get(tally, 0) + count
    for name in summary.names():
      self.key_places.setdefault(name, []).append((summary.shard, summary.record))
    if summary.sha256:
      self.content_places.setdefault(summary.sha256, []).append(
          (summary.split, summary.shard, summary.record, summary.key))
    if summary.framing:
      self.places.setdefault(summary.split, []).append(summary.place())

  def merge(self, other: RecordFacts) -> RecordFacts:
    """Adds `other` into this one; -> this one."""
    for tally, count in other.tallies.items():
      self.tallies[tally] = self.tallies.get(tally, 0) + count
    for mine, theirs in ((self.key_places, other.key_places),
                         (self.content_places, other.content_places),
                         (self.places, other.places)):
      for name, places in theirs.items():
        mine.setdefault(name, []).extend(places)
    self.problems = first_findings(self.problems + other.problems, self.max_problems)
    self.warnings = first_findings(self.warnings + other.warnings, self.max_problems)
    return self

  def report_inputs(self) -> tuple:
    """-> ({tally key: sum}, the first max_problems problems, the first
    max_problems warnings): what the report is written from, the duplicate
    keys and cross-split copies found and counted."""
    duplicates, warnings = self.duplicate_key_problems(), self.cross_split_warnings()
    sums = dict(self.tallies)
    for tally, count in ([problem_tally(p) for p in duplicates]
                         + [warning_tally(w) for w in warnings]):
      sums[tally] = sums.get(tally, 0) + count
    return (sums, first_findings(self.problems + duplicates, self.max_problems),
            first_findings(self.warnings + warnings, self.max_problems))

  def duplicate_key_problems(self) -> list:
    return [problem for key, places in self.key_places.items()
            for problem in duplicate_key_problems(key, places)]

  def cross_split_warnings(self) -> list:
    return [warning for sha256, places in self.content_places.items()
            for warning in cross_split_copies(sha256, places)]


def first_findings(findings: list, count: int) -> list:
  """The first `count` problems or warnings by Problem.sort_key."""
  return sorted(findings, key=Problem.sort_key)[:count]


def split_tallies(sums: dict) -> tuple:
  """{tally key: sum} -> ({(split, shard): records}, {(split, label): records},
  {problem kind: problems}, {warning kind: warnings})."""
  parts = {_SHARD: {}, _LABEL: {}, _KIND: {}, _WARNING: {}}
  for (kind, value), count in sums.items():
    parts[kind][value] = count
  return parts[_SHARD], parts[_LABEL], parts[_KIND], parts[_WARNING]
