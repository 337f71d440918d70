"""--runner, --direct_num_workers and Beam's type-check options checked as the
flags are read, before anything is locked or written: the runners refused and
why, names Beam does not know, module paths that do not import, a number of
local workers below 0 or more than the memory holds, type checks this
pipeline cannot pass."""

from __future__ import annotations

import importlib
import multiprocessing
from typing import Optional

from apache_beam.options.pipeline_options import StandardOptions

from pipeline.errors import UsageError
from transforms.core.redact import redact_text
from transforms.workers.pooled_step import available_memory_mib

# Runners that cannot run these pipelines, and why: refused before anything is written.
UNSUPPORTED_RUNNERS = {
    'DaskRunner': "Beam 2.77's DaskRunner merges tagged outputs into the main output and "
                  'drops what finish_bundle emits, so rejected rows, shard files and '
                  'validation problems would be lost or mixed up; use the DirectRunner '
                  'locally, or Dataflow, Flink, Spark or the PortableRunner',
    # Both failed every convert and validate, with a traceback after OUT was made.
    'BundleBasedDirectRunner': "Beam 2.77's BundleBasedDirectRunner fails on these "
                               'pipelines (convert: a KeyError in its watermark manager at '
                               "the manifest's read; validate: an AssertionError in its "
                               'GroupByKey); use the DirectRunner',
    'InteractiveRunner': "Beam's InteractiveRunner runs only pipelines a notebook's "
                         'Interactive Beam holds, and these are built out of its sight '
                         "(it failed: 'NoneType' object has no attribute 'visit'); use "
                         'the DirectRunner: pipeline.api runs it in a notebook',
}


def check_runner(runner) -> None:
  """UsageError for a runner that cannot run this pipeline, or that Beam does
  not know (it would raise a ValueError once the pipeline is made, after the
  output folder is locked)."""
  name = _unsupported(str(runner or '').split('.')[-1])
  if name:
    raise UsageError(f'--runner {name} cannot run this pipeline: {UNSUPPORTED_RUNNERS[name]}')
  if isinstance(runner, str) and '.' not in runner and not known_runner(runner):
    accepted = [r for r in StandardOptions.KNOWN_RUNNER_NAMES if r not in UNSUPPORTED_RUNNERS]
    raise UsageError(f'--runner {redact_text(runner)} is not a runner Beam knows: give one of '
                     f'{", ".join(accepted)} (any case, "Runner" may be left off), or the '
                     f'full module path of a PipelineRunner class')
  if isinstance(runner, str) and '.' in runner:
    _check_runner_path(runner)


def _unsupported(name: str) -> Optional[str]:
  """The UNSUPPORTED_RUNNERS entry `name` stands for, as Beam takes names: in
  any case, with or without 'Runner' (`interactive`, `bundlebaseddirect`)."""
  for unsupported in UNSUPPORTED_RUNNERS:
    if name.lower() in (unsupported.lower(), unsupported[:-len('Runner')].lower()):
      return unsupported
  return None


def _check_runner_path(runner: str) -> None:
  """A module path (pkg.module.SomeRunner): what Beam would import, imported
  now, so that a typo is one line before anything is locked (was Beam's
  ModuleNotFoundError or AttributeError traceback, exit 1)."""
  from apache_beam.runners.runner import PipelineRunner
  module, _, name = runner.rpartition('.')
  if not all(part.isidentifier() for part in runner.split('.')):
    # a URL, say: nothing to import, and its credentials are never shown
    raise UsageError(f'--runner {redact_text(runner)} is no module path of a runner class '
                     f'(pkg.module.SomeRunner)')
  try:
    found = getattr(importlib.import_module(module), name)
  except ImportError as error:
    raise UsageError(f'--runner {runner}: its module cannot be imported ({error})')
  except AttributeError:
    raise UsageError(f'--runner {runner}: module {module} has no {name}')
  if not (isinstance(found, type) and issubclass(found, PipelineRunner)):
    raise UsageError(f'--runner {runner} is no PipelineRunner class')


# The least memory one of Beam's local worker processes holds once it has
# imported Beam and the project: 125-139 MB RSS each, measured with
# --direct_num_workers in the hundreds (2 cores, 24 GiB, 2026-12-07).
WORKER_PROCESS_MIB = 100


def check_local_workers(options: dict, available_mib: Optional[int] = None,
                        host_cores: Optional[int] = None) -> None:
  """UsageError for a --direct_num_workers below 0 (0 means one per core):
  Beam starts no worker for it, and its job failed with an IndexError and a
  traceback (exit 1) after OUT was locked. In processes (multi_processing),
  also for more workers than the memory available holds at
  WORKER_PROCESS_MIB each (available_mib; None: this machine's): Beam starts
  them all at once, and `--direct_num_workers 100000` had the kernel kill
  the run (exit 137, nothing said) and other processes of the machine.
  0 counts as Beam counts it: one per core of the host (host_cores; None:
  multiprocessing.cpu_count()), not of a container's share of it."""
  workers = options.get('direct_num_workers')
  if workers is not None and int(workers) < 0:
    raise UsageError(f'--direct_num_workers {workers} is below 0: give a number of worker '
                     'processes, or 0 for one per core')
  if workers is None or options.get('direct_running_mode') != 'multi_processing':
    return
  available = available_memory_mib() if available_mib is None else available_mib
  cores = multiprocessing.cpu_count() if host_cores is None else host_cores
  started = int(workers) or cores
  if available is not None and started * WORKER_PROCESS_MIB > available:
    counted = '' if int(workers) else ' (one per core of the host)'
    zero = ', or 0 for one per core' if cores * WORKER_PROCESS_MIB <= available else ''
    raise UsageError(
        f'--direct_num_workers {workers} would start {started} worker processes{counted} of at '
        f'least {WORKER_PROCESS_MIB} MB each, more than the {available} MB of memory '
        f'available: give at most {max(1, available // WORKER_PROCESS_MIB)}{zero}')


def check_type_checks(options: dict) -> None:
  """UsageError for Beam's type-check options that fail every run, found by
  Beam only once the pipeline is built or run, after OUT was made (a
  traceback and exit 1, an empty OUT left): --runtime_type_check with
  --performance_runtime_type_check (Pipeline.run refuses the pair), and
  --type_check_strictness ALL_REQUIRED (its first transform without an
  output type hint, the manifest's read, raised TypeCheckError)."""
  if options.get('runtime_type_check') and options.get('performance_runtime_type_check'):
    raise UsageError('--runtime_type_check and --performance_runtime_type_check cannot both be '
                     'given (Beam refuses the pair): give one of them')
  if options.get('type_check_strictness') == 'ALL_REQUIRED':
    raise UsageError("--type_check_strictness ALL_REQUIRED: this pipeline's transforms do not "
                     'all declare an output type hint, so Beam would refuse it as it is '
                     'built; leave it at DEFAULT_TO_ANY (--runtime_type_check checks the '
                     'hints they have)')


def known_runner(name: str) -> bool:
  """Whether Beam makes a runner of this name without a module path: as its
  create_runner (apache_beam/runners/runner.py) looks names up, the class
  name of one of its known runners in any case, with or without 'Runner'."""
  known = {path.rsplit('.', 1)[-1].lower() for path in StandardOptions.ALL_KNOWN_RUNNERS}
  return name.lower() in known or name.lower() + 'runner' in known
