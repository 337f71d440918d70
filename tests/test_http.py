"""Images over HTTP(S), against a server the test starts on 127.0.0.1 (and
nowhere else): slow answers, 429 then 200, 500 then 200, a redirect loop, a
2 GB declared length, text served as image/jpeg, the X-Robots-Tag opt-outs,
a connection reset mid-body, 404, 403. Every row ends as exactly one
Example or one rejected line with its code; a run with retries writes the
bytes of a run without failures; tokens in signed URLs never show."""

from __future__ import annotations

import base64
import gzip
import http.server
import io
import json
import pathlib
import socket
import struct
import time

from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.local_http import RunningServer
from tests.test_manifest_ranges import digests
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.workers import http_fetch

# a long system test: make test stays within 6 minutes
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('http'),
              pytest.mark.integration]
SECRET = 'S3CR3T'
PRIVATE = 'Basic ' + base64.b64encode(f'me:{SECRET}'.encode()).decode()  # /private/'s


def png(seed: int) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (6 + seed, 5), (40 * seed % 256, 120, 30)).save(buffer, 'PNG')
  return buffer.getvalue()


class Server(RunningServer):
  """A threaded HTTP server on 127.0.0.1. `failing`: the flaky paths fail
  their first request (429, 500, a reset mid-body); off, every path but the
  broken ones answers at once."""

  def __init__(self):
    self.failing = True
    self.seen: dict = {}  # path -> GET requests
    self.heads: dict = {}  # path -> HEAD requests
    self.agents: list = []
    self.auth: list = []
    self.elsewhere = ''  # the base URL /away/ redirects to
    self.redirect_to = ''  # where /elsewhere/ redirects
    self.opted_out: set = set()  # paths answered with X-Robots-Tag: noai (HEAD and GET)
    server = self

    class Handler(http.server.BaseHTTPRequestHandler):
      protocol_version = 'HTTP/1.1'

      def log_message(self, *args):
        del args

      def do_HEAD(self):  # what --change_detection metadata asks: ETag, Last-Modified
        path = self.path.split('?', 1)[0]
        server.heads[path] = server.heads.get(path, 0) + 1
        if path.startswith('/slow/'):
          time.sleep(1.5)
        if path.startswith('/private/') and self.headers.get('Authorization') != PRIVATE:
          return self._send(401, b'')
        extra = {'ETag': '"v1"'} if path.startswith(('/etag/', '/private/')) else {}
        if path in server.opted_out:
          extra['X-Robots-Tag'] = 'noai'
        return self._send(200, b'', **extra)

      def do_GET(self, head=False):
        path = self.path.split('?', 1)[0]
        count = server.seen[path] = server.seen.get(path, 0) + 1
        server.agents.append(self.headers.get('User-Agent'))
        server.auth.append(self.headers.get('Authorization'))
        first = server.failing and count == 1
        name = path.rsplit('/', 1)[-1]
        seed = int(name.split('.')[0][-1]) if name[:1].isalpha() and name.split(
            '.')[0][-1:].isdigit() else 0
        if path.startswith('/private/'):  # basic authentication, as a HEAD asks it too
          if self.headers.get('Authorization') != PRIVATE:
            return self._send(401, b'')
          return self._send(200, png(seed), head=head, ETag='"v1"')
        if path.startswith('/ok/') or path.startswith('/etag/') or path.startswith('/bare/'):
          extra = {'ETag': f'"v{seed}"'} if path.startswith('/etag/') else {}
          if path in server.opted_out:
            extra['X-Robots-Tag'] = 'noai'
          return self._send(200, png(seed), head=head, **extra)
        if path.startswith('/slow/'):
          time.sleep(1.5)
          return self._send(200, png(seed), head=head)
        if path.startswith('/busy/'):  # 429 then 200
          if first:
            return self._send(429, b'slow down', **{'Retry-After': '0'})
          return self._send(200, png(seed), head=head)
        if path.startswith('/flaky/'):  # 500 then 200
          return self._send(500, b'oops') if first else self._send(200, png(seed), head=head)
        if path.startswith('/reset/'):  # cut mid-body, then whole
          if first or name.startswith('always'):
            data = png(seed)
            self.send_response(200)
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack('ii', 1, 0))
            self.close_connection = True
            return None
          return self._send(200, png(seed), head=head)
        if path.startswith('/loop/'):
          return self._send(302, b'', Location=f'/loop/{sum(server.seen.values())}.png')
        if path.startswith('/redirect/'):
          return self._send(301, b'', Location=f'/ok/{name}')
        if path.startswith('/elsewhere/'):  # to no http(s) URL: file:///..., gs://...
          return self._send(302, b'', Location=server.redirect_to)
        if path.startswith('/away/'):  # to another origin
          return self._send(302, b'', Location=f'{server.elsewhere}/ok/{name}')
        if path.startswith('/huge/'):
          self.send_response(200)
          self.send_header('Content-Length', str(2 * 1024 ** 3))
          self.end_headers()
          self.wfile.write(png(1))
          self.close_connection = True
          return None
        if path.startswith('/text/'):
          return self._send(200, b'<html>not an image</html>' * 10,
                            **{'Content-Type': 'image/jpeg'})
        if path.startswith('/robots/'):
          return self._send(200, png(seed), **{'X-Robots-Tag': 'noai'})
        if path.startswith('/agent/'):
          return self._send(200, png(seed), **{'X-Robots-Tag': 'otherbot: noimageai'})
        if path.startswith('/forbidden/'):
          return self._send(403, b'no')
        return self._send(404, b'gone')

      def _send(self, status, body, head=False, **headers):
        self.send_response(status)
        self.send_header('Content-Length', str(len(body)))
        for name, value in headers.items():
          self.send_header(name, value)
        self.end_headers()
        if not head:
          self.wfile.write(body)

    super().__init__(Handler)


@pytest.fixture
def server():
  with Server() as running:
    yield running


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch):
  monkeypatch.setattr(http_fetch, 'BACKOFF_S', 0.01)


BASE = ('--height', '8', '--width', '8', '--progress', 'off', '--http_timeout_s', '1',
        '--http_retries', '2')
FLAGS = (*BASE, '--image_threads', '4')


def _manifest(path: pathlib.Path, urls: list) -> pathlib.Path:
  path.write_text('image,label\n' + ''.join(f'{url},{label}\n' for url, label in urls))
  return path


CASES = [  # path, label, expected: None (an example) or (stage, code)
    ('/ok/a1.png', 'a', None),
    ('/busy/b2.png', 'b', None),
    ('/flaky/c3.png', 'a', None),
    ('/reset/d4.png', 'b', None),
    ('/redirect/e5.png', 'a', None),
    ('/agent/f6.png', 'b', None),  # addressed to another agent
    ('/slow/g7.png', 'a', ('read', 'timeout')),
    ('/loop/0.png', 'a', ('read', 'too_many_redirects')),
    ('/huge/h.png', 'a', ('read', 'too_large')),
    ('/text/i.jpg', 'b', ('decode', 'not_an_image')),
    ('/robots/j.png', 'a', ('read', 'robots_opt_out')),
    ('/missing/k.png', 'a', ('read', 'missing_file')),
    ('/forbidden/l.png', 'b', ('read', 'http_error')),
    ('/reset/always8.png', 'b', ('read', 'http_error')),
]


def test_every_url_ends_as_one_example_or_one_rejected_line(server, tmp_path):
  manifest = _manifest(tmp_path / 'urls.csv', [(server.base + p, l) for p, l, _ in CASES])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out),
                       '--max_error_rate', '1', *FLAGS]) == EXIT_OK
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(out)}
  rejected = {line['row']['image']: (line['stage'], line['code'])
              for line in rejected_lines(out)}
  for path, _, expected in CASES:
    url = server.base + path
    if expected is None:
      assert url in examples and url not in rejected, path
    else:
      assert rejected.get(url) == expected and url not in examples, path
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'] + info['num_rejected']) == (
      len(CASES), len(CASES))
  assert server.seen['/slow/g7.png'] == 3, server.seen  # tried, then retried twice
  assert server.seen['/missing/k.png'] == 1  # a 404 is not retried
  # the first request and 5 redirects followed, then no retry; on a loaded
  # machine a hop may time out, and that attempt is retried (at most 6 each)
  loop = sum(n for path, n in server.seen.items() if path.startswith('/loop/'))
  assert 6 <= loop <= 6 * 3, server.seen
  assert set(server.agents) == {http_fetch.DEFAULT_USER_AGENT}
  pixels = Image.frombytes('RGB', (8, 8), examples[server.base + '/busy/b2.png'][
      'image/encoded'][1][0])
  assert pixels.getpixel((4, 4)) == (80, 120, 30)  # png(2)'s colour


@pytest.mark.parametrize('pool', [('--image_processes', '2'), ('--image_threads', '2')])
def test_hf_image_structs_naming_urls_are_fetched(server, tmp_path, pool):
  # A Hugging Face Image {bytes: null, path: URL} (datasets' Image() of a
  # URL) in a local Parquet file: an image worker process read the URL as a
  # local file name, read/missing_file "file not found: http://..."; threads
  # fetched it with the default --http_* options.
  import pyarrow as pa
  import pyarrow.parquet as pq
  image_type = pa.struct([('bytes', pa.binary()), ('path', pa.string())])
  images = [{'bytes': None, 'path': server.base + '/busy/b2.png'},
            {'bytes': None, 'path': server.base + '/ok/a3.png'},
            {'bytes': None, 'path': server.base + '/missing/m1.png'},
            {'bytes': png(4), 'path': server.base + '/missing/m2.png'}]
  path = tmp_path / 'hf.parquet'
  pq.write_table(pa.table({'image': pa.array(images, image_type), 'label': ['x', 'y', 'x', 'y']}),
                 path)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--max_error_rate',
                       '1', '--http_user_agent', 'probe/1.0', *BASE, *pool]) == EXIT_OK
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(out)}
  assert sorted(examples) == ['hf.parquet:0', 'hf.parquet:1', 'hf.parquet:3']
  assert set(server.agents) == {'probe/1.0'}  # the run's --http_* flags, not the defaults
  for key, seed in (('hf.parquet:0', 2), ('hf.parquet:1', 3), ('hf.parquet:3', 4)):
    want = Image.open(io.BytesIO(png(seed))).resize((8, 8), Image.BILINEAR)
    assert examples[key]['image/encoded'][1][0] == want.tobytes(), key
  [line] = rejected_lines(out)
  assert (line['line'], line['stage'], line['code'], line['reason']) == (
      2, 'read', 'missing_file', f'{server.base}/missing/m1.png: HTTP 404')
  assert server.seen['/busy/b2.png'] == 2  # the 429, then the --http_retries retry
  assert '/missing/m2.png' not in server.seen  # its bytes are in the cell


@pytest.mark.parametrize('pool', [(), ('--image_processes', '2', '--encoding', 'png')])
def test_a_run_with_retries_writes_the_bytes_of_one_without_failures(server, tmp_path, pool):
  good = [(server.base + p, l) for p, l, expected in CASES if expected is None]
  manifest = _manifest(tmp_path / 'urls.csv', good)
  retried = tmp_path / 'retried'
  flags = (*BASE, *pool) if pool else FLAGS
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(retried),
                       *flags]) == EXIT_OK
  assert server.seen['/busy/b2.png'] == 2 and server.seen['/reset/d4.png'] == 2
  server.failing = False
  clean = tmp_path / 'clean'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(clean),
                       *flags]) == EXIT_OK
  assert server.seen['/busy/b2.png'] == 3  # one try this time
  assert digests(retried) == digests(clean)


def test_robots_tags_by_agent_token_and_ignored(server, tmp_path):
  manifest = _manifest(tmp_path / 'urls.csv', [(server.base + '/agent/a1.png', 'a'),
                                               (server.base + '/robots/b2.png', 'b'),
                                               (server.base + '/ok/c3.png', 'a')])
  out = tmp_path / 'token'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out),
                       '--max_error_rate', '1', '--http_user_agent_token', 'OtherBot',
                       '--http_user_agent', 'mybot/1.0', *FLAGS]) == EXIT_OK
  assert sorted(line['code'] for line in rejected_lines(out)) == ['robots_opt_out'] * 2
  assert set(server.agents) == {'mybot/1.0'}
  out = tmp_path / 'ignored'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out),
                       '--http_ignore_robots_tag', *FLAGS]) == EXIT_OK
  assert read_info(out)['num_examples'] == 3


def test_tokens_and_credentials_in_urls_never_show(server, tmp_path, capsys):
  signed = f'{server.base}/ok/a1.png?id=7&X-Amz-Signature={SECRET}'
  with_user = server.base.replace('http://', f'http://me:{SECRET}@') + '/ok/b2.png'
  missing = f'{server.base}/missing/c.png?token={SECRET}'
  manifest = _manifest(tmp_path / 'urls.csv', [(signed, 'a'), (with_user, 'b'),
                                               (missing, 'a')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out),
                       '--max_error_rate', '1', *FLAGS]) == EXIT_OK
  keys = sorted(e['image/key'][1][0].decode() for e in read_examples(out))
  assert keys == [f'{server.base}/ok/a1.png?id=7&X-Amz-Signature=<redacted>',
                  server.base.replace('http://', 'http://<redacted>@') + '/ok/b2.png']
  assert f'Basic {base64.b64encode(f"me:{SECRET}".encode()).decode()}' in server.auth
  for name in ('rejected.jsonl', 'dataset_info.json', 'label_map.txt'):
    assert SECRET not in (out / name).read_text(), name
  for shard in out.glob('*.tfrecord'):
    assert SECRET.encode() not in shard.read_bytes()
  for sidecar in out.glob('*.sources.jsonl.gz'):
    assert SECRET.encode() not in __import__('gzip').decompress(sidecar.read_bytes())
  captured = capsys.readouterr()
  assert SECRET not in captured.out + captured.err
  [line] = rejected_lines(out)
  assert (line['code'], SECRET in json.dumps(line)) == ('missing_file', False)


def test_an_hf_image_struct_url_shows_no_secret_and_its_rejected_line_its_cause(server,
                                                                              tmp_path):
  # The Image's path was image/filename as written (user:password and the
  # signature in the shards); a reason ending in a secret query value lost
  # its cause when rejected.jsonl redacted it again ('...?token=<redacted>').
  import pyarrow as pa
  import pyarrow.parquet as pq
  with_user = server.base.replace('http://', f'http://me:{SECRET}@')
  images = [{'bytes': None, 'path': f'{with_user}/ok/a1.png?X-Amz-Signature={SECRET}'},
            {'bytes': None, 'path': f'{server.base}/missing/b.png?token={SECRET}'}]
  image_type = pa.struct([('bytes', pa.binary()), ('path', pa.string())])
  path = tmp_path / 'hf.parquet'
  pq.write_table(pa.table({'image': pa.array(images, image_type), 'label': ['x', 'y']}), path)
  csv = _manifest(tmp_path / 'urls.csv', [(f'{server.base}/forbidden/c.png?sig={SECRET}', 'x'),
                                          (f'{server.base}/ok/d3.png', 'y')])
  out, out_csv = tmp_path / 'out', tmp_path / 'out_csv'
  for manifest, folder in ((path, out), (csv, out_csv)):
    assert convert.main(['--manifest', str(manifest), '--output_dir', str(folder),
                         '--max_error_rate', '1', *FLAGS]) == EXIT_OK
    for shard in folder.glob('*.tfrecord'):
      assert SECRET.encode() not in shard.read_bytes()
  [example] = read_examples(out)
  assert example['image/key'][1] == [b'hf.parquet:0']
  assert example['image/filename'][1] == [with_user.replace(f'me:{SECRET}', '<redacted>').encode()
                                          + b'/ok/a1.png?X-Amz-Signature=<redacted>']
  [line] = rejected_lines(out)
  assert (line['code'], line['reason']) == (
      'missing_file', f'{server.base}/missing/b.png?token=<redacted>: HTTP 404')
  [line] = rejected_lines(out_csv)
  assert (line['code'], line['reason']) == (
      'http_error', f'{server.base}/forbidden/c.png?sig=<redacted>: HTTP 403')


def _fingerprints(out: pathlib.Path) -> dict:
  lines = [json.loads(line) for line in gzip.open(out / 'train.sources.jsonl.gz')]
  return {line['image'].rsplit('/', 1)[-1]: line['fingerprint'] for line in lines}


def test_a_nightly_run_asks_etag_and_last_modified(server, tmp_path):
  manifest = _manifest(tmp_path / 'urls.csv', [(server.base + '/etag/a1.png', 'a'),
                                               (server.base + '/bare/b2.png', 'b')])
  night1, night2 = tmp_path / 'n1', tmp_path / 'n2'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(night1),
                       *FLAGS]) == EXIT_OK
  before = dict(server.seen)
  # A first night takes the ETag from the GET itself: no HEAD.
  assert (server.heads, before) == ({}, {'/etag/a1.png': 1, '/bare/b2.png': 1})
  first = _fingerprints(night1)
  assert first['a1.png'] == 'http:etag="v1"'  # what a HEAD gives, as the next night asks
  assert first['b2.png'].startswith('sha256:')  # no ETag, no Last-Modified: its content
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(night2),
                       '--previous_dataset', str(night1), *FLAGS]) == EXIT_OK
  reuse = read_info(night2)['reuse']
  assert reuse['reused'] == 1  # the URL with an ETag; the other counts as changed
  assert server.seen['/etag/a1.png'] == before['/etag/a1.png']  # no GET: copied
  assert server.seen['/bare/b2.png'] == before['/bare/b2.png'] + 1
  assert server.heads == {'/etag/a1.png': 1, '/bare/b2.png': 1}  # to decide what to copy
  assert _fingerprints(night2) == first
  assert digests(night2) == digests(night1)


def test_a_nightly_run_asks_a_url_with_a_password_with_its_password(server, tmp_path):
  # The HEAD went without the URL's user:password@: a server that asks for
  # it answered 401, and the image counted as changed every night.
  url = server.base.replace('http://', f'http://me:{SECRET}@') + '/private/a1.png'
  manifest = _manifest(tmp_path / 'urls.csv', [(url, 'a')])
  night1, night2 = tmp_path / 'n1', tmp_path / 'n2'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(night1),
                       *FLAGS]) == EXIT_OK
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(night2),
                       '--previous_dataset', str(night1), *FLAGS]) == EXIT_OK
  assert read_info(night2)['reuse']['reused'] == 1
  assert (server.heads, server.seen) == ({'/private/a1.png': 1}, {'/private/a1.png': 1})
  assert digests(night2) == digests(night1)


def test_a_nightly_run_copies_no_record_of_an_image_now_opted_out(server, tmp_path):
  # A nightly run's HEAD (its ETag unchanged) did not look at X-Robots-Tag:
  # the record of an image whose site opted out since the night before, or
  # that a night with --http_ignore_robots_tag read, was copied, where a full
  # run rejects it (robots_opt_out): not its bytes, and against the opt-out.
  # both "v1", as the HEAD answers
  manifest = _manifest(tmp_path / 'urls.csv', [(server.base + '/etag/a1.png', 'a'),
                                               (server.base + '/etag/b1.png', 'b')])
  flags = (*FLAGS, '--max_error_rate', '1')

  def night(name, *more):
    out = tmp_path / name
    assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), *flags,
                         *more]) == EXIT_OK
    return out

  night1 = night('n1')
  server.opted_out.add('/etag/b1.png')  # the site opts out
  full = night('full')
  assert [line['code'] for line in rejected_lines(full)] == ['robots_opt_out']
  night2 = night('n2', '--previous_dataset', str(night1))
  assert (read_info(night2)['reuse']['reused'], read_info(night2)['num_examples']) == (1, 1)
  assert [line['code'] for line in rejected_lines(night2)] == ['robots_opt_out']
  assert digests(night2) == digests(full)
  # read by a night told to ignore the opt-out; the next night is not
  ignored = night('ignored', '--http_ignore_robots_tag')
  assert read_info(ignored)['num_examples'] == 2
  night3 = night('n3', '--previous_dataset', str(ignored))
  assert [line['code'] for line in rejected_lines(night3)] == ['robots_opt_out']
  assert digests(night3) == digests(full)


def test_recompute_compares_urls_by_their_etag_and_shows_no_secret(server, tmp_path, capsys):
  # validate --recompute looked an http(s) source's fingerprint up with
  # Beam's filesystems, which have no ETag: every such record was
  # recompute_source_changed, never compared; and that warning showed the
  # URL's password and signature, in the report too.
  from pipeline import validate
  signed = f'{server.base}/etag/a1.png?X-Amz-Signature={SECRET}'
  with_user = server.base.replace('http://', f'http://me:{SECRET}@') + '/etag/a1.png'
  manifest = _manifest(tmp_path / 'urls.csv', [(signed, 'a'), (with_user, 'b')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_OK
  report = json.loads((out / 'validation_report.json').read_text())
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (2, 0), report
  sidecar = out / 'train.sources.jsonl.gz'
  lines = [json.loads(line) for line in gzip.decompress(sidecar.read_bytes()).splitlines()]
  assert [line['fingerprint'] for line in lines] == ['http:etag="v1"'] * 2  # HEADs say v1
  for line in lines:  # as if both had changed since the run
    line['fingerprint'] = 'http:etag="v0"'
  sidecar.write_bytes(gzip.compress(b''.join(json.dumps(line).encode() + b'\n'
                                             for line in lines)))
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_OK
  report_text = (out / 'validation_report.json').read_text()
  report = json.loads(report_text)
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (0, 2), report
  assert SECRET not in report_text + capsys.readouterr().out
  assert 'its source http://<redacted>@127.0.0.1' in report_text


def test_the_fetch_itself(server):
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=1, retries=0))
  assert client.fetch(server.base + '/ok/a3.png', ImageSpec()) == png(3)
  with pytest.raises(RowError) as error:
    client.fetch(server.base + '/busy/x1.png', ImageSpec())
  assert (error.value.code, 'HTTP 429' in error.value.reason) == ('http_error', True)
  with pytest.raises(RowError) as error:
    client.fetch(server.base + '/ok/a3.png', ImageSpec(max_image_bytes=20))
  assert error.value.code == 'too_large'


def test_credentials_are_not_sent_past_a_redirect_to_another_origin(server):
  # user:password@ is for its host: as urllib3, requests and curl do, a
  # redirect to another host or port goes without Authorization.
  with Server() as other:
    server.elsewhere = other.base
    client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=1, retries=0))
    with_password = server.base.replace('://', '://alice:pw@')
    assert client.fetch(with_password + '/redirect/a3.png', ImageSpec()) == png(3)
    assert client.fetch(with_password + '/away/a2.png', ImageSpec()) == png(2)
    basic = 'Basic ' + base64.b64encode(b'alice:pw').decode()
    assert server.auth == [basic, basic, basic]  # the same origin keeps them
    assert other.auth == [None]


@pytest.mark.parametrize('location', ['file:///etc/hostname', 'gs://bucket/a.png',
                                      'ftp://user:pw@host/a.png'])
def test_a_redirect_to_no_http_url_is_one_http_error_not_retried(server, location):
  server.redirect_to = location
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=1, retries=3))
  with pytest.raises(RowError) as error:
    client.fetch(server.base + '/elsewhere/a1.png', ImageSpec())
  assert error.value.code == 'http_error'
  shown = location.replace('user:pw', '<redacted>')
  assert error.value.reason == (f'{server.base}/elsewhere/a1.png: redirected to {shown}, '
                                f'not an http(s) URL: not followed'), error.value.reason
  assert server.seen == {'/elsewhere/a1.png': 1}  # refused at once: not tried again


@pytest.mark.parametrize('first, second, same', [
    ('http://a.example/x.png', 'http://A.EXAMPLE:80/y.png', True),
    ('https://a.example/x.png', 'http://a.example/x.png', False),
    ('http://a.example:8080/x.png', 'http://a.example:8081/x.png', False),
    ('http://a.example/x.png', 'http://b.example/x.png', False)])
def test_origins(first, second, same):
  assert (http_fetch.origin(first) == http_fetch.origin(second)) == same


def _closed_port() -> int:
  """A port of 127.0.0.1 nothing listens on: connections to it are refused."""
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return probe.getsockname()[1]


def test_a_refused_connection_or_an_unknown_host_is_an_http_error_not_a_timeout():
  waits = []
  client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=5, retries=2),
                                 sleep=waits.append)
  url = f'http://127.0.0.1:{_closed_port()}/a.png'
  started = time.monotonic()
  with pytest.raises(RowError) as error:
    client.fetch(url, ImageSpec())
  assert time.monotonic() - started < 2.5  # refused at once: no try waited --http_timeout_s
  assert (error.value.stage, error.value.code) == ('read', 'http_error')
  assert error.value.reason == (f'{url}: connection refused (nothing listens on the port), '
                                f'after 2 retries: ConnectionRefusedError: [Errno 111] '
                                f'Connection refused')
  assert len(waits) == 2  # tried three times
  # .invalid never resolves (RFC 6761): no network needed, and no waiting
  with pytest.raises(RowError) as error:
    client.fetch('http://nonexistent.invalid/x.jpg', ImageSpec())
  assert (error.value.stage, error.value.code) == ('read', 'http_error')
  assert error.value.reason.startswith('http://nonexistent.invalid/x.jpg: the host name '
                                       'nonexistent.invalid does not resolve, after 2 '
                                       'retries: gaierror: '), error.value.reason


@pytest.mark.parametrize('url, said', [
    ('http://ho\xa0st/x.jpg', "Name 'ho\xa0st' is not a valid IDNA label"),
    ('http://u:secret@host%/x.jpg', "'host%' is not a valid host or port"),
])
def test_a_url_urllib3_cannot_parse_is_not_retried(url, said):
  """What the manifest's check lets through and urllib3 refuses before any
  connection (a no-break space in the host, a bare %) was retried with
  backoff and said 'connection failed, after 3 retries'."""
  waits = []
  client = http_fetch.HttpClient(http_fetch.HttpConfig(retries=3), sleep=waits.append)
  with pytest.raises(RowError) as error:
    client.fetch(url, ImageSpec())
  assert waits == []
  shown = http_fetch.shown_url(url)
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'read', 'http_error', f'{shown} is no URL that parses (Failed to parse: {said}): '
      'not fetched')
  assert 'secret' not in error.value.reason


def test_a_connection_not_accepted_in_time_is_still_a_timeout():
  with socket.socket() as listening:
    listening.bind(('127.0.0.1', 0))
    listening.listen(0)  # never accepted: once its queue is full, connections wait
    port = listening.getsockname()[1]
    fillers = []
    try:
      for _ in range(8):
        filler = socket.socket()
        filler.settimeout(0.3)
        try:
          filler.connect(('127.0.0.1', port))
        except OSError:
          filler.close()
          break
        fillers.append(filler)
      else:
        pytest.skip('this system queues every connection: none waits')
      client = http_fetch.HttpClient(http_fetch.HttpConfig(timeout_s=0.5, retries=1),
                                     sleep=lambda _: None)
      url = f'http://127.0.0.1:{port}/a.png'
      with pytest.raises(RowError) as error:
        client.fetch(url, ImageSpec())
    finally:
      for filler in fillers:
        filler.close()
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'read', 'timeout', f'{url}: no answer within --http_timeout_s 0.5, after 1 retry: '
      'ConnectTimeoutError')


def test_a_refused_url_is_one_rejected_http_error_line(tmp_path):
  url = f'http://127.0.0.1:{_closed_port()}/refused.png'
  image = tmp_path / 'a.png'
  image.write_bytes(png(1))
  manifest = _manifest(tmp_path / 'urls.csv', [(str(image), 'a'), (url, 'b')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out),
                       '--max_error_rate', '1', *BASE, '--http_timeout_s', '30']) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['stage'], line['code'], line['row']['image'], line['reason']) == (
      'read', 'http_error', url, f'{url}: connection refused (nothing listens on the port), '
      f'after 2 retries: ConnectionRefusedError: [Errno 111] Connection refused')
  [example] = read_examples(out)
  pixels = Image.frombytes('RGB', (8, 8), example['image/encoded'][1][0])
  assert pixels.getpixel((4, 4)) == (40, 120, 30)  # png(1)'s colour


@pytest.mark.parametrize('values, token, found', [
    (['noai'], '', 'noai'), (['noindex, nofollow'], '', 'noindex, nofollow'),
    (['otherbot: noimageai'], '', None), (['otherbot: noimageai'], 'OtherBot',
                                          'otherbot: noimageai'),
    (['all', 'NoImageIndex'], '', 'NoImageIndex'), (['nofollow'], '', None)])
def test_robots_directives(values, token, found):
  assert http_fetch.robots_opt_out(values, token) == found


def test_retry_after_in_seconds_or_a_date():
  assert http_fetch.retry_after_s('7') == 7.0
  assert http_fetch.retry_after_s('Thu, 03 Dec 2026 10:00:10 GMT', now=1796292000.0) == 10.0
  assert http_fetch.retry_after_s('soon') is None


def test_http_flags_are_checked(tmp_path, capsys):
  manifest = _manifest(tmp_path / 'urls.csv', [('http://127.0.0.1:9/a.png', 'a')])
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(tmp_path / 'o'),
                       '--http_max_per_host', '0']) == EXIT_USAGE
  assert '--http_max_per_host' in capsys.readouterr().err
