"""Start-up cuts: Beam imported without unused cloud packages, the local runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from apache_beam.options.pipeline_options import PipelineOptions
import pytest

from pipeline.beam_runtime import local_runner
from pipeline.beam_runtime import startup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize('argv, needed', [
    (['--manifest', 'm.csv', '--output_dir', 'out'], False),
    (['--manifest', 'm.csv', '--runner', 'DirectRunner'], False),
    (['--manifest', 'm.csv', '--runner=FnApiRunner'], False),
    (['--manifest', 'gs://b/m.csv', '--output_dir', 'out'], True),
    (['--manifest', 'm.csv', '--output_dir=s3://b/out'], True),
    (['--manifest', 'm.csv', '--s3_endpoint_url', 'http://127.0.0.1:9000'], True),
    (['--manifest', 'm.csv', '--runner', 'DataflowRunner'], True),
    (['--manifest', 'm.csv', '--runner=PortableRunner'], True),
    (['--config', 'run.yaml'], True),
    (['--config=run.yaml'], True),
])
def test_cloud_packages_are_needed_for_urls_and_distributed_runners(argv, needed):
  assert startup.needs_cloud(argv) is needed


# In a fresh interpreter: what `import apache_beam` loads between begin() and end(),
# and whether an s3:// filesystem can still be had afterwards.
_SCRIPT = """
import json, sys
from pipeline.beam_runtime import startup
startup.begin(sys.argv[1:])
import apache_beam
from apache_beam.io.filesystems import FileSystems
startup.end()
heavy = ('google.cloud.storage', 'google.cloud.bigquery', 'apitools', 'boto3', 'botocore',
         'pymongo', 'pyarrow', 'pandas', 'apache_beam.io.gcp.bigquery', 'requests',
         'google.auth')
loaded = [m for m in heavy if m in sys.modules]  # google.cloud itself: a namespace
from transforms import filesystem
filesystem.load_filesystem('s3://bucket/key.jpg')
s3 = type(FileSystems.get_filesystem('s3://bucket/key.jpg')).__name__
filesystem.load_filesystem('gs://bucket/key.jpg')
gcs = type(FileSystems.get_filesystem('gs://bucket/key.jpg')).__name__
# An S3 client can be made (Beam's client module kept `boto3 = None` from a
# deferred import: "Missing boto3 requirement"); making one sends no request.
from apache_beam.io.aws import s3io
from apache_beam.options.pipeline_options import PipelineOptions
s3io.S3IO(options=PipelineOptions(['--s3_region_name', 'us-east-1',
                                   '--s3_endpoint_url', 'http://127.0.0.1:9']))
print(json.dumps([loaded, s3, gcs]))
"""


def _fresh_import(argv: list) -> list:
  out = subprocess.run([sys.executable, '-c', _SCRIPT] + argv, cwd=ROOT, check=True,
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
  assert 'Failed to import' not in out.stderr and 'not found' not in out.stderr, out.stderr
  return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.integration  # Beam in a subprocess
def test_local_run_imports_beam_without_cloud_packages_and_loads_s3_on_demand():
  loaded, s3, gcs = _fresh_import(['--manifest', 'm.csv'])
  assert loaded == []
  assert (s3, gcs) == ('S3FileSystem', 'GCSFileSystem')


@pytest.mark.integration  # Beam in a subprocess
def test_run_naming_a_url_imports_beam_whole():
  loaded, s3, gcs = _fresh_import(['--manifest', 'gs://bucket/m.csv'])
  assert {'google.cloud.storage', 'boto3', 'apache_beam.io.gcp.bigquery'} <= set(loaded)
  assert (s3, gcs) == ('S3FileSystem', 'GCSFileSystem')


@pytest.mark.parametrize('runner, local', [
    ('DirectRunner', True), ('direct', True),
    ('apache_beam.runners.direct.direct_runner.SwitchingDirectRunner', True),
    ('PortableRunner', False), ('DataflowRunner', False),
])
def test_direct_runner_runs_as_the_local_runner(runner, local):
  made = local_runner.for_options(PipelineOptions(['--runner', runner]))
  assert isinstance(made, local_runner.LocalRunner) if local else made is None
