"""An s3:// store that answers 500 to the write of dataset_info.json (after
boto3's tries): convert exits 1 with one line in the store's words, no
traceback, and leaves no dataset_info.json (pipeline/runs/exits.py's
store_refused). It printed 243 lines: Beam's log of the upload's traceback,
the step's, then its line with S3ClientError's tuple, then the traceback.

A local moto server behind a proxy that refuses those writes.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from pipeline.errors import EXIT_FAILED
from tests.s3_server import RefusingProxy
from tests.s3_server import isolated_env
from tests.s3_server import running_moto

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('s3'), pytest.mark.integration]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = 'store-refuses'


@pytest.fixture(scope='module')
def server():
  with running_moto() as moto:
    from PIL import Image
    client = moto.client()
    client.create_bucket(Bucket=BUCKET)
    for i in range(3):
      buffer = io.BytesIO()
      Image.new('RGB', (16, 12), (i * 80, 0, 200)).save(buffer, format='PNG')
      client.put_object(Bucket=BUCKET, Key=f'data/{i}.png', Body=buffer.getvalue())
    manifest = 'image,label\n' + ''.join(f'{i}.png,{"ab"[i % 2]}\n' for i in range(3))
    client.put_object(Bucket=BUCKET, Key='data/manifest.csv', Body=manifest.encode())
    yield moto


def _convert_refused(server, tmp_path, out: str, refused: str):
  """convert to s3://BUCKET/out with the writes under `refused` answered 500:
  (the CompletedProcess, the keys left under out/)."""
  with RefusingProxy(server.endpoint, f'{BUCKET}/{refused}') as proxy:
    options = server.beam_options()
    options[options.index('--s3_endpoint_url') + 1] = proxy.endpoint
    result = subprocess.run(
        [sys.executable, '-m', 'pipeline.convert', '--runner', 'DirectRunner',
         '--manifest', f's3://{BUCKET}/data/manifest.csv', '--output_dir', f's3://{BUCKET}/{out}',
         '--height', '8', '--width', '8', '--progress', 'off', *options],
        cwd=ROOT, env=isolated_env(str(tmp_path)), capture_output=True, text=True, timeout=180)
  assert proxy.refused >= 1
  listed = server.client().list_objects_v2(Bucket=BUCKET, Prefix=f'{out}/').get('Contents', [])
  return result, [item['Key'] for item in listed]


def _failure_lines(result) -> list:
  """The lines of a failed convert's stderr (exit 1 asserted)."""
  assert result.returncode == EXIT_FAILED, result.stderr[-3000:]
  return result.stderr.splitlines()


def test_a_dataset_info_the_store_refuses_is_one_line_and_no_dataset_info(server, tmp_path):
  result, left = _convert_refused(server, tmp_path, 'out', 'out/dataset_info.json')
  assert _failure_lines(result) == [
      'error: the job failed: an object store request failed: An error occurred (InternalError) when '
      'calling the CreateMultipartUpload operation (reached max retries: 2): We encountered an '
      "internal error. [while running 'WriteDatasetInfo']"]
  assert 'out/dataset_info.json' not in left


def test_a_shard_rename_the_store_refuses_is_one_line_naming_both_paths(server, tmp_path):
  """Beam's BeamIOError holds the store's error for the rename (a copy on S3)."""
  result, left = _convert_refused(server, tmp_path, 'out2', 'out2/train-')
  assert _failure_lines(result) == [
      'error: the job failed: an object store request failed: renaming '
      f's3://{BUCKET}/out2/beam-temp-train-shards/00000.tfrecord to '
      f's3://{BUCKET}/out2/train-00000-of-00001.tfrecord: An error occurred (InternalError) '
      'when calling the CopyObject operation (reached max retries: 2): We encountered an '
      'internal error.']
  assert 'out2/dataset_info.json' not in left


def test_a_lock_the_store_refuses_is_one_line(server, tmp_path):
  """The lock's conditional put is botocore's own request (no Beam): a
  ClientError, which printed its traceback after the line."""
  result, left = _convert_refused(server, tmp_path, 'out3', 'out3/.convert.lock')
  assert _failure_lines(result) == [
      'error: the job failed: an object store request failed: An error occurred (InternalError) '
      'when calling the PutObject operation (reached max retries: 2): We encountered an '
      'internal error.']
  assert left == []
