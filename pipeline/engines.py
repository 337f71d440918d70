"""The runners: which run locally, the local defaults, the ones refused, dry runs."""

from __future__ import annotations

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TestOptions

from pipeline import job_endpoint
from pipeline.beam_runtime import LOCAL_RUNNERS
from pipeline.cli import UsageError

LOCAL_RUNNER = 'DirectRunner'
# Local default: one in-process worker (no Beam data plane between threads or
# processes) whose image step uses every core itself (pool_size in
# transforms/workers/pooled_step.py). Measured on 2 cores, 3,000 JPEGs -> raw
# 300x300: 5.0 s against 6.3 s for --direct_running_mode multi_threading and
# 8.0 s for multi_processing; and multi_threading corrupted its data plane in 1
# of 3 runs of a 100,000-row manifest (cf. apache/beam#21104).
LOCAL_RUNNING_MODE = 'in_memory'


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


# What convert and validate check before anything is locked, created or
# written (check_before_submit): each takes (PipelineOptions, the
# --job_endpoint_connect_timeout in seconds) and raises UsageError (exit 2,
# one line) when the runner cannot take the job.
PRE_SUBMIT_CHECKS = (job_endpoint.check_answers,)


def check_before_submit(options: PipelineOptions, connect_timeout_s: float) -> None:
  """Runs every PRE_SUBMIT_CHECKS: a job service that does not answer is a
  usage error before OUT is touched, not a hang after it was locked."""
  for check in PRE_SUBMIT_CHECKS:
    check(options, connect_timeout_s)


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
  return str(runner or '').split('.')[-1] in LOCAL_RUNNERS


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
