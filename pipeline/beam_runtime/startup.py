"""What a command line run does before it imports Beam (so: no Beam here)."""

from __future__ import annotations

import contextlib
import importlib.abc
import logging
import sys

from pipeline.beam_runtime import LOCAL_RUNNERS
from pipeline.beam_runtime import runner_class_name
from transforms.core import paths

# Imported by `import apache_beam` for features a local run without gs:// or
# s3:// paths never uses: the GCS and S3 filesystems, BigQuery, Pub/Sub and
# Dataflow clients (google.cloud, apitools, boto3/botocore), MongoDB and
# Parquet IO (pymongo, pyarrow; a run naming a Parquet manifest keeps
# pyarrow, which reads it: names_parquet), and pandas (Beam's typehints for
# DataFrames; 0.15 s: a 10-image convert 0.96-1.02 against 1.08-1.13 s wall,
# four interleaved runs each). Beam imports each of them under a
# try/except ImportError and skips what is missing. Measured on 2 cores: the
# CPU time of importing Beam and the pipeline went from 1.55 s to 0.85 s.
# apache_beam.io.gcp.bigquery heads the block of `apache_beam.io` that also
# imports Pub/Sub, gcsio and the cross-language IOs under one try: without
# the cloud packages it still loaded requests, google.auth and BigQuery's
# own modules. Leaving it out took importing Beam from 1.14 to 0.96 s (wall,
# median of 4, idle machine). gcsio still comes with the gs:// filesystem.
DEFERRED = ('google.cloud', 'apitools', 'boto3', 'botocore', 'pymongo', 'pyarrow', 'pandas',
            'apache_beam.io.gcp.bigquery')
# Also LocalRunner (local_runner.py's class, by name); SwitchingDirectRunner, named
# by its full path, imports Beam whole as before.
_LOCAL_RUNNERS = tuple(r for r in LOCAL_RUNNERS if r != 'SwitchingDirectRunner') + ('LocalRunner',)


def needs_cloud(argv: list) -> bool:
  """A non-local --runner, any argument naming a URL (gs://, s3://, an
  endpoint) or a --config file: then Beam is imported whole."""
  for i, arg in enumerate(argv):
    if paths.is_remote(arg) or arg == '--config' or arg.startswith('--config='):
      return True  # a --config file may name URLs or a runner: no guessing
    runner = None
    if arg == '--runner' and i + 1 < len(argv):
      runner = argv[i + 1]
    elif arg.startswith('--runner='):
      runner = arg.split('=', 1)[1]
    if runner is not None and runner_class_name(runner) not in _LOCAL_RUNNERS:
      return True
  return False


def names_parquet(argv: list) -> bool:
  """A Parquet manifest (a .parquet name, or --manifest_format parquet): the
  run reads it with pyarrow, which Beam then imports with its Parquet IO."""
  return any(arg.endswith('.parquet') or arg in ('parquet', '--manifest_format=parquet')
             for arg in argv)


class _Refuse(importlib.abc.MetaPathFinder):
  """Makes the deferred packages look absent while it is installed."""

  def __init__(self, deferred: tuple = DEFERRED):
    self._deferred = deferred

  def find_spec(self, name, path=None, target=None):
    del path, target
    if any(name == d or name.startswith(d + '.') for d in self._deferred):
      raise ModuleNotFoundError(f'{name} deferred by pipeline.beam_runtime.startup', name=name)


def begin(argv: list) -> None:
  """Before an entry point imports Beam: leave out DEFERRED unless the run
  needs them (see needs_cloud), until end()."""
  if 'apache_beam' in sys.modules or needs_cloud(argv):
    return
  if not any(isinstance(f, _Refuse) for f in sys.meta_path):
    parquet = names_parquet(argv)
    sys.meta_path.insert(0, _Refuse(tuple(d for d in DEFERRED
                                          if not (parquet and d == 'pyarrow'))))
    # Beam logs each package it found missing ("Failed to import
    # GCSFileSystem", "apitools not found", ...): noise for a run that never
    # needs them.
    logging.disable(logging.WARNING)


def end() -> None:
  """Once Beam is imported: every import works again. A gs:// or s3:// path
  met later (an image listed in a local manifest) loads its filesystem then
  (transforms.filesystem.load_filesystem)."""
  if any(isinstance(f, _Refuse) for f in sys.meta_path):
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Refuse)]
    logging.disable(logging.NOTSET)


@contextlib.contextmanager
def deferred_cloud_imports(argv: list):
  """begin(argv) ... end() around the imports of an entry point."""
  begin(argv)
  try:
    yield
  finally:
    end()
