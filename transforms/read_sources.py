"""A row's source bytes, wherever they are: a file on any Beam filesystem,
a reference into another file (a Parquet cell, a tar member:
transforms/workers/source_refs.py), or an http(s):// URL
(transforms/workers/http_fetch.py). What the image step's pools call to read
(on their threads, and for image worker processes, which have no Beam
filesystems and no HTTP client, on the parent's)."""

from __future__ import annotations

from collections.abc import Callable
import concurrent.futures
import threading
from typing import Optional

from transforms import filesystem
from transforms.core import fingerprints
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError
from transforms.core.rejects import unexpected_error
from transforms.core.spec import ImageSpec
from transforms.core.store_errors import error_text
from transforms.workers import http_fetch
from transforms.workers import progress_ticks
from transforms.workers.checked_read import read_checked
from transforms.workers.source_image import DEFAULT_SPEC
from transforms.workers.source_image import is_local
from transforms.workers.source_image import read_local_file
from transforms.workers.source_image import stream_size
from transforms.workers.source_refs import is_ref
from transforms.workers.source_refs import read_ref
from transforms.workers.source_refs import ref_file


def read_bytes(path, reader: Optional[filesystem.FileAccess] = None,
               spec: ImageSpec = DEFAULT_SPEC,
               http: Optional[http_fetch.HttpClient] = None) -> bytes:
  """The whole file at `path` (any Beam filesystem), checked as
  read_checked does (spec.max_image_bytes from the size the filesystem
  reports, spec.formats from the first bytes) before the rest is read;
  RowError if unreadable or refused. reader: what opens remote files (a
  DoFn's, made in setup: it keeps an S3 client per thread); None: a new one.
  `path` may be a reference to bytes in another file (a Parquet cell:
  transforms/workers/source_refs.py), read from that file; or an http(s)://
  URL, fetched by `http` (transforms/workers/http_fetch.py; None: a client
  with the default --http_* options)."""
  if http_fetch.is_http(path):
    return (http or http_fetch.client(http_fetch.HttpConfig())).fetch(path, spec)
  if is_ref(path):
    reader = reader or filesystem.FileAccess()
    return read_ref(path, spec, _opener(path, reader),
                    lambda fallback, spec: read_bytes(fallback, reader, spec, http))
  if is_local(path):
    return read_local_file(path, spec)
  try:
    with (reader or filesystem.FileAccess()).open(path) as f:
      return read_checked(f, path, stream_size(f), spec)
  except RowError:
    raise
  except Exception as error:  # remote filesystems wrap their errors in BeamIOError
    text = error_text(error)
    code = 'missing_file' if ('Not found' in text or '404' in text or
                              'NoSuchKey' in text) else 'unreadable'
    raise RowError(STAGE_READ, code, f'cannot read {path}: {text}')


def _opener(ref, reader: filesystem.FileAccess):
  """What opens the file holding a reference: a local file directly, any
  other through the reader (errors of the store: read/unreadable)."""
  return (lambda path: open(path, 'rb')) if is_local(ref_file(ref)) else reader.open


def _is_remote_source(source) -> bool:
  """A path or reference a worker process cannot read: not on local disk.
  A Parquet cell of a local file whose Hugging Face Image names a URL
  (`path` http(s)://, gs://, s3://) for when its bytes are null is read
  here too: a worker read that path as a local file name, "file not found:
  http://..."."""
  if is_ref(source):
    fallback = getattr(source, 'fallback', '')
    return not is_local(ref_file(source)) or (bool(fallback) and not is_local(fallback))
  return isinstance(source, str) and not is_local(source)


def read_remote_sources(reader: filesystem.FileAccess, args: tuple,
                        http: Optional[http_fetch.HttpClient] = None,
                        stop: Optional[threading.Event] = None) -> tuple:
  """(sources, spec, *more) -> the same for an image worker process: local
  paths as they are (the worker reads them), remote files as their bytes or
  the RowError reading them (workers have no Beam filesystems), errors
  already met as they are. Runs on the pool's threads, so remote files are
  still read in parallel. stop: set, no fetch is waited for (_fetch_awaited)."""
  sources, spec, *more = args
  return ([_read_one(source, reader, spec, http, stop) for source in sources], spec, *more)


def _read_one(source, reader: filesystem.FileAccess, spec: ImageSpec,
              http: Optional[http_fetch.HttpClient], stop: Optional[threading.Event] = None):
  """read_remote_sources of one source; a remote one read shows progress
  (progress_ticks: the pool's time limit is then each source's)."""
  if isinstance(source, concurrent.futures.Future):
    read = _fetch_awaited(source, stop, progress_ticks.row_done)
  elif _is_remote_source(source):
    read = _bytes_or_error(source, reader, spec, http)
  else:
    return source
  progress_ticks.row_done()
  return read


FETCH_POLL_S = 0.02  # how often a wait on a fetch tells the call's timer it is not stuck


def _fetch_awaited(future: concurrent.futures.Future, stop: Optional[threading.Event] = None,
                   tick: Optional[Callable[[], None]] = None):
  """A fetch's result for a pool's call, its wait not timed by
  --image_timeout_s (the Preparer's limit): a fetch has limits of its own,
  each try's --http_timeout_s and --http_retries, and its failure a code of
  its own (read/timeout, read/http_error). Timed, a URL stalling under the
  defaults (4 tries of 30 s against 60 s) was decode/timeout ("reading,
  decoding, resizing and encoding took longer"), a 429 whose Retry-After was
  waited too, and its batch was redone row by row, each URL fetched again:
  6 GETs of a stalling URL, 5 of one answering 429, 2 of a good one.

  Once `stop` is set (the step's teardown: an interrupted or failed run), a
  RowError at once, the fetch left to end on its own thread: the teardown
  waits for the pool's threads, and a Ctrl-C during 40 stalling fetches
  ended the run after 205 s. tick: called while it waits (an image worker
  process's call: the Preparer's hook, no row counted)."""
  while not concurrent.futures.wait([future], timeout=FETCH_POLL_S).done:
    if stop is not None and stop.is_set():
      return RowError(STAGE_READ, 'http_error', 'not fetched: the run stopped first')
    if tick is not None:
      tick()
  return future.result()


# http(s) images are fetched on these threads, started as soon as their batch
# is formed (start_fetches), so they arrive while earlier batches decode (a
# fetch mostly waits on the network; --http_max_per_host caps each host).
FETCH_THREADS = 32
_FETCHES = concurrent.futures.ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix='fetch')


def start_fetches(sources: list, spec: ImageSpec,
                  http: Optional[http_fetch.HttpClient]) -> list:
  """The sources, each http(s) URL replaced by the Future of its fetch
  (bytes or the RowError rejecting its row), started now."""
  return [_FETCHES.submit(_fetch_or_error, source, spec, http) if http_fetch.is_http(source)
          else source for source in sources]


def start_fingerprinted_fetch(url: str, spec: ImageSpec, http: http_fetch.HttpClient,
                              fingerprinted: Callable[[str], None]) -> concurrent.futures.Future:
  """start_fetches' Future for one URL, whose fetch also calls
  fingerprinted(the metadata fingerprint its GET answered with: what a HEAD
  gives FingerprintFn; '' when it has none) before it completes."""
  return _FETCHES.submit(_fetch_or_error, url, spec, http, fingerprinted)


def _fetch_or_error(url: str, spec: ImageSpec, http: Optional[http_fetch.HttpClient],
                    fingerprinted: Optional[Callable[[str], None]] = None):
  """The bytes, or the RowError that rejects the row (one nobody foresaw
  too: it is that row's, never its batch's)."""
  try:
    if fingerprinted is None:
      return read_bytes(url, None, spec, http)
    data, metadata = http.fetch_with_metadata(url, spec)
    fingerprinted(fingerprints.remote_fingerprint(url, lambda _: metadata) if metadata else '')
    return data
  except RowError as error:
    return error
  except Exception as error:
    return unexpected_error(error, STAGE_READ)


def fetched_first(work, sources: list, spec: ImageSpec, read,
                  stop: Optional[threading.Event] = None):
  """work(sources, spec, read) on a pool thread, once the batch's fetches
  (start_fetches) are in: their errors are the results of their rows (as
  the RowError of one not waited for once `stop` is set: _fetch_awaited)."""
  return work([_fetch_awaited(source, stop) if isinstance(source, concurrent.futures.Future)
               else source for source in sources], spec, read)


def _bytes_or_error(path, reader: filesystem.FileAccess, spec: ImageSpec,
                    http: Optional[http_fetch.HttpClient]):
  try:
    return read_bytes(path, reader, spec, http)
  except RowError as error:
    return error


# http(s) images are fetched ahead of the image pool (which takes 2 batches
# per process): their fetches start as the rows arrive, up to FETCH_AHEAD_MAX
# rows ahead. Measured on 3,000 JPEGs of 80 KB from a server on 127.0.0.1
# (2 cores): 64 rows ahead 31 s, 128 23 s, 256 17 s, 512 15 s: a fetch waits
# on the network, not on a core.
FETCH_AHEAD_MAX = 512
# And no fetch starts while the rows not yet converted hold more than this
# many fetched bytes, counting each fetch still running as the average one
# so far (before any finished: FETCH_GUESS, so FETCH_THREADS run at first)
# (room_for_fetch). Bounded by rows alone, 150 JPEGs of 5 MB from a server
# on 127.0.0.1 were all held at once (the bundle's rows: 1.15 GB peak RSS,
# 1.88 GB with 300); up to 512 rows of --max_image_bytes' 256 MiB could be.
# Rows of 512 KB or less still go 512 ahead.
FETCH_AHEAD_BYTES = 256 << 20
FETCH_GUESS = FETCH_AHEAD_BYTES // FETCH_THREADS
# And at most this many of a step's fetches are started and not finished:
# the bytes of one still fetching are a guess from those before it, and
# more than the threads only queue. Unbounded, 400 PNGs of 4 KB then 60 of
# 1 MB from 127.0.0.1 (a 4 MB bound) had all 60 started at 4 KB each, and
# 66 MB held at once; a bundle of thumbnails then photos, 512 rows of them.
FETCH_IN_FLIGHT = 2 * FETCH_THREADS


class HeldBytes:
  """The bytes the fetches of rows not yet converted hold: a fetch counts
  from when it finishes (on its thread) until its row's result is taken
  (done); one still fetching counts as the average finished one."""

  def __init__(self):
    self.total = 0  # the bytes of finished fetches of rows not done
    self.fetching = 0  # fetches started, not finished, of rows not done
    self._sizes = {}  # key -> the bytes of its finished fetch (None until then)
    self._fetched = [0, 0]  # every finished fetch: how many, their bytes
    self._lock = threading.Lock()

  def started(self, key) -> None:
    with self._lock:
      self._sizes[key] = None
      self.fetching += 1

  def finished(self, key, size: int) -> None:
    with self._lock:
      if key in self._sizes and self._sizes[key] is None:
        self._sizes[key] = size
        self.total += size
        self.fetching -= 1
        self._fetched[0] += 1
        self._fetched[1] += size

  def done(self, key) -> None:
    """The row's result is taken: its bytes are let go. A key never
    started (a local file's row) takes no lock."""
    if key not in self._sizes:
      return
    with self._lock:
      size = self._sizes.pop(key, 0)
      if size is None:  # taken before its fetch's callback ran
        self.fetching -= 1
      else:
        self.total -= size

  def outstanding(self) -> int:
    """The bytes held, and those the fetches still running will hold."""
    count, size = self._fetched
    return self.total + self.fetching * (size // count if count else FETCH_GUESS)


def room_for_fetch(held: HeldBytes, count_fetches: bool = True) -> bool:
  """Whether another fetch may start now: FETCH_AHEAD_BYTES, and with
  count_fetches FETCH_IN_FLIGHT."""
  return (not count_fetches or held.fetching < FETCH_IN_FLIGHT) and (
      held.outstanding() <= FETCH_AHEAD_BYTES)
