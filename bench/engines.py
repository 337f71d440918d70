"""convert on each engine, the bench corpus, side by side: wall time,
images/s, steady-state images/s and peak memory of the processes involved.

  .venv/bin/python -m bench.engines [--num_images 2000] [--case jpeg224]
      [--engines direct,portable,flink,spark] [--clusters] [--json OUT.json]
      [--corpus photo|tiny] [--startup_images 10]

Engines (each as a user launches it, with nothing but its runner's flags):
  direct     the DirectRunner (no --runner)
  portable   --runner PortableRunner against Beam's Python job service
             (local_job_service_main, started here), LOOPBACK workers
  flink      --runner FlinkRunner: Flink inside the job server, LOOPBACK
  spark      --runner SparkRunner: Spark local[cores] in the job server, LOOPBACK
  flink_session, spark_standalone (--clusters): the session cluster and the
             standalone master + worker of tests/engine_clusters.py, with an
             EXTERNAL worker pool (make test-integration builds .peers/)

Each engine converts the first K images (--startup_images, default 10), then
all N (--repeat times each, medians taken; the K-image run at least
--startup_repeat times, default 3): the K-image run's time is its
start-up (interpreter, Beam, JVM, job server, job submission), and
(N - K) / (seconds - start-up seconds) its steady rate, compared with the
DirectRunner's. Each process's CPU per row is likewise the whole run's CPU
less the K-image run's, over the N - K rows between. Peak memory is the peak
PSS of the launcher's process tree (job server JVM, image processes) plus the
trees of the services it works through (the job service; a cluster's JVMs and
worker pool), bench/measure.py.
Flink and Spark need Java and their job servers (`make fetch-engines`).

--corpus tiny (`make bench-launcher`): 16x16 PNGs (bench/corpus.py) to raw
16x16 (--case defaults to raw16), so the per-row work of Beam and of the
launching process is what is measured, not decoding, resizing or disk
writes; it also prints the launcher's CPU per row against the target of
<= 0.05 ms (20,000 rows, marginal over 2,000). The sampler reads each
process's CPU every 0.1 s (bench/measure.py), so each run's launcher figure
may lack up to its last 0.1 s: over 18,000 marginal rows, at most 0.006 ms a
row either way.
"""

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from bench.common import CASES
from bench.corpus import ensure_corpus
from bench.corpus import ensure_tiny_corpus
from bench.measure import run_measured

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP_IMAGES = 10
# The start-up run is the cheap one and the noisier term of the steady rate:
# Flink's 10-image run took 8.5-11 s on an idle machine, so one run each put
# Flink's ratio anywhere from 0.74 to 1.07 of the DirectRunner's. Its median
# of three costs 20-40 s an engine.
STARTUP_REPEAT = 3
# --corpus: the generated corpus each names, and the case it runs by default.
CORPORA = {'photo': ensure_corpus, 'tiny': ensure_tiny_corpus}
DEFAULT_CASES = {'photo': 'jpeg224', 'tiny': 'raw16'}
LAUNCHER_TARGET_MS = 0.05  # the launching process's CPU per row, on --corpus tiny
ENGINES = ('direct', 'portable', 'flink', 'spark')
CLUSTER_ENGINES = ('flink_session', 'spark_standalone')
RUNNER_FLAGS = {
    'direct': [],
    'flink': ['--runner', 'FlinkRunner'],
    'spark': ['--runner', 'SparkRunner'],
}


def _free_port() -> int:
  with socket.socket() as sock:
    sock.bind(('127.0.0.1', 0))
    return sock.getsockname()[1]


@contextlib.contextmanager
def job_service(log_dir: str):
  """Beam's Python portable job service on a free port: (flags, [its pid])."""
  port = _free_port()
  with open(os.path.join(log_dir, 'job_service.log'), 'wb') as log:
    process = subprocess.Popen(
        [sys.executable, '-m', 'apache_beam.runners.portability.local_job_service_main',
         '--port', str(port)], stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True)
  try:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
      with contextlib.suppress(OSError), socket.create_connection(('127.0.0.1', port), 1):
        break
      time.sleep(0.3)
    yield ['--runner', 'PortableRunner', '--job_endpoint', f'localhost:{port}',
           '--environment_type', 'LOOPBACK'], [process.pid]
  finally:
    process.terminate()
    process.wait(timeout=30)


@contextlib.contextmanager
def cluster(engine: str, root: str):
  """A cluster of tests/engine_clusters.py: (flags, [pids of its processes])."""
  sys.path.insert(0, PROJECT_ROOT)
  from tests import engine_clusters
  kind = engine_clusters.FlinkSession if engine == 'flink_session' else (
      engine_clusters.SparkStandalone)
  running = kind(pathlib.Path(root))
  try:
    running.start()
    processes = ([running.jobmanager, running.taskmanager] if engine == 'flink_session'
                 else [running.master_process, running.worker]) + [running.pool.process]
    yield running.flags(), [p.process.pid for p in processes]
  finally:
    running.stop()


@contextlib.contextmanager
def engine_context(engine: str, work: str):
  if engine == 'portable':
    with job_service(work) as found:
      yield found
  elif engine in CLUSTER_ENGINES:
    with cluster(engine, os.path.join(work, engine)) as found:
      yield found
  else:
    yield RUNNER_FLAGS[engine], []


def convert_once(engine, manifest, num_images, case, flags, others, work, env, extra=()):
  out = os.path.join(work, f'out-{engine}-{num_images}')
  cmd = [sys.executable, '-m', 'pipeline.convert', '--manifest', manifest, '--output_dir',
         out, '--overwrite', '--encoding', case.encoding, '--height', str(case.height),
         '--width', str(case.width), '--progress', 'off', *flags, *extra]
  result = run_measured(cmd, os.path.join(work, f'{engine}-{num_images}'), cwd=PROJECT_ROOT,
                        timeout=3600, env=env, other_roots=others)
  if result['returncode'] != 0:
    raise SystemExit(f'{engine} failed on {num_images} images:\n'
                     + '\n'.join(result.get('stderr_tail', [])))
  shutil.rmtree(out, ignore_errors=True)
  return result


def measure(engines, corpus_dir, num_images, case, work, repeat=1, extra=(),
            startup_images=STARTUP_IMAGES, corpus=ensure_corpus,
            startup_repeat=STARTUP_REPEAT):
  """{engine: its row (engine_row)}; `corpus`: ensure_corpus or ensure_tiny_corpus.
  The start-up run is made max(repeat, startup_repeat) times, the whole one
  `repeat` times."""
  small, _ = corpus(corpus_dir, startup_images)
  full, _ = corpus(corpus_dir, num_images)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      filter(None, [PROJECT_ROOT, os.environ.get('PYTHONPATH')])))
  env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env.get('PATH', '')
  rows = {}
  for engine in engines:
    with engine_context(engine, work) as (flags, others):
      startups, wholes = [], []
      for run in range(max(repeat, startup_repeat)):
        startups.append(convert_once(engine, small, startup_images, case, flags, others, work,
                                     env, extra))
        if run < repeat:
          wholes.append(convert_once(engine, full, num_images, case, flags, others, work, env,
                                     extra))
    # Medians: the steady rate is a difference of two noisy times.
    rows[engine] = engine_row(_median_run(startups), _median_run(wholes), num_images,
                              startup_images)
    print(engine, rows[engine], flush=True)
  base = (rows.get('direct') or {}).get('steady_images_per_s')
  for row in rows.values():
    row['steady_vs_direct'] = round(row['steady_images_per_s'] / base, 2) if (
        base and row['steady_images_per_s']) else None
  return rows


def engine_row(startup: dict, whole: dict, num_images: int,
               startup_images: int = STARTUP_IMAGES) -> dict:
  """An engine's figures from its run of `startup_images` (`startup`) and of
  all `num_images` (`whole`), both run_measured's dicts: the start-up run's
  time and CPU are what every run pays once, so the differences over the
  rows between are what a row costs."""
  steady_s = whole['seconds'] - startup['seconds']
  return {
      'seconds': whole['seconds'], 'startup_seconds': startup['seconds'],
      'images_per_s': round(num_images / whole['seconds'], 1),
      'steady_images_per_s': round((num_images - startup_images) / steady_s, 1)
      if steady_s > 0 and num_images > startup_images else None,
      'peak_pss_mib': whole['peak_pss_mib'], 'cpu_seconds': whole['cpu_seconds'],
      'other_cpu_seconds': whole['other_cpu_seconds'],
      'cpu_ms_per_row': cpu_ms_per_row(startup['cpu_by_process'], whole['cpu_by_process'],
                                       num_images - startup_images),
  }


def cpu_ms_per_row(startup: dict, whole: dict, rows: int) -> dict:
  """{process role: its marginal CPU per row in ms}: the CPU of a run of N
  images less that of the start-up run, over the `rows` (N - K) between."""
  return {role: round(1000 * (whole[role] - startup.get(role, 0.0)) / rows, 3)
          for role in sorted(whole)} if rows > 0 else {}


def _median_run(runs: list) -> dict:
  """The run of median wall time (the lower middle one of an even count)."""
  return sorted(runs, key=lambda run: run['seconds'])[(len(runs) - 1) // 2]


def table(rows: dict, num_images: int, case: str, startup_images: int = STARTUP_IMAGES,
          corpus_note: str = '') -> str:
  lines = [f'{num_images} images{corpus_note}, {case}, {os.cpu_count()} cores',
           f'| engine | wall s | start-up s ({startup_images} images) | images/s | '
           'steady images/s | steady vs direct | peak PSS MiB |', '| --- | ---: | ---: | ---: | ---: | ---: | ---: |']
  for engine, row in rows.items():
    lines.append(f'| {engine} | {row["seconds"]:.1f} | {row["startup_seconds"]:.1f} | '
                 f'{row["images_per_s"]:.0f} | {row["steady_images_per_s"] or 0:.0f} | '
                 f'{row["steady_vs_direct"] or 0:.2f} | {row["peak_pss_mib"]:.0f} |')
  lines.append('')
  lines.append(f'CPU per row, marginal over the {startup_images}-image run (ms), by process:')
  for engine, row in rows.items():
    shown = ', '.join(f'{role} {ms:.3f}' for role, ms in row.get('cpu_ms_per_row', {}).items())
    lines.append(f'- {engine}: {shown}')
  return '\n'.join(lines)


def launcher_lines(rows: dict, num_images: int, startup_images: int) -> list:
  """The launching process's CPU per row of each engine, against LAUNCHER_TARGET_MS."""
  lines = [f'Launcher CPU per row, marginal over the {startup_images}-image run, '
           f'on {num_images - startup_images} rows (target <= {LAUNCHER_TARGET_MS} ms):']
  for engine, row in rows.items():
    ms = row.get('cpu_ms_per_row', {}).get('launcher')
    verdict = 'no figure' if ms is None else (
        f'{ms:.3f} ms a row: {"met" if ms <= LAUNCHER_TARGET_MS else "NOT met"}')
    lines.append(f'- {engine}: {verdict}')
  return lines


def parse_args(argv=None) -> argparse.Namespace:
  """The command line's options; args.engines a list, args.case filled in."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--num_images', type=int, default=2000)
  parser.add_argument('--case', choices=sorted(CASES),
                      help='default jpeg224; with --corpus tiny, raw16')
  parser.add_argument('--corpus', choices=sorted(CORPORA), default='photo',
                      help='photo: the photo-like JPEGs; tiny: 16x16 PNGs, for per-row costs')
  parser.add_argument('--startup_images', type=int, default=STARTUP_IMAGES,
                      help='images of the start-up run, whose time and CPU the marginal '
                      f'figures leave out (default {STARTUP_IMAGES})')
  parser.add_argument('--engines', default=','.join(ENGINES))
  parser.add_argument('--clusters', action='store_true',
                      help='also ' + ' and '.join(CLUSTER_ENGINES))
  parser.add_argument('--repeat', type=int, default=1,
                      help='runs per engine; the median counts')
  parser.add_argument('--startup_repeat', type=int, default=STARTUP_REPEAT,
                      help='runs of the start-up case at least (its median counts; default '
                      f'{STARTUP_REPEAT})')
  parser.add_argument('--workdir', default='/tmp/img2tfrecord-bench')
  parser.add_argument('--json')
  parser.add_argument('--convert_flags', default='',
                      help='more convert flags for every run, e.g. "--image_processes 1"')
  args = parser.parse_args(argv)
  args.engines = [e for e in args.engines.split(',') if e] + (
      list(CLUSTER_ENGINES) if args.clusters else [])
  unknown = set(args.engines) - set(ENGINES) - set(CLUSTER_ENGINES)
  if unknown:
    parser.error(f'unknown engines: {sorted(unknown)}')
  if args.startup_images < 1:
    parser.error('--startup_images must be at least 1')
  if args.repeat < 1 or args.startup_repeat < 1:
    parser.error('--repeat and --startup_repeat must be at least 1')
  args.case = args.case or DEFAULT_CASES[args.corpus]
  return args


def main(argv=None):
  args = parse_args(argv)
  tiny = args.corpus == 'tiny'
  with tempfile.TemporaryDirectory(prefix='bench-engines-') as work:
    rows = measure(args.engines, args.workdir, args.num_images, CASES[args.case], work, args.repeat,
                   args.convert_flags.split(), args.startup_images, CORPORA[args.corpus],
                   args.startup_repeat)
  print(table(rows, args.num_images, args.case, args.startup_images,
              ' (16x16 PNGs)' if tiny else ''))
  if tiny:
    print('\n' + '\n'.join(launcher_lines(rows, args.num_images, args.startup_images)))
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as handle:
      json.dump({'num_images': args.num_images, 'case': args.case, 'corpus': args.corpus,
                 'startup_images': args.startup_images, 'engines': rows}, handle, indent=2)


if __name__ == '__main__':
  main()
