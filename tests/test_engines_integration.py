"""convert and validate on a real Flink (embedded in its job server) and a
real Spark (local), launched with nothing but --runner, as a user would: the
launcher finds Java, takes the job server from the cache (fetching it with
Maven the first time) and fills in the rest (pipeline/engines/runners.py).

make test-integration runs these (minutes: a JVM, a job server and an engine
per run); make test leaves them out.
"""

from __future__ import annotations

import http.server
import os
import pathlib
import signal
import subprocess
import sys
import threading
import uuid

import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import COLOURS
from tests.conftest import read_info
from tests.conftest import write_image
from tests.conftest import write_manifest
from transforms.workers.pooled_step import available_cores

# One engine at a time: each wants both cores.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group('engines')]

REPO = pathlib.Path(__file__).resolve().parents[1]
FLAGS = ('--height', '16', '--width', '16', '--max_error_rate', '0.5')
RUN_TIMEOUT = 900.0  # a cold job server fetch (~1 min) plus a run (~1-2 min on a busy machine)


@pytest.fixture(scope='module')
def images(tmp_path_factory) -> pathlib.Path:
  """Six PNGs of two classes and a row whose file is missing."""
  root = tmp_path_factory.mktemp('engine-images')
  rows = []
  for i in range(6):
    name = ('blue', 'red')[i % 2]
    write_image(root / f'images/{name}_{i}.png', COLOURS[name], size=(24 + 5 * i, 18 + 3 * i))
    rows.append((f'images/{name}_{i}.png', name))
  rows.append(('images/gone.png', 'red'))
  return write_manifest(root / 'manifest.csv', rows)


@pytest.fixture(scope='module')
def local(images, tmp_path_factory) -> pathlib.Path:
  """The same dataset from the DirectRunner, in this process."""
  out = tmp_path_factory.mktemp('engine-local') / 'out'
  assert convert.main(['--manifest', str(images), '--output_dir', str(out),
                       *FLAGS]) == EXIT_OK
  return out


def run_module(module: str, *args) -> subprocess.CompletedProcess:
  """Runs `python -m module args`, then checks that it left no process behind
  (its job server JVM, say): each process it started inherits a marker in
  its environment."""
  marker = f'IMG2TFRECORD_TEST_RUN={uuid.uuid4().hex}'
  env = {**os.environ, marker.split('=', maxsplit=1)[0]: marker.split('=')[1]}
  result = subprocess.run([sys.executable, '-m', module, *map(str, args)], cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)
  assert processes_with(marker) == [], f'{module} left processes running\n{describe(result)}'
  return result


def processes_with(marker: str) -> list:
  """The command lines of the live processes whose environment holds `marker`."""
  found = []
  for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
      with open(f'/proc/{pid}/environ', 'rb') as handle:
        if marker.encode() not in handle.read().split(b'\0'):
          continue
      with open(f'/proc/{pid}/cmdline', 'rb') as handle:
        found.append(handle.read().replace(b'\0', b' ').decode(errors='replace')[:200])
    except OSError:  # gone meanwhile, or not ours to read
      continue
  return found


def describe(result: subprocess.CompletedProcess) -> str:
  return (f'exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}'
          f'\n--- stderr\n{result.stderr[-5000:]}')


@pytest.mark.parametrize('runner, master', [
    ('FlinkRunner', '[local]'), ('SparkRunner', f'local[{available_cores()}]')])
def test_convert_and_validate(runner, master, images, local, tmp_path):
  out = tmp_path / 'out'
  java_temp = set(_java_temp_files())
  converted = run_module('pipeline.convert', '--manifest', images, '--output_dir', out,
                         *FLAGS, '--runner', runner)
  assert converted.returncode == EXIT_OK, describe(converted)
  # the job server's JVM kept its temp files in the run's own temp folder (a
  # Flink job server unpacked a 21 MB jar into /tmp on every run and left it)
  assert set(_java_temp_files()) - java_temp == set()
  assert 'Converted 6 of 7 rows' in converted.stdout, describe(converted)
  assert 'Traceback' not in converted.stderr, describe(converted)
  engine = read_info(out)['engine']
  assert engine['runner'] == runner and engine['master'] == master
  assert engine['environment_type'] == 'LOOPBACK'
  assert engine['job_server']['origin'] in ('maven', 'assembled'), engine
  # The same bytes as the local run: shards and rejected rows.
  names = sorted(p.name for p in local.iterdir() if p.name != 'dataset_info.json')
  assert sorted(p.name for p in out.iterdir() if p.name != 'dataset_info.json') == names
  for name in names:
    assert (out / name).read_bytes() == (local / name).read_bytes(), name

  validated = run_module('pipeline.validate', '--input_dir', out, '--runner', runner)
  assert validated.returncode == EXIT_OK, describe(validated)
  assert 'OK: 6 examples (train 6)' in validated.stdout, describe(validated)


def _java_temp_files() -> list:
  """What Flink's and Spark's JVMs leave in Java's default temp folder."""
  return [name for name in os.listdir('/tmp') if name.startswith(('flink-rpc-akka', 'spark-'))]


def test_a_launcher_started_with_sigint_ignored_keeps_ignoring_it(images, local, tmp_path):
  """Run in the background by a script or nohup: a SIGINT once the Flink job
  server is up does not stop the run (Beam's job server handler is kept off)."""
  import time
  out = tmp_path / 'out'
  marker = f'IMG2TFRECORD_TEST_RUN={uuid.uuid4().hex}'
  env = {**os.environ, marker.split('=', maxsplit=1)[0]: marker.split('=')[1]}
  # As a non-interactive shell starts a background job: SIGINT ignored, then exec.
  launcher = subprocess.Popen(
      ['sh', '-c', 'trap "" INT; exec "$0" "$@"', sys.executable, '-m', 'pipeline.convert',
       '--manifest', str(images), '--output_dir', str(out), *FLAGS, '--runner', 'FlinkRunner'],
      cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + RUN_TIMEOUT
  while launcher.poll() is None and not any(
          'java' in line for line in processes_with(marker)) and time.monotonic() < deadline:
    time.sleep(0.2)
  time.sleep(3)  # the job server started: Beam has installed its handler by now
  launcher.send_signal(signal.SIGINT)
  stdout, stderr = launcher.communicate(timeout=RUN_TIMEOUT)
  result = subprocess.CompletedProcess(launcher.args, launcher.returncode, stdout, stderr)
  assert launcher.returncode == EXIT_OK, describe(result)
  assert 'Converted 6 of 7 rows' in stdout, describe(result)
  assert processes_with(marker) == []
  for name in ('train-00000-of-00001.tfrecord', 'rejected.jsonl'):
    assert (out / name).read_bytes() == (local / name).read_bytes(), name


class HeldServer:
  """An HTTP server on 127.0.0.1 whose every GET waits until the test ends
  (then answers 404): a run with a row of its URL is running, and cannot
  end, from the first request on. Sleeping a second after the job started
  was not enough: under load a 600-row Flink job had published by then."""

  def __init__(self):
    self.asked = threading.Event()
    self.released = threading.Event()
    held = self

    class Handler(http.server.BaseHTTPRequestHandler):

      def log_message(self, *args):
        pass

      def do_GET(self):
        held.asked.set()
        held.released.wait(RUN_TIMEOUT)
        self.send_error(404)

    self._server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    self._server.daemon_threads = True
    self.url = f'http://127.0.0.1:{self._server.server_address[1]}/held.png'
    self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *_):
    self.released.set()
    self._server.shutdown()
    self._server.server_close()


@pytest.fixture
def held(images, tmp_path):
  """(the server, a manifest of the six images and a row of its URL)."""
  lines = images.read_text().splitlines()
  with HeldServer() as server:
    manifest = images.parent / f'held-{uuid.uuid4().hex}.csv'  # its paths are relative to it
    manifest.write_text('\n'.join([*lines, f'{server.url},red']) + '\n')
    yield server, manifest
    manifest.unlink()


def _start_held(held, out: pathlib.Path, marker: str, **popen) -> subprocess.Popen:
  """convert on Flink of the held manifest, returned once the job asked for
  the held URL: running, and not able to end."""
  import time
  server, manifest = held
  env = {**os.environ, marker.split('=', maxsplit=1)[0]: marker.split('=')[1],
         **popen.pop('env', {})}
  launcher = subprocess.Popen(
      [sys.executable, '-m', 'pipeline.convert', '--manifest', str(manifest),
       '--output_dir', str(out), *FLAGS, '--http_timeout_s', str(RUN_TIMEOUT),
       '--runner', 'FlinkRunner'],
      cwd=REPO, env=env, stdin=subprocess.DEVNULL, **popen)
  deadline = time.monotonic() + RUN_TIMEOUT
  while launcher.poll() is None and not server.asked.wait(0.2) and (
          time.monotonic() < deadline):
    pass
  assert launcher.poll() is None and server.asked.is_set(), 'the job never asked for the URL'
  return launcher


@pytest.mark.parametrize('signum, whole_group', [
    (signal.SIGINT, True),  # Ctrl-C in a terminal: the launcher's group (its JVM has its own session)
    (signal.SIGINT, False),  # kill -INT on the launcher alone
    (signal.SIGTERM, False),
])
def test_an_interrupted_flink_run_cancels_its_job_and_says_one_line(
        signum, whole_group, held, tmp_path):
  """The job is cancelled through its job server, then the job server stops:
  one line, the exit by the signal, nothing published, no process left. A
  terminal's Ctrl-C once hung the launcher for good (Beam's SIGINT handler
  waited for a lock its own thread held)."""
  import time
  out = tmp_path / 'out'
  marker = f'IMG2TFRECORD_TEST_RUN={uuid.uuid4().hex}'
  launcher = _start_held(held, out, marker, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
  if whole_group:
    os.killpg(launcher.pid, signum)
  else:
    launcher.send_signal(signum)
  stdout, stderr = launcher.communicate(timeout=120)
  result = subprocess.CompletedProcess(launcher.args, launcher.returncode, stdout, stderr)
  assert launcher.returncode == -signum, describe(result)
  assert stderr.strip() == 'interrupted: nothing was published; rerun to convert again', (
      describe(result))
  deadline = time.monotonic() + 60  # the JVM's last moments
  while _alive(processes_with(marker)) and time.monotonic() < deadline:
    time.sleep(0.5)
  assert _alive(processes_with(marker)) == []
  assert not out.exists() or list(out.iterdir()) == []


def test_a_killed_launcher_takes_its_job_server_with_it(held, tmp_path):
  """SIGKILL runs no clean-up, but the job server's JVM gets SIGTERM when
  its launcher dies (job_server_launcher.py) and ends; so do the image
  worker processes. What a killed run leaves in OUT is for --overwrite."""
  import time
  marker = f'IMG2TFRECORD_TEST_RUN={uuid.uuid4().hex}'
  # SIGKILL leaves the run's private temp folder: in a TMPDIR of its own
  (tmp_path / 'temp').mkdir()
  launcher = _start_held(held, tmp_path / 'out', marker, env={'TMPDIR': str(tmp_path / 'temp')},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  assert any('java' in line for line in processes_with(marker))
  launcher.kill()
  assert launcher.wait(timeout=30) == -signal.SIGKILL
  deadline = time.monotonic() + 60  # the JVM's shutdown
  while _alive(processes_with(marker)) and time.monotonic() < deadline:
    time.sleep(0.5)
  assert _alive(processes_with(marker)) == []


def _alive(command_lines: list) -> list:
  """Those not ended: a process reparented to an init that does not reap
  shows as a zombie with an empty command line."""
  return [line for line in command_lines if line.strip()]


@pytest.mark.parametrize('runner', ['FlinkRunner', 'SparkRunner'])
def test_a_nightly_run_on_an_engine_copies_unchanged_records(runner, images, local, tmp_path):
  """--previous_dataset on a distributed runner (the copy by shard, in
  parallel): night 2, one row relabelled and one deleted, writes the bytes a
  full local run of night 2 writes, with the unchanged rows' records copied."""
  lines = images.read_text().splitlines()
  night2 = images.parent / f'night2-{runner}.csv'  # its paths are relative to it
  relabelled = lines[1].rsplit(',', 1)[0] + ',red'  # was blue
  night2.write_text('\n'.join([lines[0], relabelled, *lines[3:]]) + '\n')
  full = tmp_path / 'full'
  assert convert.main(['--manifest', str(night2), '--output_dir', str(full), *FLAGS]) == EXIT_OK
  out = tmp_path / 'out'
  result = run_module('pipeline.convert', '--manifest', night2, '--output_dir', out, *FLAGS,
                      '--previous_dataset', local, '--runner', runner)
  assert result.returncode == EXIT_OK, describe(result)
  reuse = read_info(out)['reuse']
  # encoded: the relabelled row; the row whose file is missing is rejected
  # again, counted as rejected, not as new
  assert (reuse['reused'], reuse['num_encoded'], reuse['rejected'], reuse['dropped']) == (
      4, 1, 1, 1), reuse
  assert (reuse['encoded']['changed_label'], reuse['encoded']['new']) == (1, 0), reuse
  names = sorted(p.name for p in full.iterdir() if p.name != 'dataset_info.json')
  assert sorted(p.name for p in out.iterdir() if p.name != 'dataset_info.json') == names
  for name in names:
    assert (out / name).read_bytes() == (full / name).read_bytes(), name


@pytest.mark.parametrize('runner, prop, said', [
    ('FlinkRunner', '-Xmx1m', 'Error occurred during initialization of VM; Too small maximum heap'),
    ('SparkRunner', '-XX:+NoSuchOption', "Unrecognized VM option 'NoSuchOption'; Error: Could "
     'not create the Java Virtual Machine.; Error: A fatal exception has occurred. Program '
     'will exit.')])
def test_a_job_server_java_cannot_start_is_one_line(runner, prop, said, images, tmp_path):
  """A real JVM that ends as the job server starts: exit 1 after Beam's three
  tries, three `Failed to start job service with (...)` lines and a traceback
  of 50 lines ending `Service failed to start up with error 1`; now what Java
  said, in one line, exit 2, no process left."""
  out = tmp_path / 'out'
  result = run_module('pipeline.convert', '--manifest', images, '--output_dir', out, *FLAGS,
                      '--runner', runner, f'--job_server_jvm_properties={prop}')
  assert result.returncode == 2, describe(result)
  assert result.stderr.splitlines() == [
      f'error: the {runner[:-len("Runner")]} job server ended as it started (Java exited with '
      f'status 1): {said}'], describe(result)
  assert not (out / 'dataset_info.json').exists()


@pytest.mark.parametrize('runner', ['FlinkRunner', 'SparkRunner'])
def test_a_manifest_cut_short_is_the_local_runs_one_line(runner, images, tmp_path):
  """A .gz manifest cut short: the DirectRunner's one line, exit 1; on Flink
  and Spark it was 63 lines (the harness's and the job service's logged
  tracebacks) above `error: the job failed: RuntimeError: Pipeline BeamApp-...
  failed in state FAILED: java.lang.RuntimeException: Error received from SDK
  harness for instruction 3: transforms.core.line_ranges.ManifestCutShortError: ...`."""
  import gzip
  data = gzip.compress(images.read_bytes() * 40)
  cut = images.parent / f'cut-{runner}.csv.gz'  # its paths are relative to it
  cut.write_bytes(data[:len(data) * 2 // 3])
  out = tmp_path / 'out'
  local = subprocess.run([sys.executable, '-m', 'pipeline.convert', '--manifest', str(cut),
                          '--output_dir', str(tmp_path / 'local'), *FLAGS], cwd=REPO,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT, check=False)
  result = run_module('pipeline.convert', '--manifest', cut, '--output_dir', out, *FLAGS,
                      '--runner', runner)
  cut.unlink()
  assert (local.returncode, result.returncode) == (1, 1), describe(result)
  (line,) = local.stderr.splitlines()
  assert line.startswith('error: the job failed: ManifestCutShortError: manifest '), line
  assert result.stderr.splitlines() == [line], describe(result)
  assert not (out / 'dataset_info.json').exists()


def test_a_spark_master_the_job_servers_spark_cannot_use_is_one_line(images, tmp_path):
  """`yarn` passes the launcher (Spark takes it with spark-yarn on its class
  path) and the assembled job server's Spark, which has none, refuses it:
  21 lines and a traceback before, exit 1; now the job's one line says why."""
  out = tmp_path / 'out'
  result = run_module('pipeline.convert', '--manifest', images, '--output_dir', out, *FLAGS,
                      '--runner', 'SparkRunner', '--spark_master_url', 'yarn',
                      '--environment_type', 'EXTERNAL', '--environment_config', 'localhost:50000')
  assert result.returncode == 1, describe(result)
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: the job failed: '), describe(result)
  assert lines[0].endswith(
      "Could not parse Master URL: 'yarn' (the job server's Spark has no cluster manager for "
      'that --spark_master_url; the assembled job server takes local[N] and spark:// masters '
      'only: give one of those, or a --spark_job_server_jar built with that cluster '
      'manager)'), describe(result)
  assert not (out / 'dataset_info.json').exists()


_API_RUN = """
import os, sys
from pipeline import api
result = api.convert(manifest=sys.argv[1], output_dir=sys.argv[2], height=16, width=16,
                     max_error_rate=0.5, progress='off', runner='SparkRunner')
children = []
for pid in filter(str.isdigit, os.listdir('/proc')):
  try:
    with open(f'/proc/{pid}/stat') as stat:
      if int(stat.read().rpartition(')')[2].split()[1]) != os.getpid():
        continue
    with open(f'/proc/{pid}/cmdline', 'rb') as cmdline:
      children.append(cmdline.read().replace(b'\\0', b' ').decode())
  except (OSError, ValueError):
    continue
print(result.num_examples, result.num_rejected, sorted(children))
"""


def test_a_spark_run_from_python_leaves_no_image_process_running(images, tmp_path):
  """Spark caches its worker environment (--environment_cache_millis) and
  never stopped it before its job server was: the LOOPBACK harness in the
  caller's process was never torn down, and api.convert(runner='SparkRunner')
  returned with its two image processes still running (for 1-2 minutes,
  until Beam's idle clean-up)."""
  result = subprocess.run([sys.executable, '-c', _API_RUN, str(images), str(tmp_path / 'out')],
                          cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)
  assert result.returncode == 0, describe(result)
  assert result.stdout.splitlines()[-1] == '6 1 []', describe(result)
