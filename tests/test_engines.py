"""Flink and Spark as far as the launcher goes (pipeline/engines/runners.py,
pipeline/engines/job_servers.py): what a run fills in, the job server cache and its
Maven fetch (a fake mvn), the Java chosen, and every one-line exit 2 before
anything is written. No Java or Beam job runs here: the real runs are in
tests/test_engines_integration.py (make test-integration)."""

from __future__ import annotations

import http.server
import json
import logging
import os
import pathlib
import queue
import shlex
import shutil
import socket
import tempfile
import threading
import types
import zipfile

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability import flink_runner
from apache_beam.runners.runner import PipelineState
from apache_beam.runners.worker import sdk_worker
import grpc
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.engines import __main__ as fetch_command
from pipeline.engines import engine_runners
from pipeline.engines import jar_manifests
from pipeline.engines import job_server_checks
from pipeline.engines import job_server_launcher
from pipeline.engines import job_servers
from pipeline.engines import masters
from pipeline.engines import runners
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from pipeline.runs import exits
from tests.conftest import free_port
from tests.conftest import read_info
from tests.conftest import write_image
from tests.conftest import write_manifest
from transforms.workers.pooled_step import available_cores

FLINK = job_servers.ENGINES['flink']
SPARK = job_servers.ENGINES['spark']
SDK = job_servers.sdk_version()
TEMURIN_25 = pathlib.Path('/usr/lib/jvm/temurin-25-jdk-amd64')
OFFICIAL_FLINK = f'org.apache.beam:beam-runners-flink-2.2-job-server:{SDK}'


def fake_java(home: pathlib.Path, version: str) -> pathlib.Path:
  """A Java installation as the launcher sees one: bin/java and a release file."""
  (home / 'bin').mkdir(parents=True)
  (home / 'release').write_text(f'IMPLEMENTOR="test"\nJAVA_VERSION="{version}"\n')
  java = home / 'bin' / 'java'
  java.write_text('#!/bin/sh\nexit 0\n')
  java.chmod(0o755)
  return home


def fake_mvn(folder: pathlib.Path, official: str, dependencies: str) -> pathlib.Path:
  """An mvn on PATH: `official` and `dependencies` are shell lines run for the
  dependency:copy of Beam's job server jar and for copy-dependencies."""
  folder.mkdir(parents=True, exist_ok=True)
  mvn = folder / 'mvn'
  mvn.write_text('#!/bin/sh\nPATH=/usr/bin:/bin\n'
                 'for arg in "$@"; do case "$arg" in -DoutputDirectory=*) out="${arg#*=}";; '
                 'esac; done\n'
                 f'case "$*" in *-Dartifact=*) {official};; *) {dependencies};; esac\n')
  mvn.chmod(0o755)
  return mvn


NOT_FOUND = ('echo "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-dependency-'
             'plugin:3.6.1:copy (default-cli) on project standalone-pom: Unable to find '
             f'artifact. Could not find artifact {OFFICIAL_FLINK.replace(SDK, "jar:" + SDK)} '
             'in central (https://repo.maven.apache.org/maven2)"; echo "[ERROR] "; exit 1')
LIBRARIES = 'mkdir -p lib && touch lib/beam-runners-a-2.62.0.jar lib/guava-33.3.1-android.jar'


@pytest.fixture
def machine(tmp_path, monkeypatch):
  """A machine with a Java 17 (JAVA_HOME), no mvn, no other Java, an empty cache."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  java = fake_java(tmp_path / 'jdk17', '17.0.9')
  monkeypatch.setenv('JAVA_HOME', str(java))
  monkeypatch.setenv('PATH', str(bin_dir))
  monkeypatch.setenv(job_servers.CACHE_ENV, str(tmp_path / 'cache'))
  monkeypatch.setattr(job_servers, 'JVM_DIRS', (str(tmp_path / 'jvm'),))
  return tmp_path


@pytest.fixture
def sample(tmp_path) -> pathlib.Path:
  manifest = write_manifest(tmp_path / 'manifest.csv', [('a.png', 'red')])
  write_image(tmp_path / 'a.png')
  return manifest


def run_convert(sample, out, *flags) -> int:
  return convert.main(['--manifest', str(sample), '--output_dir', str(out), *flags])


def one_error_line(capsys) -> str:
  err = capsys.readouterr().err
  assert len(err.splitlines()) == 1, err
  return err.strip()


# --- exit 2, one line, nothing written --------------------------------------------


def test_no_java(machine, sample, capsys, monkeypatch):
  monkeypatch.delenv('JAVA_HOME')
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner') == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: FlinkRunner needs Java 11-21 for Flink and found none (no java in JAVA_HOME, '
      f'on PATH or in {machine}/jvm): apt-get install openjdk-17-jre-headless, or set JAVA_HOME')
  assert not out.exists()


def test_only_a_java_too_new(machine, sample, capsys, monkeypatch):
  java25 = fake_java(machine / 'jvm' / 'jdk-25', '25.0.3')
  monkeypatch.delenv('JAVA_HOME')
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'SparkRunner') == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: SparkRunner needs Java 11-17 for Spark 3.5; found only Java 25 at {java25} '
      '(set JAVA_HOME to a Java 17)')
  assert not out.exists()


@pytest.mark.skipif(not TEMURIN_25.is_dir(), reason='no Temurin 25 on this machine')
def test_only_the_machines_temurin_25(machine, sample, capsys, monkeypatch):
  monkeypatch.setenv('JAVA_HOME', str(TEMURIN_25))
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'SparkRunner') == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: SparkRunner needs Java 11-17 for Spark 3.5; found only Java 25 at {TEMURIN_25} '
      '(set JAVA_HOME to a Java 17)')
  assert not out.exists()


def test_no_job_server_and_no_mvn(machine, sample, capsys):
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner') == EXIT_USAGE
  assert one_error_line(capsys) == (
      f"error: FlinkRunner needs Beam's Flink job server: it is not in the cache "
      f'({machine}/cache/job-servers) and there is no mvn on PATH to fetch it (apt-get '
      'install maven; then `python -m pipeline.engines fetch flink`), or give '
      '--flink_job_server_jar')
  assert not out.exists()


def test_maven_cannot_fetch(machine, sample, capsys):
  fake_mvn(machine / 'bin', 'echo "[ERROR] Failed to execute goal x:copy (default-cli) on '
           'project standalone-pom: Could not transfer artifact a:b:jar:1 from/to central: '
           'Network is unreachable"; exit 1', 'exit 1')
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner') == EXIT_USAGE
  lines = capsys.readouterr().err.splitlines()
  assert lines[-1] == (f'error: could not fetch {OFFICIAL_FLINK} with Maven: Could not '
                       'transfer artifact a:b:jar:1 from/to central: Network is unreachable')
  assert lines[:-1] == [f"note: fetching Beam's Flink job server with Maven into "
                        f'{machine}/cache/job-servers/flink-beam{SDK} (once; a minute or two)']
  assert not out.exists()
  assert os.listdir(machine / 'cache' / 'job-servers') == []  # no half-fetched folder


def test_master_not_known(machine, sample, capsys):
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner', '--flink_master',
                     'nohost:1') == EXIT_USAGE
  assert one_error_line(capsys) == (
      'error: --flink_master nohost:1 does not answer at nohost:1: the host nohost is not '
      'known; start the Flink cluster there, or leave --flink_master out to run on a Flink '
      'inside the job server')
  assert not out.exists()


@pytest.mark.parametrize('userinfo, shown', [('', ''), ('admin:HUSH@', '<redacted>@')])
def test_spark_master_refuses(machine, sample, capsys, userinfo, shown):
  """user:password@ is no part of the host (it was: "the host
  admin:HUSH@127.0.0.1 is not known", the password printed twice)."""
  port = free_port()
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'SparkRunner', '--spark_master_url',
                     f'spark://{userinfo}127.0.0.1:{port}') == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: --spark_master_url spark://{shown}127.0.0.1:{port} does not answer at '
      f'127.0.0.1:{port}: nothing listens there (connection refused); start the Spark '
      'master there, or leave --spark_master_url out to run Spark inside the job server '
      '(local[N])')
  assert not out.exists()


def test_cluster_without_worker_environment(machine, sample, capsys, monkeypatch):
  monkeypatch.setattr(runners, 'docker_answers', lambda: False)
  with socket.socket() as master:
    master.bind(('127.0.0.1', 0))
    master.listen()
    address = f'127.0.0.1:{master.getsockname()[1]}'
    out = machine / 'out'
    assert run_convert(sample, out, '--runner', 'FlinkRunner', '--flink_master',
                       address) == EXIT_USAGE
  assert one_error_line(capsys) == (
      f"error: --flink_master {address} runs the Python workers in Beam's default environment "
      'there, DOCKER, and no docker daemon answers here: start `python -m '
      'apache_beam.runners.worker.worker_pool_main --service_port 50000` (with the '
      "venv's bin first on PATH) beside each TaskManager and add --environment_type EXTERNAL "
      '--environment_config localhost:50000')
  assert not out.exists()


class _Rest(http.server.BaseHTTPRequestHandler):
  """A web server that is no Flink (404 everywhere) or, at /config, Flink's
  REST API answering as a Flink 1.19 JobManager does."""
  flink = False
  version = '1.19.3'

  def do_GET(self):
    if self.flink and self.path == '/config':
      body = json.dumps({'refresh-interval': 3000, 'flink-version': self.version}).encode()
      self.send_response(200)
      self.send_header('Content-Length', str(len(body)))
      self.end_headers()
      self.wfile.write(body)
    else:
      self.send_error(404)

  def log_message(self, *args):
    pass


@pytest.fixture
def web_server():
  servers = []

  def start(flink: bool) -> str:
    handler = type('Handler', (_Rest,), {'flink': flink})
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    servers.append(server)
    return f'127.0.0.1:{server.server_address[1]}'
  yield start
  for server in servers:
    server.shutdown()
    server.server_close()


def test_flink_master_that_is_no_flink_rest_api(machine, sample, capsys, web_server):
  """A port that answers TCP but is no Flink REST API (a web server, the
  JobManager's RPC port) is exit 2 at once: the job server tried it for about
  a minute before failing the job (exit 1, a Java traceback)."""
  address = web_server(flink=False)
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner', '--flink_master', address,
                     '--environment_type', 'EXTERNAL',
                     '--environment_config', 'localhost:50000') == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: --flink_master {address} is no Flink REST API at {address}: it answers '
      "HTTP 404 to GET /config; give the JobManager's REST address (rest.port, 8081 by "
      'default), or leave --flink_master out to run on a Flink inside the job server')
  assert not out.exists()


def test_flink_master_that_hangs_up(machine, sample, capsys):
  with socket.socket() as rpc_port:  # takes the connection, closes it unanswered
    rpc_port.bind(('127.0.0.1', 0))
    rpc_port.listen()
    address = f'127.0.0.1:{rpc_port.getsockname()[1]}'

    def hang_up():
      for _ in range(2):  # the TCP check, then the GET
        rpc_port.accept()[0].close()
    threading.Thread(target=hang_up, daemon=True).start()
    out = machine / 'out'
    assert run_convert(sample, out, '--runner', 'FlinkRunner', '--flink_master', address,
                       '--environment_type', 'EXTERNAL',
                       '--environment_config', 'localhost:50000') == EXIT_USAGE
  assert one_error_line(capsys).startswith(
      f'error: --flink_master {address} is no Flink REST API at {address}: it closed the '
      'connection without an HTTP answer; ')
  assert not out.exists()


def test_flink_rest_api_is_recognised(web_server):
  assert masters.flink_rest(f'http://{web_server(flink=True)}') == (None, '1.19.3')
  assert masters.flink_rest(f'http://{web_server(flink=False)}') == (
      'it answers HTTP 404 to GET /config', None)


def test_flink_cluster_of_another_version(machine, sample, capsys, web_server, monkeypatch):
  """A Flink 2.2 cluster fails the 1.19 job server's jobs (a
  NullPointerException, exit 1): exit 2 before anything is written."""
  monkeypatch.setattr(_Rest, 'version', '2.2.0')
  address = web_server(flink=True)
  jar = machine / 'job-server.jar'  # a jar of nothing but a manifest: it never starts
  jar_manifests.write_thin_jar(str(jar), 'org.apache.beam.runners.flink.FlinkJobServerDriver', [])
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner', '--flink_master', address,
                     '--environment_type', 'EXTERNAL', '--environment_config', 'localhost:50000',
                     '--flink_job_server_jar', str(jar), '--flink_version', '1.19') == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: --flink_master {address} runs Flink 2.2.0 and the job server Flink 1.19: its '
      'jobs fail on another Flink; start a Flink 1.19 cluster there, or leave --flink_master '
      'out to run on the Flink inside the job server')
  assert not out.exists()
  assert masters.check_flink_version({'flink_master': address}, '1.19.3', '1.19') is None


def test_a_flink_master_given_with_credentials(machine, sample, capsys, web_server):
  """user:password@ is no part of the host: a Flink master that answers gets
  past the master's checks, to the job server's."""
  out = machine / 'out'
  address = web_server(flink=True)
  assert run_convert(sample, out, '--runner', 'FlinkRunner', '--flink_master',
                     f'http://admin:HUSH@{address}', '--environment_type', 'EXTERNAL',
                     '--environment_config', 'localhost:50000') == EXIT_USAGE
  assert one_error_line(capsys).startswith(
      "error: FlinkRunner needs Beam's Flink job server: it is not in the cache")
  assert not out.exists()


@pytest.mark.parametrize('master, why', [
    ('local[x]', 'is no master URL Spark takes'),
    ('local[0]', 'asks for 0 threads'),
    ('127.0.0.1:7077', 'is no master URL Spark takes'),  # spark:// forgotten
])
def test_a_spark_master_url_spark_cannot_parse(machine, sample, capsys, master, why):
  """Spark failed the job ~10 s in, OUT locked and made: exit 1 and 21 lines
  under `SparkException: Could not parse Master URL` (`Asked to run locally
  with 0 threads`); the host:port got a line about DOCKER first."""
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'SparkRunner', '--spark_master_url', master,
                     '--environment_type', 'EXTERNAL',
                     '--environment_config', 'localhost:50000') == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: --spark_master_url {master} {why}: give local[N] (N threads, or * for one '
      'per core) or spark://host:port (a standalone master), or leave --spark_master_url '
      'out to run Spark inside the job server (local[N])')
  assert not out.exists()


def test_the_master_urls_spark_takes():
  for master in ('local', 'local[1]', 'local[*]', 'local[4, 2]', 'local-cluster[2, 1, 1024]',
                 'spark://m1:7077,m2:7077', 'yarn', 'k8s://https://host:6443',
                 'mesos://host:5050', ' local[2] '):
    assert masters.check_spark_master({'spark_master_url': master}) is None, master
  assert masters.check_spark_master({}) is None


def test_a_java_launcher_that_is_not_there(machine, sample, capsys):
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner', '--job_server_java_launcher',
                     str(machine / 'nojava' / 'bin' / 'java')) == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: --job_server_java_launcher {machine}/nojava/bin/java is not there; give the '
      'java of a Java 11-21, or leave the flag out to use JAVA_HOME or java on PATH')
  assert not out.exists()


def test_a_java_launcher_out_of_the_engines_range(machine, sample, capsys):
  """A Java 25 given for Spark failed its job server: exit 1, `getSubject is
  not supported` and a traceback."""
  java25 = fake_java(machine / 'jdk-25', '25.0.3') / 'bin' / 'java'
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'SparkRunner', '--job_server_java_launcher',
                     str(java25)) == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: --job_server_java_launcher {java25} is Java 25; SparkRunner needs Java 11-17 '
      'for Spark 3.5: give the java of a Java 11-17, or leave the flag out to use JAVA_HOME '
      'or java on PATH')
  assert not out.exists()


@pytest.mark.parametrize('runner, kind, why', [
    ('FlinkRunner', 'missing', 'is not there'),
    ('SparkRunner', 'text', 'is no jar (not a zip archive)'),
    ('FlinkRunner', 'folder', 'is a folder'),
    ('FlinkRunner', 'library',
     'is no job server: its manifest names no Main-Class for `java -jar` to run')])
def test_a_job_server_jar_that_is_no_jar(machine, sample, capsys, runner, kind, why):
  """A --flink_job_server_jar not there failed the run after OUT was created:
  exit 1 and a traceback ending in Beam's `ValueError: Unable to parse jar
  URL`; a --spark_job_server_jar that is no jar, exit 1, three `Failed to
  start job service` lines and a traceback (`Service failed to start up with
  error 1`); so did a jar Java cannot run (one of Beam's runner libraries
  given for the job server: `no main manifest attribute`, measured 7 s)."""
  engine = runner[:-len('Runner')].lower()
  jar = machine / 'job-server.jar'
  if kind == 'text':
    jar.write_text('not a jar\n')
  elif kind == 'folder':
    jar.mkdir()
  elif kind == 'library':
    with zipfile.ZipFile(jar, 'w') as archive:
      archive.writestr('META-INF/MANIFEST.MF', 'Manifest-Version: 1.0\r\n'
                       'Automatic-Module-Name: org.apache.beam.runners.flink\r\n\r\n')
      archive.writestr('org/apache/beam/runners/flink/FlinkRunner.class', b'')
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', runner,
                     f'--{engine}_job_server_jar', str(jar)) == EXIT_USAGE
  assert one_error_line(capsys) == (
      f"error: --{engine}_job_server_jar {jar} {why}: give Beam's {runner} job server jar, "
      'or leave the flag out to use the one `python -m pipeline.engines fetch` assembles')
  assert not out.exists()


def test_a_job_server_jar_that_is_a_jar_or_a_url_is_taken(tmp_path):
  jar = tmp_path / 'job-server.jar'
  with zipfile.ZipFile(jar, 'w') as archive:  # a manifest folded as the jar spec lets it be
    archive.writestr('META-INF/MANIFEST.MF', 'Manifest-Version: 1.0\nMain-Class: org.apache.be\n'
                     ' am.runners.flink.FlinkJobServerDriver\n\n')
  assert jar_manifests.attributes(str(jar))['Main-Class'] == (
      'org.apache.beam.runners.flink.FlinkJobServerDriver')
  assert job_server_checks.check_job_server_jar(FLINK, str(jar)) is None
  assert job_server_checks.check_job_server_jar(
      SPARK, 'https://repo.maven.apache.org/maven2/x/job-server.jar') is None


@pytest.mark.parametrize('flag', ['--job_port', '--artifact_port', '--expansion_port'])
def test_a_job_server_port_in_use(machine, sample, capsys, flag):
  """The job server could not listen: exit 1 and 53 lines ending `Service
  failed to start up with error 0`."""
  with socket.socket() as taken:
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    port = taken.getsockname()[1]
    out = machine / 'out'
    assert run_convert(sample, out, '--runner', 'FlinkRunner', flag, str(port)) == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: {flag} {port} cannot be used for the job server: it is in use; give a free '
      f'port, or leave {flag} out (a free one is picked)')
  assert not out.exists()


@pytest.mark.parametrize('parallelism', ['0', '-3'])
def test_a_flink_parallelism_below_one(machine, sample, capsys, parallelism):
  """Flink failed the job 6 s in: exit 1, 21 lines ending `Parallelism must
  be at least one, or ExecutionConfig.PARALLELISM_DEFAULT`."""
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner',
                     '--parallelism', parallelism) == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: --parallelism {parallelism} is no parallelism Flink takes: give 1 or more, -1 '
      "for the Flink cluster's parallelism.default, or leave it out")
  assert not out.exists()


def test_flink_parallelisms_taken():
  for given in ({}, {'parallelism': 1}, {'parallelism': 8}, {'parallelism': -1}):
    assert job_server_checks.check_flink_parallelism(given) is None


def test_validate_checks_before_reading(machine, capsys, monkeypatch):
  monkeypatch.delenv('JAVA_HOME')
  dataset = machine / 'dataset'
  dataset.mkdir()
  assert validate.main(['--input_dir', str(dataset), '--runner', 'SparkRunner']) == EXIT_USAGE
  assert one_error_line(capsys).startswith('error: SparkRunner needs Java 11-17 for Spark 3.5 '
                                           'and found none')
  assert list(dataset.iterdir()) == []  # no report written


def test_a_local_run_records_its_runner(sample, tmp_path):
  out = tmp_path / 'out'
  assert run_convert(sample, out, '--height', '4', '--width', '4') == EXIT_OK
  assert read_info(out)['engine'] == {'runner': 'DirectRunner'}


# --- what a run fills in (pure) ----------------------------------------------------


def test_flink_defaults():
  given = {'runner': 'FlinkRunner', 'default_sdk_harness_log_level': 'WARNING'}
  assert runners.fill_in('FlinkRunner', given, cores=6, docker=False) == {
      'flink_master': '[local]', 'parallelism': 6, 'environment_type': 'LOOPBACK',
      'default_sdk_harness_log_level': 'WARN'}


def test_spark_defaults():
  assert runners.fill_in('SparkRunner', {}, cores=3, docker=False) == {
      'spark_master_url': 'local[3]', 'environment_type': 'LOOPBACK',
      'environment_cache_millis': '60000'}


def test_given_options_are_kept():
  given = {'flink_master': '[auto]', 'parallelism': 1, 'environment_type': 'EXTERNAL',
           'default_sdk_harness_log_level': 'ERROR'}
  assert runners.fill_in('FlinkRunner', given, cores=6, docker=False) == {}
  given = {'spark_master_url': 'local[*]', 'environment_cache_millis': '0'}
  assert runners.fill_in('SparkRunner', given, cores=3, docker=False) == {
      'environment_type': 'LOOPBACK'}


def test_cluster_masters():
  flink = {'flink_master': 'http://jm:8081', 'environment_type': 'EXTERNAL'}
  assert runners.master_of('FlinkRunner', flink) == ('http://jm:8081', False, [('jm', 8081)])
  assert runners.fill_in('FlinkRunner', flink, cores=6, docker=False) == {}
  spark = {'spark_master_url': 'spark://m1:7077,m2', 'environment_type': 'EXTERNAL'}
  assert runners.master_of('SparkRunner', spark)[2] == [('m1', 7077), ('m2', 7077)]
  assert runners.fill_in('SparkRunner', spark, cores=3, docker=False) == {
      'environment_cache_millis': '60000'}
  # Beam's DOCKER default stands where a docker daemon answers.
  assert runners.fill_in('FlinkRunner', {'flink_master': 'jm:8081'}, 6, docker=True) == {}
  with pytest.raises(UsageError, match='Spark worker'):
    runners.fill_in('SparkRunner', {'spark_master_url': 'yarn'}, 3, docker=False)


def test_job_server_options(tmp_path):
  jar = tmp_path / 'job-server.jar'
  server = {'jar': str(jar), 'engine_version': '1.19'}
  assert runners.job_server_options('FlinkRunner', {}, server, '/jdk/bin/java') == {
      'job_server_java_launcher': '/jdk/bin/java', 'flink_job_server_jar': str(jar),
      'flink_version': '1.19'}
  assert runners.job_server_options('FlinkRunner', {'flink_version': '1.19'}, None, None) == {}
  (tmp_path / 'lib').mkdir()
  (tmp_path / 'lib' / 'guava-33.3.1-android.jar').touch()
  spark = {'spark_master_url': 'spark://m:7077', 'job_server_jvm_properties': ['-Da=b']}
  assert runners.job_server_options('SparkRunner', spark, {'jar': str(jar)}, None) == {
      'spark_job_server_jar': str(jar),
      'job_server_jvm_properties': [
          '-Da=b', f'-Dspark.executor.extraClassPath={tmp_path}/lib/guava-33.3.1-android.jar']}
  # local Spark needs no Guava first; a given executor class path is the user's
  assert 'job_server_jvm_properties' not in runners.job_server_options(
      'SparkRunner', {}, {'jar': str(jar)}, None)
  given = {**spark, 'job_server_jvm_properties': ['-Dspark.executor.extraClassPath=/x.jar']}
  assert 'job_server_jvm_properties' not in runners.job_server_options(
      'SparkRunner', given, {'jar': str(jar)}, None)


def test_runner_names():
  assert [runners.runner_name(name) for name in (
      'flink', 'FlinkRunner', 'sparkrunner', 'Spark',
      'apache_beam.runners.portability.flink_runner.FlinkRunner',
      'pipeline.engines.engine_runners.SparkRunner', 'DirectRunner', None)] == [
      'FlinkRunner', 'FlinkRunner', 'SparkRunner', 'SparkRunner', 'FlinkRunner',
      'SparkRunner', 'DirectRunner', '']


def test_prepare_leaves_other_runners_alone():
  from apache_beam.options.pipeline_options import PipelineOptions
  options = PipelineOptions([], runner='DirectRunner')
  assert runners.prepare(options) is options
  assert options.get_all_options(drop_default=True) == {'runner': 'DirectRunner'}


def test_prepare_leaves_a_given_job_server_alone(machine, monkeypatch):
  from apache_beam.options.pipeline_options import PipelineOptions
  monkeypatch.delenv('JAVA_HOME')  # no Java needed: the job server runs elsewhere
  options = PipelineOptions([], runner='FlinkRunner', job_endpoint='localhost:8099')
  assert runners.prepare(options).get_all_options(drop_default=True) == {
      'runner': 'FlinkRunner', 'job_endpoint': 'localhost:8099'}


def test_prepare_fills_the_options(machine, monkeypatch):
  from apache_beam.options.pipeline_options import PipelineOptions
  server = cache_a_job_server(machine / 'cache', 'flink', '1.19')
  options = runners.prepare(PipelineOptions([], runner='FlinkRunner'))
  filled = options.get_all_options(drop_default=True)
  assert filled['runner'] == 'pipeline.engines.engine_runners.FlinkRunner'  # stops its job server
  assert filled['flink_job_server_jar'] == server
  assert filled['flink_version'] == '1.19' and filled['flink_master'] == '[local]'
  assert filled['environment_type'] == 'LOOPBACK'
  assert filled['job_server_java_launcher'] == str(machine / 'jdk17' / 'bin' / 'java')
  assert runners.engine_record(options) == {
      'runner': 'FlinkRunner', 'master': '[local]', 'parallelism': available_cores(),
      'environment_type': 'LOOPBACK',
      'job_server': {'jar': server, 'origin': 'assembled', 'beam_version': '2.62.0',
                     'engine_version': '1.19'}}


# --- Java ---------------------------------------------------------------------------


def test_java_home_first_then_path_then_the_newest_in_the_jvm_folders(tmp_path, monkeypatch):
  jvm = tmp_path / 'jvm'
  homes = {v: fake_java(jvm / f'jdk-{v}', f'{v}.0.1') for v in (11, 17, 21, 25)}
  monkeypatch.setattr(job_servers, 'JVM_DIRS', (str(jvm),))

  def chosen(engine, **environ):
    return job_servers.choose_java(engine, job_servers.java_candidates(environ)).home

  assert chosen(FLINK, JAVA_HOME=str(homes[11])) == str(homes[11])
  assert chosen(FLINK, JAVA_HOME=str(homes[25]), PATH=str(homes[17] / 'bin')) == str(homes[17])
  assert chosen(FLINK, JAVA_HOME=str(homes[25])) == str(homes[21])
  assert chosen(SPARK, JAVA_HOME=str(homes[25])) == str(homes[17])


def test_java_versions(tmp_path):
  assert job_servers.java_version(str(fake_java(tmp_path / 'a', '1.8.0_392')), '') == 8
  assert job_servers.java_version(str(fake_java(tmp_path / 'b', '21')), '') == 21
  script = tmp_path / 'c' / 'java'  # no release file: `java -version`
  script.parent.mkdir()
  script.write_text('#!/bin/sh\necho \'openjdk version "17.0.15" 2025-04-15\' >&2\n')
  script.chmod(0o755)
  assert job_servers.java_version(str(tmp_path / 'c'), str(script)) == 17


@pytest.mark.skipif(not TEMURIN_25.is_dir(), reason='no Temurin 25 on this machine')
def test_never_the_machines_temurin_25():
  chosen = job_servers.choose_java(SPARK, job_servers.java_candidates(
      {'JAVA_HOME': str(TEMURIN_25), 'PATH': ''}))
  assert chosen.version == 17 and 'temurin' not in chosen.home


# --- the cache and Maven ----------------------------------------------------------


def cache_a_job_server(root: pathlib.Path, engine: str, version: str) -> str:
  folder = root / 'job-servers' / f'{engine}-beam{SDK}'
  folder.mkdir(parents=True)
  (folder / 'job-server.jar').touch()
  (folder / 'job-server.json').write_text(json.dumps({
      'engine': engine, 'jar': 'job-server.jar', 'origin': 'assembled',
      'beam_version': '2.62.0', 'engine_version': version}))
  return str(folder / 'job-server.jar')


def test_assembled_when_maven_serves_no_job_server(machine):
  fake_mvn(machine / 'bin', NOT_FOUND, LIBRARIES)
  notes = []
  record = job_servers.fetch(FLINK, note=notes.append)
  folder = machine / 'cache' / 'job-servers' / f'flink-beam{SDK}'
  assert record['jar'] == str(folder / 'job-server.jar')
  assert record['origin'] == 'assembled' and record['engine_version'] == '1.19'
  assert record['reason'] == f'Maven Central serves no {OFFICIAL_FLINK}'
  assert notes[1] == (f'Maven Central serves no {OFFICIAL_FLINK}: assembling a Flink 1.19 '
                      "job server from Beam 2.62.0's runner libraries")
  with zipfile.ZipFile(record['jar']) as jar:
    assert jar.namelist() == ['META-INF/MANIFEST.MF']
  pom = (folder / 'pom.xml').read_text()
  assert ('<artifactId>beam-runners-flink-1.19</artifactId><version>2.62.0</version>'
          in pom)
  # cached: the next run asks Maven nothing (a failing mvn would say so)
  fake_mvn(machine / 'bin', 'exit 1', 'exit 1')
  assert job_servers.fetch(FLINK, note=notes.append) == record and len(notes) == 2
  # an asked-for version the cached job server runs is found there too
  assert job_servers.cached(FLINK, '1.19') == record


def test_beams_own_job_server_when_served(machine):
  fake_mvn(machine / 'bin', 'touch "$out/beam-runners-spark-3-job-server-x.jar"', 'exit 1')
  record = job_servers.fetch(SPARK, note=lambda line: None)
  assert record['origin'] == 'maven'
  assert record['artifact'] == f'org.apache.beam:beam-runners-spark-3-job-server:{SDK}'
  assert os.path.basename(record['jar']) == 'beam-runners-spark-3-job-server-x.jar'
  assert job_servers.describe(record['jar'])['beam_version'] == SDK


def test_libraries_not_fetched(machine):
  fake_mvn(machine / 'bin', NOT_FOUND, 'echo "[ERROR] Failed to execute goal y on project '
           'job-server: Could not resolve dependencies for project img2tfrecord:job-server"; '
           'exit 1')
  with pytest.raises(UsageError) as raised:
    job_servers.fetch(FLINK, note=lambda line: None)
  assert str(raised.value) == ('could not fetch the libraries of a Flink job server with '
                               'Maven: Could not resolve dependencies for project '
                               'img2tfrecord:job-server')


def test_no_assembly_for_an_asked_version(machine):
  fake_mvn(machine / 'bin', NOT_FOUND, LIBRARIES)
  with pytest.raises(UsageError) as raised:
    job_servers.fetch(FLINK, '2.0', note=lambda line: None)
  assert str(raised.value) == (
      f'Maven Central serves no org.apache.beam:beam-runners-flink-2.0-job-server:{SDK} and '
      'this project assembles Flink job servers for Flink 1.19 only: leave --flink_version '
      'out, or give --flink_job_server_jar')


def test_maven_error_line():
  output = ('\x1b[0m[INFO] Scanning\n[ERROR] Failed to execute goal a:b:1:copy (default-cli) '
            'on project standalone-pom: Unable to find artifact. Could not find artifact x\n'
            '[ERROR] \n[ERROR] Try downloading the file manually\n')
  assert job_servers.maven_error(output) == 'Unable to find artifact. Could not find artifact x'
  assert job_servers.maven_error('The JAVA_HOME environment variable is not defined correctly\n'
                                 '\n') == ('The JAVA_HOME environment variable is not defined '
                                           'correctly')


def test_thin_jar_manifest(tmp_path):
  class_path = [f'lib/library-number-{i:03d}-with-a-long-name-1.0.jar' for i in range(40)]
  path = tmp_path / 'job-server.jar'
  jar_manifests.write_thin_jar(str(path), 'org.example.Main', class_path)
  with zipfile.ZipFile(path) as jar:
    data = jar.read('META-INF/MANIFEST.MF')
  lines = data.split(b'\r\n')
  assert max(len(line) for line in lines) == 72  # the jar spec's limit, filled
  assert lines[:2] == [b'Manifest-Version: 1.0', b'Main-Class: org.example.Main']
  assert data.endswith(b'\r\n\r\n')
  unfolded = data.replace(b'\r\n ', b'').decode().split('\r\n')
  assert unfolded[2] == 'Class-Path: ' + ' '.join(class_path)


def assemble_in_cache(root: pathlib.Path, engine: str, libraries: list) -> pathlib.Path:
  """A job server of the cache as fetch assembles one: the thin jar naming
  lib/<each of libraries>, all there; -> its folder."""
  folder = pathlib.Path(cache_a_job_server(root, engine, '1.19')).parent
  (folder / 'lib').mkdir()
  for name in libraries:
    (folder / 'lib' / name).write_bytes(b'PK\x05\x06' + bytes(18))  # an empty zip
  jar_manifests.write_thin_jar(str(folder / 'job-server.jar'), 'org.example.Driver',
                               [f'lib/{name}' for name in libraries])
  return folder


@pytest.mark.parametrize('lost', [['lib/beam-runners-flink-1.19-2.62.0.jar'],
                                  ['lib/a.jar', 'lib/beam-runners-flink-1.19-2.62.0.jar'],
                                  ['job-server.jar']])
def test_a_cached_job_server_that_lost_a_part(machine, sample, capsys, lost):
  """A cached job server whose lib/ lost a jar started a JVM that ended at
  once (`Could not find or load main class ... FlinkJobServerDriver`): exit 1
  after 5 s, three `Failed to start job service` lines and a traceback of 40
  lines. One whose job-server.jar was gone had Maven fetch it again (a minute
  or two), then failed renaming the new folder onto the old: a traceback
  (OSError, Directory not empty). Now exit 2 at once, one line, Maven not
  asked, nothing written; `fetch` says the same."""
  folder = assemble_in_cache(machine / 'cache', 'flink',
                             ['a.jar', 'beam-runners-flink-1.19-2.62.0.jar', 'z.jar'])
  fake_mvn(machine / 'bin', 'echo "[ERROR] Maven was asked"; exit 1', 'exit 1')
  for part in lost:
    (folder / part).unlink()
  more = ' (and 1 more)' if len(lost) > 1 else ''
  line = (f"error: FlinkRunner needs Beam's Flink job server and the one in the cache is "
          f'incomplete: {lost[0]}{more} is not there in {folder}; '
          'delete that folder and fetch it again (`python -m pipeline.engines fetch flink`)')
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner') == EXIT_USAGE
  assert one_error_line(capsys) == line
  assert not out.exists()
  assert fetch_command.main(['fetch', 'flink']) == EXIT_USAGE
  assert one_error_line(capsys) == line
  assert job_servers.cached(FLINK) is None


# gRPC's poll of the channel Beam closes after each try, in its own thread
# (`ValueError: Cannot monitor channel state: Channel closed!`): pytest's
# own excepthook sees it; the command line printed none in 9 runs.
@pytest.mark.filterwarnings('ignore::pytest.PytestUnhandledThreadExceptionWarning')
def test_a_job_server_that_ends_as_it_starts_is_one_line(machine, sample, capsys):
  """A JVM that ended before the job server answered (here a heap too small
  for it, as `--job_server_jvm_properties=-Xmx1m` gives): exit 1, three
  `Failed to start job service with (...)` lines, `error: the job failed:
  RuntimeError: Service failed to start up with error 1` and a traceback of
  50 lines, never what Java said. Now its last lines, once, and exit 2."""
  assemble_in_cache(machine / 'cache', 'flink', ['a.jar'])
  java = machine / 'jdk17' / 'bin' / 'java'
  java.write_text('#!/bin/sh\necho "Error occurred during initialization of VM" >&2\n'
                  'echo "Too small maximum heap" >&2\nexit 1\n')
  out = machine / 'out'
  assert run_convert(sample, out, '--runner', 'FlinkRunner') == EXIT_USAGE
  assert one_error_line(capsys) == (
      'error: the Flink job server ended as it started (Java exited with status 1): Error '
      'occurred during initialization of VM; Too small maximum heap')
  assert not (out / 'dataset_info.json').exists()
  # Beam's line at each of its tries is left out of the command line's log
  tried = logging.LogRecord('apache_beam.utils.subprocess_server', logging.ERROR, __file__, 1,
                            'Failed to start job service with %s', (('java', '-jar'),), None)
  assert exits._no_repeated_failures(tried) is False


def test_a_whole_cached_job_server_is_used(machine):
  folder = assemble_in_cache(machine / 'cache', 'flink', ['a.jar', 'b.jar'])
  assert job_servers.incomplete(str(folder)) == []
  assert job_servers.cached(FLINK)['jar'] == str(folder / 'job-server.jar')


# --- python -m pipeline.engines fetch -----------------------------------------------


def test_fetch_command_prints_the_jar(machine, capsys):
  jar = cache_a_job_server(machine / 'cache', 'spark', '3.5.1')
  assert fetch_command.main(['fetch', 'spark']) == EXIT_OK
  assert capsys.readouterr().out == jar + '\n'


def test_fetch_command_usage(machine, capsys):
  assert fetch_command.main(['fetch', 'storm']) == EXIT_USAGE
  assert one_error_line(capsys) == 'error: usage: python -m pipeline.engines fetch {flink,spark}'
  assert fetch_command.main(['fetch', 'flink']) == EXIT_USAGE  # no mvn here
  assert one_error_line(capsys).startswith("error: FlinkRunner needs Beam's Flink job server")


# --- the runners prepare names (pipeline/engines/engine_runners.py) -----------------------


class _Stream(grpc.RpcError):
  def __init__(self, code):
    super().__init__()
    self._code = code

  def code(self):
    return self._code


def test_a_failed_instruction_s_traceback_is_logged_not_printed(capsys, monkeypatch):
  """With LOOPBACK the SDK harness runs in the launcher, and printed each
  failed instruction's traceback to stderr besides logging it: a Flink job
  failing on a full disk wrote 134 lines above the run's one line, which the
  command line's log filter was there to leave out."""
  monkeypatch.setattr(engine_runners, '_quieted', [])
  monkeypatch.setattr(threading, 'excepthook', threading.excepthook)
  monkeypatch.setattr(sdk_worker, 'print', print, raising=False)
  engine_runners._quiet_hang_ups()

  def full_disk():
    raise OSError(28, 'No space left on device')

  logged = []
  handler = logging.Handler(logging.ERROR)
  handler.emit = logged.append
  logger = logging.getLogger(sdk_worker.__name__)
  logger.addHandler(handler)
  harness = types.SimpleNamespace(_responses=queue.Queue())
  try:
    sdk_worker.SdkHarness._execute(
        harness, full_disk, beam_fn_api_pb2.InstructionRequest(instruction_id='7'))
  finally:
    logger.removeHandler(handler)
  assert capsys.readouterr().err == ''
  assert [r.getMessage().splitlines()[0] for r in logged] == [
      'Error processing instruction 7. Original traceback is']
  assert 'OSError: [Errno 28] No space left on device' in logged[0].getMessage()
  response = harness._responses.get_nowait()
  assert response.instruction_id == '7' and 'No space left on device' in response.error


def test_a_hung_up_stream_is_quiet():
  passed_on = []
  hook = engine_runners.without_hang_ups(passed_on.append)
  cancelled, unavailable, internal = (_Stream(grpc.StatusCode.CANCELLED),
                                      _Stream(grpc.StatusCode.UNAVAILABLE),
                                      _Stream(grpc.StatusCode.INTERNAL))
  bug = ValueError('a bug')
  for error in (cancelled, unavailable, internal, bug):
    hook(types.SimpleNamespace(exc_value=error, thread=None))
  assert [args.exc_value for args in passed_on] == [internal, bug]

  def record(error):
    return logging.LogRecord('apache_beam.runners.worker.data_plane', logging.ERROR, '', 0,
                             'Failed to read inputs in the data plane.', (),
                             (type(error), error, None))
  quiet = engine_runners._NoHangUps()
  assert not quiet.filter(record(cancelled)) and not quiet.filter(record(unavailable))
  assert quiet.filter(record(internal))
  # once the job is over, its job server stops: every stream closes
  engine_runners._job_over.set()
  try:
    assert not quiet.filter(record(internal))
    hook(types.SimpleNamespace(exc_value=internal, thread=None))
    assert len(passed_on) == 2
  finally:
    engine_runners._job_over.clear()


def test_the_job_server_stops_with_the_job(monkeypatch, tmp_path):
  from apache_beam.options.pipeline_options import PipelineOptions
  from apache_beam.runners.portability import portable_runner
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))  # the run's temp folder

  class Server:
    stopped = 0

    def stop(self):
      Server.stopped += 1

  class Result:
    _cleanup_callbacks = ['loopback worker']
    _state = PipelineState.DONE  # the job ended: nothing to cancel

  def run(runner, pipeline, options):
    runner.default_job_server(options)
    return Result()

  monkeypatch.setattr(portable_runner.PortableRunner, 'run_portable_pipeline', run)
  monkeypatch.setattr(flink_runner.FlinkRunner, 'default_job_server',
                      lambda self, options: Server())
  options = PipelineOptions([], job_server_java_launcher='/jdk/bin/java')
  result = engine_runners.FlinkRunner().run_portable_pipeline(None, options)
  assert result._cleanup_callbacks[1] == 'loopback worker'
  assert not engine_runners._job_over.is_set()
  for callback in result._cleanup_callbacks[::2]:  # what the result runs when the job ends
    callback()
  assert Server.stopped == 1 and engine_runners._job_over.is_set()
  engine_runners._job_over.clear()

  def fails(runner, pipeline, options):
    runner.default_job_server(options)
    raise RuntimeError('submit failed')

  monkeypatch.setattr(portable_runner.PortableRunner, 'run_portable_pipeline', fails)
  with pytest.raises(RuntimeError, match='submit failed'):
    engine_runners.FlinkRunner().run_portable_pipeline(None, options)
  assert Server.stopped == 2
  # Java is started through the wrapper that ends it with this process, once.
  launcher = options.get_all_options()['job_server_java_launcher']
  if shutil.which('setpriv'):
    assert launcher == str(tmp_path / job_server_launcher.WRAPPER)
    # its temp files (a Flink job server's 21 MB jar) in the run's temp folder
    option = shlex.quote(f'-Djava.io.tmpdir={tmp_path}')
    assert f'-- /jdk/bin/java {option} "$@"' in (
        tmp_path / job_server_launcher.WRAPPER).read_text()
  else:
    assert launcher == '/jdk/bin/java'


@pytest.mark.skipif(not shutil.which('setpriv'), reason='no setpriv (util-linux)')
def test_a_job_server_started_through_the_wrapper_ends_with_its_launcher(tmp_path):
  """The launcher killed outright (SIGKILL): its job server (here `sleep`
  standing for Java) gets SIGTERM and ends, instead of running on. It runs in
  a session of its own (a terminal's Ctrl-C is for the launcher alone), as
  the very process the launcher started (setsid did not fork)."""
  import signal
  import subprocess
  import sys
  import time
  java = tmp_path / 'java'  # stands for Java: takes its options, then is `sleep`
  java.write_text(f'#!/bin/sh\nexec {shutil.which("sleep")} "$2"\n')
  java.chmod(0o755)
  wrapper = job_server_launcher.dying_with_launcher(str(java), str(tmp_path))
  launcher = subprocess.Popen(
      [sys.executable, '-c', 'import subprocess, sys, time\n'
       'child = subprocess.Popen([sys.argv[1], "300"])\n'
       'print(child.pid, flush=True)\ntime.sleep(300)', wrapper],
      stdout=subprocess.PIPE, text=True)
  child = int(launcher.stdout.readline())
  deadline = time.monotonic() + 10
  while not pathlib.Path(f'/proc/{child}/cmdline').read_bytes().startswith(
          shutil.which('sleep').encode()) and time.monotonic() < deadline:
    time.sleep(0.01)  # the wrapper has run setpriv, which has set the signal and run sleep
  if shutil.which('setsid'):
    assert os.getsid(child) == child != os.getsid(launcher.pid)
  launcher.send_signal(signal.SIGKILL)
  launcher.wait(timeout=10)
  deadline = time.monotonic() + 10
  while pathlib.Path(f'/proc/{child}').exists() and time.monotonic() < deadline:
    state = pathlib.Path(f'/proc/{child}/stat').read_text().split()[2]
    if state == 'Z':  # ended, not yet reaped by init
      break
    time.sleep(0.05)
  assert not pathlib.Path(f'/proc/{child}').exists() or (
      pathlib.Path(f'/proc/{child}/stat').read_text().split()[2] == 'Z')


def test_without_setpriv_java_is_started_as_it_is(tmp_path):
  assert job_server_launcher.dying_with_launcher('/jdk/bin/java', str(tmp_path), '') == (
      '/jdk/bin/java')
  assert list(tmp_path.iterdir()) == []


class _JobService:
  """A job service whose job is RUNNING until cancelled; `gone`: its job
  server is stopped already (every call fails as Beam's closed channel does)."""

  def __init__(self, calls: list, gone: bool = False):
    self._calls, self._gone, self._cancelled = calls, gone, False

  def _call(self, name):
    self._calls.append(name)
    if self._gone:
      raise ValueError('Cannot invoke RPC on closed channel!')

  def Cancel(self, request):  # the gRPC stub's names
    self._call(f'cancel {request.job_id}')
    self._cancelled = True

  def GetState(self, request):
    from apache_beam.portability.api import beam_job_api_pb2
    self._call('state')
    return types.SimpleNamespace(state=beam_job_api_pb2.JobState.CANCELLED if self._cancelled
                                 else beam_job_api_pb2.JobState.RUNNING)


@pytest.mark.parametrize('gone', [False, True])
def test_an_interrupted_job_is_cancelled_before_its_job_server_stops(gone):
  """The wait interrupted (SIGINT, SIGTERM, KeyboardInterrupt) runs the
  job's clean-up with the job still RUNNING: it is cancelled through the
  job server, then the job server stops. A job server gone already (a
  terminal's Ctrl-C reached its JVM) is stopped all the same, quietly."""
  from apache_beam.runners.portability.portable_runner import PipelineResult
  calls = []

  class Server:
    def stop(self):
      calls.append('stop')

  result = PipelineResult(_JobService(calls, gone), 'job-1', None, None, [])
  result._state = PipelineState.RUNNING
  engine_runners._cancel_then_stop(result, [Server()])()
  if gone:
    assert calls == ['cancel job-1', 'stop']
  else:
    assert calls == ['cancel job-1', 'state', 'stop']
    assert result._state == PipelineState.CANCELLED
  assert result.job_server_stopped


def test_a_job_that_ended_is_not_cancelled_by_its_clean_up():
  calls = []

  class Server:
    def stop(self):
      calls.append('stop')

  from apache_beam.runners.portability.portable_runner import PipelineResult
  for state in (PipelineState.DONE, PipelineState.FAILED, PipelineState.CANCELLED):
    result = PipelineResult(_JobService(calls), 'job-1', None, None, [])
    result._state = state
    engine_runners._cancel_then_stop(result, [Server()])()
  assert calls == ['stop'] * 3
