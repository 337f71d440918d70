"""convert and validate on runners other than the DirectRunner, as users launch them.

- PortableRunner against Beam's own Python job service (the portable path
  Flink and Spark use), with the SDK harness in the launcher (LOOPBACK) and
  in an EXTERNAL worker pool (separate worker processes, as on a cluster).
- DataflowRunner with --dry_run=True: the job is built offline (no network,
  checked inside an empty network namespace when the machine allows one),
  and nothing is written or deleted (apache-beam[gcp] is in requirements.txt).

Every service runs as its own process on 127.0.0.1, started by pid and
stopped by its own process group at teardown.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import COLOURS
from tests.conftest import SubmittedPipeline
from tests.conftest import feature
from tests.conftest import free_port
from tests.conftest import pixels
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import write_image
from tests.conftest import write_manifest

# One worker builds the job service and worker pool (make test: --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('runners')]
# Runs on Beam's portable job service and Dataflow's dry run: engine tests,
# in make test-integration with Flink and Spark (make test stays in 6 minutes).
ENGINE = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[1]
HOST = '127.0.0.1'
START_TIMEOUT = 60.0  # a cold Beam import on a busy 2-core machine takes a few s
RUN_TIMEOUT = 180.0   # one convert or validate subprocess; each takes ~3-8 s here
CLASSES = ('blue', 'red')  # label map order: sorted class names


@dataclasses.dataclass
class TwoClassSet:
  root: pathlib.Path
  manifest: pathlib.Path
  labels: dict  # relative image path -> class name


@pytest.fixture(scope='module')
def images(tmp_path_factory) -> TwoClassSet:
  """Six solid-colour PNGs of two classes and sizes, listed in manifest.csv."""
  root = tmp_path_factory.mktemp('runner-images')
  labels = {}
  for i in range(6):
    name = CLASSES[i % 2]
    relative = f'images/{name}_{i}.png'
    write_image(root / relative, COLOURS[name], size=(24 + 5 * i, 18 + 3 * i))
    labels[relative] = name
  manifest = write_manifest(root / 'manifest.csv', labels.items())
  return TwoClassSet(root, manifest, labels)


# --- services ----------------------------------------------------------------


def _accepts(port: int) -> bool:
  try:
    with socket.create_connection((HOST, port), timeout=1):
      return True
  except OSError:
    return False


def _venv_env() -> dict:
  """The environment with this interpreter's bin first on PATH.

  worker_pool_main starts each SDK worker as a bare `python -c ...`, so the
  `python` found on PATH must be the one with Beam and this package.
  """
  env = dict(os.environ)
  env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env.get('PATH', '')
  return env


def _tail(path: pathlib.Path, chars: int = 3000) -> str:
  try:
    return path.read_text(errors='replace')[-chars:]
  except OSError:
    return ''


class Service:
  """A Beam service process (`python -m MODULE --FLAG PORT ...`) on a free port."""

  def __init__(self, name: str, module: str, port_flag: str, log_dir: pathlib.Path,
               extra_args=(), cwd: Optional[pathlib.Path] = None, attempts: int = 3):
    self.name = name
    self._module = module
    self._port_flag = port_flag
    self._log = log_dir / f'{name}.log'
    self._extra = list(extra_args)
    self._cwd = cwd or log_dir
    self._attempts = attempts
    self._process: Optional[subprocess.Popen] = None
    self.port: Optional[int] = None

  def start(self) -> Service:
    for _ in range(self._attempts):  # a free port can be taken before the service binds it
      self.port = free_port()
      with open(self._log, 'ab') as log:
        self._process = subprocess.Popen(
            [sys.executable, '-m', self._module, self._port_flag, str(self.port),
             *self._extra],
            cwd=self._cwd, env=_venv_env(), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
      deadline = time.monotonic() + START_TIMEOUT
      while time.monotonic() < deadline and self._process.poll() is None:
        if _accepts(self.port):
          return self
        time.sleep(0.2)
      self.stop()
    raise RuntimeError(f'{self.name} did not accept connections on {HOST}:{self.port} '
                       f'within {START_TIMEOUT:.0f} s; its log:\n{_tail(self._log)}')

  def stop(self) -> None:
    """Ends the service and the workers it spawned: its own process group only."""
    process, self._process = self._process, None
    if process is None or process.poll() is not None:
      return
    try:
      os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
      return
    try:
      process.wait(timeout=10)
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)
      process.wait(timeout=10)
    try:  # SDK workers of the pool share the group; none may outlive the test
      os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass

  def log(self) -> str:
    return _tail(self._log)


@pytest.fixture(scope='module')
def job_service(tmp_path_factory):
  """Beam's Python job service (what a Flink/Spark job server is to the SDK)."""
  log_dir = tmp_path_factory.mktemp('job-service')
  staging = log_dir / 'staging'
  service = Service('job_service', 'apache_beam.runners.portability.local_job_service_main',
                    '--port', log_dir, ['--staging_dir', str(staging)])
  service.start()
  yield service
  service.stop()


@pytest.fixture(scope='module')
def worker_pool(tmp_path_factory):
  """An EXTERNAL worker pool: one SDK worker process per job, like a cluster's."""
  log_dir = tmp_path_factory.mktemp('worker-pool')
  service = Service('worker_pool', 'apache_beam.runners.worker.worker_pool_main',
                    '--service_port', log_dir)
  service.start()
  yield service
  service.stop()


# --- running the entry points --------------------------------------------------


def run_module(module: str, *args, timeout: float = RUN_TIMEOUT,
               prefix=()) -> subprocess.CompletedProcess:
  return subprocess.run([*prefix, sys.executable, '-m', module, *map(str, args)],
                        cwd=REPO, env=_venv_env(), stdin=subprocess.DEVNULL,
                        capture_output=True, text=True, timeout=timeout, check=False)


def describe(result: subprocess.CompletedProcess, *services: Service) -> str:
  text = (f'exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}'
          f'\n--- stderr\n{result.stderr[-5000:]}')
  for service in services:
    text += f'\n--- {service.name} log\n{service.log()}'
  return text


def check_dataset(out: pathlib.Path, images: TwoClassSet) -> None:
  """Counts in dataset_info.json, then every record's label and real pixels."""
  info = read_info(out)
  assert info['num_manifest_rows'] == 6 and info['num_examples'] == 6
  assert info['num_rejected'] == 0 and info['over_budget'] is False
  assert info['label_map'] == list(CLASSES) and info['num_classes'] == 2
  assert list(info['splits']) == ['train']
  assert info['splits']['train']['num_examples'] == 6
  shards = info['splits']['train']['shards']
  assert shards and all((out / shard).is_file() for shard in shards)
  assert info['splits']['train']['num_bytes'] == sum((out / s).stat().st_size
                                                     for s in shards)
  examples = read_examples(out)
  assert len(examples) == 6
  seen = set()
  for example in examples:
    filename = feature(example, 'image/filename').decode()
    name = feature(example, 'image/class/text').decode()
    assert images.labels[filename] == name
    assert feature(example, 'image/class/label') == CLASSES.index(name)
    image = pixels(example)  # default spec: raw 300x300x3, resized from the PNG
    assert image[0, 0].tolist() == list(COLOURS[name])
    assert image[150, 150].tolist() == list(COLOURS[name])
    assert (image == COLOURS[name]).all()
    seen.add(filename)
  assert seen == set(images.labels)


def convert_and_validate(images: TwoClassSet, out: pathlib.Path, runner_flags: list,
                         *services: Service) -> None:
  converted = run_module('pipeline.convert', '--manifest', images.manifest,
                         '--output_dir', out, *runner_flags)
  assert converted.returncode == EXIT_OK, describe(converted, *services)
  assert 'Converted 6 of 6 rows' in converted.stdout, describe(converted, *services)
  check_dataset(out, images)

  validated = run_module('pipeline.validate', '--input_dir', out, *runner_flags)
  assert validated.returncode == EXIT_OK, describe(validated, *services)
  assert 'OK: 6 examples (train 6)' in validated.stdout, describe(validated, *services)
  report = json.loads((out / 'validation_report.json').read_text())
  assert report['valid'] is True and report['num_examples'] == 6
  assert report['num_problems'] == 0


# --- the runners ---------------------------------------------------------------


@ENGINE
def test_portable_runner_loopback(images, job_service, tmp_path):
  flags = ['--runner=PortableRunner', f'--job_endpoint=localhost:{job_service.port}',
           '--environment_type=LOOPBACK']
  convert_and_validate(images, tmp_path / 'out', flags, job_service)


@ENGINE
def test_portable_runner_with_beams_tfrecordio_sink(images, job_service, tmp_path):
  """--sink tfrecordio on the portable path: Beam's WriteToTFRecord, gzip, the
  shard count the runner chooses; validate reads it back."""
  out = tmp_path / 'out'
  flags = ['--runner=PortableRunner', f'--job_endpoint=localhost:{job_service.port}',
           '--environment_type=LOOPBACK']
  converted = run_module('pipeline.convert', '--manifest', images.manifest, '--output_dir',
                         out, '--sink', 'tfrecordio', '--compression', 'gzip', *flags)
  assert converted.returncode == EXIT_OK, describe(converted, job_service)
  check_dataset(out, images)
  validated = run_module('pipeline.validate', '--input_dir', out, '--expected_count', '6',
                         *flags)
  assert validated.returncode == EXIT_OK, describe(validated, job_service)
  assert 'OK: 6 examples (train 6)' in validated.stdout, describe(validated, job_service)
  info = read_info(out)
  assert info['sink']['name'] == 'tfrecordio' and info['compression'] == 'gzip'
  shards = info['splits']['train']['shards']
  assert all(s.startswith('train-') and s.endswith(f'-of-{len(shards):05d}.tfrecord.gz')
             for s in shards)
  assert not list(out.glob('beam-temp-*'))


@ENGINE
def test_portable_runner_external_worker_pool(images, job_service, worker_pool, tmp_path):
  flags = ['--runner=PortableRunner', f'--job_endpoint=localhost:{job_service.port}',
           '--environment_type=EXTERNAL',
           f'--environment_config=localhost:{worker_pool.port}']
  convert_and_validate(images, tmp_path / 'out', flags, job_service, worker_pool)
  assert 'Starting worker with command' in worker_pool.log(), (
      'the job ran, but not in the worker pool:\n' + worker_pool.log())


def _no_network_prefix() -> list:
  """`unshare -n` (an empty network namespace: loopback down, no routes) if allowed."""
  unshare = shutil.which('unshare')
  if not unshare:
    return []
  try:
    probe = subprocess.run([unshare, '-n', 'true'], capture_output=True, timeout=10,
                           check=False)
  except (OSError, subprocess.TimeoutExpired):
    return []
  return [unshare, '-n'] if probe.returncode == 0 else []


def _copy_project(destination: pathlib.Path) -> pathlib.Path:
  """What --setup_file builds into an sdist, outside the work tree.

  Staging runs `setup.py sdist`, which (re)writes an egg-info folder next to
  setup.py: a copy keeps that out of the repository others are working in.
  """
  for name in ('setup.py', 'requirements.txt', 'requirements-tf.txt', 'requirements-test.txt'):
    shutil.copy2(REPO / name, destination / name)
  for package in ('pipeline', 'transforms'):
    shutil.copytree(REPO / package, destination / package,
                    ignore=shutil.ignore_patterns('__pycache__'))
  return destination / 'setup.py'


DATAFLOW_DRY_RUN = ['--runner=DataflowRunner', '--dry_run=True',
                    '--project=img2tfrecord-test', '--region=us-central1',
                    # a valid bucket name: with an invalid one Beam tries to
                    # create a default bucket over the network (120 s of retries)
                    '--temp_location=gs://img2tfrecord-test/tmp']


@ENGINE
def test_dataflow_dry_run_builds_the_job_offline(images, tmp_path):
  project = tmp_path / 'project'
  project.mkdir()
  setup_file = _copy_project(project)
  out = tmp_path / 'out'
  prefix = _no_network_prefix()
  result = run_module(
      'pipeline.convert', '--manifest', images.manifest, '--output_dir', out,
      *DATAFLOW_DRY_RUN, f'--setup_file={setup_file}', prefix=prefix)
  # Building the job: imports, pipeline graph, Runner API proto, the staged
  # sdist of setup.py, the Dataflow Job message. Any network use would fail
  # inside the empty namespace (and be an ImportError without the gcp extra).
  assert 'Google Cloud Dataflow runner not available' not in result.stderr, describe(result)
  # A dry run writes nothing: no dataset, no shards.
  assert not (out / 'dataset_info.json').exists()
  assert not list(out.glob('*.tfrecord*'))
  assert result.returncode == EXIT_OK, describe(result)
  assert 'Traceback' not in result.stderr, describe(result)


def _previous_dataset(images: TwoClassSet, out: pathlib.Path) -> dict:
  """A real dataset (DirectRunner, in this process) -> {name: bytes} of its files."""
  assert convert.main(['--manifest', str(images.manifest), '--output_dir', str(out),
                       '--height', '8', '--width', '8']) == EXIT_OK
  return {p.name: p.read_bytes() for p in out.iterdir()}


@ENGINE
def test_dataflow_dry_run_keeps_a_previous_dataset_with_overwrite(images, tmp_path):
  out = tmp_path / 'out'
  before = _previous_dataset(images, out)
  result = run_module('pipeline.convert', '--manifest', images.manifest,
                      '--output_dir', out, '--overwrite', *DATAFLOW_DRY_RUN,
                      prefix=_no_network_prefix())
  after = {p.name: p.read_bytes() for p in out.iterdir()}
  assert after == before, describe(result)
  assert result.returncode == EXIT_OK, describe(result)


@ENGINE
def test_dataflow_dry_run_of_validate(images, tmp_path):
  out = tmp_path / 'out'
  before = _previous_dataset(images, out)
  result = run_module('pipeline.validate', '--input_dir', out, *DATAFLOW_DRY_RUN,
                      prefix=_no_network_prefix())
  assert 'Google Cloud Dataflow runner not available' not in result.stderr, describe(result)
  assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no report either
  assert result.returncode == EXIT_OK, describe(result)
  assert 'Traceback' not in result.stderr, describe(result)


def test_dry_run_flag_on_a_runner_that_ignores_it_still_converts(images, tmp_path, capsys):
  """Only the DataflowRunner honours --dry_run; elsewhere the job runs in full.

  So convert may treat a run as a dry run only on the DataflowRunner: on the
  DirectRunner it still refuses a non-empty folder, writes the dataset and
  reports it as usual.
  """
  out = tmp_path / 'out'
  flags = ['--manifest', str(images.manifest), '--output_dir', str(out), '--dry_run=True']
  assert convert.main(flags) == EXIT_OK
  assert 'Converted 6 of 6 rows' in capsys.readouterr().out
  check_dataset(out, images)
  assert convert.main(flags) == EXIT_USAGE
  assert 'is not empty' in capsys.readouterr().err
  check_dataset(out, images)


# --- a job that fails, a job that is interrupted ----------------------------------


def _job_service_stub(service: Service):
  from apache_beam.portability.api import beam_job_api_pb2_grpc
  import grpc
  return beam_job_api_pb2_grpc.JobServiceStub(
      grpc.insecure_channel(f'{HOST}:{service.port}'))


def _jobs(stub) -> dict:
  from apache_beam.portability.api import beam_job_api_pb2
  return {job.job_id: job.state for job in
          stub.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30).job_info}


def _state_history(stub, job_id: str) -> list:
  """The job's states, up to its first terminal one (the service's stream stops there)."""
  from apache_beam.portability.api import beam_job_api_pb2
  return [beam_job_api_pb2.JobState.Enum.Name(event.state) for event in
          stub.GetStateStream(beam_job_api_pb2.GetJobStateRequest(job_id=job_id), timeout=30)]


@ENGINE
def test_portable_runner_failed_job_names_the_error(images, job_service, tmp_path):
  """A job that fails on the job service: one line with the exception's type
  and the error itself (not the start of the service's traceback), and
  nothing of the run is left in OUT."""
  data = gzip.compress(('image,label\n' + ''.join(
      f'{path},{label}\n' for path, label in images.labels.items()) * 400).encode())
  manifest = tmp_path / 'cut.csv.gz'
  manifest.write_bytes(data[:len(data) // 2])  # a cut-off gzip stream: EOFError
  for name in images.labels:
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_bytes((images.root / name).read_bytes())
  out = tmp_path / 'out'
  result = run_module('pipeline.convert', '--manifest', manifest, '--output_dir', out,
                      '--runner=PortableRunner', f'--job_endpoint=localhost:{job_service.port}',
                      '--environment_type=LOOPBACK')
  assert result.returncode == 1, describe(result, job_service)
  # The line of a local run, without the job service's `Pipeline job-...
  # failed in state FAILED: Error running pipeline: ...` around it. (Beam's
  # harness, in this process with LOOPBACK, prints the job's own traceback
  # before it: only Flink's and Spark's runners keep it to the log.)
  (line,) = [line for line in result.stderr.splitlines() if line.startswith('error: ')]
  assert re.fullmatch(r'error: the job failed: '
                      r'ManifestCutShortError: manifest \S+/cut\.csv\.gz: its compressed '
                      r'stream breaks off after line \d+: the '
                      r'lines after it are lost \(EOFError: Compressed file ended before '
                      r'the end-of-stream marker was reached\)', line), line
  assert os.listdir(out) == [], describe(result)  # no lock, no temp folder


@ENGINE
def test_portable_runner_interrupted_job_is_cancelled(images, job_service, tmp_path):
  """SIGTERM while the job runs on the job service: convert cancels it
  (PipelineResult.cancel()) before it cleans up, then ends by the signal."""
  manifest = write_manifest(tmp_path / 'many.csv', [
      (images.root / path, label, f'k{i}')
      for i, (path, label) in enumerate(list(images.labels.items()) * 100)],
      header=('image', 'label', 'key'))
  out = tmp_path / 'out'
  stub = _job_service_stub(job_service)
  before = set(_jobs(stub))
  process = subprocess.Popen(
      [sys.executable, '-m', 'pipeline.convert', '--manifest', str(manifest),
       '--output_dir', str(out), '--runner=PortableRunner',
       f'--job_endpoint=localhost:{job_service.port}', '--environment_type=LOOPBACK'],
      cwd=REPO, env=_venv_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True, start_new_session=True)
  from apache_beam.portability.api import beam_job_api_pb2
  deadline = time.monotonic() + RUN_TIMEOUT
  running = []
  while not running:
    assert process.poll() is None, process.communicate()
    assert time.monotonic() < deadline, 'the job never ran'
    running = [job for job, state in _jobs(stub).items()
               if job not in before and state == beam_job_api_pb2.JobState.RUNNING]
    time.sleep(0.05)
  os.killpg(process.pid, signal.SIGTERM)
  _, err = process.communicate(timeout=RUN_TIMEOUT)
  assert process.returncode == -signal.SIGTERM, err
  assert err == 'interrupted: nothing was published; rerun to convert again\n', err
  assert _state_history(stub, running[0])[-2:] == ['CANCELLING', 'CANCELLED']
  assert os.listdir(out) == []


def _threshold_seen(_):
  import gc
  return gc.get_threshold()


def _sampling_seen(_):
  from apache_beam.runners.worker import statesampler
  return statesampler.get_current_tracker().sampling_period_ms


def _fails(_):
  raise ValueError('a step that fails')


def test_a_local_run_collects_cycles_less_often_and_gives_the_thresholds_back():
  import gc

  import apache_beam as beam
  from apache_beam.testing.util import assert_that
  from apache_beam.testing.util import equal_to

  from pipeline.beam_runtime import local_runner
  from tests.conftest import local_pipeline
  before = gc.get_threshold()
  assert before != local_runner.RUN_GC_THRESHOLDS
  with local_pipeline() as p:
    assert_that(p | beam.Create([1]) | beam.Map(_threshold_seen),
                equal_to([local_runner.RUN_GC_THRESHOLDS]))
  assert gc.get_threshold() == before
  with pytest.raises(Exception, match='a step that fails'), local_pipeline() as p:
    _ = p | beam.Create([1]) | beam.Map(_fails)
  assert gc.get_threshold() == before


def test_a_local_run_samples_its_steps_often_so_that_bundles_end_without_waiting():
  import apache_beam as beam
  from apache_beam.runners.worker import statesampler
  from apache_beam.testing.util import assert_that
  from apache_beam.testing.util import equal_to

  from pipeline.beam_runtime import local_runner
  from tests.conftest import local_pipeline
  beam_default = statesampler.DEFAULT_SAMPLING_PERIOD_MS
  assert beam_default > local_runner.SAMPLING_PERIOD_MS
  with local_pipeline() as p:
    assert_that(p | beam.Create([1]) | beam.Map(_sampling_seen),
                equal_to([local_runner.SAMPLING_PERIOD_MS]))
  assert statesampler.StateSampler('after', None).sampling_period_ms == beam_default
  with pytest.raises(Exception, match='a step that fails'), local_pipeline() as p:
    _ = p | beam.Create([1]) | beam.Map(_fails)
  assert statesampler.StateSampler('after', None).sampling_period_ms == beam_default


class _WaitSeesThresholds:
  """A portable job's result (embedded Flink or Spark): the harness runs in
  this process while the launcher waits; it records the gc thresholds then."""

  def __init__(self, fails: bool = False):
    self.seen = None
    self._fails = fails

  def wait_until_finish(self):
    import gc

    from apache_beam.runners.runner import PipelineState
    self.seen = gc.get_threshold()
    if self._fails:
      raise RuntimeError('the job failed')
    return PipelineState.DONE


def test_a_non_local_run_waits_with_fewer_collections_and_gives_the_thresholds_back():
  import gc

  from pipeline.beam_runtime import local_runner
  from pipeline.runs.run_guard import RunGuard
  before = gc.get_threshold()
  done = _WaitSeesThresholds()
  RunGuard().run(SubmittedPipeline(done))
  assert done.seen == local_runner.RUN_GC_THRESHOLDS and gc.get_threshold() == before
  with pytest.raises(RuntimeError, match='the job failed'):
    RunGuard().run(SubmittedPipeline(_WaitSeesThresholds(fails=True)))
  assert gc.get_threshold() == before


def test_runs_at_once_share_the_harness_settings_and_the_last_gives_them_back():
  """pipeline.api on two threads: run A starts, run B starts, A ends, B ends.
  Each giving back what it found left B's end setting A's values again for
  good (the gc thresholds of a run in the caller's process)."""
  import gc

  from apache_beam.runners.worker import statesampler

  from pipeline.beam_runtime import local_runner

  def settings():
    return gc.get_threshold(), statesampler.StateSampler('now', None).sampling_period_ms

  before = settings()
  during = (local_runner.RUN_GC_THRESHOLDS, local_runner.SAMPLING_PERIOD_MS)
  assert before != during
  run_a, run_b = local_runner.harness_settings(), local_runner.harness_settings()
  run_a.__enter__()
  run_b.__enter__()
  assert settings() == during
  run_a.__exit__(None, None, None)
  assert settings() == during  # B still runs
  run_b.__exit__(None, None, None)
  assert settings() == before


class _DyingWorker:
  """A --direct_running_mode multi_processing SDK worker whose process ends
  as Beam's SubprocessSdkWorker.run reports it."""

  def run(self):
    raise RuntimeError('Worker subprocess exited with return code -9')


def test_a_dead_sdk_worker_fails_what_was_sent_to_it_until_the_runner_stops_it():
  """Beam's worker thread only raised and ended: the runner waited for the
  dead worker's bundle for ever (convert hung with its lock held). Each
  instruction sent to it, before or after it died, gets an error response,
  which fails the bundle and so the job, until the runner stops it."""
  import threading
  import types

  from apache_beam.portability.api import beam_fn_api_pb2
  from apache_beam.runners.portability.fn_api_runner import worker_handlers

  from pipeline.beam_runtime import local_runner
  handler = types.SimpleNamespace(worker=_DyingWorker(),
                                  control_conn=worker_handlers.ControlConnection())
  before = handler.control_conn.push(beam_fn_api_pb2.InstructionRequest(instruction_id='a'))
  stopping = threading.Event()
  thread = threading.Thread(target=local_runner._run_worker, args=(handler, stopping),
                            daemon=True)
  thread.start()
  expected = 'an SDK worker died: RuntimeError: Worker subprocess exited with return code -9'
  assert before.get(timeout=30).error == expected
  after = handler.control_conn.push(beam_fn_api_pb2.InstructionRequest(instruction_id='b'))
  assert after.get(timeout=30).error == expected
  assert (before.instruction_id, after.instruction_id) == ('a', 'b')
  assert thread.is_alive()  # until the runner stops it
  stopping.set()
  thread.join(timeout=30)
  assert not thread.is_alive()


class _Closing:
  """What SubprocessSdkWorkerHandler.stop_worker sees: a control connection
  and the thread of a worker that ends once its control stream is told to
  (or after 30 s, told nothing)."""

  def __init__(self):
    import threading

    from apache_beam.runners.portability.fn_api_runner import worker_handlers
    self.control_conn = worker_handlers.ControlConnection()
    self.img2tfrecord_stopping = threading.Event()
    self.told = None
    self.worker_thread = threading.Thread(target=self._connected, daemon=True)

  def _connected(self):
    import queue
    with contextlib.suppress(queue.Empty):
      self.told = self.control_conn._push_queue.get(timeout=30)


def test_stopping_a_worker_ends_its_control_stream_even_one_closed_before_it_connected():
  """A handler closed while its worker still started (the job had failed)
  queued no end: the worker connected, waited for its first instruction for
  ever, and stop_worker's join with it."""
  from apache_beam.runners.portability.fn_api_runner import worker_handlers

  from pipeline.beam_runtime import local_runner
  closing = _Closing()
  closing.control_conn.close()  # never connected: Beam queues nothing
  closing.worker_thread.start()  # it connects
  with local_runner.harness_settings():
    worker_handlers.SubprocessSdkWorkerHandler.stop_worker(closing)
  assert closing.told is worker_handlers.BeamFnControlServicer._DONE_MARKER
  assert closing.img2tfrecord_stopping.is_set()


def test_a_local_run_starts_sdk_workers_on_its_own_thread_and_gives_beams_back():
  from apache_beam.runners.portability.fn_api_runner import worker_handlers

  from pipeline.beam_runtime import local_runner
  beams = worker_handlers.SubprocessSdkWorkerHandler.start_worker
  with local_runner.harness_settings():
    assert worker_handlers.SubprocessSdkWorkerHandler.start_worker is not beams
  assert worker_handlers.SubprocessSdkWorkerHandler.start_worker is beams
