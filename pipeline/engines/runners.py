"""The runners: which run locally, the local defaults, dry runs, and what a
Flink or Spark run needs (prepare): Java, a job server, a master that
answers, a worker environment. The runners refused: runner_flags.py."""

from __future__ import annotations

import os
import re
import shutil
import socket
from typing import Optional

from apache_beam.options.pipeline_options import DebugOptions
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import FlinkRunnerOptions
from apache_beam.options.pipeline_options import JobServerOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.options.pipeline_options import SetupOptions
from apache_beam.options.pipeline_options import SparkRunnerOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TestOptions
from apache_beam.options.pipeline_options import WorkerOptions

from pipeline.beam_runtime import LOCAL_RUNNERS
from pipeline.beam_runtime import local_runner
from pipeline.beam_runtime import runner_class_name
from pipeline.engines import job_endpoint
from pipeline.engines import job_server_checks
from pipeline.engines import job_servers
from pipeline.engines import masters
from pipeline.engines.masters import CONNECT_TIMEOUT_S
from pipeline.errors import UsageError
from transforms.core.redact import redact_text
from transforms.workers.pooled_step import available_cores

LOCAL_RUNNER = 'DirectRunner'
# Local default: one in-process worker (no Beam data plane between threads or
# processes) whose image step uses every core itself (pool_size in
# transforms/workers/pooled_step.py). Measured on 2 cores, 3,000 JPEGs -> raw
# 300x300: 5.0 s against 6.3 s for --direct_running_mode multi_threading and
# 8.0 s for multi_processing; and multi_threading corrupted its data plane in 1
# of 3 runs of a 100,000-row manifest (cf. apache/beam#21104).
LOCAL_RUNNING_MODE = 'in_memory'


def check_options_hold(options: PipelineOptions, _timeout_s: float = 0) -> None:
  """UsageError naming what Beam's own checks of the options find for the
  runner the job gets (PipelineOptionsValidator, which beam.Pipeline runs): a
  DataflowRunner without --project, --region or a gs:// --temp_location, an
  --environment_type PROCESS without its command. Beam raised them when the
  pipeline was made, after OUT was locked and made: a traceback and exit 1.
  On Dataflow Beam asks GCS about the temp bucket's soft-delete policy in
  this check: once more per run, on the launcher, before the job is submitted."""
  from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
  from apache_beam.runners.runner import create_runner
  given = options.view_as(StandardOptions).runner
  runner = local_runner.for_options(options) or create_runner(given)
  found = PipelineOptionsValidator(options, runner).validate()
  if found:
    reasons = '; '.join(' '.join(error.split()).rstrip('.') for error in found)
    raise UsageError(redact_text(f'the Beam options do not hold for --runner '
                                 f'{runner_name(given)}: {reasons}'))


def check_embedded_workers(options: PipelineOptions, _timeout_s: float = 0) -> None:
  """UsageError for --job_endpoint embed (Beam's job server in this process)
  whose workers would run in Beam's default environment, DOCKER, with no
  docker daemon answering: Beam's `docker run` failed the job after OUT was
  locked (exit 1, a 150-line traceback)."""
  portable = options.view_as(PortableOptions)
  if (portable.job_endpoint != job_endpoint.EMBEDDED
      or runner_name(options.view_as(StandardOptions).runner) not in job_endpoint.PORTABLE_RUNNERS
      or (portable.environment_type or 'DOCKER').upper() != 'DOCKER' or docker_answers()):
    return
  raise UsageError("--job_endpoint embed runs the Python workers in Beam's default "
                   'environment, DOCKER, and no docker daemon answers here: add '
                   '--environment_type LOOPBACK (the workers run in this process), or start '
                   'docker')


def check_setup_file(options: PipelineOptions, _timeout_s: float = 0) -> None:
  """UsageError for a --setup_file Beam's stager cannot build the package
  from (every runner but the local one stages it): no such file, or one not
  named setup.py or pyproject.toml. Beam raised a RuntimeError as the job
  was submitted, after OUT was locked: a traceback and exit 1."""
  path = options.view_as(SetupOptions).setup_file
  if path is None or is_local_runner(options.view_as(StandardOptions).runner or LOCAL_RUNNER):
    return
  if not os.path.isfile(path):
    raise UsageError(f'--setup_file {path}: no such file (the setup.py the workers install)')
  if os.path.basename(path) not in ('setup.py', 'pyproject.toml'):
    raise UsageError(f'--setup_file {path}: Beam builds the package from a file named '
                     f'setup.py or pyproject.toml')


# What convert and validate check before anything is locked, created or
# written (check_before_submit): each takes (PipelineOptions, the
# --job_endpoint_connect_timeout in seconds) and raises UsageError (exit 2,
# one line) when the runner cannot take the job.
PRE_SUBMIT_CHECKS = (check_setup_file, check_options_hold, job_endpoint.check_answers, check_embedded_workers)


def check_before_submit(options: PipelineOptions, connect_timeout_s: float) -> None:
  """Runs every PRE_SUBMIT_CHECKS: a job service that does not answer is a
  usage error before OUT is touched, not a hang after it was locked."""
  for check in PRE_SUBMIT_CHECKS:
    check(options, connect_timeout_s)


def local_defaults(given: dict) -> dict:
  """The Beam options a run uses: `given` (command line and --config, by option
  name) plus the local defaults, all of them here.

  No --runner: the DirectRunner (never a download). A local run: one in-process
  worker, or Beam's worker processes when --direct_num_workers asks for
  workers (its thread mode is what corrupted its data plane, see above).
  Worker logs: warnings and up.
  """
  options = dict(given)
  options.setdefault('runner', LOCAL_RUNNER)
  if is_local_runner(options['runner']):
    options.setdefault('direct_running_mode', 'multi_processing'
                       if 'direct_num_workers' in given else LOCAL_RUNNING_MODE)
  options.setdefault('default_sdk_harness_log_level', 'WARNING')
  # Beam's stager enters its folder: '' for `setup.py`. A URL is left as given
  # (abspath made 'https://u:p@h' a path 'https:/u:p@h' its redaction missed).
  if options.get('setup_file') and '://' not in options['setup_file']:
    options['setup_file'] = os.path.abspath(options['setup_file'])
  return options


def single_local_worker(options: PipelineOptions) -> bool:
  """One in-process worker, which gets every element in one bundle: the writer
  can stream in write order. --direct_num_workers 2 (or 0: one per core) splits
  the input even in_memory, so it takes the distributed path."""
  direct = options.view_as(DirectOptions)
  return (is_local(options) and direct.direct_running_mode == 'in_memory'
          and direct.direct_num_workers == 1)


def harnesses_per_machine(options: PipelineOptions) -> int:
  """How many SDK harnesses (the processes running this job's Python) share
  one machine's cores, for each to size its image pool (pooled_step.in_worker);
  0: one per core. LOOPBACK: one, the launcher itself, whatever the runner
  (Flink's or Spark's in the job server, Beam's portable service). Beam's
  local worker processes: --direct_num_workers. Dataflow: one per core unless
  --experiments no_use_multiple_sdk_containers. Any other environment (a
  cluster's EXTERNAL worker pools, PROCESS, DOCKER): --sdk_worker_parallelism
  per worker node (Beam's default 1: one per TaskManager or Spark executor;
  0, the runner's choice, counts as one per core)."""
  runner = runner_name(options.view_as(StandardOptions).runner)
  if is_local_runner(runner):
    direct = options.view_as(DirectOptions)
    return int(direct.direct_num_workers) if (
        direct.direct_running_mode == 'multi_processing') else 1
  if runner == 'DataflowRunner':
    experiments = options.view_as(DebugOptions).experiments or []
    return 1 if 'no_use_multiple_sdk_containers' in experiments else 0
  portable = options.view_as(PortableOptions)
  if (portable.environment_type or '').upper() == 'LOOPBACK':
    return 1
  try:
    return max(0, int(portable.sdk_worker_parallelism))
  except (TypeError, ValueError):
    return 0  # not a number: Beam's job server refuses it anyway


def is_local(options: PipelineOptions) -> bool:
  return is_local_runner(options.view_as(StandardOptions).runner)


def is_local_runner(runner) -> bool:
  return runner_class_name(runner) in LOCAL_RUNNERS


def is_dry_run(options: PipelineOptions) -> bool:
  """--dry_run=True on the DataflowRunner: the job is built, never submitted.

  Every other runner ignores the flag and runs the job in full.
  """
  runner = runner_class_name(options.view_as(StandardOptions).runner)
  return bool(options.view_as(TestOptions).dry_run) and runner == 'DataflowRunner'


def dry_run_note(options: PipelineOptions, nothing: str) -> str:
  runner = options.view_as(StandardOptions).runner
  return f'Dry run: the {runner} job was built, not submitted; {nothing}.'


# --- Flink and Spark -------------------------------------------------------------

JOB_SERVER_RUNNERS = {'FlinkRunner': 'flink', 'SparkRunner': 'spark'}
EMBEDDED_FLINK = ('[local]', '[auto]')  # Beam's names for a Flink inside the job server
LOCAL_SPARK = re.compile(r'^local(\[.+\])?$')  # Beam's pattern for a Spark in the job server
DEFAULT_PORTS = {'flink': 8081, 'spark': 7077}  # Flink's REST port, Spark's master port
# Spark's runner starts a worker environment per stage unless environments
# are cached: one harness for the whole job instead.
SPARK_ENVIRONMENT_CACHE_MS = '60000'
WORKER_POOL_PORT = 50000
# The options prepare fills in, and the options class each is set through.
_VIEWS = {'flink_master': FlinkRunnerOptions, 'flink_version': FlinkRunnerOptions,
          'flink_job_server_jar': FlinkRunnerOptions, 'parallelism': FlinkRunnerOptions,
          'spark_master_url': SparkRunnerOptions, 'spark_job_server_jar': SparkRunnerOptions,
          'environment_type': PortableOptions, 'environment_cache_millis': PortableOptions,
          'job_server_java_launcher': JobServerOptions,
          'job_server_jvm_properties': JobServerOptions,
          'default_sdk_harness_log_level': WorkerOptions, 'runner': StandardOptions}


def runner_name(runner) -> str:
  """--runner's class name; Beam's short names (flink, sparkrunner, portable,
  ...: any case) as their class names."""
  return runner_class_name(runner)


def master_of(runner: str, given: dict) -> tuple:
  """-> (the master as given or defaulted, whether the engine runs inside the
  job server, [(host, port)] to reach: a Flink master's REST address, a
  standalone Spark master and its standbys)."""
  engine = JOB_SERVER_RUNNERS[runner]
  if engine == 'flink':
    text = given.get('flink_master', '[local]').strip()
    if text in EMBEDDED_FLINK:
      return text, True, []
    hosts = [re.sub(r'^https?://', '', text).split('/')[0]]
  else:
    text = given.get('spark_master_url', f'local[{available_cores()}]').strip()
    if LOCAL_SPARK.match(text):
      return text, True, []
    if not text.startswith('spark://'):
      return text, False, []  # yarn, k8s://...: Spark's own resolution
    hosts = text[len('spark://'):].split(',')
  addresses = []
  for host in hosts:
    host = host.rpartition('@')[2]  # user:password@ (redacted in what is shown)
    name, _, port = host.rpartition(':') if ':' in host else (host, '', '')
    addresses.append((name.strip('[]'), int(port) if port.isdigit()
                      else DEFAULT_PORTS[engine]))
  return text, False, addresses


def fill_in(runner: str, given: dict, cores: int, docker: bool) -> dict:
  """What a Flink or Spark run adds to `given` (Beam options by name): the
  master, parallelism and worker environment, each unless given. An engine in
  the job server gets every core and LOOPBACK workers (in this process); a
  cluster keeps Beam's DOCKER only where a docker daemon answers (`docker`).
  """
  engine = JOB_SERVER_RUNNERS[runner]
  master, embedded, _ = master_of(runner, given)
  added = {}
  if engine == 'flink':
    added['flink_master'] = master
    if embedded:
      added['parallelism'] = cores
  else:
    added['spark_master_url'] = master if 'spark_master_url' in given else f'local[{cores}]'
    added['environment_cache_millis'] = SPARK_ENVIRONMENT_CACHE_MS
  if embedded:
    added['environment_type'] = 'LOOPBACK'
  elif 'environment_type' not in given and not docker:
    flag = 'flink_master' if engine == 'flink' else 'spark_master_url'
    beside = 'TaskManager' if engine == 'flink' else 'Spark worker'
    raise UsageError(
        f"--{flag} {redact_text(master)} runs the Python workers in Beam's default "
        f'environment there, DOCKER, and no docker daemon answers here: start `python -m '
        f'apache_beam.runners.worker.worker_pool_main --service_port {WORKER_POOL_PORT}` '
        f"(with the venv's bin first on PATH) beside each {beside} and add "
        f'--environment_type EXTERNAL --environment_config localhost:{WORKER_POOL_PORT}')
  added = {name: value for name, value in added.items() if name not in given}
  # The same level as Java spells it: the 2.62 job server reads the options
  # into Java's enum, which has WARN and no WARNING (Python's harness takes both).
  if given.get('default_sdk_harness_log_level') == 'WARNING':
    added['default_sdk_harness_log_level'] = 'WARN'
  return added


def job_server_options(runner: str, given: dict, server: Optional[dict],
                       java: Optional[str]) -> dict:
  """The job server's options, each unless given: the jar and the Flink version
  it runs (server: job_servers' record, None when --*_job_server_jar is given),
  the Java that runs it, and for a standalone Spark the Guava the executors
  need first on their class path (theirs is older than Beam's)."""
  engine = JOB_SERVER_RUNNERS[runner]
  added = {}
  if java:
    added['job_server_java_launcher'] = java
  if server:
    added[f'{engine}_job_server_jar'] = server['jar']
    if engine == 'flink':
      added['flink_version'] = server['engine_version']
  added = {name: value for name, value in added.items() if name not in given}
  master = given.get('spark_master_url', '')
  properties = list(given.get('job_server_jvm_properties') or [])
  lib = os.path.join(os.path.dirname(server['jar']), 'lib') if server else ''
  guava = sorted(n for n in os.listdir(lib) if n.startswith('guava-')) if (
      engine == 'spark' and master.startswith('spark://') and os.path.isdir(lib)) else []
  if guava and not any('spark.executor.extraClassPath' in p for p in properties):
    added['job_server_jvm_properties'] = properties + [  # after the user's own
        f'-Dspark.executor.extraClassPath={os.path.join(lib, guava[-1])}']
  return added


def prepare(options: PipelineOptions) -> PipelineOptions:
  """A Flink or Spark run's options completed (in place), after checking on
  the launcher what it needs, before anything is written: Java, the master's
  address, a worker environment, the job server (fetched once into the
  cache). UsageError names what is missing and how to get it. Other runners'
  options, and theirs with --job_endpoint (a job server of the user's), come
  back as they are."""
  runner = runner_name(options.view_as(StandardOptions).runner)
  if runner not in JOB_SERVER_RUNNERS:
    return options
  engine = job_servers.ENGINES[JOB_SERVER_RUNNERS[runner]]
  given = options.get_all_options(drop_default=True)
  if given.get('job_endpoint'):  # a job server already running elsewhere: Beam's as is
    return options
  uber_jar = given.get(f'{engine.name}_submit_uber_jar')  # no job server runs here
  if engine.name == 'spark':
    masters.check_spark_master(given)
  else:
    job_server_checks.check_flink_parallelism(given)
  java = None
  if 'job_server_java_launcher' not in given and not uber_jar:
    java = job_servers.choose_java(engine, job_servers.java_candidates())
  elif not uber_jar:
    job_server_checks.check_java_launcher(engine, given['job_server_java_launcher'])
  if not uber_jar:
    job_server_checks.check_ports(given)
  if given.get(f'{engine.name}_job_server_jar'):
    job_server_checks.check_job_server_jar(engine, given[f'{engine.name}_job_server_jar'])
  _, embedded, addresses = master_of(runner, given)
  masters.check_answers(engine.name, given, addresses)
  docker = not embedded and 'environment_type' not in given and docker_answers()
  # the cores this process may use (affinity, a container's quota), not the host's
  added = fill_in(runner, given, available_cores(), docker)
  cluster = masters.check_flink_rest(given, addresses[0]) if (
      engine.name == 'flink' and addresses) else None
  server = None
  if f'{engine.name}_job_server_jar' not in given:
    server = job_servers.fetch(engine, given.get('flink_version'),
                               java_home=java.home if java else None)
  if cluster:
    masters.check_flink_version(given, cluster, server['engine_version'] if server
                                else given.get('flink_version'))
  added.update(job_server_options(runner, given, server, java.path if java else None))
  # The same runner, stopping its job server when the job ends (engine_runners.py).
  added['runner'] = f'pipeline.engines.engine_runners.{runner}'
  for name, value in added.items():
    setattr(options.view_as(_VIEWS[name]), name, value)
  return options


def docker_answers(environ=None) -> bool:
  """Whether a docker daemon answers (Beam's DOCKER environment needs one)."""
  environ = os.environ if environ is None else environ
  if not shutil.which('docker', path=environ.get('PATH', '')):
    return False
  host = environ.get('DOCKER_HOST') or 'unix:///var/run/docker.sock'
  try:
    if host.startswith('unix://'):
      with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(CONNECT_TIMEOUT_S)
        sock.connect(host[len('unix://'):])
      return True
    name, _, port = re.sub(r'^tcp://', '', host).rpartition(':')
    with socket.create_connection((name, int(port)), timeout=CONNECT_TIMEOUT_S):
      return True
  except (OSError, ValueError):
    return False


def engine_record(options: PipelineOptions) -> dict:
  """What dataset_info.json's `engine` holds: the runner; for Flink and Spark
  also the master, the worker environment and the job server."""
  runner = runner_name(options.view_as(StandardOptions).runner)
  record = {'runner': runner}
  portable = options.view_as(PortableOptions)
  if runner == 'PortableRunner':
    record.update(job_endpoint=portable.job_endpoint,
                  environment_type=portable.environment_type)
  elif runner in JOB_SERVER_RUNNERS:
    flink = options.view_as(FlinkRunnerOptions)
    spark = options.view_as(SparkRunnerOptions)
    if runner == 'FlinkRunner':
      record.update(master=flink.flink_master, parallelism=flink.parallelism)
      jar = flink.flink_job_server_jar
    else:
      record['master'] = spark.spark_master_url
      jar = spark.spark_job_server_jar
    record.update(environment_type=portable.environment_type,
                  job_server=job_servers.describe(jar))
  return record
