"""An s3:// object whose body breaks off (shorter than its Content-Length,
its connection reset mid-body) or that keeps answering 500: the row is
rejected as read/unreadable within seconds, saying what happened, and a
break that happens once is read again (transforms/s3_client.py's get_range).

Before, Beam's get_range retried such a read under its backoff for minutes
(7 tries, waits growing to minutes, an AttributeError for the reset), which
--image_timeout_s cut after 60 s into a rejection saying the image "took
longer than --image_timeout_s".

A fake S3 endpoint on 127.0.0.1 (no moto): HEAD and GET of one object.
"""

from __future__ import annotations

import io
import socket
import struct
import threading
import time

from PIL import Image
import pytest

from tests.local_http import QuietHandler
from tests.local_http import RunningServer
from transforms import filesystem
from transforms import s3_client
from transforms.core.rejects import RowError
from transforms.read_sources import read_bytes

PATH = 's3://bkt/images/a.png'
# Far below Beam's backoff (minutes), far above RANGE_5XX_ATTEMPTS tries with
# their waits of 1 to 8 s (botocore's backoff under a 500's).
LIMIT_S = 90


def _png(size=(64, 48)) -> bytes:
  buffer = io.BytesIO()
  Image.effect_noise(size, 60).convert('RGB').save(buffer, format='PNG')
  return buffer.getvalue()


BODY = _png()


def _handler(behaviour: str, gets: list):
  """behaviour for each GET: 'short' (half the body, then the connection
  closes), 'reset' (half, then an RST), '500', '503' (SlowDown), 'changed' (overwritten since
  the HEAD: a larger object, or 412 if asked If-Match), or 'whole'; after the listed
  ones, the last repeats."""

  class Handler(QuietHandler):

    def do_HEAD(self):
      self._headers(200, len(BODY))

    def _headers(self, status: int, length: int) -> None:
      self.send_response(status)
      self.send_header('Content-Length', str(length))
      self.send_header('ETag', '"abc"')
      self.send_header('Last-Modified', 'Mon, 07 Dec 2026 20:00:00 GMT')
      self.send_header('Content-Type', 'image/png' if status == 200 else 'application/xml')
      self.end_headers()

    def do_GET(self):
      gets.append(self.headers.get('Range'))
      mode = behaviour.split(',')[min(len(gets), len(behaviour.split(','))) - 1]
      if mode == 'changed':  # its ETag is no longer "abc"
        if self.headers.get('If-Match'):  # as S3 answers one asked for a version it no longer holds
          error = (b'<?xml version="1.0"?><Error><Code>PreconditionFailed</Code><Message>At least '
                   b'one of the pre-conditions you specified did not hold</Message></Error>')
          self._headers(412, len(error))
          self.wfile.write(error)
          return
        mode, body = 'whole', _png((96, 72))  # overwritten since its HEAD: another, larger object
        self._headers(200, len(body))
        self.wfile.write(body)
        return
      if mode in ('500', '503'):
        error = (b'<?xml version="1.0"?><Error><Code>InternalError</Code>'
                 b'<Message>We encountered an internal error.</Message></Error>' if mode == '500'
                 else b'<?xml version="1.0"?><Error><Code>SlowDown</Code>'
                 b'<Message>Please reduce your request rate.</Message></Error>')
        self._headers(int(mode), len(error))
        self.wfile.write(error)
        return
      start = int((self.headers.get('Range') or 'bytes=0-')[6:].split('-')[0])
      body = BODY[start:]
      self._headers(206 if self.headers.get('Range') else 200, len(body))
      if mode == 'whole':
        self.wfile.write(body)
        return
      self.wfile.write(body[:len(body) // 2])
      self.wfile.flush()
      if mode == 'reset':  # SO_LINGER 0: close() sends an RST
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
      self.close_connection = True
      self.connection.close()

  return Handler


@pytest.fixture(autouse=True)
def _no_aws_config(monkeypatch):
  """Only the client's own options configure it (no profile, file or proxy here)."""
  for name, value in (('AWS_CONFIG_FILE', '/dev/null'), ('AWS_SHARED_CREDENTIALS_FILE', '/dev/null'),
                      ('AWS_EC2_METADATA_DISABLED', 'true'), ('NO_PROXY', '127.0.0.1')):
    monkeypatch.setenv(name, value)
  for name in ('AWS_PROFILE', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'HTTP_PROXY',
               'http_proxy', 'AWS_ENDPOINT_URL'):
    monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _short_waits(monkeypatch):
  """get_range's waits between its tries, 1 to 8 s, cut to 10 ms: the tries
  and what they end in are asserted, not the waits (45 s of the file's run)."""
  monkeypatch.setattr(s3_client, 'RANGE_BACKOFF_S', 0.01)


def _files(endpoint: str) -> filesystem.FileAccess:
  """FileAccess whose S3 client asks `endpoint`."""
  def make_s3io():
    from apache_beam.io.aws import s3io
    return s3io.S3IO(client=s3_client.BoundedClient({
        's3_endpoint_url': endpoint, 's3_access_key_id': 'AKIDTEST',
        's3_secret_access_key': 'SECRETTEST', 's3_region_name': 'us-east-1'}))
  return filesystem.FileAccess(make_s3io)


def _read(behaviour: str):
  """(what read_bytes returned or raised, seconds it took, the GETs made)."""
  gets: list = []
  with RunningServer(_handler(behaviour, gets)) as server:
    endpoint = server.base
    s3_client._NOT_ANSWERING.pop(endpoint, None)

    outcome: list = []

    def read():
      try:
        outcome.append(read_bytes(PATH, _files(endpoint)))
      except Exception as error:  # the test asserts on what it was
        outcome.append(error)

    started = time.monotonic()
    reader = threading.Thread(target=read, daemon=True)  # left running if it hangs: it fails below
    reader.start()
    reader.join(LIMIT_S)
    took = time.monotonic() - started
    assert outcome, f'the read of a {behaviour} body was still going after {took:.0f} s'
    return outcome[0], took, gets


@pytest.mark.parametrize('behaviour', ['short', 'reset'])
def test_a_body_that_always_breaks_off_is_unreadable_saying_so(behaviour):
  result, _, gets = _read(behaviour)
  assert isinstance(result, RowError), result
  assert (result.stage, result.code) == ('read', 'unreadable')
  assert result.reason.startswith(f"cannot read {PATH}: the store's answer for {PATH} broke off "
                                  f'before its Content-Length, {s3_client.ATTEMPTS} times (')
  assert "', None)" not in result.reason  # not S3ClientError's tuple
  # A cut-off body's bytes are kept and the rest asked for (Range): the
  # last ATTEMPTS asks got nothing more.
  assert len(gets) >= s3_client.ATTEMPTS


def test_a_body_that_breaks_off_once_is_read_again_from_where_it_broke():
  result, _, gets = _read('short,whole')
  assert result == BODY
  assert gets == [None, f'bytes={len(BODY) // 2}-'] or gets == ['bytes=0-', f'bytes={len(BODY) // 2}-']


def test_an_object_changed_between_its_size_and_its_bytes_is_unreadable_saying_so():
  """Beam's downloader reads the size (HEAD), then the bytes to that size:
  an object overwritten between the two by a larger one was read cut at the
  old size, and rejected as 'image file is truncated'."""
  result, _, gets = _read('changed')
  assert isinstance(result, RowError), result
  assert (result.stage, result.code) == ('read', 'unreadable')
  assert result.reason == (
      f'cannot read {PATH}: {PATH} changed while it was read: its ETag is no longer the one its '
      'size was read with (An error occurred (PreconditionFailed) when calling the GetObject '
      'operation: At least one of the pre-conditions you specified did not hold)')
  assert len(gets) == 1  # a 4xx is not asked again


def test_an_object_that_keeps_answering_500_is_unreadable_with_the_stores_words():
  result, _, gets = _read('500')
  assert isinstance(result, RowError), result
  assert (result.stage, result.code) == ('read', 'unreadable')
  assert result.reason == (
      f'cannot read {PATH}: An error occurred (InternalError) when calling the GetObject '
      'operation (reached max retries: 2): We encountered an internal error.')
  # botocore's tries under each of ours
  assert len(gets) == s3_client.RANGE_5XX_ATTEMPTS * s3_client.ATTEMPTS


def test_a_burst_of_slow_down_answers_is_waited_out():
  """S3's 503 SlowDown, 10 times in a row: boto3's 3 tries alone gave up."""
  result, _, gets = _read(','.join(['503'] * 10 + ['whole']))
  assert result == BODY
  assert len(gets) == 11


class _BreaksOff(io.RawIOBase):
  """A shard's stream whose store's answer broke off (what get_range raises
  then), or that raises `error`."""

  def __init__(self, error: Exception):
    super().__init__()
    self._error = error

  def readable(self) -> bool:
    return True

  def readinto(self, buffer) -> int:
    raise self._error


def test_inspect_skips_a_shard_whose_body_breaks_off_saying_so(monkeypatch):
  """inspect --input_dir s3://...: it was a traceback and exit 1."""
  from apache_beam.io.aws.clients.s3.messages import S3ClientError

  from pipeline.looking import look_sample
  words = ("the store's answer for s3://b/out/train-00000-of-00001.tfrecord broke off before "
           'its Content-Length, 3 times (IncompleteReadError: 0 read, but total bytes expected '
           'is 1.)')
  monkeypatch.setattr(look_sample.dataset, 'open_binary',
                      lambda path: io.BufferedReader(_BreaksOff(S3ClientError(words, None))))
  skipped: list = []
  assert list(look_sample.records_of('s3://b/out/train-00000-of-00001.tfrecord', skipped)) == []
  assert skipped == [f'train-00000-of-00001.tfrecord: {words}']
  monkeypatch.setattr(look_sample.dataset, 'open_binary',  # a bug is still one
                      lambda path: io.BufferedReader(_BreaksOff(ValueError('a bug'))))
  with pytest.raises(ValueError, match='a bug'):
    list(look_sample.records_of('s3://b/out/train-00000-of-00001.tfrecord', []))


def test_a_password_in_the_endpoint_url_is_in_no_line_about_it():
  """--s3_endpoint_url http://user:password@host: botocore's errors name the
  URL whole; the lines that quote them said the password."""
  from pipeline.configuration import locations
  from tests.conftest import free_port
  endpoint = f'http://admin:HUSH@127.0.0.1:{free_port()}'  # nothing listens there
  s3_client._NOT_ANSWERING.pop(endpoint, None)
  problem = locations.unreachable('s3://bkt/data/m.csv', _files(endpoint))
  assert problem.startswith('cannot be reached: EndpointConnectionError: Could not connect to '
                            'the endpoint URL: "http://<redacted>@127.0.0.1:')
  with pytest.raises(s3_client.StoreNotAnswering) as raised:
    _files(endpoint).read_bytes('s3://bkt/data/m.csv')
  assert str(raised.value).startswith('the S3 endpoint http://<redacted>@127.0.0.1:')
  assert 'HUSH' not in problem + str(raised.value)


def test_a_parquet_manifest_the_store_fails_to_give_is_one_line_in_its_words():
  """It said S3ClientError's tuple: ("the store's answer ... 3 times (...)", None)."""
  from apache_beam.io.aws.clients.s3.messages import S3ClientError

  from pipeline.configuration import preflight_parquet
  from pipeline.errors import UsageError

  class Refusing:
    def open(self, path):
      raise S3ClientError('An error occurred (InternalError) when calling the GetObject '
                          'operation (reached max retries: 2): We encountered an internal error.',
                          500)

  with pytest.raises(UsageError) as raised:
    preflight_parquet._footer('s3://bkt/data/m.parquet', Refusing())
  assert str(raised.value) == (
      'cannot read manifest s3://bkt/data/m.parquet: S3ClientError: An error occurred '
      '(InternalError) when calling the GetObject operation (reached max retries: 2): We '
      'encountered an internal error.')
