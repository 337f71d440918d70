"""What both entry points share: exit codes, local defaults, runners, logging."""

from __future__ import annotations

import logging
import sys
import traceback

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TestOptions

from pipeline.beam_signatures import remember_method_signatures

EXIT_OK = 0
EXIT_FAILED = 1  # convert: crashed; validate: the dataset has problems
EXIT_USAGE = 2
EXIT_OVER_BUDGET = 3

LOCAL_RUNNER = 'DirectRunner'
# Local default: one in-process worker (no Beam data plane between threads or
# processes) whose image step uses every core itself (pool_size in
# transforms/workers/pooled_step.py). Measured on 2 cores, 3,000 JPEGs -> raw
# 300x300: 5.0 s against 6.3 s for --direct_running_mode multi_threading and
# 8.0 s for multi_processing; and multi_threading corrupted its data plane in 1
# of 3 runs of a 100,000-row manifest (cf. apache/beam#21104).
LOCAL_RUNNING_MODE = 'in_memory'


class UsageError(Exception):
  """Bad flags or unusable input: exit 2 with one line, before any work."""


# Runners that cannot run these pipelines, and why: refused before anything is written.
UNSUPPORTED_RUNNERS = {
    'DaskRunner': "Beam 2.77's DaskRunner merges tagged outputs into the main output and "
                  'drops what finish_bundle emits, so rejected rows, shard files and '
                  'validation problems would be lost or mixed up; use the DirectRunner '
                  'locally, or Dataflow, Flink, Spark or the PortableRunner',
}


def check_runner(runner) -> None:
  """UsageError for a runner that cannot run this pipeline."""
  name = str(runner or '').split('.')[-1]
  if name in UNSUPPORTED_RUNNERS:
    raise UsageError(f'--runner {name} cannot run this pipeline: {UNSUPPORTED_RUNNERS[name]}')


def local_defaults(given: dict) -> dict:
  """The Beam options a run uses: `given` (command line and --config, by option
  name) plus the local defaults, all of them here.

  No --runner: the DirectRunner (never a download). A local run: one in-process
  worker, or Beam's worker processes when --direct_num_workers asks for
  workers (its thread mode is what corrupted its data plane, see above).
  Worker logs: warnings and up.
  """
  options = dict(given)
  options.setdefault('runner', LOCAL_RUNNER)
  if is_local_runner(options['runner']):
    options.setdefault('direct_running_mode', 'multi_processing'
                       if 'direct_num_workers' in given else LOCAL_RUNNING_MODE)
  options.setdefault('default_sdk_harness_log_level', 'WARNING')
  return options


def single_local_worker(options: PipelineOptions) -> bool:
  """One in-process worker, which gets every element in one bundle: the writer
  can stream in write order. --direct_num_workers 2 (or 0: one per core) splits
  the input even in_memory, so it takes the distributed path."""
  direct = options.view_as(DirectOptions)
  return (is_local(options) and direct.direct_running_mode == 'in_memory'
          and direct.direct_num_workers == 1)


def is_local(options: PipelineOptions) -> bool:
  return is_local_runner(options.view_as(StandardOptions).runner)


def is_local_runner(runner) -> bool:
  # 'direct' too: Beam and local_runner.for_options accept it for the DirectRunner.
  return str(runner or '').split('.')[-1] in ('DirectRunner', 'FnApiRunner',
                                              'SwitchingDirectRunner', 'direct')


def is_dry_run(options: PipelineOptions) -> bool:
  """--dry_run=True on the DataflowRunner: the job is built, never submitted.

  Every other runner ignores the flag and runs the job in full.
  """
  runner = options.view_as(StandardOptions).runner or ''
  return bool(options.view_as(TestOptions).dry_run) and (
      runner.split('.')[-1] == 'DataflowRunner')


def dry_run_note(options: PipelineOptions, nothing: str) -> str:
  runner = options.view_as(StandardOptions).runner
  return f'Dry run: the {runner} job was built, not submitted; {nothing}.'


def configure_logging() -> None:
  """For the command line only: Beam's warnings (no GCP client, ...) are noise
  for users; errors still reach stderr. Importing our modules configures nothing."""
  logging.basicConfig(format='%(levelname)s: %(message)s')
  logging.getLogger().setLevel(logging.ERROR)


def main_with_exit_codes(run, argv=None) -> int:
  """Runs `run(argv)` and maps failures to exit codes: usage 2, crash 1."""
  argv = list(sys.argv[1:] if argv is None else argv)
  configure_logging()
  remember_method_signatures()
  try:
    return run(argv)
  except UsageError as error:
    print(f'error: {error}', file=sys.stderr)
    return EXIT_USAGE
  except KeyboardInterrupt:
    print('interrupted', file=sys.stderr)
    return EXIT_FAILED
  except Exception as error:  # a crash: say what failed, keep the detail
    print(f'error: the job failed: {type(error).__name__}: '
          f'{str(error).splitlines()[0] if str(error) else ""}', file=sys.stderr)
    traceback.print_exc(file=sys.stderr)
    return EXIT_FAILED
