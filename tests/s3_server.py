"""A local S3-compatible server (moto) for tests, on 127.0.0.1 only.

The server runs as its own process (`python -m moto.server`), so its state
and threads stay out of the test process and it is stopped by its own pid.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import os
import subprocess
import sys
import time
from typing import Optional
import urllib.error
import urllib.request

from tests.conftest import free_port

HOST = '127.0.0.1'
ACCESS_KEY = 'testing'
SECRET_KEY = 'testing'
REGION = 'us-east-1'


class ServerUnavailable(Exception):
  """moto cannot be started here (not installed, or never answers)."""


def _answers(url: str) -> bool:
  try:
    with urllib.request.urlopen(url, timeout=1):
      return True
  except urllib.error.HTTPError:
    return True  # any HTTP answer means the server is up
  except (urllib.error.URLError, OSError):
    return False


class MotoServer:
  """`with MotoServer() as server:` -> server.endpoint is http://127.0.0.1:PORT."""

  def __init__(self, start_timeout: float = 20.0, attempts: int = 3):
    self._start_timeout = start_timeout
    self._attempts = attempts
    self._process: Optional[subprocess.Popen] = None
    self._log = None
    self.port: Optional[int] = None

  @property
  def endpoint(self) -> str:
    return f'http://{HOST}:{self.port}'

  def beam_options(self) -> list:
    """Beam pipeline options that point the s3:// filesystem at this server."""
    return ['--s3_endpoint_url', self.endpoint,
            '--s3_access_key_id', ACCESS_KEY,
            '--s3_secret_access_key', SECRET_KEY,
            '--s3_region_name', REGION]

  def client(self):
    import boto3
    return boto3.session.Session().client(
        's3', endpoint_url=self.endpoint, region_name=REGION,
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

  def start(self) -> MotoServer:
    try:
      import moto.server  # noqa: F401
    except ImportError as error:
      raise ServerUnavailable(f'moto[server] is not importable: {error}')
    last = ''
    for _ in range(self._attempts):  # a free port can be taken before moto binds it
      self.port = free_port()
      last = self._try_start()
      if not last:
        return self
    raise ServerUnavailable(last)

  def _try_start(self) -> str:
    """'' once the server answers, else why it did not (the process is stopped)."""
    import tempfile
    self._log = tempfile.TemporaryFile()
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION)
    self._process = subprocess.Popen(
        [sys.executable, '-m', 'moto.server', '-H', HOST, '-p', str(self.port)],
        stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + self._start_timeout
    while time.monotonic() < deadline:
      if self._process.poll() is not None:
        why = f'moto_server exited with {self._process.returncode}: {self._output()}'
        self.stop()
        return why
      if _answers(self.endpoint + '/moto-api/'):
        return ''
      time.sleep(0.1)
    why = f'moto_server did not answer within {self._start_timeout:.0f} s: {self._output()}'
    self.stop()
    return why

  def _output(self) -> str:
    if self._log is None:
      return ''
    self._log.seek(0)
    return self._log.read().decode('utf-8', 'replace')[-2000:]

  def stop(self) -> None:
    process, self._process = self._process, None
    if process is not None and process.poll() is None:
      process.terminate()
      try:
        process.wait(timeout=10)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    if self._log is not None:
      self._log.close()
      self._log = None

  def __enter__(self) -> MotoServer:
    return self.start()

  def __exit__(self, *exc) -> bool:
    self.stop()
    return False


def isolated_env(temp: Optional[str] = None) -> dict:
  """The environment of a run that only its --s3_* options configure for S3:
  no profile, config file, credentials or proxy of this machine's; TMPDIR
  `temp` when given."""
  env = dict(os.environ, AWS_EC2_METADATA_DISABLED='true', AWS_CONFIG_FILE=os.devnull,
             AWS_SHARED_CREDENTIALS_FILE=os.devnull)
  if temp is not None:
    env['TMPDIR'] = str(temp)
  for name in ('AWS_PROFILE', 'AWS_DEFAULT_PROFILE', 'AWS_ACCESS_KEY_ID',
               'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_ENDPOINT_URL',
               'AWS_ENDPOINT_URL_S3', 'HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy',
               'https_proxy'):
    env.pop(name, None)
  env['NO_PROXY'] = env['no_proxy'] = '127.0.0.1,localhost'
  return env


@contextlib.contextmanager
def running_moto() -> Iterator[MotoServer]:
  """A moto server on 127.0.0.1 for a test module's fixture, stopped after;
  the test skipped when none can start here."""
  import pytest
  try:
    moto = MotoServer().start()
  except ServerUnavailable as error:
    pytest.skip(f'cannot start a local moto S3 server: {error}')
  try:
    yield moto
  finally:
    moto.stop()


class StallingProxy:
  """An HTTP proxy in front of a server (a MotoServer) that holds back every
  request for one object: it answers that request only once released (or
  after `stall_s`). `with StallingProxy(server.endpoint, 'bucket/key') as proxy:`;
  proxy.endpoint replaces the server's in --s3_endpoint_url. Runs on threads
  of the test process; stopping it releases what it holds."""

  def __init__(self, target: str, stalled_path: str, stall_s: float = 300.0):
    import threading
    self._target = target
    self._stalled = '/' + stalled_path.lstrip('/')
    self._stall_s = stall_s
    self.released = threading.Event()
    self.stalled_requests = 0
    self._server = None

  @property
  def endpoint(self) -> str:
    return f'http://{HOST}:{self._server.server_address[1]}'

  def _forward(self, handler) -> None:
    import http.client
    import urllib.parse
    if handler.path.split('?', 1)[0] == self._stalled:
      self.stalled_requests += 1
      self.released.wait(self._stall_s)
    length = int(handler.headers.get('Content-Length') or 0)
    body = handler.rfile.read(length) if length else None
    target = urllib.parse.urlsplit(self._target)
    connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
    try:
      headers = {k: v for k, v in handler.headers.items() if k.lower() != 'connection'}
      connection.request(handler.command, handler.path, body=body, headers=headers)
      response = connection.getresponse()
      data = response.read()
      handler.send_response(response.status)
      for name, value in response.getheaders():
        if name.lower() not in ('connection', 'transfer-encoding', 'content-length'):
          handler.send_header(name, value)
      handler.send_header('Content-Length', str(
          int(response.getheader('Content-Length') or 0) if handler.command == 'HEAD'
          else len(data)))
      handler.end_headers()
      if handler.command != 'HEAD':
        handler.wfile.write(data)
    finally:
      connection.close()

  def start(self) -> StallingProxy:
    import http.server
    import threading
    proxy = self

    class Handler(http.server.BaseHTTPRequestHandler):
      protocol_version = 'HTTP/1.1'

      def log_message(self, *args):
        del args  # quiet: the test reports what matters

      def do_GET(self):
        proxy._forward(self)

      do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    self._server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
    self._server.daemon_threads = True
    threading.Thread(target=self._server.serve_forever, daemon=True).start()
    return self

  def stop(self) -> None:
    self.released.set()
    if self._server is not None:
      self._server.shutdown()
      self._server.server_close()
      self._server = None

  def __enter__(self) -> StallingProxy:
    return self.start()

  def __exit__(self, *exc) -> bool:
    self.stop()
    return False


class CuttingProxy:
  """A TCP proxy in front of a server (a MotoServer) that stops answering
  once a request holding `trigger` (bytes, e.g. b'/images/') passes through
  it: mode 'refuse' closes its port and every connection (a server that was
  stopped), mode 'hang' keeps every connection open and never sends another
  byte, taking new ones the same way (a store that accepts and never
  answers). `with CuttingProxy(server.endpoint, b'/images/') as proxy:`;
  proxy.endpoint replaces the server's in --s3_endpoint_url; proxy.cut is
  set once it stopped answering. Runs on threads of the test process."""

  def __init__(self, target: str, trigger: bytes, mode: str = 'refuse'):
    import threading
    import urllib.parse
    parts = urllib.parse.urlsplit(target)
    self._target = (parts.hostname, parts.port)
    self._trigger, self._mode = trigger, mode
    self.cut = threading.Event()
    self._sockets: list = []
    self._listener = None
    self.port: Optional[int] = None

  @property
  def endpoint(self) -> str:
    return f'http://{HOST}:{self.port}'

  def start(self) -> CuttingProxy:
    import socket
    import threading
    self._listener = socket.create_server((HOST, 0))
    self.port = self._listener.getsockname()[1]
    threading.Thread(target=self._accept, daemon=True).start()
    return self

  def _accept(self) -> None:
    import socket
    import threading
    while True:
      try:
        client, _ = self._listener.accept()
      except OSError:
        return  # closed
      self._sockets.append(client)
      if self.cut.is_set():
        continue  # 'hang': taken, never answered
      upstream = socket.create_connection(self._target)
      self._sockets.append(upstream)
      threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
      threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

  def _pump(self, source, destination, watch: bool) -> None:
    while True:
      try:
        data = source.recv(65536)
      except OSError:
        return
      if not data:
        return
      if watch and self._trigger in data and not self.cut.is_set():
        self._stop_answering()
      if self.cut.is_set():
        if self._mode == 'refuse':
          return
        continue  # 'hang': read and dropped, nothing sent on
      try:
        destination.sendall(data)
      except OSError:
        return

  def _stop_answering(self) -> None:
    self.cut.set()
    if self._mode == 'refuse':
      self._close_all()

  def _close_all(self) -> None:
    import socket
    for sock in [self._listener, *self._sockets]:  # the listener's shutdown ends its accept()
      if sock is None:
        continue
      try:
        sock.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass  # not connected any more
      sock.close()

  def stop(self) -> None:
    self._close_all()

  def __enter__(self) -> CuttingProxy:
    return self.start()

  def __exit__(self, *exc) -> bool:
    self.stop()
    return False


class RefusingProxy(StallingProxy):
  """StallingProxy's forwarder that answers every write (PUT, POST) to the
  objects whose path starts with `refused_path` ('bucket/key-prefix') with a
  500 InternalError, as a failing store does after its client's tries;
  other requests pass. proxy.refused counts those answered so."""

  def __init__(self, target: str, refused_path: str):
    super().__init__(target, '\0')  # stalls nothing
    self._refused = '/' + refused_path.lstrip('/')
    self.refused = 0

  def _forward(self, handler) -> None:
    if handler.command in ('PUT', 'POST') and handler.path.startswith(self._refused):
      self.refused += 1
      length = int(handler.headers.get('Content-Length') or 0)
      handler.rfile.read(length)
      error = (b'<?xml version="1.0"?><Error><Code>InternalError</Code>'
               b'<Message>We encountered an internal error.</Message></Error>')
      handler.send_response(500)
      handler.send_header('Content-Length', str(len(error)))
      handler.end_headers()
      handler.wfile.write(error)
      return
    super()._forward(handler)
