"""Images over HTTP(S): one GET per image on a pool of keep-alive
connections, streamed and abandoned past --max_image_bytes, retried with
exponential backoff and jitter on connection errors, 429 and 5xx (honouring
Retry-After), X-Robots-Tag opt-outs honoured. Plain functions and a client
without Beam, run on the image step's threads.

Each failure is a RowError of its own code: missing_file (404, 410),
http_error (another 4xx or 5xx after the retries, the status in the reason;
a connection that fails on every try: refused, a name that does not resolve,
reset, TLS; request_error), timeout (no connection or answer within
--http_timeout_s on every try), too_large, too_many_redirects
(more than MAX_REDIRECTS), robots_opt_out. URLs in messages are shown with
their credentials redacted (core/redact.shown_url).
"""

from __future__ import annotations

import dataclasses
import random
import socket
import threading
import time
from typing import Optional
import urllib.parse

from transforms.core.redact import shown_url
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.workers import http_deadline
from transforms.workers import http_logs
from transforms.workers.http_headers import change_metadata
from transforms.workers.http_headers import retry_after_s
from transforms.workers.http_headers import robots_opt_out


def _version() -> str:
  """The installed package's version (setup.py's), for the User-Agent."""
  import importlib.metadata
  try:
    return importlib.metadata.version('img2tfrecord')
  except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
    return 'dev'


DEFAULT_USER_AGENT = f'img2tfrecord/{_version()} (image dataset converter)'
MAX_REDIRECTS = 5
BACKOFF_S = 1.0  # first retry's base wait; doubled each retry, plus jitter
MAX_WAIT_S = 60.0  # no Retry-After is waited longer than this
MAX_TIMEOUT_S = 1e6  # --http_timeout_s at most (a socket takes none past about 9e9 s)
_REDIRECTS = (301, 302, 303, 307, 308)


@dataclasses.dataclass(frozen=True)
class HttpConfig:
  """The --http_* flags."""
  timeout_s: float = 30.0
  retries: int = 3
  max_per_host: int = 16
  user_agent: str = DEFAULT_USER_AGENT
  user_agent_token: str = ''  # the agent name X-Robots-Tag directives may address
  ignore_robots_tag: bool = False


def is_http(path) -> bool:
  # the scheme alone lowered, not the whole path: a row each
  return isinstance(path, str) and path[:8].lower().startswith(('http://', 'https://'))


def backoff_s(attempt: int, base: float = BACKOFF_S) -> float:
  """Exponential backoff with full jitter: up to base * 2**attempt seconds."""
  return min(MAX_WAIT_S, base * 2 ** attempt) * (0.5 + random.random() / 2)


def after_retries(retries: int) -> str:
  """How a failure that was retried says so (it is the last try's)."""
  return f'after {retries} retr{"y" if retries == 1 else "ies"}' if retries else 'not retried'


def request_error(error: Exception, shown: str, timeout_s: float, retries: int) -> RowError:
  """The RowError of a try whose request got no answer (urllib3's `error`;
  its message as the last try's, after `retries`). read/timeout only when
  the connection or a read took longer than --http_timeout_s; a connection
  refused, a host name that does not resolve, a reset, a TLS failure:
  read/http_error, the cause in the reason. (urllib3's NewConnectionError,
  however immediate, is a subclass of its ConnectTimeoutError.)"""
  import urllib3
  if isinstance(error, urllib3.exceptions.NewConnectionError):
    cause = error.__cause__ or error.__context__
    said = f'{type(cause).__name__}: {cause}' if cause is not None else str(error)
    if isinstance(cause, socket.gaierror):
      host = getattr(getattr(error, 'conn', None), 'host', None) or urllib.parse.urlsplit(
          shown).hostname
      what = f'the host name {host} does not resolve'
    elif isinstance(cause, ConnectionRefusedError):
      what = 'connection refused (nothing listens on the port)'
    else:
      what = 'connection failed'
    return RowError(STAGE_READ, 'http_error', f'{shown}: {what}, {after_retries(retries)}: '
                    f'{shown_url(said)}')
  if isinstance(error, urllib3.exceptions.TimeoutError):
    return RowError(STAGE_READ, 'timeout', f'{shown}: no answer within --http_timeout_s '
                    f'{timeout_s:g}, {after_retries(retries)}: {type(error).__name__}')
  return RowError(STAGE_READ, 'http_error', f'{shown}: connection failed, '
                  f'{after_retries(retries)}: {type(error).__name__}: '
                  f'{shown_url(str(error))}')


class _Retry(Exception):
  """A try that may succeed later: its RowError if none does, and the wait
  the server asked for (Retry-After), if any."""

  def __init__(self, error: RowError, wait_s: Optional[float] = None):
    super().__init__(error.reason)
    self.error = error
    self.wait_s = wait_s


def origin(url: str) -> tuple:
  """(scheme, host, port) of a URL, the default port filled in: where its
  basic-authentication credentials may go (never past a redirect to another
  origin, as urllib3's and curl's redirects drop them)."""
  parts = urllib.parse.urlsplit(url)
  scheme = parts.scheme.lower()
  try:
    port = parts.port
  except ValueError:  # a port that is no number: never the same origin as a valid one
    port = -1
  return scheme, (parts.hostname or '').lower(), port or {'http': 80, 'https': 443}.get(scheme)


def redirect_target(current: str, location: str, shown: str) -> str:
  """The URL a redirect from `current` to `location` leads to; RowError
  (http_error, not retried) when it is no http(s) URL. urllib3 refused a
  file:// or gs:// target only as it tried it, so each was tried again
  --http_retries times and rejected as "connection failed, after 3 retries:
  LocationValueError: No host specified.", naming neither the redirect nor
  where it led."""
  target = urllib.parse.urljoin(current, location)
  if urllib.parse.urlsplit(target).scheme.lower() not in ('http', 'https'):
    raise RowError(STAGE_READ, 'http_error', f'{shown}: redirected to {shown_url(target)}, '
                   f'not an http(s) URL: not followed')
  return target


class _Deadline:
  """A response body read within the try's time: reads raise urllib3's
  ReadTimeoutError past it, as a socket read past it does (http_deadline),
  so the try is retried either way: a RowError of its own was not, when
  the time ran out between two reads rather than inside one."""

  def __init__(self, response, deadline: float, url: str):
    self._response = response
    self._deadline = deadline
    self._url = url

  def _check(self) -> None:
    if time.monotonic() > self._deadline:
      import urllib3
      raise urllib3.exceptions.ReadTimeoutError(None, self._url, 'past the deadline')

  def read(self, amount: int = -1) -> bytes:
    self._check()
    parts, wanted = [], amount
    while wanted != 0:  # urllib3 may return less than asked: read on to `amount`
      chunk = self._response.read(min(wanted, 1 << 16) if wanted > 0 else 1 << 16)
      if not chunk:
        break
      parts.append(chunk)
      wanted = wanted - len(chunk) if wanted > 0 else wanted
      self._check()
    return b''.join(parts)

  def seekable(self) -> bool:
    return False


class HttpClient:
  """Keep-alive connections shared by a worker's threads, at most
  config.max_per_host requests at once per host."""

  def __init__(self, config: HttpConfig = HttpConfig(), sleep=time.sleep):
    self._config = config
    self._sleep = sleep
    self._pool_made = None
    self._hosts: dict = {}
    self._lock = threading.Lock()

  @property
  def _pool(self):
    """The connections, made at the first request: every run's steps make a
    client, and importing urllib3 cost 14 ms of a local run's start that
    fetches no URL (python -X importtime)."""
    if self._pool_made is None:
      with self._lock:
        if self._pool_made is None:
          http_logs.redact_urllib3_logs()  # before its first request logs a URL
          self._pool_made = http_deadline.pool_manager(
              num_pools=64, maxsize=self._config.max_per_host, block=False, retries=False)
    return self._pool_made

  def _host_slot(self, url: str) -> threading.BoundedSemaphore:
    host = urllib.parse.urlsplit(url).netloc.rsplit('@', 1)[-1].lower()
    with self._lock:
      slot = self._hosts.get(host)
      if slot is None:
        slot = self._hosts[host] = threading.BoundedSemaphore(self._config.max_per_host)
      return slot

  def fetch(self, url: str, spec: ImageSpec) -> bytes:
    """The image's bytes, checked as a file's are (--max_image_bytes,
    --formats by the first bytes); RowError naming the failure."""
    return self.fetch_with_metadata(url, spec)[0]

  def fetch_with_metadata(self, url: str, spec: ImageSpec) -> tuple:
    """(the bytes, as fetch gives them; their change metadata as metadata()
    gives it, from the GET's own answer: None when it has none)."""
    shown = shown_url(url)
    error = None
    for attempt in range(self._config.retries + 1):
      if attempt:
        wait = error.wait_s if error.wait_s is not None else backoff_s(attempt - 1)
        self._sleep(min(wait, MAX_WAIT_S))
      try:
        with self._host_slot(url):
          return self._try(url, shown, spec)
      except _Retry as retry:
        error = retry
    raise error.error

  def _request_of(self, url: str) -> tuple:
    """(the URL to request, its headers): a user:password@ in the URL is
    basic authentication, not part of the URL."""
    import urllib3
    headers = {'User-Agent': self._config.user_agent}
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
      return url, headers
    headers.update(urllib3.make_headers(basic_auth=f'{urllib.parse.unquote(parts.username)}:'
                                        f'{urllib.parse.unquote(parts.password or "")}'))
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit('@', 1)[1])), headers

  def _try(self, url: str, shown: str, spec: ImageSpec) -> tuple:
    from transforms.workers.checked_read import read_checked
    deadline = time.monotonic() + self._config.timeout_s
    with http_deadline.within(deadline):  # its status line and headers too, not each read
      return self._redirected(url, shown, spec, deadline, read_checked)

  def _redirected(self, url: str, shown: str, spec: ImageSpec, deadline: float, read_checked):
    import urllib3
    timeout = self._config.timeout_s
    current, headers = self._request_of(url)
    for _ in range(MAX_REDIRECTS + 1):
      # A redirect's connection within what is left of the try's time: each
      # had the whole --http_timeout_s, so a try that followed a slow answer
      # to a host slow to connect took up to twice it. (urllib3 takes no 0.)
      connect = min(timeout, max(deadline - time.monotonic(), 0.001))
      try:
        response = self._pool.request(
            'GET', current, headers=headers, preload_content=False, redirect=False,
            timeout=urllib3.Timeout(connect=connect, read=timeout))
      except urllib3.exceptions.LocationValueError as error:  # an HTTPError: caught first
        # urllib3 refused the URL (or a redirect's) before connecting: a host
        # 'ho\xa0st' or 'host%' was retried (3.5-7 s of waits), 'connection failed'
        raise RowError(STAGE_READ, 'http_error', f'{shown} is no URL that '
                       f'parses ({shown_url(str(error))}): not fetched')
      except urllib3.exceptions.HTTPError as error:  # refused, DNS, reset, TLS, timeout
        raise _Retry(request_error(error, shown, timeout, self._config.retries))
      done = False
      try:
        if response.status in _REDIRECTS and response.headers.get('Location'):
          target = redirect_target(current, response.headers['Location'], shown)
          if origin(target) != origin(current):  # a user:password@ is for its own host
            headers.pop('authorization', None)
          current = target
          continue
        data = self._body(response, shown, spec, deadline, read_checked)
        done = True  # read to its end: the connection can serve the next request
        return data, change_metadata(response.status, response.headers)
      finally:
        if not done:  # a body left unread (an error, a redirect, too large): not reused
          response.close()
        response.release_conn()
    raise RowError(STAGE_READ, 'too_many_redirects', f'{shown}: more than {MAX_REDIRECTS} '
                   f'redirects')

  def _body(self, response, shown: str, spec: ImageSpec, deadline: float, read_checked):
    import urllib3
    status = response.status
    if status in (404, 410):
      raise RowError(STAGE_READ, 'missing_file', f'{shown}: HTTP {status}')
    if status == 429 or status >= 500:
      raise _Retry(RowError(STAGE_READ, 'http_error', f'{shown}: HTTP {status} '
                            f'{after_retries(self._config.retries)}'),
                   retry_after_s(response.headers.get('Retry-After')))
    if not 200 <= status < 300:
      raise RowError(STAGE_READ, 'http_error', f'{shown}: HTTP {status}')
    if not self._config.ignore_robots_tag:
      found = robots_opt_out(response.headers.getlist('X-Robots-Tag'),
                             self._config.user_agent_token)
      if found:
        raise RowError(STAGE_READ, 'robots_opt_out', f'{shown}: X-Robots-Tag {found!r} '
                       f'(--http_ignore_robots_tag reads it anyway)')
    length = response.headers.get('Content-Length')
    size = int(length) if length and length.isdigit() else None
    try:
      return read_checked(_Deadline(response, deadline, shown), shown, size, spec)
    except urllib3.exceptions.TimeoutError as error:
      raise _Retry(RowError(STAGE_READ, 'timeout', f'{shown}: the body took longer than '
                            f'--http_timeout_s {self._config.timeout_s:g}, '
                            f'{after_retries(self._config.retries)}: {type(error).__name__}'))
    except urllib3.exceptions.DecodeError as error:  # an HTTPError: caught first
      # Not the gzip (deflate, zstd) its Content-Encoding says, on every try:
      # retried, and said 'the body broke off: DecodeError'.
      raise RowError(STAGE_READ, 'http_error', f'{shown}: the body does not decode as its '
                     f'Content-Encoding {response.headers.get("Content-Encoding")!r} says: '
                     f'not retried ({type(error).__name__})')
    except urllib3.exceptions.HTTPError as error:  # reset mid-body, a short body
      raise _Retry(RowError(STAGE_READ, 'http_error', f'{shown}: the body broke off, '
                            f'{after_retries(self._config.retries)}: {type(error).__name__}'))


  def metadata(self, url: str) -> dict:
    """{'etag', 'mtime': Last-Modified} of a URL, from a HEAD request
    (--change_detection metadata); LookupError when it answers with neither
    (the image then counts as changed), RowError when it fails."""
    import urllib3
    timeout = self._config.timeout_s
    # With the GET's basic authentication: without it a server that asks for
    # it answered 401, so such a URL counted as changed every night.
    # (urllib3 drops Authorization on a redirect to another host.)
    target, headers = self._request_of(url)
    with self._host_slot(url), http_deadline.within(time.monotonic() + timeout):
      response = self._pool.request(
          'HEAD', target, headers=headers,
          timeout=urllib3.Timeout(connect=timeout, read=timeout),
          retries=urllib3.Retry(total=None, connect=0, read=0, status=0,
                                redirect=MAX_REDIRECTS))
    meta = change_metadata(response.status, response.headers)
    if meta is None:
      raise LookupError(f'{shown_url(url)}: HTTP {response.status}, no ETag or Last-Modified')
    # An opt-out the GET would reject the row for (the site's, since the
    # previous night, or one that night's --http_ignore_robots_tag read):
    # counted as changed, so the GET rejects it as a full run does; its
    # record was copied, against the opt-out and not a full run's bytes.
    if not self._config.ignore_robots_tag and robots_opt_out(
        response.headers.getlist('X-Robots-Tag'), self._config.user_agent_token):
      raise LookupError(f'{shown_url(url)}: X-Robots-Tag opts out')
    return meta


_CLIENTS: dict = {}
_CLIENTS_LOCK = threading.Lock()


def client(config: HttpConfig) -> HttpClient:
  """The process's client for these options (its connections shared by threads)."""
  with _CLIENTS_LOCK:
    found = _CLIENTS.get(config)
    if found is None:
      found = _CLIENTS[config] = HttpClient(config)
    return found
