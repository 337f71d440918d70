"""What every Beam step shares: the output tags, the counters and
in_global_window.

A step that cannot turn an element into its main output emits a dead letter
under REJECTED (convert) or PROBLEMS (validate): never dropped, always counted.
"""

from __future__ import annotations

from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from transforms.core.rejects import Rejection

ROWS = 'rows'  # ManifestRow
REJECTED = 'rejected'  # Rejection
EXAMPLES = 'examples'  # BuiltExample (split, order, ..., serialized tf.train.Example)
TALLIES = 'tallies'  # (tally key, 1)
SKIPPED = 'skipped'  # a file below --image_dir that is not an image by name
LABELLED = 'labelled'  # LabelledRow
LOADED = 'loaded'  # LoadedImage
SUMMARIES = 'summaries'  # RecordSummary, or with gather RecordFacts (validate's reader)
PROBLEMS = 'problems'  # Problem
WARNINGS = 'warnings'  # Problem that leaves the dataset valid (validate --strict: exit 1)
# CheckShards' outputs, what validate's report is written from:
TALLY_SUMS = 'tally_sums'  # (tally key, sum over the dataset)
FIRST_PROBLEMS = 'first_problems'  # one list: the first --max_problems Problems (none: none)
FIRST_WARNINGS = 'first_warnings'  # one list: the first warnings, likewise


# --- Beam counters: every one lives under METRICS_NAMESPACE ---

METRICS_NAMESPACE = 'img2tfrecord'


def counter(name: str):
  return Metrics.counter(METRICS_NAMESPACE, name)


def count_rejection(rejection: Rejection) -> Rejection:
  counter(rejection.counter_name).inc()
  return rejection


def in_global_window(value):
  """`value` as finish_bundle must emit it: in the global window."""
  return WindowedValue(value, GlobalWindow().max_timestamp(), [GlobalWindow()])
