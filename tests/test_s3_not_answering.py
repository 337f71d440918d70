"""An s3:// store that stops answering in the middle of a convert: the run
ends by itself within a bounded time, with one line and exit 4, or at once
on SIGTERM, and leaves nothing in TMPDIR (transforms/s3_client.py).

A local moto server behind a CuttingProxy that stops answering as the first
image is asked for: its connections refused (a server stopped), or taken
and never answered. The time limits only prove that the run does not wait
minutes (it did for over 12: boto3's and Beam's retries, each with a
traceback logged).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_STORE_NOT_ANSWERING
from tests.s3_server import CuttingProxy
from tests.s3_server import isolated_env
from tests.s3_server import running_moto

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('s3'), pytest.mark.integration]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = 'stops-answering'
IMAGES = 40
# Far more than the bounded waits (3 tries of 10 s to connect or 20 s per
# read, and the backoff), far less than the 12 minutes before.
LIMIT_S = 180


@pytest.fixture(scope='module')
def server():
  with running_moto() as moto:
    from PIL import Image
    client = moto.client()
    client.create_bucket(Bucket=BUCKET)
    for i in range(IMAGES):
      buffer = io.BytesIO()
      Image.new('RGB', (32, 24), (i * 6, 0, 255 - i * 6)).save(buffer, format='PNG')
      client.put_object(Bucket=BUCKET, Key=f'data/images/{i}.png', Body=buffer.getvalue())
    manifest = 'image,label\n' + ''.join(f'images/{i}.png,{"ab"[i % 2]}\n' for i in range(IMAGES))
    client.put_object(Bucket=BUCKET, Key='data/manifest.csv', Body=manifest.encode())
    yield moto


def _env(temp: str) -> dict:
  """Only the --s3_* options configure S3; the run's TMPDIR is `temp`."""
  return isolated_env(temp)


def _convert(server, endpoint: str, out: str, temp, *extra: str) -> subprocess.Popen:
  temp.mkdir(exist_ok=True)
  options = server.beam_options()
  options[options.index('--s3_endpoint_url') + 1] = endpoint
  return subprocess.Popen(
      [sys.executable, '-m', 'pipeline.convert', '--manifest',
       f's3://{BUCKET}/data/manifest.csv', '--output_dir', f's3://{BUCKET}/{out}',
       '--height', '8', '--width', '8', '--progress', 'off', *extra, *options],
      cwd=ROOT, env=_env(str(temp)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ended(process: subprocess.Popen) -> tuple:
  try:
    return process.communicate(timeout=LIMIT_S)
  except subprocess.TimeoutExpired:
    process.kill()
    _, stderr = process.communicate()
    pytest.fail(f'still running after {LIMIT_S} s\n--- stderr\n{stderr[-4000:]}')


def _keys(server, prefix: str) -> list:
  listing = server.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix)
  return sorted(item['Key'][len(prefix):] for item in listing.get('Contents', []))


@pytest.mark.parametrize('mode', ['refuse', 'hang'])
def test_a_store_that_stops_answering_ends_the_run_with_exit_4(server, tmp_path, mode):
  out = f'out-{mode}'
  with CuttingProxy(server.endpoint, b'/images/', mode) as proxy:
    process = _convert(server, proxy.endpoint, out, tmp_path / 'temp')
    stdout, stderr = _ended(process)
    assert proxy.cut.is_set()
  explain = f'exit {process.returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}'
  assert process.returncode == EXIT_STORE_NOT_ANSWERING, explain
  assert 'Traceback' not in stderr, explain
  errors = [line for line in stderr.splitlines() if line.startswith('error: ')]
  assert errors == [line for line in errors if line.startswith(
      f'error: the job failed: the S3 endpoint {proxy.endpoint} stopped answering: ')], explain
  assert len(errors) == 1 and errors[0].endswith(
      '(after 3 tries of 10 s to connect and 20 s per read)'), explain
  assert (f'note: s3://{BUCKET}/{out} was left as it is: its store stopped answering before '
          f'the run could remove what it wrote there') in stderr, explain
  assert len(stderr.splitlines()) == 2, explain  # the note and the error, nothing else
  assert os.listdir(tmp_path / 'temp') == []
  # What was left (its lock among it) is taken over with --overwrite
  assert [key for key in _keys(server, f'{out}/') if key.startswith('.convert.lock.')]
  again = _convert(server, server.endpoint, out, tmp_path / 'temp', '--overwrite')
  stdout, stderr = _ended(again)
  assert again.returncode == EXIT_OK, stderr
  assert f'Converted {IMAGES} of {IMAGES} rows' in stdout, stdout
  assert not [key for key in _keys(server, f'{out}/') if key.startswith('.convert.lock.')]


def test_sigterm_while_the_store_hangs_ends_the_run_promptly(server, tmp_path):
  out = 'out-sigterm'
  with CuttingProxy(server.endpoint, b'/images/', 'hang') as proxy:
    process = _convert(server, proxy.endpoint, out, tmp_path / 'temp')
    deadline = time.monotonic() + LIMIT_S
    while not proxy.cut.is_set() and process.poll() is None and time.monotonic() < deadline:
      time.sleep(0.05)
    assert proxy.cut.is_set(), process.poll()
    time.sleep(1)  # the run's threads waiting on the store
    process.send_signal(signal.SIGTERM)
    stdout, stderr = _ended(process)
  explain = f'exit {process.returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}'
  assert process.returncode == -signal.SIGTERM, explain
  assert 'Traceback' not in stderr, explain
  assert stderr.splitlines()[-1] == 'interrupted: nothing was published; rerun to convert again', explain
  assert os.listdir(tmp_path / 'temp') == []
