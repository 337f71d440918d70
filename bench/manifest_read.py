"""The manifest read stage alone: rows/s of ReadManifest (byte ranges read
by every worker) against the single reader it replaced (one Impulse +
FlatMap over the whole file, the parse fused to it), on the local runner.

  python -m bench.manifest_read --rows 1000000 [--workers 1,2] [--repeat 2]
      [--runner_flags '--runner FlinkRunner --parallelism 2']
      [--cluster flink_session|spark_standalone]

Each run reads a generated manifest (`key,image,label` rows pointing at 8
images) into rows and counts them; the time is the pipeline's wall time,
start-up included (~1 s: measure a 1,000-row manifest to see it).
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import tempfile
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam_runtime import local_runner
from transforms.beam_util import ROWS
from transforms.core import manifest
from transforms.filesystem import FileAccess

HEADER = ('key', 'image', 'label')


def write_manifest(path: str, rows: int) -> None:
  with open(path, 'w') as handle:
    handle.write(','.join(HEADER) + '\n')
    for i in range(rows):
      handle.write(f'row{i:08d},images/img_{i % 8}.png,class_{i % 10}\n')


class _SingleParseFn(beam.DoFn):
  """The replaced reader's parse: (line, raw) -> ManifestRow (rejections dropped)."""

  def __init__(self, config):
    self._config = config

  def process(self, numbered):
    line, raw = numbered
    try:
      yield manifest.row_from_fields(manifest.line_fields(raw, line, self._config),
                                     self._config, line)
    except manifest.RowError:
      return


def _single_lines(_, path: str, fmt: str):
  with FileAccess().open_checked(path) as stream:
    yield from manifest.iter_lines(stream, fmt)


def single_reader(pbegin, config):
  return (pbegin
          | 'Once' >> beam.Impulse()
          | 'ReadLines' >> beam.FlatMap(_single_lines, config.path, config.fmt)
          | 'ParseLines' >> beam.ParDo(_SingleParseFn(config)))


def _cpu_seconds() -> float:
  """CPU time of this process and of its ended children (Beam's worker
  processes): steadier than wall time on a shared machine."""
  own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
      resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_once(reader: str, config, workers: int, runner_flags: tuple = ()) -> tuple:
  """-> (rows read, wall seconds, CPU seconds). runner_flags: another runner
  (Flink, Spark: completed as convert completes them, runners.prepare);
  its job server's start-up is in the wall time, its CPU is not."""
  flags = ['--runner=DirectRunner']
  if workers > 1:
    flags += [f'--direct_num_workers={workers}', '--direct_running_mode=multi_processing']
  if runner_flags:
    from pipeline.engines import runners
    options = runners.prepare(PipelineOptions(list(runner_flags)))
  else:
    options = PipelineOptions(flags)
  counted = os.path.join(tempfile.mkdtemp(prefix='manifest-read-'), 'count')
  p = beam.Pipeline(runner=local_runner.for_options(options), options=options)
  if reader == 'ranges':
    from transforms.sources import ReadManifest
    rows = (p | 'Read' >> ReadManifest(config))[ROWS]
  else:
    rows = single_reader(p, config)
  _ = (rows
       | 'One' >> beam.Map(lambda _: 1)
       | 'Count' >> beam.CombineGlobally(sum).without_defaults()
       | 'Write' >> beam.Map(lambda n, path: open(path, 'w').write(str(n)), counted))
  started, cpu = time.perf_counter(), _cpu_seconds()
  local_runner.run(p).wait_until_finish()
  seconds = time.perf_counter() - started
  with open(counted) as handle:
    return int(handle.read()), seconds, _cpu_seconds() - cpu


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rows', type=int, default=1_000_000)
  parser.add_argument('--workers', default='1,2')
  parser.add_argument('--readers', default='single,ranges')
  parser.add_argument('--repeat', type=int, default=2)
  parser.add_argument('--runner_flags', default='',
                      help="another runner's flags, e.g. '--runner FlinkRunner --parallelism 2' "
                           '(then --workers means nothing)')
  parser.add_argument('--cluster', choices=('flink_session', 'spark_standalone'),
                      help='read on a cluster of tests/engine_clusters.py (make '
                           'test-integration builds .peers/): its flags join --runner_flags, '
                           'e.g. --sdk_worker_parallelism 2 for two harnesses')
  args = parser.parse_args(argv)
  if args.cluster:
    from bench.engines import cluster
    with cluster(args.cluster, tempfile.mkdtemp(prefix=f'manifest-read-{args.cluster}-')) as (
        flags, _):
      _measure(args, tuple(flags) + tuple(shlex.split(args.runner_flags)))
  else:
    _measure(args, tuple(shlex.split(args.runner_flags)))


def _measure(args, runner_flags: tuple) -> None:
  workers_list = '1' if runner_flags else args.workers
  folder = tempfile.mkdtemp(prefix='manifest-read-')
  path = os.path.join(folder, 'manifest.csv')
  write_manifest(path, args.rows)
  # (The single reader also runs on a checkout from before byte ranges,
  # whose ManifestConfig has no `files`: PYTHONPATH=that checkout.)
  config = manifest.ManifestConfig(path=path, fmt='csv', header=HEADER,
                                   role=manifest.ROLE_COMBINED)
  print(f'{args.rows} rows, {os.path.getsize(path) / 1e6:.1f} MB, {os.cpu_count()} cores',
        flush=True)
  for workers in (int(w) for w in workers_list.split(',')):
    for _ in range(args.repeat):
      for reader in args.readers.split(','):
        rows, seconds, cpu = run_once(reader, config, workers, runner_flags)
        assert rows == args.rows, (reader, rows)
        print(f'{reader:7s} workers={workers}  {seconds:6.1f} s  {rows / seconds:9.0f} rows/s'
              f'  CPU {cpu:6.1f} s {" ".join(runner_flags)}', flush=True)


if __name__ == '__main__':
  main()
