"""inspect and export of a dataset on s3://, against a local moto server.

Neither command takes Beam's --s3_* options: boto3's own configuration (the
AWS_* variables, ~/.aws) reaches the bucket, as for any other S3 tool. Beam's
S3IO refused to be made without options (ValueError), which inspect and
export reported as `dataset_info.json is missing or unreadable (ValueError):
the dataset is incomplete or was never written`, exit 2, of a whole dataset;
inspect --files matched an s3:// pattern with Python's glob: "matches no file".
"""

from __future__ import annotations

import csv
import os
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import read_info
from tests.s3_server import ACCESS_KEY
from tests.s3_server import REGION
from tests.s3_server import SECRET_KEY
from tests.s3_server import running_moto

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('s3_inspect'),
              pytest.mark.integration]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = 'img2tfrecord-inspect'
PREFIX = 'sets/day 1'  # a space in the key, as object stores allow


@pytest.fixture(scope='module')
def server():
  with running_moto() as moto:
    yield moto


@pytest.fixture(scope='module')
def uploaded(server, converted_sample):
  """The nine-image sample converted locally, its files put under s3://BUCKET/PREFIX/."""
  sample, out = converted_sample('--height', '8', '--width', '8')
  client = server.client()
  client.create_bucket(Bucket=BUCKET)
  for path in sorted(pathlib.Path(out).iterdir()):
    client.put_object(Bucket=BUCKET, Key=f'{PREFIX}/{path.name}', Body=path.read_bytes())
  return sample, pathlib.Path(out)


def _run(server, module: str, *args: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, AWS_EC2_METADATA_DISABLED='true', AWS_CONFIG_FILE=os.devnull,
             AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_ENDPOINT_URL=server.endpoint,
             AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
             AWS_DEFAULT_REGION=REGION, NO_PROXY='127.0.0.1,localhost',
             no_proxy='127.0.0.1,localhost')
  for name in ('AWS_PROFILE', 'AWS_DEFAULT_PROFILE', 'AWS_SESSION_TOKEN',
               'AWS_ENDPOINT_URL_S3', 'HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy'):
    env.pop(name, None)
  return subprocess.run([sys.executable, '-m', module, *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=120)


def test_inspect_of_an_s3_dataset_counts_and_exports_its_records(server, uploaded, tmp_path):
  sample, out = uploaded
  export_dir = tmp_path / 'look'
  done = _run(server, 'pipeline.look', '--input_dir', f's3://{BUCKET}/{PREFIX}',
              '--export_dir', str(export_dir))
  assert done.returncode == 0, done.stderr[-3000:]
  info = read_info(out)
  assert info['num_examples'] == len(sample.labels) == 9
  assert 'train                9 examples' in done.stdout, done.stdout
  names = info['label_map']
  for label_id, name in enumerate(names):
    assert f'{label_id:>6d}  {name:20s}{3:>16d}{3:>16d}' in done.stdout, done.stdout
  with open(export_dir / 'samples.csv', newline='') as handle:
    rows = list(csv.DictReader(handle))
  assert len(rows) == 9
  assert sorted(r['key'] for r in rows) == sorted(sample.labels)
  for row in rows:
    assert row['class_text'] == sample.labels[row['key']]
    assert int(row['label']) == names.index(sample.labels[row['key']])


def test_inspect_files_lists_an_s3_pattern(server, uploaded):
  _, out = uploaded
  shards = read_info(out)['splits']['train']['shards']
  done = _run(server, 'pipeline.look', '--files', f's3://{BUCKET}/{PREFIX}/train-*.tfrecord',
              '--height', '8', '--width', '8')
  assert done.returncode == 0, done.stderr[-3000:]
  listed = [line[:-1] for line in done.stdout.splitlines() if line.startswith('s3://')]
  assert listed == [f's3://{BUCKET}/{PREFIX}/{shard}' for shard in sorted(shards)]
  assert done.stdout.count('  record 0:') == len(shards)


def test_inspect_files_of_an_s3_pattern_matching_nothing_is_one_line(server, uploaded):
  del uploaded
  done = _run(server, 'pipeline.look', '--files', f's3://{BUCKET}/{PREFIX}/none-*.tfrecord')
  assert done.returncode == 2
  assert done.stderr.strip().splitlines() == [
      f"error: --files 's3://{BUCKET}/{PREFIX}/none-*.tfrecord' matches no file"]


def test_export_tfds_of_an_s3_dataset_copies_its_shards(server, uploaded, tmp_path):
  _, out = uploaded
  target = tmp_path / 'tfds'
  done = _run(server, 'pipeline.export', '--format', 'tfds',
              '--input_dir', f's3://{BUCKET}/{PREFIX}', '--output_dir', str(target))
  assert done.returncode == 0, done.stderr[-3000:]
  shards = read_info(out)['splits']['train']['shards']
  assert shards
  for shard in shards:
    assert (target / shard).read_bytes() == (out / shard).read_bytes()


def test_inspect_report_of_an_s3_dataset_shows_its_validation(server, uploaded, tmp_path):
  """validation_report.json beside the shards on s3:// was looked for with
  os.path.exists: the page said 'Not validated yet' of a validated dataset."""
  from pipeline import validate
  from tests.conftest import copy_dataset
  _, out = uploaded
  local = copy_dataset(out, tmp_path)
  assert validate.main(['--input_dir', str(local)]) == 0
  server.client().put_object(Bucket=BUCKET, Key=f'{PREFIX}-validated/validation_report.json',
                             Body=(local / 'validation_report.json').read_bytes())
  for path in sorted(out.iterdir()):
    server.client().put_object(Bucket=BUCKET, Key=f'{PREFIX}-validated/{path.name}',
                               Body=path.read_bytes())
  export_dir = tmp_path / 'look'
  done = _run(server, 'pipeline.look', '--input_dir', f's3://{BUCKET}/{PREFIX}-validated',
              '--export_dir', str(export_dir))
  assert done.returncode == 0, done.stderr[-3000:]
  page = (export_dir / 'report.html').read_text()
  assert 'Not validated yet' not in page
  assert '<p id="validation" class="good">valid: 9 examples read, 0 problems.</p>' in page
