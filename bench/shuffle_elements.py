"""python -m bench.shuffle_elements [--num_images N] [--workdir DIR]: how many
elements enter each GroupByKey of convert's distributed path.

On Flink and Spark every element crossing a shuffle costs the engine's JVM
~2.2 ms of CPU (the Fn API data plane, then the engine's own shuffle), so
this counts them. convert runs on the DirectRunner with --direct_num_workers
2 --direct_running_mode multi_threading (runners.single_local_worker: no, so
the distributed path, in_order=False) over the tiny corpus (16x16 PNGs,
bench/corpus.py), in four runs that between them take every shuffle:

  plain      --num_shards 4: ResolveKeys, WriteShards (round robin), the
             sidecar, ContentDuplicates
  capped     --num_shards 0 (size-capped shards): WriteShards' other path
  dedupe     --dedupe content: DedupeContent
  previous   --previous_dataset (plain's output): JoinPrevious, CopyRecords

A Map put in front of every GroupByKey (CoGroupByKey's too) counts what
enters it, as a Beam counter named by the GroupByKey's full label. Combines
are left out: the runner lifts them (one accumulator per bundle crosses).
Prints a table, and with --json the counts as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from bench.corpus import ensure_tiny_corpus

NAMESPACE = 'shuffle_elements'
DEFAULT_WORKDIR = '/tmp/img2tfrecord-bench'
RUNS = {
    'plain': ['--num_shards', '4'],
    'capped': ['--num_shards', '0', '--shard_size_mb', '1'],
    'dedupe': ['--num_shards', '4', '--dedupe', 'content'],
    'previous': ['--num_shards', '4'],  # + --previous_dataset plain's output
}


class _CountFn(beam.DoFn):
  """Elements -> the same, counted under `name`."""

  def __init__(self, name: str):
    self._name = name

  def setup(self):
    self._counter = Metrics.counter(NAMESPACE, self._name)

  def process(self, element):
    self._counter.inc()
    yield element


def count_shuffles() -> list:
  """Patches Pipeline.apply (a Map before every GroupByKey outside a combine)
  and Pipeline.run (each result kept, returned in the list)."""
  results = []
  apply, run = beam.Pipeline.apply, beam.Pipeline.run

  def counted_apply(self, transform, pvalueish=None, label=None):
    # Beam's apply calls itself once more without the label: count there.
    current = self._current_transform()
    if isinstance(transform, beam.GroupByKey) and not label and not _in_combine(current):
      name = '/'.join(part for part in (current.full_label, transform.label) if part)
      pvalueish = apply(self, beam.ParDo(_CountFn(name)), pvalueish, f'Count{transform.label}')
    return apply(self, transform, pvalueish, label)

  def kept_run(self, *args, **kwargs):
    result = run(self, *args, **kwargs)
    results.append(result)
    return result

  beam.Pipeline.apply, beam.Pipeline.run = counted_apply, kept_run
  return results


def _in_combine(applied) -> bool:
  while applied is not None:
    if isinstance(applied.transform, (beam.CombinePerKey, beam.CombineGlobally)):
      return True
    applied = applied.parent
  return False


def counts_of(result) -> dict:
  """{GroupByKey's full label: elements in} of a finished run."""
  found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))['counters']
  counts = {}
  for counter in found:
    counts[counter.key.metric.name] = counts.get(counter.key.metric.name, 0) + counter.committed
  return dict(sorted(counts.items()))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
  parser.add_argument('--num_images', type=int, default=2000)
  parser.add_argument('--workdir', default=DEFAULT_WORKDIR)
  parser.add_argument('--runs', default=','.join(RUNS), help='of: ' + ','.join(RUNS))
  parser.add_argument('--mode', default='multi_threading',
                      choices=('multi_threading', 'in_memory', 'multi_processing'),
                      help='--direct_running_mode (with 2 workers, each the distributed path)')
  parser.add_argument('--json', help='also write the counts here')
  args = parser.parse_args(argv)
  manifest, _ = ensure_tiny_corpus(args.workdir, args.num_images)
  from pipeline import convert  # after the corpus: Beam's start-up is not the corpus'

  results = count_shuffles()
  out_root = tempfile.mkdtemp(prefix='shuffle-elements-')
  counted = {}
  try:
    for name in args.runs.split(','):
      out = os.path.join(out_root, name)
      flags = list(RUNS[name])
      if name == 'previous':
        flags += ['--previous_dataset', os.path.join(out_root, 'plain')]
      code = convert.main(['--manifest', manifest, '--output_dir', out, '--height', '16',
                           '--width', '16', '--encoding', 'raw', '--direct_num_workers', '2',
                           '--direct_running_mode', args.mode, *flags])
      if code != 0:
        print(f'{name}: convert exited {code}', file=sys.stderr)
        return code
      counted[name] = counts_of(results[-1])
  finally:
    shutil.rmtree(out_root, ignore_errors=True)
  for name, counts in counted.items():
    print(f'{name} ({args.num_images} rows): elements into each GroupByKey')
    for label, count in counts.items():
      print(f'  {count:>8,}  {label}')
  if args.json:
    with open(args.json, 'w') as handle:
      json.dump({'num_images': args.num_images, 'runs': counted}, handle, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
