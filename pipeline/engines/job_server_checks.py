"""What the job server a Flink or Spark run starts is given, checked on the
launcher before anything is written (runners.prepare): the Java named by
--job_server_java_launcher, the ports named by --job_port, --artifact_port
and --expansion_port, and Flink's --parallelism. Beam starts the job server
only once OUT is locked, and a Java that is not there, a Java 25 for Spark
or a port in use then failed the run after 3-14 s with exit 1 and 20-80
lines of tracebacks (`RuntimeError: Service failed to start up with error
127`, `... error 0`, `UnsupportedOperationException: getSubject is not
supported`); a --parallelism of 0 failed the job 6 s in, exit 1 and 21
lines (`IllegalArgumentException: Parallelism must be at least one`); a
--flink_job_server_jar or --spark_job_server_jar that is not there, or is no
jar, failed the run with exit 1 and a traceback of 40-120 lines (Beam's
`ValueError: Unable to parse jar URL`, `Service failed to start up with
error 1`), after OUT was created; so did a jar that `java -jar` cannot run
(jar_manifests.py)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import urllib.parse
import zipfile

from pipeline.engines import jar_manifests
from pipeline.engines import job_servers
from pipeline.errors import UsageError
from transforms.core.redact import redact_text

PORT_FLAGS = ('job_port', 'artifact_port', 'expansion_port')  # Beam's JobServerOptions


def check_java_launcher(engine: job_servers.Engine, launcher: str) -> None:
  """UsageError unless --job_server_java_launcher names a program that can be
  run (a path, or a name on PATH, as Beam runs it) and, when its version can
  be told, a Java in the engine's range."""
  low, high = engine.java
  flag = f'--job_server_java_launcher {redact_text(launcher)}'
  path = shutil.which(launcher)
  if not path:
    why = 'is not there' if not os.path.exists(launcher) else 'cannot be run'
    raise UsageError(f'{flag} {why}; give the java of a Java {low}-{high}, or leave '
                     f'the flag out to use JAVA_HOME or java on PATH')
  real = os.path.realpath(path)
  version = job_servers.java_version(os.path.dirname(os.path.dirname(real)), real)
  if version is not None and not low <= version <= high:
    raise UsageError(f'{flag} is Java {version}; {engine.runner} needs Java {low}-{high} for '
                     f'{engine.java_for}: give the java of a Java {low}-{high}, or leave the '
                     'flag out to use JAVA_HOME or java on PATH')


def check_job_server_jar(engine: job_servers.Engine, jar: str) -> None:
  """UsageError unless --<engine>_job_server_jar, when it is a path on this
  machine, names a jar (a zip archive) that can be read, which `java -jar`
  can run (jar_manifests.py). A URL (http://,
  https://: Beam downloads it) is left to Beam."""
  if urllib.parse.urlparse(jar).scheme:
    return
  flag = f'--{engine.name}_job_server_jar {redact_text(jar)}'
  if not os.path.exists(jar):
    why = 'is not there'
  elif os.path.isdir(jar):
    why = 'is a folder'
  else:
    try:
      is_jar = zipfile.is_zipfile(jar)
    except OSError as error:
      is_jar, why = False, f'cannot be read ({error.strerror or error})'
    else:
      why = 'is no jar (not a zip archive)'
    # `java -jar` runs only a jar whose manifest names its Main-Class (one
    # of Beam's runner libraries names none)
    if is_jar and 'Main-Class' in jar_manifests.attributes(jar):
      return
    if is_jar:
      why = 'is no job server: its manifest names no Main-Class for `java -jar` to run'
  raise UsageError(f"{flag} {why}: give Beam's {engine.runner} job server jar, or leave the "
                   'flag out to use the one `python -m pipeline.engines fetch` assembles')


def check_ports(given: dict) -> None:
  """UsageError when a job server port given is taken on this machine (0,
  the default, is a free port Beam picks)."""
  for flag in PORT_FLAGS:
    port = given.get(flag)
    if not port:
      continue
    why = port_taken(int(port))
    if why:
      raise UsageError(f'--{flag} {port} cannot be used for the job server: {why}; give '
                       f'a free port, or leave --{flag} out (a free one is picked)')


def port_taken(port: int) -> str:
  """Why the job server could not listen on `port` ('' when it could): as
  it does, on localhost, with SO_REUSEADDR (gRPC's servers set it: a port
  left in TIME_WAIT is no obstacle, one listened on, at any address, is)."""
  with socket.socket() as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      probe.bind(('localhost', port))
    except OverflowError:
      return 'no such port'
    except OSError as error:
      return 'it is in use' if error.errno == errno.EADDRINUSE else (
          error.strerror or str(error))
  return ''


# Flink's ExecutionConfig.PARALLELISM_DEFAULT: the cluster's parallelism.default
# (Beam's default for --parallelism); any other value below 1 fails the job.
FLINK_DEFAULT_PARALLELISM = -1


def check_flink_parallelism(given: dict) -> None:
  """UsageError when --parallelism is given below 1 (and is not -1)."""
  parallelism = given.get('parallelism')
  if parallelism is None or int(parallelism) >= 1 or (
      int(parallelism) == FLINK_DEFAULT_PARALLELISM):
    return
  raise UsageError(f'--parallelism {parallelism} is no parallelism Flink takes: give 1 or '
                   f"more, {FLINK_DEFAULT_PARALLELISM} for the Flink cluster's "
                   'parallelism.default, or leave it out')
