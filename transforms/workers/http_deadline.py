"""urllib3 connection pools whose responses are read within a deadline: each
socket read of an answer (its status line, its headers, its body) waits at
most until the try's deadline, and none starts after it (a TimeoutError,
that urllib3 raises as its ReadTimeoutError). A server that drips its
answer, a header line or a byte at a time each within the read timeout,
held a try for as long as it dripped: http.client reads a header line of up
to 64 KB and 100 of them, urllib3 a body to the length it asked, each read
bounded by the timeout alone (a header a second held a fetch 100 s a try
under --http_timeout_s 3). Below http_fetch.py.
"""

from __future__ import annotations

import http.client
import io
import socket
import threading
import time
from typing import Optional

_DEADLINE = threading.local()  # .at: this thread's try's time.monotonic() deadline


class within:
  """`with within(deadline):` the answers this thread reads end by then."""

  def __init__(self, deadline: float):
    self._deadline = deadline

  def __enter__(self):
    self._outer = getattr(_DEADLINE, 'at', None)
    _DEADLINE.at = self._deadline

  def __exit__(self, *_):
    _DEADLINE.at = self._outer


class _DeadlineIO(socket.SocketIO):
  """A socket's reads that wait no longer than the deadline, nor than the
  socket's own timeout; past the deadline, a TimeoutError (socket.timeout)."""

  def __init__(self, sock, deadline: float):
    super().__init__(sock, 'rb')
    sock._io_refs += 1  # as socket.makefile counts its files: closed with the last one
    self._deadline = deadline
    self._timeout = sock.gettimeout()

  def readinto(self, b):
    left = self._deadline - time.monotonic()
    if left <= 0:
      raise TimeoutError('the answer took longer than its deadline')
    self._sock.settimeout(left if self._timeout is None else min(self._timeout, left))
    try:
      return super().readinto(b)
    finally:  # the connection's next request sends with its own timeout
      self._sock.settimeout(self._timeout)


class _Socket:
  """What http.client.HTTPResponse asks of a socket (makefile) with the
  deadline's reads."""

  def __init__(self, sock, deadline: float):
    self._sock = sock
    self._deadline = deadline

  def makefile(self, mode: str = 'rb') -> io.BufferedReader:
    del mode  # a response reads bytes
    return io.BufferedReader(_DeadlineIO(self._sock, self._deadline))


class DeadlineResponse(http.client.HTTPResponse):
  """A response read within the deadline of the thread that asked for it
  (as any response when it has none); interim 1xx answers skipped."""

  def __init__(self, sock, *args, **kwargs):
    deadline: Optional[float] = getattr(_DEADLINE, 'at', None)
    if deadline is not None and isinstance(sock, socket.socket):
      sock = _Socket(sock, deadline)
    super().__init__(sock, *args, **kwargs)

  def _read_status(self):
    """The status line of the final answer. An interim one (1xx: 103 Early
    Hints, 102 Processing), which HTTP/1.1 clients must read past (RFC 9110
    15.2), is skipped with its headers: http.client skips 100 Continue
    alone, and took a 103 for the answer (read/http_error 'HTTP 103' for an
    image its server then sent). 101 Switching Protocols ends the answer,
    as ever. Each line is read within the deadline, as the answer's."""
    while True:
      version, status, reason = super()._read_status()
      if not 100 < status < 200 or status == 101:
        return version, status, reason
      http.client.parse_headers(self.fp)  # of the interim answer: nothing to keep


def pool_manager(**kwargs):
  """A urllib3.PoolManager whose connections read their answers within the
  deadline `within` sets."""
  import urllib3
  import urllib3.connection

  class Connection(urllib3.connection.HTTPConnection):
    response_class = DeadlineResponse

  class SecureConnection(urllib3.connection.HTTPSConnection):
    response_class = DeadlineResponse

  class Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = Connection

  class SecurePool(urllib3.HTTPSConnectionPool):
    ConnectionCls = SecureConnection

  manager = urllib3.PoolManager(**kwargs)
  manager.pool_classes_by_scheme = {'http': Pool, 'https': SecurePool}
  return manager
