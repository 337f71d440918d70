"""validate's report: every count and finding of a run (check_shards), and
what the launcher found, written as validation_report.json."""

from __future__ import annotations

import json
from typing import Optional

import apache_beam as beam

from transforms import filesystem
from transforms.core import class_counts
from transforms.core import dataset_checks
from transforms.core import record_facts
from transforms.core import validation


class WriteReportFn(beam.DoFn):
  """Runs once with every count as side inputs: writes the JSON report."""

  def __init__(self, info: dict, report_path: str, listing_problems: list,
               expected_count, max_problems: int, listing_warnings: list = (),
               more: Optional[dict] = None, temp: Optional[str] = None):
    self._info = info
    self._temp = temp  # the name it is written under (None: one of its own)
    self._report_path = report_path
    self._listing_problems = listing_problems
    self._listing_warnings = list(listing_warnings)
    self._more = dict(more or {})  # more fields of the report (num_recomputed)
    self._expected_count = expected_count
    self._max_problems = max_problems

  def process(self, _, tally_sums, first_problems, first_warnings):
    shard_counts, label_counts, problem_counts, warning_counts = record_facts.split_tallies(
        tally_sums)
    report = build_report(self._info, shard_counts, label_counts,
                          problem_counts, list(first_problems),
                          self._listing_problems, self._expected_count,
                          self._max_problems, warning_counts, list(first_warnings),
                          self._listing_warnings)
    report.update(self._more)
    filesystem.write_text(self._report_path, json.dumps(report, indent=2) + '\n', self._temp)
    yield report


def build_report(info, shard_counts, label_counts, problem_counts, first_problems,
                 listing_problems, expected_count, max_problems, warning_counts=None,
                 first_warnings=(), listing_warnings=()) -> dict:
  """Everything validate found, as the JSON report holds it.

  Warnings (e.g. the same image in two splits) are listed apart from problems
  and leave `valid` as it is; validate --strict exits 1 on them too.
  listing_problems, listing_warnings: what the launcher found, each counted here.
  """
  warning_counts = dict(warning_counts or {})
  for warning in listing_warnings:
    warning_counts[warning.kind] = warning_counts.get(warning.kind, 0) + 1
  first_warnings = [*first_warnings, *listing_warnings]
  per_split = {}
  for (split, shard), count in sorted(shard_counts.items()):
    per_split.setdefault(split, {})[shard] = count
  counts = {split: sum(shards.values()) for split, shards in per_split.items()}
  fixed = (listing_problems + dataset_checks.count_problems(info, counts, expected_count)
           + class_counts.class_count_problems(info, counts, label_counts)
           + class_counts.object_count_problems(info, counts, label_counts))
  for problem in fixed:
    problem_counts[problem.kind] = problem_counts.get(problem.kind, 0) + 1
  shown = sorted(fixed + first_problems, key=validation.Problem.sort_key)[:max_problems]
  names = info['label_map']
  per_label = {}  # over the splits
  for (_, label), count in label_counts.items():
    per_label[label] = per_label.get(label, 0) + count
  # Records whose label could not be read (label None) are not in the histogram.
  histogram = {(names[label] if 0 <= label < len(names) else str(label)): count
               for label, count in sorted((l, c) for l, c in per_label.items()
                                          if l is not None)}
  num_problems = sum(problem_counts.values())
  num_warnings = sum((warning_counts or {}).values())
  warnings_shown = sorted(first_warnings, key=validation.Problem.sort_key)[:max_problems]
  return {
      'valid': num_problems == 0,
      'num_examples': sum(counts.values()),
      'expected_count': expected_count,
      'splits': {
          split: {'num_examples': counts.get(split, 0),
                  'expected': declared['num_examples'],
                  'shards': per_split.get(split, {})}
          for split, declared in info['splits'].items()},
      'label_histogram': histogram,
      'num_problems': num_problems,
      'problems_by_kind': dict(sorted(problem_counts.items())),
      'problems': [p.to_json() for p in shown],
      'problems_truncated': num_problems > len(shown),
      'num_warnings': num_warnings,
      'warnings_by_kind': dict(sorted((warning_counts or {}).items())),
      'warnings': [w.to_json() for w in warnings_shown],
      'warnings_truncated': num_warnings > len(warnings_shown),
      'over_budget': info.get('over_budget', False),
  }
