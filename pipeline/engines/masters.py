"""Is the cluster master a Flink or Spark run is given there, and is it one?
Checked on the launcher before anything is written (runners.prepare): a
TCP connection to each address (a Spark master's standbys too), and for
Flink a GET of the REST API's /config. A port that takes connections but
is no Flink REST API (the JobManager's RPC port 6123, a web server, a
proxy) otherwise fails the job only after Beam's job server has tried it
for about a minute (exit 1, Java's `ConnectionClosedException: Channel
became inactive` and a traceback)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
from typing import Optional
import urllib.error
import urllib.request

from pipeline.errors import UsageError
from transforms.core.redact import redact_text

CONNECT_TIMEOUT_S = 5.0  # a TCP connection, and then Flink's answer to GET /config
_FLAGS = {'flink': 'flink_master', 'spark': 'spark_master_url'}
_INSTEAD = {
    'flink': 'leave --flink_master out to run on a Flink inside the job server',
    'spark': 'leave --spark_master_url out to run Spark inside the job server (local[N])'}


def check_answers(engine: str, given: dict, addresses: list) -> None:
  """UsageError unless a TCP connection opens to one of `addresses` (a
  master, or a Spark master's standbys; none: nothing to check)."""
  why = [answers(address) for address in addresses]
  if addresses and None not in why:
    start = 'start the Flink cluster there' if engine == 'flink' else \
        'start the Spark master there'
    flag = _FLAGS[engine]
    host, port = addresses[0]
    raise UsageError(f'--{flag} {redact_text(given[flag])} does not answer at {host}:{port}: '
                     f'{why[0]}; '
                     f'{start}, or {_INSTEAD[engine]}')


# The master URLs Spark 3.5 parses itself (SparkContext.createTaskScheduler):
# local, local[N] and local[N,F] (N threads, a count or *; F task failures),
# local-cluster[N,C,M] and spark://...; any other is left to the cluster
# managers on the job server's class path, each of which takes its own (yarn,
# k8s..., mesos...). Anything else (local[x], local[0], a host:port without
# spark://) failed the job after ~10 s, once OUT was locked: exit 1 and a
# traceback under `SparkException: Could not parse Master URL`.
SPARK_MASTER = re.compile(r'local|local\[([0-9]+|\*)(\s*,\s*[0-9]+)?\]|'
                          r'local-cluster\[\s*[0-9]+\s*,\s*[0-9]+\s*,\s*[0-9]+\s*]|spark://.*')
SPARK_CLUSTER_MANAGERS = re.compile(r'yarn$|k8s|mesos')  # their ExternalClusterManager.canCreate


def check_spark_master(given: dict) -> None:
  """UsageError when --spark_master_url is a master URL Spark cannot take."""
  master = given.get('spark_master_url')
  if master is None:
    return
  text = master.strip()
  local = SPARK_MASTER.fullmatch(text)
  threads = local.group(1) if local else None
  if (local and threads != '0') or (not local and SPARK_CLUSTER_MANAGERS.match(text)):
    return
  why = 'asks for 0 threads' if local else 'is no master URL Spark takes'
  raise UsageError(f'--spark_master_url {redact_text(master)} {why}: give local[N] (N '
                   'threads, or * for one per core) or spark://host:port (a standalone '
                   f"master), or {_INSTEAD['spark']}")


def answers(address: tuple) -> Optional[str]:
  """None if a TCP connection to (host, port) opens, else why not."""
  try:
    with socket.create_connection(address, timeout=CONNECT_TIMEOUT_S):
      return None
  except socket.gaierror:
    return f'the host {address[0]} is not known'
  except ConnectionRefusedError:
    return 'nothing listens there (connection refused)'
  except TimeoutError:
    return f'no answer in {CONNECT_TIMEOUT_S:.0f} s'
  except OSError as error:
    return error.strerror or type(error).__name__


def check_flink_rest(given: dict, address: tuple) -> Optional[str]:
  """UsageError unless Flink's REST API answers at `address` (the
  --flink_master given, which answered TCP); -> the Flink version it runs
  (None: not told)."""
  master = redact_text(given['flink_master'])
  scheme = 'https' if master.strip().startswith('https://') else 'http'
  host, port = address
  why, version = flink_rest(f'{scheme}://{host}:{port}')
  if why:
    raise UsageError(
        f"--flink_master {master} is no Flink REST API at {host}:{port}: {why}; give the "
        f"JobManager's REST address (rest.port, 8081 by default), or {_INSTEAD['flink']}")
  return version


def check_flink_version(given: dict, cluster: Optional[str], server: Optional[str]) -> None:
  """UsageError when the cluster runs another Flink (major.minor) than the
  job server's: its jobs fail there (a Flink 2.2 cluster: a
  NullPointerException in FlinkExecutableStageFunction.mapPartition)."""
  if not cluster or not server or _minor(cluster) == _minor(server):
    return
  raise UsageError(
      f'--flink_master {redact_text(given["flink_master"])} runs Flink {cluster} and the job server '
      f'Flink {server}: its jobs fail on another Flink; start a Flink {_minor(server)} '
      f'cluster there, or leave --flink_master out to run on the Flink inside the job server')


def _minor(version: str) -> str:
  return '.'.join(version.strip().split('.')[:2])


def flink_rest(base: str, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple:
  """-> (None, the Flink version) if GET base/config answers Flink's JSON (it
  names a flink-version); (None, None) when it cannot be told (TLS this
  launcher cannot verify: the job server has its own certificates); else
  (what answered instead, None). Direct, as the job server connects: no
  HTTP proxy."""
  why, config = _get_config(base, timeout_s)
  if why or config is None:
    return why, None
  return None, str(config['flink-version'])


def _get_config(base: str, timeout_s: float) -> tuple:
  opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
  try:
    with opener.open(f'{base}/config', timeout=timeout_s) as response:
      body = response.read(1 << 16)
  except urllib.error.HTTPError as error:
    if error.code in (401, 403):  # behind a proxy asking credentials: cannot tell
      return None, None
    return f'it answers HTTP {error.code} to GET /config', None
  except urllib.error.URLError as error:
    if isinstance(error.reason, ssl.SSLError):
      return None, None
    return _no_http(error.reason), None
  except ssl.SSLError:
    return None, None
  except (http.client.HTTPException, OSError) as error:
    return _no_http(error), None
  try:
    config = json.loads(body)
  except ValueError:
    return 'its answer to GET /config is not JSON', None
  if not isinstance(config, dict) or 'flink-version' not in config:
    return 'its answer to GET /config names no flink-version', None
  return None, config


def _no_http(error) -> str:
  if isinstance(error, TimeoutError) or re.search('timed out', str(error)):
    return f'no HTTP answer in {CONNECT_TIMEOUT_S:.0f} s'
  if isinstance(error, (http.client.RemoteDisconnected, ConnectionResetError)):
    return 'it closed the connection without an HTTP answer'
  if isinstance(error, http.client.BadStatusLine):
    return 'it does not answer HTTP'
  if isinstance(error, OSError):
    return error.strerror or type(error).__name__
  return f'{type(error).__name__}: {error}'
