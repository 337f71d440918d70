"""What both entry points share: argument parsing, local defaults, exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TestOptions
from apache_beam.options.pipeline_options import WorkerOptions
from apache_beam.options.pipeline_options import _BeamArgumentParser

EXIT_OK = 0
EXIT_FAILED = 1  # convert: crashed; validate: the dataset has problems
EXIT_USAGE = 2
EXIT_OVER_BUDGET = 3

LOCAL_RUNNER = 'DirectRunner'
# Local default: one in-process worker (no Beam data plane between threads or
# processes) whose image step uses every core itself (image_threads and
# image_processes below). Measured on 2 cores, 3,000 JPEGs -> raw 300x300: 5.0 s against
# 6.3 s for --direct_running_mode multi_threading and 8.0 s for
# multi_processing; and multi_threading corrupted its data plane in 1 of 3
# runs of a 100,000-row manifest (cf. apache/beam#21104).
LOCAL_RUNNING_MODE = 'in_memory'


class UsageError(Exception):
  """Bad flags or unusable input: exit 2 with one line, before any work."""


class _UsageParser(_BeamArgumentParser):

  def error(self, message):
    raise UsageError(message)


def _option_classes(options_cls):
  """Beam's own option classes plus ours (not the other entry point's)."""
  classes = {str(options_cls): options_cls}
  for cls in PipelineOptions.__subclasses__():
    if cls.__module__.startswith('apache_beam'):
      classes.setdefault(str(cls), cls)
  return classes.values()


def parse_options(argv: list, options_cls, description: str):
  """Splits argv into our options (a namespace) and Beam PipelineOptions.

  Every flag must be known to our options or to some Beam options class;
  anything else is a usage error rather than silently discarded.
  """
  if any(arg in ('-h', '--help') for arg in argv):
    own = argparse.ArgumentParser(description=description,
                                  epilog='Any Beam pipeline option is accepted too '
                                  '(--runner, --direct_num_workers, --temp_location, ...).')
    options_cls._add_argparse_args(own)  # pylint: disable=protected-access
    own.print_help()
    raise SystemExit(EXIT_OK)
  parser = _UsageParser(allow_abbrev=False)
  for cls in _option_classes(options_cls):
    cls._add_argparse_args(parser)  # pylint: disable=protected-access
  _, unknown = parser.parse_known_args(argv)
  if unknown:
    raise UsageError(f'unrecognized argument {unknown[0]!r}')
  own = _UsageParser(allow_abbrev=False)
  options_cls._add_argparse_args(own)  # pylint: disable=protected-access
  ours, _ = own.parse_known_args(argv)
  pipeline_options = local_defaults(PipelineOptions(argv), argv)
  # The launcher reads the manifest header, lists the output folder and reads
  # dataset_info.json before any Pipeline exists (which is what normally hands
  # the options to the filesystems): s3:// needs its endpoint and keys here.
  FileSystems.set_options(pipeline_options)
  return ours, pipeline_options


def _given(argv: list, flag: str) -> bool:
  return any(a == flag or a.startswith(flag + '=') for a in argv)


def local_defaults(options: PipelineOptions, argv: list) -> PipelineOptions:
  """No --runner: the DirectRunner (never a download), one in-process worker."""
  if not _given(argv, '--runner'):
    options.view_as(StandardOptions).runner = LOCAL_RUNNER
  if is_local(options):
    direct = options.view_as(DirectOptions)
    if not _given(argv, '--direct_running_mode'):
      # Asking for workers means Beam's worker processes; its thread mode is
      # what corrupted its data plane (see above).
      direct.direct_running_mode = (
          'multi_processing' if _given(argv, '--direct_num_workers') else LOCAL_RUNNING_MODE)
  if not _given(argv, '--default_sdk_harness_log_level'):
    options.view_as(WorkerOptions).default_sdk_harness_log_level = 'WARNING'
  return options


def image_threads(requested: int, options: PipelineOptions) -> int:
  """Threads converting images inside one worker; 0 means: cores + 1 when the
  run is a single local worker, else 1 (the runner parallelises).

  The extra thread covers the worker's own thread, which holds the GIL for
  Beam's per-element work: 3,000 JPEGs on 2 cores took 5.7 s with 2 threads,
  5.25 s with 3 and 5.5 s with 4.
  """
  if requested:
    return requested
  return (os.cpu_count() or 1) + 1 if single_local_worker(options) else 1


def image_processes(requested: int, threads_requested: int, encoding: str,
                    options: PipelineOptions) -> int:
  """Child processes converting images; 0 means: one per core for JPEG/PNG
  output on a single local worker (unless threads were asked for), else none.

  Measured on 2 cores, 3,000 JPEGs -> JPEG 224x224: the image stage took
  3.18 s in processes against 3.58 s on threads (Pillow's Python parts
  share the GIL). Raw 300x300 output was slower in processes (4.18 s against
  3.79 s): 270 KB of pixels per image cost more to pass back than the GIL.
  """
  if requested:
    return requested
  if threads_requested or encoding == 'raw' or not single_local_worker(options):
    return 0
  return os.cpu_count() or 1


def single_local_worker(options: PipelineOptions) -> bool:
  direct = options.view_as(DirectOptions)
  return is_local(options) and direct.direct_running_mode == 'in_memory'


def is_local(options: PipelineOptions) -> bool:
  runner = options.view_as(StandardOptions).runner or ''
  return runner.split('.')[-1] in ('DirectRunner', 'FnApiRunner',
                                   'SwitchingDirectRunner')


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


def quiet_logging():
  """Beam's import-time warnings (no GCP client, ...) are noise for users."""
  logging.getLogger().setLevel(logging.ERROR)


def main_with_exit_codes(run, argv=None) -> int:
  """Runs `run(argv)` and maps failures to exit codes: usage 2, crash 1."""
  argv = list(sys.argv[1:] if argv is None else argv)
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
