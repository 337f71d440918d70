"""PooledSourceFn: the base of the DoFns whose rows' source files are read
and worked on in a pool (LoadImageFn, HashSourceFn), with the image
processes a harness process shares."""

from __future__ import annotations

import functools
import threading
from typing import Optional

import apache_beam as beam
from apache_beam.utils import shared

from transforms import filesystem
from transforms.beam_util import in_global_window
from transforms.core.image import prepare_pillow
from transforms.core.spec import ImageSpec
from transforms.read_sources import fetched_first
from transforms.read_sources import read_bytes
from transforms.read_sources import read_remote_sources
from transforms.read_sources import start_fetches
from transforms.workers import http_fetch
from transforms.workers.pooled_step import PooledStep
from transforms.workers.pooled_step import PoolSize
from transforms.workers.pooled_step import available_cores
from transforms.workers.pooled_step import in_worker
from transforms.workers.shared_pool import SharedProcesses

# Rows per call to an image worker process: one pipe round trip per batch.
PROCESS_BATCH = 8


# Image processes sized in the worker are one pool per harness process,
# whichever instances of the pooled steps run there (SharedProcesses).
_SHARED_PROCESSES = shared.Shared()


def _shared_processes(size: PoolSize) -> SharedProcesses:
  """The harness process's image processes (each step's calls bring their
  own reader of remote files)."""
  return SharedProcesses(size.processes, size.timeout_s)


class PooledSourceFn(beam.DoFn):
  """Elements whose source files are read (and worked on) on a PooledStep: in
  image worker processes, where a call running over size.timeout_s is
  stopped (WorkerTimedOut, its row alone), or on threads. Each element's row
  (row_of) gives its file: row.path, or row.read_error when reading it
  already failed (that error is its result, nothing is read).

  on_thread(sources, spec, read) / in_process(sources, spec) do the work of a
  batch (one result or exception per source); outcome(element, result) is
  what the DoFn emits for one. Only the global window is used (outputs of
  finish_bundle are placed in it). BATCH: rows per pool call.
  """

  BATCH = PROCESS_BATCH
  MAX_BATCH = 0  # no growing (PooledStep's max_batch)
  # PooledStep's weigh: a result's bytes, batches then held within CALL_BYTES
  # (None: results too small to count).
  WEIGH = None

  def __init__(self, spec: ImageSpec, size: PoolSize, on_thread, in_process,
               http: Optional[http_fetch.HttpConfig] = None):
    self._spec = spec
    self._http_config = http or http_fetch.HttpConfig()
    self._size = size
    self._timeout_s = size.timeout_s or 0.0
    self._processes = size.processes
    self._on_thread = on_thread
    self._in_process = in_process
    self._step = self._pooled_step(size)

  def _pooled_step(self, size: PoolSize) -> PooledStep:
    spec = self._spec
    # An image's pixels at the output size, what its result may weigh before
    # any came back; unknown with --resize_mode none (each image's own size).
    row_bytes = spec.height * spec.width * spec.channels if spec.fixed_size else None
    return PooledStep(size, self.BATCH, self.MAX_BATCH, self.WEIGH, row_bytes)

  def setup(self):
    self._reader = filesystem.FileAccess()
    self._http = http_fetch.client(self._http_config)  # the process's keep-alive connections
    # Sized here when the launcher left it to the worker: from the cores
    # this harness finds and the harnesses sharing them (pooled_step.in_worker).
    size = in_worker(self._size, self._spec.encoding, available_cores())
    if not size.processes:
      # Images open on this process's threads. With image processes, each
      # prepares its own Pillow, and a signature check here (a URL's bytes)
      # registers the plugins itself (check_signature): loading all of them
      # cost 20-30 ms of every run's start.
      prepare_pillow(self._spec.max_pixels)
    self._processes = size.processes
    self._step = self._pooled_step(size)
    shared = _SHARED_PROCESSES.acquire(
        functools.partial(_shared_processes, size), tag=(size.processes, size.timeout_s)
    ) if size.shared else None
    # Set by teardown: the pool's threads then wait for no fetch (read_sources._fetch_awaited).
    self._stopping = threading.Event()
    self._step.start(self._call, prepare=functools.partial(read_remote_sources, self._reader,
                                                               http=self._http,
                                                               stop=self._stopping),
                     shared=shared)

  def teardown(self):
    stopping = getattr(self, '_stopping', None)  # none when setup never ran
    if stopping is not None:
      stopping.set()
    self._step.close()

  def process(self, element):
    for done, result in self._step.add(element):
      yield self.outcome(done, result)

  def finish_bundle(self):
    for element, result in self._step.flush():
      yield in_global_window(self.outcome(element, result))

  def row_of(self, element):
    return element

  def source_of(self, row):
    """What a pool call works on for `row`: its path, or the error met."""
    return row.read_error or row.ref or row.path

  def outcome(self, element, result):
    raise NotImplementedError

  def _call(self, batch: list) -> tuple:
    """(function, *args) working on these elements' files on the pool."""
    sources = start_fetches([self.source_of(self.row_of(element)) for element in batch],
                            self._spec, self._http)
    if self._processes:
      return self._in_process, sources, self._spec
    return fetched_first, self._on_thread, sources, self._spec, self._read, self._stopping

  def _read(self, path: str, spec: ImageSpec) -> bytes:
    return read_bytes(path, self._reader, spec, self._http)
