"""Images over HTTP from servers that misbehave on purpose, each a server
the test starts on 127.0.0.1 (and nowhere else): an answer dripped a header
line at a time, or after 100 Continue answers one at a time, each line well
within the read timeout, whose whole answer takes longer than
--http_timeout_s; a body of no stated length (chunked, or
ended by the connection's close) longer than --max_image_bytes."""

from __future__ import annotations

import base64
import gzip
import io
import threading
import time

from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import read_examples
from tests.conftest import rejected_lines
from tests.local_http import QuietHandler
from tests.local_http import RunningServer
from transforms.core import fingerprints
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.workers import http_fetch

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('http'), pytest.mark.integration]
DRIPPED_LINES = 40  # a header line each DRIP_S: 4 s to answer, 4 times --http_timeout_s 1
DRIP_S = 0.1
LONG_BYTES = 1 << 20


def png(seed: int) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (6, 5), (40 * seed, 120, 30)).save(buffer, 'PNG')
  return buffer.getvalue()


class Server(RunningServer):
  """/drip/...: the status line, then DRIPPED_LINES header lines a DRIP_S
  apart, then a whole PNG with an ETag; /ok/...: that PNG at once."""

  def __init__(self):
    self.seen: list = []
    self.auth: list = []
    self.dripped: list = []  # of each /drip/ answer: the header lines written before its end
    self.drips_ended = threading.Semaphore(0)
    server = self

    class Handler(QuietHandler):

      def do_GET(self):
        server.seen.append((self.command, self.path))
        server.auth.append(self.headers.get('Authorization'))
        body = png(2)
        if self.path.startswith('/continue/') and not self._dripped(b'HTTP/1.1 100 Continue\r\n\r\n'):
          return
        if self.path.startswith('/unavailable/'):  # always, come back in a second
          self.wfile.write(b'HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n'
                           b'Content-Length: 0\r\n\r\n')
          return None
        self.wfile.write(b'HTTP/1.1 200 OK\r\n')
        if self.path.startswith('/drip/') and not self._dripped(b'X-Drip: 1\r\n'):
          return
        if self.path.startswith('/long/'):
          return self._long(self.path.endswith('chunked'))
        self.wfile.write(b'ETag: "v1"\r\nContent-Length: %d\r\n\r\n' % len(body))
        if self.command == 'GET':
          self.wfile.write(body)

      def _long(self, chunked: bool) -> None:
        """LONG_BYTES of a PNG's signature then zeros, no Content-Length:
        chunked, or to the connection's close."""
        self.wfile.write(b'Transfer-Encoding: chunked\r\n\r\n' if chunked
                         else b'Connection: close\r\n\r\n')
        self.close_connection = True
        block = (png(1)[:8] + bytes(LONG_BYTES))[:LONG_BYTES]
        try:
          self.wfile.write(b'%x\r\n%s\r\n0\r\n\r\n' % (len(block), block) if chunked
                           else block)
        except OSError:  # the client stopped reading, as it should
          pass

      def _dripped(self, line: bytes) -> bool:
        """DRIPPED_LINES lines, a DRIP_S apart; False when the client left first."""
        written = 0
        try:
          for _ in range(DRIPPED_LINES):
            self.wfile.write(line)
            self.wfile.flush()
            written += 1
            time.sleep(DRIP_S)
          return True
        except OSError:  # the client gave up: nothing more to drip
          self.close_connection = True
          return False
        finally:
          server.dripped.append(written)
          server.drips_ended.release()

    super().__init__(Handler)


@pytest.fixture
def server():
  with Server() as running:
    yield running


def test_interim_100_continue_answers_without_end_are_a_timeout(server):
  # http.client skips each 100 Continue for the next status line: a server
  # sending them on held the fetch for as long (forever under
  # --http_timeout_s 1, one every 10 ms), each within the read timeout.
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=1, retries=0))
  url = server.base + '/continue/a.png'
  with pytest.raises(RowError) as error:
    client.fetch(url, ImageSpec())
  assert server.drips_ended.acquire(timeout=60)
  assert server.dripped[0] < DRIPPED_LINES
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'read', 'timeout', f'{url}: no answer within --http_timeout_s 1, not retried: '
      'ReadTimeoutError')


def test_an_answer_dripped_a_header_at_a_time_is_a_timeout(server):
  # Each header line came within the read timeout: the fetch waited the
  # whole drip (a header a second: 100 s a try under --http_timeout_s 3),
  # and only then said timeout ("the body took longer").
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=1, retries=0))
  url = server.base + '/drip/a.png'
  with pytest.raises(RowError) as error:
    client.fetch(url, ImageSpec())
  assert server.drips_ended.acquire(timeout=60)
  assert server.dripped[0] < DRIPPED_LINES  # given up after about 10 lines, not after 40
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'read', 'timeout', f'{url}: no answer within --http_timeout_s 1, not retried: '
      'ReadTimeoutError')
  assert client.fetch(server.base + '/ok/b.png', ImageSpec()) == png(2)  # the pool still serves
  # a nightly run's HEAD too: no ETag from it, the image counts as changed
  assert fingerprints.remote_fingerprint(url, client.metadata) == ''
  assert server.drips_ended.acquire(timeout=60)
  assert server.dripped[1] < DRIPPED_LINES
  assert [command for command, _ in server.seen] == ['GET', 'GET', 'HEAD']
  assert fingerprints.remote_fingerprint(server.base + '/ok/b.png',
                                         client.metadata) == 'http:etag="v1"'


def test_a_dripped_answer_is_one_rejected_timeout_line(server, tmp_path):
  manifest = tmp_path / 'urls.csv'
  manifest.write_text(f'image,label\n{server.base}/drip/a.png,a\n{server.base}/ok/b.png,b\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), '--height', '8',
                       '--width', '8', '--progress', 'off', '--http_timeout_s', '1',
                       '--http_retries', '0', '--max_error_rate', '1']) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['line'], line['stage'], line['code'], line['reason']) == (
      2, 'read', 'timeout', f'{server.base}/drip/a.png: no answer within --http_timeout_s 1, '
      'not retried: ReadTimeoutError')
  assert server.drips_ended.acquire(timeout=60)
  assert server.dripped[0] < DRIPPED_LINES
  [example] = read_examples(out)
  assert example['image/key'][1] == [f'{server.base}/ok/b.png'.encode()]
  pixels = Image.frombytes('RGB', (8, 8), example['image/encoded'][1][0])
  assert pixels.getpixel((4, 4)) == (80, 120, 30)  # png(2)'s colour


@pytest.mark.parametrize('name', ['b.chunked', 'c.closed'])
def test_a_body_of_no_stated_length_past_max_image_bytes_says_no_size(server, name):
  # Read to --max_image_bytes + 1 and abandoned, it "is 1001 bytes": its
  # size was none of that (a 2 GB body was said to be 268435457 bytes).
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=5, retries=0))
  url = f'{server.base}/long/{name}'
  with pytest.raises(RowError) as error:
    client.fetch(url, ImageSpec(max_image_bytes=1000))
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'read', 'too_large', f'{url} has more bytes than --max_image_bytes 1000: not read further')
  data = client.fetch(url, ImageSpec(max_image_bytes=LONG_BYTES))  # as long as allowed
  assert (len(data), data[:8], set(data[8:])) == (LONG_BYTES, png(1)[:8], {0})


def test_a_password_with_a_space_or_a_slash_never_shows(server, tmp_path, capsys):
  # 'me:HUSH 4U@' is sent as basic authentication, and its key and
  # image/filename (shards, sidecar) showed it whole; 'me:HUSH/4U@' is no URL
  # that parses, and its rejected line showed it.
  spaced = server.base.replace('://', '://me:HUSH 4U@') + '/ok/a.png'
  slashed = server.base.replace('://', '://me:HUSH/4U@') + '/ok/b.png'
  manifest = tmp_path / 'urls.csv'
  manifest.write_text(f'image,label\n{spaced},a\n{slashed},b\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), '--height', '8',
                       '--width', '8', '--progress', 'off', '--max_error_rate', '1']) == EXIT_OK
  assert server.auth == ['Basic ' + base64.b64encode(b'me:HUSH 4U').decode()]
  [example] = read_examples(out)
  shown = server.base.replace('://', '://<redacted>@')
  assert (example['image/key'][1], example['image/filename'][1]) == (
      [f'{shown}/ok/a.png'.encode()], [f'{shown}/ok/a.png'.encode()])
  [line] = rejected_lines(out)
  assert (line['stage'], line['code'], line['row']['image']) == (
      'manifest', 'bad_value', f'{shown}/ok/b.png')
  for path in out.iterdir():
    data = path.read_bytes()
    data = gzip.decompress(data) if path.name.endswith('.gz') else data
    assert b'HUSH' not in data, path.name
  captured = capsys.readouterr()
  assert 'HUSH' not in captured.out + captured.err


def test_a_fetch_longer_than_image_timeout_s_ends_by_its_own_limits(server, tmp_path):
  # An image worker process's call waited for its fetches within
  # --image_timeout_s: a 503 whose Retry-After and --http_retries outlast it
  # (under the defaults, any stall: 4 tries of 30 s against 60 s) was
  # decode/timeout, and its batch was redone row by row, each URL fetched
  # again (the good one too).
  manifest = tmp_path / 'urls.csv'
  manifest.write_text(f'image,label\n{server.base}/unavailable/a.png,a\n'
                      f'{server.base}/ok/b.png,b\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), '--height', '8',
                       '--width', '8', '--progress', 'off', '--image_processes', '1',
                       '--image_timeout_s', '1', '--http_retries', '2',
                       '--max_error_rate', '1']) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['stage'], line['code'], line['reason']) == (
      'read', 'http_error', f'{server.base}/unavailable/a.png: HTTP 503 after 2 retries')
  [example] = read_examples(out)
  assert example['image/key'][1] == [f'{server.base}/ok/b.png'.encode()]
  assert sorted(path for _, path in server.seen) == ['/ok/b.png'] + ['/unavailable/a.png'] * 3
