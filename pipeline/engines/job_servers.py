"""Beam's Flink and Spark job servers, fetched once into a cache, and the Java
that runs them.

A job server is looked up in the cache (CACHE_ENV, else ~/.cache/img2tfrecord,
then job-servers/<engine>-beam<SDK version>/). If absent, Maven fetches it:
first Beam's own job server jar for the pinned SDK; when Maven says that
artifact is not served, a job server is assembled from the newest Beam
release whose runner libraries are (ASSEMBLIES): `mvn dependency:copy-dependencies`
into lib/, and job-server.jar, a jar holding only a manifest whose Class-Path
names them. Either way job-server.json, written last, records what the folder
holds; a folder without it is not used.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Optional

from pipeline.engines import jar_manifests
from pipeline.errors import UsageError

CACHE_ENV = 'IMG2TFRECORD_CACHE'
RECORD = 'job-server.json'
THIN_JAR = 'job-server.jar'
MAVEN_TIMEOUT_S = 1800  # a cold fetch of a job server's ~300 MB of jars
# Where Java installations are looked for after JAVA_HOME and PATH (tests swap it).
JVM_DIRS = ('/usr/lib/jvm',)
INSTALL_JAVA = 'apt-get install openjdk-17-jre-headless'
DEPENDENCY_PLUGIN = 'org.apache.maven.plugins:maven-dependency-plugin:3.6.1'


@dataclasses.dataclass(frozen=True)
class Assembly:
  """A job server put together from Beam's runner libraries on Maven Central."""
  beam_version: str
  engine_version: str  # the Flink or Spark version it runs
  main_class: str
  dependencies: tuple  # (groupId, artifactId, version)
  pinned: tuple = ()  # (groupId, artifactId, version) in dependencyManagement


@dataclasses.dataclass(frozen=True)
class Engine:
  name: str  # flink, spark
  runner: str  # FlinkRunner, SparkRunner
  label: str  # Flink, Spark
  java: tuple  # (oldest, newest) Java feature release its job servers run on
  java_for: str  # what needs that Java, for messages
  assemblies: dict  # engine version -> Assembly

  def official(self, version: str, beam_version: str) -> str:
    """groupId:artifactId:version of Beam's own job server jar."""
    name = 'spark-3' if self.name == 'spark' else f'flink-{version}'
    return f'org.apache.beam:beam-runners-{name}-job-server:{beam_version}'


def _beam(artifact: str, version: str) -> tuple:
  return ('org.apache.beam', artifact, version)


# Beam 2.62.0 is the newest release of which Maven Central serves every part:
# the Flink 1.19 runner library, the Spark 3 runner and the job service (and
# Beam's 2.77 SDK runs its pipelines, see docs/running.md "Running on Flink").
# slf4j: Flink's runner brings slf4j-api 1.7 with no binding; Spark 3.5 needs
# slf4j-api 2 (its log4j binding is 2.x), which Maven would otherwise resolve to 1.7.
ENGINES = {
    'flink': Engine('flink', 'FlinkRunner', 'Flink', (11, 21), 'Flink', {
        '1.19': Assembly('2.62.0', '1.19', 'org.apache.beam.runners.flink.FlinkJobServerDriver', (
            _beam('beam-runners-flink-1.19', '2.62.0'),
            ('org.slf4j', 'slf4j-simple', '1.7.30'))),
    }),
    'spark': Engine('spark', 'SparkRunner', 'Spark', (11, 17), 'Spark 3.5', {
        '3': Assembly('2.62.0', '3.5.1', 'org.apache.beam.runners.spark.SparkJobServerDriver', (
            _beam('beam-runners-spark-3', '2.62.0'),
            _beam('beam-runners-java-job-service', '2.62.0'),
            ('org.apache.spark', 'spark-core_2.12', '3.5.1'),
            ('org.apache.spark', 'spark-streaming_2.12', '3.5.1'),
            ('org.apache.spark', 'spark-sql_2.12', '3.5.1')),
            pinned=(('org.slf4j', 'slf4j-api', '2.0.7'),)),
    }),
}


# --- Java ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Java:
  path: str  # the java executable
  home: str
  version: Optional[int]  # feature release (17), None if it could not be told
  source: str = 'JAVA_HOME'  # JAVA_HOME, PATH or the JVM folder it was found in


def java_version(home: str, java: str) -> Optional[int]:
  """The feature release of a Java installation: its `release` file, else `java -version`."""
  try:
    with open(os.path.join(home, 'release'), encoding='utf-8') as handle:
      text = handle.read()
  except OSError:
    try:
      text = subprocess.run([java, '-version'], capture_output=True, text=True,
                            timeout=30, check=False).stderr
    except (OSError, subprocess.TimeoutExpired):
      return None
  found = re.search(r'(?:JAVA_VERSION=|version )"(\d+)(?:\.(\d+))?', text)
  if not found:
    return None
  major = int(found.group(1))
  return int(found.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def java_candidates(environ=None) -> list:
  """Every Java to consider, in order: JAVA_HOME, `java` on PATH, then JVM_DIRS."""
  environ = os.environ if environ is None else environ
  paths = []
  if environ.get('JAVA_HOME'):
    paths.append((os.path.join(environ['JAVA_HOME'], 'bin', 'java'), 'JAVA_HOME'))
  on_path = shutil.which('java', path=environ.get('PATH', ''))
  if on_path:
    paths.append((on_path, 'PATH'))
  for folder in JVM_DIRS:
    paths += [(path, folder) for path in sorted(glob.glob(os.path.join(folder, '*', 'bin',
                                                                        'java')))]
  found, seen = [], set()
  for path, source in paths:
    real = os.path.realpath(path)
    if real in seen or not os.access(real, os.X_OK):
      continue
    seen.add(real)
    home = os.path.dirname(os.path.dirname(real))
    found.append(Java(real, home, java_version(home, real), source))
  return found


def choose_java(engine: Engine, candidates: list) -> Java:
  """JAVA_HOME if it fits the engine's range, else `java` on PATH, else the
  newest fitting Java of the JVM folders; UsageError saying what was found."""
  low, high = engine.java
  fits = [j for j in candidates if j.version is not None and low <= j.version <= high]
  chosen = [j for j in fits if j.source in ('JAVA_HOME', 'PATH')] or sorted(
      fits, key=lambda j: -j.version)
  if chosen:
    return chosen[0]
  need = f'{engine.runner} needs Java {low}-{high} for {engine.java_for}'
  if not candidates:
    raise UsageError(f'{need} and found none (no java in JAVA_HOME, on PATH or in '
                     f'{", ".join(JVM_DIRS)}): {INSTALL_JAVA}, or set JAVA_HOME')
  seen = ', '.join(f'Java {j.version or "of unknown version"} at {j.home}' for j in candidates)
  raise UsageError(f'{need}; found only {seen} (set JAVA_HOME to a Java 17)')


# --- the cache -------------------------------------------------------------------


def cache_root(environ=None) -> str:
  environ = os.environ if environ is None else environ
  if environ.get(CACHE_ENV):
    return os.path.abspath(environ[CACHE_ENV])
  base = environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'img2tfrecord')


def sdk_version() -> str:
  from apache_beam import version
  return version.__version__


def folder_name(engine: Engine, version: Optional[str]) -> str:
  """The cache folder of a job server for this SDK: one per engine, and one per
  engine version a user asks for (--flink_version)."""
  return f'{engine.name}{"-" + version if version else ""}-beam{sdk_version()}'


def cached(engine: Engine, version: Optional[str] = None, root: Optional[str] = None):
  """The record (dict, with the jar's absolute path) of a cached job server, or None.

  An asked-for version is also found in the engine's default folder when that
  holds the same version.
  """
  root = os.path.join(root or cache_root(), 'job-servers')
  names = [folder_name(engine, version)] + ([folder_name(engine, None)] if version else [])
  for name in names:
    try:
      with open(os.path.join(root, name, RECORD), encoding='utf-8') as handle:
        record = json.load(handle)
    except (OSError, ValueError):
      continue
    record['jar'] = os.path.join(root, name, record['jar'])
    if version in (None, record['engine_version']) and not incomplete(os.path.join(root, name)):
      return record
  return None


def incomplete(folder: str) -> list:
  """What a cache folder with its job-server.json (complete once) lacks now:
  its jar, or the jars of its Class-Path that are no file (lib/ cleaned, a
  copy cut short); [] for a whole one, or one without a record (an
  unfinished fetch, which the next replaces)."""
  try:
    with open(os.path.join(folder, RECORD), encoding='utf-8') as handle:
      jar = json.load(handle)['jar']
  except (OSError, ValueError, KeyError, TypeError):
    return []
  if not os.path.isfile(os.path.join(folder, jar)):
    return [jar]
  return jar_manifests.missing_class_path(os.path.join(folder, jar))


# --- fetching ------------------------------------------------------------------


class FetchError(UsageError):
  """No job server could be had: one line saying why and what to do."""


def fetch(engine: Engine, version: Optional[str] = None, root: Optional[str] = None,
          java_home: Optional[str] = None, note=None) -> dict:
  """The cached job server, else Maven's: its record. FetchError when neither.

  version: the engine version asked for (--flink_version), None for the
  default (the newest Beam publishes). note: called with one line of progress.
  """
  found = cached(engine, version, root)
  if found:
    return found
  note = note or (lambda line: print(f'note: {line}', file=sys.stderr))
  mvn = shutil.which('mvn')
  what = f"Beam's {engine.label} job server"
  root = os.path.join(root or cache_root(), 'job-servers')
  final = os.path.join(root, folder_name(engine, version))
  missing = incomplete(final)
  if missing:  # not fetched again over it: what removed part of it may be at work still
    more = f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''
    raise FetchError(f'{engine.runner} needs {what} and the one in the cache is incomplete: '
                     f'{missing[0]}{more} is not there in {final}; delete that folder and '
                     f'fetch it again (`python -m pipeline.engines fetch {engine.name}`)')
  if not mvn:
    raise FetchError(f'{engine.runner} needs {what}: it is not in the cache ({root}) and '
                     f'there is no mvn on PATH to fetch it (apt-get install maven; then '
                     f'`python -m pipeline.engines fetch {engine.name}`), or give '
                     f'--{engine.name}_job_server_jar')
  note(f'fetching {what} with Maven into {final} (once; a minute or two)')
  os.makedirs(root, exist_ok=True)
  work = tempfile.mkdtemp(prefix='.fetch-', dir=root)
  try:
    record = _fetch_into(work, engine, version, mvn, java_home, note)
    with open(os.path.join(work, RECORD), 'w', encoding='utf-8') as handle:
      json.dump(record, handle, indent=2)
      handle.write('\n')
    if os.path.isdir(final) and not os.path.isfile(os.path.join(final, RECORD)):
      shutil.rmtree(final)  # an unfinished folder (job-server.json goes in last)
    try:
      os.rename(work, final)
    except OSError:  # another run finished the same fetch first: use that one
      if cached(engine, version, os.path.dirname(root)) is None:
        raise
  finally:
    shutil.rmtree(work, ignore_errors=True)
  return cached(engine, version, os.path.dirname(root))


def _fetch_into(work: str, engine: Engine, version: Optional[str], mvn: str,
                java_home: Optional[str], note) -> dict:
  sdk = sdk_version()
  asked = version or _newest_version(engine)
  official = engine.official(asked, sdk)
  served, error = _maven(mvn, work, java_home, [
      f'{DEPENDENCY_PLUGIN}:copy', f'-Dartifact={official}', f'-DoutputDirectory={work}'])
  record = {'engine': engine.name, 'sdk_beam_version': sdk,
            'fetched': datetime.datetime.now(datetime.timezone.utc).strftime(
                '%Y-%m-%dT%H:%M:%SZ')}
  if served:
    jar = os.path.basename(glob.glob(os.path.join(work, '*.jar'))[0])
    return {**record, 'origin': 'maven', 'artifact': official, 'jar': jar,
            'beam_version': sdk, 'engine_version': asked}
  if not _not_found(error):
    raise FetchError(f'could not fetch {official} with Maven: {error}')
  assembly = engine.assemblies.get(asked) or (
      None if version else engine.assemblies[max(engine.assemblies)])
  if assembly is None:
    raise FetchError(f'Maven Central serves no {official} and this project assembles '
                     f'{engine.label} job servers for {engine.label} '
                     f'{", ".join(engine.assemblies)} only: leave --{engine.name}_version '
                     f'out, or give --{engine.name}_job_server_jar')
  note(f'Maven Central serves no {official}: assembling a {engine.label} '
       f"{assembly.engine_version} job server from Beam {assembly.beam_version}'s "
       f'runner libraries')
  with open(os.path.join(work, 'pom.xml'), 'w', encoding='utf-8') as handle:
    handle.write(pom(assembly))
  done, error = _maven(mvn, work, java_home, [
      f'{DEPENDENCY_PLUGIN}:copy-dependencies', '-DoutputDirectory=lib',
      '-DincludeScope=runtime'])
  if not done:
    raise FetchError(f'could not fetch the libraries of a {engine.label} job server with '
                     f'Maven: {error}')
  libraries = sorted(n for n in os.listdir(os.path.join(work, 'lib')) if n.endswith('.jar'))
  jar_manifests.write_thin_jar(os.path.join(work, THIN_JAR), assembly.main_class,
                 [f'lib/{name}' for name in libraries])
  return {**record, 'origin': 'assembled', 'jar': THIN_JAR,
          'artifact': ':'.join(assembly.dependencies[0]),
          'beam_version': assembly.beam_version, 'engine_version': assembly.engine_version,
          'reason': f'Maven Central serves no {official}'}


def _newest_version(engine: Engine) -> str:
  if engine.name == 'spark':
    return '3'
  from apache_beam.options.pipeline_options import FlinkRunnerOptions
  return FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS[-1]


def _maven(mvn: str, cwd: str, java_home: Optional[str], goal: list) -> tuple:
  """Runs one Maven goal -> (succeeded, its first error line or '')."""
  env = dict(os.environ)
  if java_home:
    env['JAVA_HOME'] = java_home
  try:
    done = subprocess.run([mvn, '-B', '-ntp', *goal], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=MAVEN_TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired:
    return False, f'mvn did not finish in {MAVEN_TIMEOUT_S} s'
  return done.returncode == 0, maven_error(done.stdout + done.stderr)


_ANSI = re.compile(r'\x1b\[[0-9;]*m')


def maven_error(output: str) -> str:
  """Maven's first [ERROR] line without its goal preamble, else its last line."""
  lines = [_ANSI.sub('', line).strip() for line in output.splitlines()]
  errors = [line[len('[ERROR]'):].strip() for line in lines if line.startswith('[ERROR]')]
  first = next((line for line in errors if line), '')
  if first:
    return re.sub(r'^Failed to execute goal .*? on project [^:]+: ', '', first)
  return next((line for line in reversed(lines) if line), 'mvn failed with no output')


def _not_found(error: str) -> bool:
  """Whether Maven's error says the artifact is not served (now or when last asked)."""
  return 'Could not find artifact' in error or 'was not found in' in error


def pom(assembly: Assembly) -> str:
  """A pom whose only purpose is the runtime dependencies of `assembly`."""
  def dependency(group, artifact, version):
    return (f'    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>'
            f'<version>{version}</version></dependency>\n')
  return ('<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
          '  <modelVersion>4.0.0</modelVersion>\n'
          '  <groupId>img2tfrecord</groupId><artifactId>job-server</artifactId>'
          '<version>1</version><packaging>pom</packaging>\n'
          '  <dependencies>\n' + ''.join(dependency(*d) for d in assembly.dependencies)
          + '  </dependencies>\n'
          + ('  <dependencyManagement><dependencies>\n'
             + ''.join(dependency(*d) for d in assembly.pinned)
             + '  </dependencies></dependencyManagement>\n' if assembly.pinned else '')
          + '</project>\n')


def describe(jar: Optional[str]) -> Optional[dict]:
  """What dataset_info.json records of a job server jar: its path, and what
  its job-server.json says when it came from the cache."""
  if not jar:
    return None
  described = {'jar': jar}
  try:
    with open(os.path.join(os.path.dirname(jar), RECORD), encoding='utf-8') as handle:
      record = json.load(handle)
  except (OSError, ValueError):
    return described
  if record.get('jar') == os.path.basename(jar):
    described.update({key: record[key] for key in (
        'origin', 'artifact', 'beam_version', 'engine_version') if key in record})
  return described
