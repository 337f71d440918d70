"""Images over HTTP from a server the test starts on 127.0.0.1 (and nowhere
else) that answers in ways HTTP allows but http.client and urllib3 read
badly, or that leave traces: interim 1xx answers (103 Early Hints) before
the image, an X-Robots-Tag whose first directive takes a value
(`max-image-preview:large, noai`), a header line that does not parse
(urllib3 logs the URL asked, signature and all), a slow answer that
redirects to a host slow to connect, a body that is not the gzip its
Content-Encoding says, a body dripped past --http_timeout_s, a Ctrl-C while
fetches stall."""

from __future__ import annotations

import importlib
import io
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import numpy as np
from PIL import Image
import pytest
import urllib3

from pipeline import convert
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import read_examples
from tests.conftest import rejected_lines
from tests.local_http import QuietHandler
from tests.local_http import RunningServer
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.workers import http_fetch
from transforms.workers import http_logs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('http'), pytest.mark.integration]
SECRET = 'S1GN4TURE'
HOP_S = 1.5  # how long /slowhop/ takes to answer with its redirect
DRIP_S = 0.1  # /dripbody/ sends a byte of its body each DRIP_S


def png(seed: int) -> bytes:
  """A PNG of distinct pixels (6x5 + seed), so pixel checks mean something."""
  width, height = 6 + seed, 5
  image = Image.new('RGB', (width, height))
  image.putdata([((x * 40 + seed) % 256, (y * 50) % 256, (x * y * 9 + seed * 30) % 256)
                 for y in range(height) for x in range(width)])
  buffer = io.BytesIO()
  image.save(buffer, 'PNG')
  return buffer.getvalue()


class Server(RunningServer):
  """Raw answers by path: /early/N.png (103 and 102, then the PNG), /ok/N.png,
  /stall/N.png (no answer until the test ends),
  /robots/N.png (X-Robots-Tag as the query's v= says), /badhdr/N.png (a
  header line without a colon), /gzlie/N.png (Content-Encoding: gzip, not
  gzipped), /dripbody/N.png (a byte each DRIP_S), /redirect/N.png (HEAD and GET: 302 to
  /ok/N.png), /slowhop/N.png (HOP_S, then 302 to self.slow_target)."""

  def __init__(self):
    self.seen: list = []
    self.slow_target = ''
    self.released = threading.Event()  # /stall/ answers nothing until it is set
    server = self

    class Handler(QuietHandler):

      def do_GET(self):
        server.seen.append((self.command, self.path))
        path, _, query = self.path.partition('?')
        kind, name = path.split('/')[1:3]
        body = png(int(name.split('.')[0]))
        extra = b''
        if kind == 'early':
          self.wfile.write(b'HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n'
                           b'HTTP/1.1 102 Processing\r\n\r\n')
          self.wfile.flush()
        elif kind == 'robots':
          extra = b'X-Robots-Tag: %s\r\n' % urllib.parse.unquote(
              query.partition('v=')[2]).encode()
        elif kind == 'badhdr':
          extra = b'This line has no colon\r\nX-After: 1\r\n'
        elif kind == 'gzlie':  # says gzip, is the PNG itself
          extra = b'Content-Encoding: gzip\r\n'
        elif kind == 'dripbody':  # its first bytes, then a byte each DRIP_S
          self.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s'
                           % (len(body), body[:16]))
          try:
            for i in range(16, len(body)):
              self.wfile.flush()
              time.sleep(DRIP_S)
              self.wfile.write(body[i:i + 1])
          except OSError:  # the client gave up, as it should
            self.close_connection = True
          return
        elif kind == 'stall':  # no answer until the test ends
          server.released.wait(120)
          self.close_connection = True
          return
        elif kind in ('redirect', 'slowhop'):
          if kind == 'slowhop':
            time.sleep(HOP_S)
          target = server.slow_target if kind == 'slowhop' else f'/ok/{name}'
          self.wfile.write(b'HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n'
                           % target.encode())
          return
        self.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n' % (len(body), extra))
        if self.command == 'GET':
          self.wfile.write(body)

    super().__init__(Handler)


@pytest.fixture
def server():
  with Server() as running:
    try:
      yield running
    finally:
      running.released.set()


def pixels(data: bytes) -> np.ndarray:
  return np.asarray(Image.open(io.BytesIO(data)).convert('RGB'))


def test_interim_answers_before_the_image_are_read_past(server):
  # http.client skips 100 Continue alone: the 103 was taken for the answer,
  # read/http_error 'HTTP 103', though the server sent the image after it.
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=5, retries=0))
  assert client.fetch(server.base + '/early/3.png', ImageSpec()) == png(3)
  assert client.fetch(server.base + '/ok/4.png', ImageSpec()) == png(4)  # the connection again


@pytest.mark.parametrize('values, token, found', [
    # a first directive with a value was read as an agent's name: noai missed
    (['max-image-preview:large, noai'], '', 'max-image-preview:large, noai'),
    (['max-snippet: -1, NoImageAI'], 'mybot', 'max-snippet: -1, NoImageAI'),
    (['unavailable_after: 2030-01-01, noindex'], '', 'unavailable_after: 2030-01-01, noindex'),
    (['noai,max-snippet:0'], '', 'noai,max-snippet:0'),  # no space: no agent's name either
    (['max-image-preview:large'], '', None),
    (['mybot: max-image-preview:large, noai'], 'MyBot', 'mybot: max-image-preview:large, noai'),
    (['otherbot: max-image-preview:large, noai'], 'mybot', None),
    (['otherbot: noai'], '', None)])
def test_robots_directives_with_values(values, token, found):
  assert http_fetch.robots_opt_out(values, token) == found


def test_every_row_is_one_example_or_one_rejected_line_with_its_pixels(server, tmp_path):
  rows = [('/early/1.png', 'a'), ('/ok/2.png', 'b'),
          ('/robots/3.png?v=max-image-preview:large%2C%20noai', 'a'),
          ('/robots/4.png?v=max-image-preview:large', 'b')]
  manifest = tmp_path / 'urls.csv'
  manifest.write_text('image,label\n' + ''.join(f'{server.base}{p},{l}\n' for p, l in rows))
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), '--progress',
                       'off', '--resize_mode', 'none', '--encoding', 'png', '--http_timeout_s',
                       '5', '--http_retries', '0', '--max_error_rate', '1']) == EXIT_OK
  examples = {e['image/key'][1][0].decode(): e['image/encoded'][1][0]
              for e in read_examples(out)}
  assert sorted(examples) == [server.base + p for p in ('/early/1.png', '/ok/2.png',
                                                        '/robots/4.png?v=max-image-preview'
                                                        ':large')]
  for key, seed in zip(sorted(examples), (1, 2, 4)):
    assert np.array_equal(pixels(examples[key]), pixels(png(seed))), key
  [line] = rejected_lines(out)
  assert (line['line'], line['stage'], line['code'], line['reason']) == (
      4, 'read', 'robots_opt_out', f'{server.base}{rows[2][0]}: X-Robots-Tag '
      "'max-image-preview:large, noai' (--http_ignore_robots_tag reads it anyway)")


def test_urllib3_logs_no_credential_and_no_traceback(server, caplog):
  # urllib3 logs the URL it asked when an answer's headers do not parse
  # (WARNING, with its traceback), and a HEAD's redirects (INFO): a signed
  # URL's signature showed in any log at those levels (a Dataflow worker's);
  # at DEBUG, each answer's line shows the path and query asked.
  caplog.set_level(logging.DEBUG, logger='urllib3')
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=5, retries=0))
  signed = f'{server.base}/badhdr/5.png?X-Amz-Signature={SECRET}&id=9'
  assert client.fetch(signed, ImageSpec()) == png(5)
  redirected = f'{server.base}/redirect/6.png?token={SECRET}'
  with pytest.raises(LookupError):  # a nightly run's HEAD: /ok/ gives no ETag
    client.metadata(redirected)
  [parsing] = [r for r in caplog.records if 'Failed to parse headers' in r.getMessage()]
  assert parsing.exc_info is None and parsing.levelno == logging.WARNING
  assert parsing.getMessage().startswith(
      f'Failed to parse headers (url={server.base}/badhdr/5.png?X-Amz-Signature=<redacted>')
  [redirect] = [r for r in caplog.records if r.getMessage().startswith('Redirecting')]
  assert redirect.getMessage() == (f'Redirecting {server.base}/redirect/6.png?token=<redacted> '
                                   f'-> {server.base}/ok/6.png')
  assert '"GET /badhdr/5.png?X-Amz-Signature=<redacted>&id=9 HTTP/1.1" 200' in caplog.text
  assert SECRET not in caplog.text and 'Traceback' not in caplog.text
  assert ('GET', f'/badhdr/5.png?X-Amz-Signature={SECRET}&id=9') in server.seen  # as written


def test_every_urllib3_logger_a_fetch_loads_is_filtered():
  # A filter holds for the records of its own logger only: each module's is named.
  loaded = [name for name in list(sys.modules) if name.startswith('urllib3')]
  loggers = {getattr(importlib.import_module(name), 'log', None) for name in loaded}
  named = {logger.name for logger in loggers if isinstance(logger, logging.Logger)}
  assert named and named <= set(http_logs.URLLIB3_LOGGERS), named


def test_a_redirect_connects_within_the_try_s_time(server):
  """A redirect's connection had the whole --http_timeout_s again: an answer
  taking HOP_S, then a host slow to accept, made a try of 2 s take 3.5 s.
  Asserted on the connect timeout each request is given (what is left of
  the try's time can only shrink under load), not on how long it took."""
  server.slow_target = '/ok/7.png'
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=5, retries=0))
  pool, connects = client._pool, []
  request = pool.request

  def recorded(*args, timeout=None, **kwargs):
    connects.append(timeout.connect_timeout)
    return request(*args, timeout=timeout, **kwargs)

  pool.request = recorded
  assert client.fetch(server.base + '/slowhop/7.png', ImageSpec()) == png(7)
  first, hop = connects
  assert 0 < first <= 5
  assert 0 < hop <= 5 - HOP_S, connects


def test_a_body_that_does_not_decode_as_its_content_encoding_says_is_not_retried(server):
  # Retried --http_retries times (3.5-7 s of waits), then 'the body broke
  # off: DecodeError': it was whole, and the same on every try.
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=5, retries=2))
  url = server.base + '/gzlie/8.png'
  with pytest.raises(RowError) as error:
    client.fetch(url, ImageSpec())
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'read', 'http_error', f"{url}: the body does not decode as its Content-Encoding 'gzip' "
      'says: not retried (DecodeError)')
  assert server.seen == [('GET', '/gzlie/8.png')]


def test_a_body_dripped_past_the_timeout_is_retried_and_says_so(server):
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=1, retries=1),
                                 sleep=lambda _: None)
  url = server.base + '/dripbody/9.png'
  started = time.monotonic()
  with pytest.raises(RowError) as error:
    client.fetch(url, ImageSpec())
  # two tries of 1 s: a bound far from both (each try would drip for 8.5 s
  # unbounded), so that a loaded machine cannot fail it
  assert time.monotonic() - started < 12
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'read', 'timeout', f'{url}: the body took longer than --http_timeout_s 1, after 1 retry: '
      'ReadTimeoutError')
  assert server.seen == [('GET', '/dripbody/9.png')] * 2


def test_a_body_whose_time_runs_out_between_two_reads_is_a_try_to_retry():
  # The time checked between reads raised a RowError of its own, which no
  # retry follows: the same drip was retried or not as the time ran out
  # inside a socket's read or between two.
  class Late:
    def read(self, amount):
      time.sleep(0.2)
      return b'x' * min(amount, 10)

  body = http_fetch._Deadline(Late(), time.monotonic() + 0.1, 'http://h/a.png')
  with pytest.raises(urllib3.exceptions.ReadTimeoutError):
    body.read(100)


@pytest.mark.parametrize('pool', [('--image_processes', '1'), ('--image_threads', '2')])
def test_ctrl_c_while_fetches_stall_ends_the_run_at_once(server, tmp_path, pool):
  # The step's teardown waited for its pool's threads, each waiting for a
  # fetch that waits out --http_timeout_s and its retries: a Ctrl-C during
  # 40 stalling fetches (--http_timeout_s 30) ended the run after 205 s.
  manifest = tmp_path / 'urls.csv'
  manifest.write_text('image,label\n' + ''.join(f'{server.base}/stall/{i}.png,a\n'
                                                for i in range(40)))
  root = pathlib.Path(__file__).resolve().parent.parent
  run = subprocess.Popen(
      [sys.executable, '-m', 'pipeline.convert', '--manifest', str(manifest), '--output_dir',
       str(tmp_path / 'out'), '--height', '8', '--width', '8', '--progress', 'off',
       '--http_timeout_s', '30', *pool], cwd=root, stdin=subprocess.DEVNULL,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
      env={**os.environ, 'TMPDIR': str(tmp_path), 'PYTHONPATH': str(root)})
  try:
    deadline = time.monotonic() + 60
    while len(server.seen) < 4 and run.poll() is None and time.monotonic() < deadline:
      time.sleep(0.05)
    assert len(server.seen) >= 4, run.communicate()  # fetches under way
    os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C
    started = time.monotonic()
    _, err = run.communicate(timeout=60)
    took = time.monotonic() - started
  finally:
    if run.poll() is None:
      os.killpg(run.pid, signal.SIGKILL)
      run.communicate()
  assert (run.returncode, err.strip().splitlines()[-1]) == (
      -signal.SIGINT, 'interrupted: nothing was published; rerun to convert again'), err
  assert took < 10, took
  assert 'Traceback' not in err


@pytest.mark.parametrize('value', ['0', '1e300'])
def test_an_http_timeout_no_request_can_take_is_a_usage_error(tmp_path, capsys, value):
  # urllib3 takes no timeout of 0 (ValueError) and a socket none past about
  # 9e9 s (OverflowError): each http(s) row was read/unexpected_error.
  manifest = tmp_path / 'urls.csv'
  manifest.write_text('image,label\nhttp://127.0.0.1:9/a.png,a\n')
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(tmp_path / 'out'),
                       '--http_timeout_s', value]) == EXIT_USAGE
  assert capsys.readouterr().err == (f'error: --http_timeout_s {float(value):g} must be above 0 '
                                     'and at most 1,000,000 s\n')
  assert not (tmp_path / 'out').exists()
