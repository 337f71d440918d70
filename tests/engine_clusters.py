"""Engines for the integration tests, started from the project's own files as
a user would run them: a Flink 1.19 session cluster (a JobManager and a
TaskManager, each its own JVM) and a Spark 3.5 standalone master and worker,
each with an EXTERNAL Beam worker pool beside it, all on 127.0.0.1 on ports
free when they start.

Flink's and Spark's jars and scripts come from PyPI (`apache-flink`,
`pyspark`) installed --no-deps under .peers/ (make test-integration builds
them from tests/peers/requirements-*.txt). Every process is started in its own
session and stopped by its own process group, so what it started (Spark's
executors, the pool's SDK workers) goes with it.
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Optional
import urllib.error
import urllib.request

from pipeline.engines import job_servers
from tests.conftest import free_port

REPO = pathlib.Path(__file__).resolve().parents[1]
HOST = '127.0.0.1'
START_TIMEOUT = 120.0  # a JVM on a busy 2-core machine takes a while
STOP_TIMEOUT = 15.0
SLOTS = 2  # TaskManager slots, Spark worker cores: this machine's two cores


def peer_package(name: str, package: str) -> pathlib.Path:
  """The folder of `package` in the venv .peers/NAME (made by make test-integration)."""
  found = glob.glob(str(REPO / '.peers' / name / 'lib' / 'python*' / 'site-packages' / package))
  if not found:
    raise RuntimeError(f'.peers/{name} has no {package}: run `make .peers/{name}/.installed` '
                       f'(make test-integration does)')
  return pathlib.Path(found[0])


def java_home(engine: str) -> str:
  """The Java the engine runs on: the one the launcher would choose for it."""
  return job_servers.choose_java(job_servers.ENGINES[engine],
                                 job_servers.java_candidates()).home


def accepts(port: int) -> bool:
  try:
    with socket.create_connection((HOST, port), timeout=1):
      return True
  except OSError:
    return False


def get_json(url: str):
  """The JSON at `url`, or None while the server cannot answer it."""
  try:
    with urllib.request.urlopen(url, timeout=5) as response:
      return json.load(response)
  except (OSError, ValueError, urllib.error.URLError):
    return None


def worker_env(**extra) -> dict:
  """This environment with the project's venv first on PATH (Beam's worker
  pool starts each SDK worker as a bare `python`) and this work tree first on
  PYTHONPATH (the workers import its pipeline and transforms)."""
  env = dict(os.environ, **extra)
  env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env.get('PATH', '')
  env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(REPO), env.get('PYTHONPATH')]))
  return env


class Process:
  """One process started in a session of its own, its output in a log file."""

  def __init__(self, name: str, args: list, env: dict, log_dir: pathlib.Path,
               cwd: Optional[pathlib.Path] = None):
    self.name = name
    self._args = [str(a) for a in args]
    self._env = env
    self.log_path = log_dir / f'{name}.log'
    self._cwd = cwd or log_dir
    self.process: Optional[subprocess.Popen] = None

  def start(self) -> Process:
    with open(self.log_path, 'ab') as log:
      self.process = subprocess.Popen(self._args, cwd=self._cwd, env=self._env,
                                      stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
    return self

  @property
  def alive(self) -> bool:
    return self.process is not None and self.process.poll() is None

  def stop(self, sig: int = signal.SIGTERM) -> None:
    """Ends the process and everything in its process group: SIGTERM (or
    `sig`), then SIGKILL for what is left after STOP_TIMEOUT."""
    process, self.process = self.process, None
    if process is None:
      return
    for signal_now in (sig, signal.SIGKILL):
      try:
        os.killpg(process.pid, signal_now)
      except ProcessLookupError:
        break
      try:
        process.wait(timeout=STOP_TIMEOUT)
      except subprocess.TimeoutExpired:
        continue
    process.wait()

  def kill(self) -> None:
    """SIGKILL, as a crash or an OOM killer would."""
    self.stop(signal.SIGKILL)

  def log(self, chars: int = 4000) -> str:
    try:
      return self.log_path.read_text(errors='replace')[-chars:]
    except OSError:
      return ''


def wait_for(ready, what: str, processes: list, timeout: float = START_TIMEOUT):
  """ready()'s first true value, polled; RuntimeError with the logs when one
  of `processes` ends first or the time is up."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    value = ready()
    if value:
      return value
    dead = [p for p in processes if not p.alive]
    if dead:
      raise RuntimeError(f'{dead[0].name} ended before {what}:\n{dead[0].log()}')
    time.sleep(0.5)
  logs = '\n'.join(f'--- {p.name}\n{p.log()}' for p in processes)
  raise RuntimeError(f'no {what} within {timeout:.0f} s\n{logs}')


class WorkerPool:
  """Beam's EXTERNAL worker pool (`python -m apache_beam.runners.worker.worker_pool_main`):
  an SDK worker process for each worker the runner asks it for."""

  def __init__(self, log_dir: pathlib.Path, name: str = 'worker_pool'):
    self._log_dir = log_dir
    self._name = name
    self.port: Optional[int] = None
    self.process: Optional[Process] = None

  def start(self) -> WorkerPool:
    for _ in range(3):  # a free port can be taken before the pool binds it
      self.port = free_port()
      self.process = Process(self._name, [
          sys.executable, '-m', 'apache_beam.runners.worker.worker_pool_main',
          '--service_port', self.port], worker_env(), self._log_dir, cwd=REPO).start()
      try:
        wait_for(lambda: accepts(self.port), f'{self._name} on port {self.port}',
                 [self.process])
        return self
      except RuntimeError:
        self.stop()
    raise RuntimeError(f'{self._name} did not start:\n{self.process.log()}')

  @property
  def address(self) -> str:
    return f'{HOST}:{self.port}'

  def stop(self) -> None:
    if self.process is not None:
      self.process.stop()


class FlinkSession:
  """A Flink session cluster: a JobManager and a TaskManager of SLOTS slots,
  each its own JVM, with a worker pool beside the TaskManager."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self.home = peer_package('flink', 'pyflink')
    self.conf_dir = root / 'conf'
    self.rest_port: Optional[int] = None
    self.jobmanager: Optional[Process] = None
    self.taskmanager: Optional[Process] = None
    self.pool = WorkerPool(root, 'flink_worker_pool')

  def _write_conf(self) -> None:
    self.conf_dir.mkdir(parents=True, exist_ok=True)
    for name in ('log4j-console.properties', 'logback-console.xml'):
      shutil.copy(self.home / 'conf' / name, self.conf_dir / name)
    ports = {'rest': free_port(), 'rpc': free_port(), 'blob': free_port()}
    self.rest_port = ports['rest']
    (self.root / 'tmp').mkdir(exist_ok=True)
    # Flat keys: Flink 1.19's config.yaml takes them as they are.
    settings = {
        'jobmanager.rpc.address': HOST, 'jobmanager.rpc.port': ports['rpc'],
        'jobmanager.bind-host': HOST, 'jobmanager.memory.process.size': '1024m',
        'rest.address': HOST, 'rest.bind-address': HOST, 'rest.port': ports['rest'],
        'blob.server.port': ports['blob'],
        'taskmanager.host': HOST, 'taskmanager.bind-host': HOST,
        'taskmanager.numberOfTaskSlots': SLOTS, 'taskmanager.memory.process.size': '3072m',
        # Beam's batch job runs ~90 tasks at once: Flink's default network
        # memory for a small TaskManager (~100 MB) has too few buffers.
        'taskmanager.memory.network.min': '320m', 'taskmanager.memory.network.max': '320m',
        # Beam's data plane to the SDK harness (gRPC) takes direct memory for
        # each element it passes, a whole shard for the writer: Flink's
        # default (none) fails 16 MB shards with OutOfMemoryError: Direct
        # buffer memory.
        'taskmanager.memory.task.off-heap.size': '512m',
        'parallelism.default': SLOTS, 'io.tmp.dirs': str(self.root / 'tmp'),
        # A lost TaskManager fails the job at once (no restarts, no waiting
        # 5 minutes for slots that will not come).
        'restart-strategy.type': 'none', 'slot.request.timeout': '30000',
        'heartbeat.timeout': '10000', 'heartbeat.interval': '2000',
        # Java 17 needs Flink's --add-opens (its shipped config.yaml has them).
        'env.java.opts.all': self._shipped_java_opts(),
    }
    text = ''.join(f'{key}: {json.dumps(value) if isinstance(value, str) else value}\n'
                   for key, value in settings.items())
    (self.conf_dir / 'config.yaml').write_text(text)

  def _shipped_java_opts(self) -> str:
    for line in (self.home / 'conf' / 'config.yaml').read_text().splitlines():
      if line.strip().startswith('all: --add-exports'):
        return line.split('all:', 1)[1].strip()
    raise RuntimeError("no env.java.opts.all in Flink's own config.yaml")

  def _env(self) -> dict:
    return dict(os.environ, JAVA_HOME=java_home('flink'), FLINK_HOME=str(self.home),
                FLINK_CONF_DIR=str(self.conf_dir), FLINK_LOG_DIR=str(self.root / 'log'),
                FLINK_PID_DIR=str(self.root / 'pid'))

  def _script(self, name: str, role: str) -> Process:
    return Process(role, ['bash', self.home / 'bin' / name, 'start-foreground'], self._env(),
                   self.root)

  def start(self) -> FlinkSession:
    for folder in ('log', 'pid'):
      (self.root / folder).mkdir(parents=True, exist_ok=True)
    for _ in range(3):  # a free port can be taken before the JobManager binds it
      self._write_conf()
      self.jobmanager = self._script('jobmanager.sh', 'jobmanager').start()
      try:
        wait_for(lambda: get_json(self._url('/overview')), "the JobManager's REST API",
                 [self.jobmanager])
        break
      except RuntimeError:
        self.jobmanager.stop()
    else:
      raise RuntimeError(f'the Flink JobManager did not start:\n{self.jobmanager.log()}')
    self.start_taskmanager()
    self.pool.start()
    return self

  def start_taskmanager(self) -> None:
    self.taskmanager = self._script('taskmanager.sh', 'taskmanager').start()
    wait_for(lambda: (get_json(self._url('/overview')) or {}).get('slots-available') == SLOTS,
             f'a TaskManager with {SLOTS} free slots', [self.jobmanager, self.taskmanager])

  def _url(self, path: str) -> str:
    return f'http://{HOST}:{self.rest_port}{path}'

  def jobs(self) -> list:
    """[{'jid', 'name', 'state', ...}] of every job the cluster has seen."""
    return (get_json(self._url('/jobs/overview')) or {}).get('jobs', [])

  @property
  def master(self) -> str:
    return f'{HOST}:{self.rest_port}'

  def flags(self) -> list:
    return ['--runner', 'FlinkRunner', '--flink_master', self.master,
            '--parallelism', str(SLOTS), '--environment_type', 'EXTERNAL',
            '--environment_config', self.pool.address]

  def stop(self) -> None:
    for process in (self.pool, self.taskmanager, self.jobmanager):
      if process is not None:
        process.stop()


class SparkStandalone:
  """A Spark standalone master and a worker of SLOTS cores, each its own JVM
  (pyspark's spark-class), with a worker pool beside the worker."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self.home = peer_package('spark', 'pyspark')
    self.work_dir = root / 'work'
    self.port: Optional[int] = None
    self.webui_port: Optional[int] = None
    self.master_process: Optional[Process] = None
    self.worker: Optional[Process] = None
    self.pool = WorkerPool(root, 'spark_worker_pool')

  def _env(self) -> dict:
    conf = self.root / 'conf'  # empty: no spark-defaults.conf from elsewhere
    conf.mkdir(parents=True, exist_ok=True)
    return dict(os.environ, JAVA_HOME=java_home('spark'), SPARK_HOME=str(self.home),
                SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP=HOST,
                SPARK_WORKER_DIR=str(self.work_dir), SPARK_LOG_DIR=str(self.root / 'log'),
                SPARK_NO_DAEMONIZE='1')

  def _class(self, role: str, main: str, *args) -> Process:
    return Process(role, ['bash', self.home / 'bin' / 'spark-class', main, *args],
                   self._env(), self.root)

  def start(self) -> SparkStandalone:
    self.work_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(3):  # a free port can be taken before the master binds it
      self.port, self.webui_port = free_port(), free_port()
      self.master_process = self._class(
          'spark_master', 'org.apache.spark.deploy.master.Master', '--host', HOST,
          '--port', self.port, '--webui-port', self.webui_port).start()
      try:
        wait_for(lambda: get_json(self._url('/json/')), 'the Spark master',
                 [self.master_process])
        break
      except RuntimeError:
        self.master_process.stop()
    else:
      raise RuntimeError(f'the Spark master did not start:\n{self.master_process.log()}')
    self.worker = self._class(
        'spark_worker', 'org.apache.spark.deploy.worker.Worker', '--host', HOST,
        '--port', free_port(), '--webui-port', free_port(), '--cores', SLOTS,
        '--memory', '2g', '--work-dir', self.work_dir, self.master).start()
    wait_for(lambda: (get_json(self._url('/json/')) or {}).get('aliveworkers') == 1,
             'a Spark worker registered with the master', [self.master_process, self.worker])
    self.pool.start()
    return self

  def _url(self, path: str) -> str:
    return f'http://{HOST}:{self.webui_port}{path}'

  @property
  def master(self) -> str:
    return f'spark://{HOST}:{self.port}'

  def flags(self) -> list:
    return ['--runner', 'SparkRunner', '--spark_master_url', self.master,
            '--environment_type', 'EXTERNAL', '--environment_config', self.pool.address]

  def stop(self) -> None:
    for process in (self.pool, self.worker, self.master_process):
      if process is not None:
        process.stop()
    shutil.rmtree(self.work_dir, ignore_errors=True)  # executors' copies of the job's jars
