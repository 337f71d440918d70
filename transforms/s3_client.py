"""The S3 client of every s3:// call FileAccess makes (transforms/filesystem.py):
Beam's boto3 client with bounded waits for a store that stops answering.

Beam's client asks boto3 for its defaults (60 s to connect, 60 s per read,
5 tries), and Beam's S3IO retries what is left (a failure with no HTTP
status) 7 more times with waits growing to 320 s, logging a traceback each
time: a store that stopped answering 9 s into a run kept it going for over
12 minutes, its clean-up (and a SIGTERM's) waiting the same. Here:

- each request: CONNECT_TIMEOUT_S to connect, READ_TIMEOUT_S per read of its
  answer, ATTEMPTS tries in all (botocore's standard retry mode: 5xx,
  throttling and no answer retried with a backoff of at most 20 s);
- a request that got no answer after those tries (refused, reset, timed
  out) raises StoreNotAnswering, which Beam's retries let through (a
  PermanentException): an HTTP error (403, 404, 5xx) is still Beam's S3ClientError;
- for NOT_ANSWERING_FOR_S from then on, every request of this process to
  that endpoint raises StoreNotAnswering at once: the run's clean-up does
  not wait on the store request after request (what it could not remove,
  it says). Not for good: a distributed runner's worker process lives on,
  and its retry of the bundle, later, asks the store again.

So a store that stops answering ends the run within about ATTEMPTS *
(CONNECT_TIMEOUT_S or READ_TIMEOUT_S) + 40 s of backoff (seconds when its
connections are refused), whatever it was doing then.

A body that breaks off (cut short of its Content-Length, its connection
reset) is no store that stopped answering: it answered. get_range asks
again, ATTEMPTS times in all (RANGE_5XX_ATTEMPTS for a 5xx or throttling
answer, each of boto3's ATTEMPTS tries: a burst of SlowDown is waited out
for about 30 s), then raises an S3ClientError saying so: the row is
rejected as unreadable with that reason. Beam's get_range retried it under
its backoff for minutes (and, as it failed to read the error's HTTP status,
with an AttributeError), which --image_timeout_s cut after 60 s into a
rejection saying "took longer than --image_timeout_s".
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from apache_beam.io.aws.clients.s3 import boto3_client
from apache_beam.io.aws.clients.s3 import messages
from apache_beam.options import pipeline_options
from apache_beam.utils.retry import PermanentException

from transforms.core.not_answering import NotAnswering
from transforms.core.redact import redact_text
from transforms.core.store_errors import error_text

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 20
ATTEMPTS = 3
NOT_ANSWERING_FOR_S = 60.0
# get_range's wait before asking again: 1, 2, 4, 8 s (botocore's own backoff
# sits under each try for an HTTP 5xx or throttling answer).
RANGE_BACKOFF_S = 1.0
RANGE_5XX_ATTEMPTS = 5
_ETAGS_KEPT = 64

# endpoint -> (time.monotonic() when a request got no answer, its line)
_NOT_ANSWERING: dict = {}
_LOCK = threading.Lock()


class StoreNotAnswering(PermanentException, NotAnswering):
  """An S3 endpoint gave no answer to a request after ATTEMPTS tries (or did
  not to an earlier one of this process): one line, no retry."""


def _options(options) -> dict:
  """Beam's S3 options, from PipelineOptions or a dict (a worker's runtime
  options), as Beam's client reads them."""
  if isinstance(options, pipeline_options.PipelineOptions):
    return options.view_as(pipeline_options.S3Options).get_all_options()
  return dict(options or {})


def _no_answer(error: Optional[BaseException]) -> Optional[BaseException]:
  """The botocore error of a request that got no answer (connection refused,
  reset or closed, a timeout) that `error` is or was raised from, else None.
  A body that broke off after its answer began (ResponseStreamingError) is
  none: the store answered."""
  from botocore.exceptions import ConnectionError as NoConnection
  from botocore.exceptions import HTTPClientError
  from botocore.exceptions import ResponseStreamingError
  seen = 0
  while error is not None and seen < 10:
    if isinstance(error, ResponseStreamingError):
      return None
    if isinstance(error, (NoConnection, HTTPClientError)):
      return error
    error, seen = error.__cause__ or error.__context__, seen + 1
  return None


class BoundedClient(boto3_client.Client):
  """Beam's boto3 client with bounded waits (see the module's docstring)."""

  def __init__(self, options):  # pylint: disable=super-init-not-called
    # Beam's __init__, with a botocore Config (it passes none).
    assert boto3_client.boto3 is not None, 'Missing boto3 requirement'
    from botocore.config import Config
    given = _options(options)
    session = boto3_client.boto3.session.Session()
    self.client = session.client(
        service_name='s3',
        region_name=given.get('s3_region_name'),
        api_version=given.get('s3_api_version'),
        use_ssl=not given.get('s3_disable_ssl', False),
        verify=given.get('s3_verify'),
        endpoint_url=given.get('s3_endpoint_url'),
        aws_access_key_id=given.get('s3_access_key_id'),
        aws_secret_access_key=given.get('s3_secret_access_key'),
        aws_session_token=given.get('s3_session_token'),
        config=Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                      retries={'total_max_attempts': ATTEMPTS, 'mode': 'standard'}))
    self._download_request = None
    self._download_stream = None
    self._download_pos = 0
    # (bucket, key) -> the ETag of the object whose size was read (Beam's
    # downloader reads the size, then the bytes): its reads ask If-Match.
    self._etags: dict = {}
    self.client.meta.events.register('before-parameter-build.s3.GetObject', self._if_match)

  @property
  def endpoint(self) -> str:
    return self.client.meta.endpoint_url

  def refuse_if_not_answering(self) -> None:
    """StoreNotAnswering at once if this client's endpoint gave no answer before."""
    with _LOCK:
      since, line = _NOT_ANSWERING.get(self.endpoint, (None, None))
    if since is not None and time.monotonic() - since < NOT_ANSWERING_FOR_S:
      raise StoreNotAnswering(line)

  def not_answering(self, cause: BaseException) -> StoreNotAnswering:
    """Records that the endpoint gave no answer (cause: botocore's error)."""
    # the endpoint URL, in ours and botocore's words, with a user:password@ given in it
    line = redact_text(
        f'the S3 endpoint {self.endpoint} stopped answering: {type(cause).__name__}: '
        f'{str(cause).splitlines()[0] if str(cause) else ""} (after {ATTEMPTS} tries of '
        f'{CONNECT_TIMEOUT_S} s to connect and {READ_TIMEOUT_S} s per read)')
    with _LOCK:
      _NOT_ANSWERING[self.endpoint] = (time.monotonic(), line)
    return StoreNotAnswering(line)

  def get_object_metadata(self, request):
    """Beam's, bounded; the object's ETag is kept for its reads (_if_match)."""
    item = _BOUNDED['get_object_metadata'](self, request)
    if len(self._etags) >= _ETAGS_KEPT:  # a step's client reads one object after another
      self._etags.pop(next(iter(self._etags)))
    self._etags[(request.bucket, request.object)] = item.etag
    return item

  def _if_match(self, params: dict, **_) -> None:
    """A GetObject of an object whose size was read asks for that version
    (If-Match its ETag): one changed since answers 412, not other bytes read
    to the old size (a larger one was cut there: 'image file is truncated')."""
    etag = self._etags.get((params.get('Bucket'), params.get('Key')))
    if etag and 'IfMatch' not in params:
      params['IfMatch'] = etag

  def get_range(self, request, start, end):
    """The object's bytes [start, end) (fewer at its end): Beam's
    get_range, asked ATTEMPTS times (RANGE_5XX_ATTEMPTS for a 5xx) with a
    short wait, not under Beam's backoff (see the module's docstring). S3ClientError, with the answer's
    HTTP status if there was one, once every try failed; StoreNotAnswering
    if the store gave no answer."""
    for attempt in range(1, RANGE_5XX_ATTEMPTS + 1):
      self.refuse_if_not_answering()
      try:
        data = self.get_stream(request, start).read(end - start)
        self._download_pos += len(data)
        return data
      except Exception as error:
        self._download_stream = self._download_request = None  # the next try reconnects
        cause = _no_answer(error)
        if cause is not None:
          raise self.not_answering(cause) from None
        code = getattr(error, 'code', None)  # S3ClientError's: the answer's HTTP status
        last = RANGE_5XX_ATTEMPTS if code is not None else ATTEMPTS
        if attempt >= last or (code is not None and code < 500):
          raise _read_failed(request, error, code, attempt) from None
        time.sleep(RANGE_BACKOFF_S * 2 ** (attempt - 1))
    raise AssertionError('unreachable: the last try returns or raises')


def _read_failed(request, error: Exception, code: Optional[int],
                 tries: int) -> messages.S3ClientError:
  """The S3ClientError of a read of `request` that failed with `error`: a
  body that broke off says so, with how much came (botocore's words)."""
  from botocore.exceptions import IncompleteReadError
  from botocore.exceptions import ResponseStreamingError
  text = error_text(error).splitlines()[0] if str(error) else type(error).__name__
  if code == 412:  # _if_match's
    text = (f's3://{request.bucket}/{request.object} changed while it was read: its ETag is '
            f'no longer the one its size was read with ({text})')
  elif isinstance(error, (ResponseStreamingError, IncompleteReadError)):
    text = (f"the store's answer for s3://{request.bucket}/{request.object} broke off "
            f'before its Content-Length, {tries} times ({type(error).__name__}: {text})')
  return messages.S3ClientError(text, code)


def _bounded(name: str):
  beam_call = getattr(boto3_client.Client, name)

  def call(self, *args, **kwargs):
    self.refuse_if_not_answering()
    try:
      return beam_call(self, *args, **kwargs)
    except Exception as error:
      cause = _no_answer(error)
      if cause is None:
        raise
      raise self.not_answering(cause) from None

  call.__name__ = call.__qualname__ = name
  call.__doc__ = beam_call.__doc__
  return call


_BOUNDED = {name: _bounded(name) for name in (
    'get_object_metadata', 'get_stream', 'list', 'create_multipart_upload', 'upload_part',
    'complete_multipart_upload', 'delete', 'delete_batch', 'copy')}
for _name, _call in _BOUNDED.items():
  if _name not in vars(BoundedClient):  # BoundedClient's own calls them
    setattr(BoundedClient, _name, _call)

