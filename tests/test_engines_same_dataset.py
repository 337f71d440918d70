"""The same dataset on every engine: one corpus of 2,000 photo-like images with
rejects (tests/engine_corpus.py) converted by the DirectRunner, Beam's
portable job service (LOOPBACK), Flink inside its job server, a Flink session
cluster (JobManager and TaskManager processes, an EXTERNAL worker pool), Spark
local and a Spark standalone master and worker (an EXTERNAL worker pool): the
same shard and index bytes, the same rejected.jsonl and label_map.txt, the
same dataset_info.json but for what names the run (RUN_SPECIFIC), and the same
validation report from validate run on the same engine.

Also: a Flink job killed mid-run, by its job server's death or its
TaskManager's, leaves no dataset_info.json, and the same command with
--overwrite then completes.

Each engine converts and validates once; one cluster runs at a time (two
cores). make test-integration runs this: 19 minutes on this 2-core machine
under a load of 12 from other work.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Optional

import pytest

from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from tests import engine_clusters
from tests.engine_clusters import FlinkSession
from tests.engine_clusters import Process
from tests.engine_clusters import SparkStandalone
from tests.engine_clusters import worker_env
from tests.engine_corpus import Corpus
from tests.engine_corpus import make_corpus

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group('engines')]

REPO = pathlib.Path(__file__).resolve().parents[1]
RUN_TIMEOUT = 1200.0  # one convert or validate: a cold job server and a busy machine
CONVERT_FLAGS = ('--encoding', 'jpeg', '--height', '48', '--width', '48',
                 '--split', 'train=0.8,validation=0.2', '--shard_size_mb', '1',
                 '--write_index', '--max_error_rate', '0.05', '--progress', 'off')
# What dataset_info.json says of the run rather than of the dataset: the
# engine that ran it, every option in effect (the runner's among them) and
# the output folder (config.output_dir), the run's id. Everything else is the same.
RUN_SPECIFIC = ('engine', 'options', 'run_id')


@dataclasses.dataclass
class Run:
  out: pathlib.Path
  converted: subprocess.CompletedProcess
  validated: Optional[subprocess.CompletedProcess] = None


def run_module(module: str, *args) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', module, *map(str, args)], cwd=REPO,
                        env=worker_env(), stdin=subprocess.DEVNULL, capture_output=True,
                        text=True, timeout=RUN_TIMEOUT, check=False)


def describe(result: subprocess.CompletedProcess, *processes) -> str:
  text = (f'exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}'
          f'\n--- stderr\n{result.stderr[-6000:]}')
  for process in processes:
    text += f'\n--- {process.name}\n{process.log()}'
  return text


def convert_and_validate(corpus: Corpus, out: pathlib.Path, flags: list, *processes) -> Run:
  converted = run_module('pipeline.convert', '--manifest', corpus.manifest, '--output_dir',
                         out, *CONVERT_FLAGS, *flags)
  assert converted.returncode == EXIT_OK, describe(converted, *processes)
  validated = run_module('pipeline.validate', '--input_dir', out, *flags)
  assert validated.returncode == EXIT_OK, describe(validated, *processes)
  return Run(out, converted, validated)


def dataset_files(out: pathlib.Path) -> dict:
  """name -> bytes of every file but dataset_info.json and validation_report.json."""
  return {p.name: p.read_bytes() for p in sorted(out.iterdir())
          if p.is_file() and p.name not in ('dataset_info.json', 'validation_report.json')}


def info_of_the_dataset(out: pathlib.Path) -> dict:
  info = json.loads((out / 'dataset_info.json').read_text())
  for key in RUN_SPECIFIC:
    info.pop(key)
  info['config'].pop('output_dir')
  return info


class Engines:
  """The services the engines need, one at a time: starting one stops the other."""

  def __init__(self, root: pathlib.Path):
    self._root = root
    self._running = None  # (name, service)

  def get(self, name: str):
    if self._running and self._running[0] == name:
      return self._running[1]
    self.stop()
    folder = self._root / name
    folder.mkdir(parents=True, exist_ok=True)
    if name == 'flink':
      service = FlinkSession(folder)
    elif name == 'spark':
      service = SparkStandalone(folder)
    else:
      service = JobService(folder)
    self._running = (name, service)
    service.start()
    return service

  def stop(self) -> None:
    running, self._running = self._running, None
    if running:
      running[1].stop()


class JobService:
  """Beam's Python portable job service (local_job_service_main)."""

  def __init__(self, root: pathlib.Path):
    self._root = root
    self.process: Optional[Process] = None
    self.port: Optional[int] = None

  def start(self) -> JobService:
    for _ in range(3):  # a free port can be taken before the service binds it
      self.port = engine_clusters.free_port()
      self.process = Process('job_service', [
          sys.executable, '-m', 'apache_beam.runners.portability.local_job_service_main',
          '--port', self.port], worker_env(), self._root, cwd=REPO).start()
      try:
        engine_clusters.wait_for(lambda: engine_clusters.accepts(self.port),
                                 'the job service', [self.process])
        return self
      except RuntimeError:
        self.process.stop()
    raise RuntimeError(f'the job service did not start:\n{self.process.log()}')

  def flags(self) -> list:
    return ['--runner', 'PortableRunner', '--job_endpoint', f'localhost:{self.port}',
            '--environment_type', 'LOOPBACK']

  def stop(self) -> None:
    if self.process is not None:
      self.process.stop()


@pytest.fixture(scope='module')
def corpus(tmp_path_factory) -> Corpus:
  return make_corpus(tmp_path_factory.mktemp('engine-corpus'))


@pytest.fixture(scope='module')
def services(tmp_path_factory):
  engines = Engines(tmp_path_factory.mktemp('engine-services'))
  yield engines
  engines.stop()


@pytest.fixture(scope='module')
def direct(corpus, tmp_path_factory) -> Run:
  return convert_and_validate(corpus, tmp_path_factory.mktemp('direct') / 'out', [])


def check_same_dataset(run: Run, direct: Run, runner: str) -> None:
  """Bytes, rejected rows, label map, dataset_info.json and validation report."""
  got, want = dataset_files(run.out), dataset_files(direct.out)
  assert sorted(got) == sorted(want)
  for name in want:
    assert got[name] == want[name], f"{name} differs from the DirectRunner's"
  assert info_of_the_dataset(run.out) == info_of_the_dataset(direct.out)
  assert json.loads((run.out / 'dataset_info.json').read_text())['engine']['runner'] == runner
  assert ((run.out / 'validation_report.json').read_bytes()
          == (direct.out / 'validation_report.json').read_bytes())
  assert (run.validated.stdout.replace(str(run.out), 'OUT').splitlines()[0]
          == direct.validated.stdout.replace(str(direct.out), 'OUT').splitlines()[0])


def test_the_direct_runners_dataset(direct, corpus):
  """The reference: every image but the rejects, each reject once, in order."""
  info = json.loads((direct.out / 'dataset_info.json').read_text())
  assert info['num_manifest_rows'] == corpus.num_rows
  assert info['num_examples'] == corpus.num_images
  assert info['rejected_by_reason'] == dict(sorted(corpus.rejected.items()))
  assert sum(s['num_examples'] for s in info['splits'].values()) == corpus.num_images
  assert len(info['splits']['train']['shards']) >= 2  # --shard_size_mb 1 cuts
  rejected = [json.loads(line) for line in (direct.out / 'rejected.jsonl').read_text().splitlines()]
  assert len(rejected) == sum(corpus.rejected.values())
  assert [(r['source'], r['line']) for r in rejected] == sorted(
      (r['source'], r['line']) for r in rejected)
  assert (direct.out / 'label_map.txt').read_text().split() == sorted(
      f'class_{i}' for i in range(10))
  assert f'OK: {corpus.num_images} examples' in direct.validated.stdout


def test_beams_portable_job_service(services, corpus, direct, tmp_path):
  job_service = services.get('job_service')
  run = convert_and_validate(corpus, tmp_path / 'out', job_service.flags(), job_service.process)
  check_same_dataset(run, direct, 'PortableRunner')


def test_flink_in_its_job_server(services, corpus, direct, tmp_path):
  services.stop()  # both cores for Flink in the job server
  run = convert_and_validate(corpus, tmp_path / 'out', ['--runner', 'FlinkRunner'])
  check_same_dataset(run, direct, 'FlinkRunner')


def test_a_flink_session_cluster(services, corpus, direct, tmp_path):
  flink = services.get('flink')
  run = convert_and_validate(corpus, tmp_path / 'out', flink.flags(), flink.jobmanager,
                             flink.taskmanager, flink.pool.process)
  check_same_dataset(run, direct, 'FlinkRunner')
  engine = json.loads((run.out / 'dataset_info.json').read_text())['engine']
  assert (engine['master'], engine['environment_type']) == (flink.master, 'EXTERNAL')
  assert 'Starting worker with command' in flink.pool.process.log()


def children(pid: int) -> list:
  """(pid, command line) of the live children of process `pid`."""
  found = []
  for entry in filter(str.isdigit, os.listdir('/proc')):
    try:
      with open(f'/proc/{entry}/stat', encoding='ascii', errors='replace') as handle:
        parent = int(handle.read().rsplit(')', 1)[1].split()[1])
      if parent == pid:
        with open(f'/proc/{entry}/cmdline', 'rb') as handle:
          found.append((int(entry), handle.read().replace(b'\0', b' ').decode(errors='replace')))
    except (OSError, ValueError, IndexError):
      continue  # gone meanwhile
  return found


def start_convert(corpus: Corpus, out: pathlib.Path, flags: list, log: pathlib.Path):
  with open(log, 'wb') as handle:
    return subprocess.Popen([sys.executable, '-m', 'pipeline.convert', '--manifest',
                             corpus.manifest, '--output_dir', out, *CONVERT_FLAGS, *flags],
                            cwd=REPO, env=worker_env(), stdin=subprocess.DEVNULL, stdout=handle,
                            stderr=subprocess.STDOUT)


def wait_until_running(flink: FlinkSession, known: set, launcher) -> dict:
  """The cluster's new job once its tasks run (the launcher still waiting on it)."""
  return engine_clusters.wait_for(
      lambda: next((job for job in flink.jobs() if job['jid'] not in known
                    and job['state'] == 'RUNNING' and job['tasks']['running']), None)
      if launcher.poll() is None else pytest.fail('convert ended before its job ran'),
      'a running job on the Flink cluster', [flink.jobmanager, flink.taskmanager],
      timeout=RUN_TIMEOUT)


def job_state(flink: FlinkSession, jid: str) -> str:
  return next(job['state'] for job in flink.jobs() if job['jid'] == jid)


@pytest.mark.parametrize('victim', ['job server', 'TaskManager'])
def test_a_killed_flink_job_publishes_nothing_and_a_rerun_completes(
    victim, services, corpus, direct, tmp_path):
  flink = services.get('flink')
  out, log = tmp_path / 'out', tmp_path / 'convert.log'
  known = {job['jid'] for job in flink.jobs()}
  launcher = start_convert(corpus, out, flink.flags(), log)
  try:
    job = wait_until_running(flink, known, launcher)
    if victim == 'job server':
      servers = [pid for pid, command in children(launcher.pid) if 'job-server' in command]
      assert len(servers) == 1, children(launcher.pid)
      os.kill(servers[0], signal.SIGKILL)
    else:
      flink.taskmanager.kill()
    assert launcher.wait(timeout=RUN_TIMEOUT) == EXIT_FAILED, log.read_text()[-5000:]
  finally:
    if launcher.poll() is None:
      launcher.kill()
      launcher.wait()
  if victim == 'TaskManager':
    flink.start_taskmanager()
  # The launcher cancelled its job on the cluster (its job server gone, it
  # asks Flink's REST API), or the job failed with its TaskManager.
  engine_clusters.wait_for(lambda: job_state(flink, job['jid']) in ('CANCELED', 'FAILED'),
                           'the killed job to end', [flink.jobmanager], timeout=120)
  assert not (out / 'dataset_info.json').exists()
  assert 'error: the job failed' in log.read_text()

  converted = run_module('pipeline.convert', '--manifest', corpus.manifest, '--output_dir',
                         out, *CONVERT_FLAGS, *flink.flags(), '--overwrite')
  assert converted.returncode == EXIT_OK, describe(converted, flink.taskmanager)
  assert dataset_files(out) == dataset_files(direct.out)
  assert info_of_the_dataset(out) == info_of_the_dataset(direct.out)


def test_spark_local(services, corpus, direct, tmp_path):
  services.stop()  # both cores for Spark in the job server
  run = convert_and_validate(corpus, tmp_path / 'out', ['--runner', 'SparkRunner'])
  check_same_dataset(run, direct, 'SparkRunner')


def test_a_spark_standalone_cluster(services, corpus, direct, tmp_path):
  spark = services.get('spark')
  run = convert_and_validate(corpus, tmp_path / 'out', spark.flags(), spark.master_process,
                             spark.worker, spark.pool.process)
  check_same_dataset(run, direct, 'SparkRunner')
  engine = json.loads((run.out / 'dataset_info.json').read_text())['engine']
  assert (engine['master'], engine['environment_type']) == (spark.master, 'EXTERNAL')
  services.stop()
  assert not spark.work_dir.exists()  # the executors' folders go with the cluster
