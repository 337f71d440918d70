"""An HTTP server on 127.0.0.1 that tests start and stop (the network tests
talk to no other)."""

import http.server
import threading

from pipeline.demo_sources import LocalServer


class QuietHandler(http.server.BaseHTTPRequestHandler):
  """A test server's handler: HTTP/1.1 (keep-alive, as image hosts answer),
  no access log on stderr, a HEAD answered as its GET (headers and all)."""
  protocol_version = 'HTTP/1.1'

  def log_message(self, *args):
    del args

  def do_HEAD(self):
    self.do_GET()


class RunningServer:
  """`handler`'s LocalServer on a free port of 127.0.0.1 (its URL: base),
  serving on a thread of its own inside `with`."""

  def __init__(self, handler):
    self._server = LocalServer(('127.0.0.1', 0), handler)
    self.base = f'http://127.0.0.1:{self._server.server_address[1]}'
    self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *_):
    self._server.shutdown()
    self._server.server_close()
