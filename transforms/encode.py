"""EncodeRows: labelled manifest rows -> serialized tf.train.Examples."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
from typing import Optional

import apache_beam as beam

from transforms.batches import BatchedFn
from transforms.batches import BatchesOut
from transforms.batches import RowBatch
from transforms.beam_util import EXAMPLES
from transforms.beam_util import LABELLED
from transforms.beam_util import LOADED
from transforms.beam_util import REJECTED
from transforms.beam_util import counter
from transforms.beam_util import in_global_window
from transforms.core.copies import COPY_ERRORS
from transforms.core.copies import NO_CHECK
from transforms.core.copies import Copied
from transforms.core.copies import ShardReader
from transforms.core.copies import copy_check
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedCopy
from transforms.core.example import LoadedExample
from transforms.core.example import LoadedImage
from transforms.core.example import built_example
from transforms.core.example import held_bytes
from transforms.core.pickling import replaced
from transforms.core.rejects import STAGE_DECODE
from transforms.core.rejects import RowError
from transforms.core.rejects import unexpected_rejection
from transforms.core.reuse import FALLBACK
from transforms.core.shuffle import DEFAULT_ORDERING
from transforms.core.shuffle import Ordering
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.label_maps import label_map_side_input
from transforms.pooled_source import PooledSourceFn
from transforms.read_sources import FETCH_AHEAD_MAX
from transforms.read_sources import HeldBytes
from transforms.read_sources import room_for_fetch
from transforms.read_sources import start_fetches
from transforms.read_sources import start_fingerprinted_fetch
from transforms.workers import http_fetch
from transforms.workers.child_process import WorkerTimedOut
from transforms.workers.pooled_step import PoolSize
from transforms.workers.progress_file import ProgressFile
from transforms.workers.source_image import convert_in_worker
from transforms.workers.source_image import convert_sources
from transforms.workers.source_image import examples_in_worker
from transforms.workers.source_image import loaded_image
from transforms.workers.source_image import result_bytes

COUNT_EVERY = 256  # loaded images a counter update (LoadImageFn._count_loaded)


class AssignLabelFn(BatchesOut, beam.DoFn):
  """A batch of ManifestRows -> one batch of their LabelledRows, using the
  LabelMap side input; a row whose label it has not leaves alone under
  REJECTED."""

  def process(self, rows, label_map):
    labelled = RowBatch()
    for row in rows:
      try:
        label_id, label_text = label_map.resolve(row.label)  # --multi_label: tuples
      except RowError as error:
        yield beam.pvalue.TaggedOutput(
            REJECTED, row.reject(error.stage, error.code, error.reason))
        continue
      labelled.append(LabelledRow(row, label_id, label_text))
    if labelled:
      yield labelled


class LoadImageFn(PooledSourceFn):
  """LabelledRow -> LoadedImage (read, decode, orient, resize, encode).

  With threads > 1, images are converted on a PooledStep (Pillow releases
  the GIL while decoding and resizing), so a single in-process worker uses
  every core without Beam's multi-worker data plane; with processes > 0, in
  that many child processes instead (no GIL shared at all). In processes, a
  batch with a row still running timeout_s after the row before it ended
  (progress_ticks) has its child killed and replaced and is rerun row by
  row: the row that overruns alone is rejected (decode/timeout),
  the others are converted. Threads cannot be stopped: no limit there.
  convert_on_thread/convert_in_process: what converts a batch of rows on a
  thread (any Beam filesystem) or in a worker process (tests swap them).
  """

  MAX_BATCH = 64  # rows of cheap images a call (PooledStep)
  WEIGH = staticmethod(result_bytes)  # large images: fewer rows a call (PooledStep)
  # Copied records may wait behind a row the pool still converts (they go
  # out in arrival order), at most this many or bytes of them: then the pool's
  # oldest calls are waited for. Unbounded, a nightly run with 1% of its rows
  # changed held nearly every copy until the bundle's end (12,000 224x224
  # JPEG records: 563 MB peak RSS against 345 MB at 6,000).
  MAX_COPIES_WAITING = 1024
  MAX_COPY_BYTES_WAITING = 32 << 20
  # Each time this many more copies wait, the rows they wait behind go to the
  # pool as they are (a changed row's batch fills only every few hundred
  # rows), and the calls finished are taken: the images convert while the
  # copies go on, and copies leave as soon as the rows before them are done.
  # Without it, the step sat idle at each bound, waiting for rows sent only
  # then (12,000 224x224 JPEGs, 1% changed, `metadata`: 2.51-2.79 against
  # 2.34-2.37 s, four interleaved runs each).
  SEND_AFTER_COPIES = 64

  def __init__(self, spec: ImageSpec, progress_dir=None, threads: int = 1,
               processes: int = 0, convert_on_thread=convert_sources,
               convert_in_process=convert_in_worker, timeout_s: float = 0.0,
               harnesses: Optional[int] = None, http: Optional[http_fetch.HttpConfig] = None,
               example_spec: Optional[ExampleSpec] = None, fingerprint_fetches: bool = False):
    """example_spec: in image worker processes, each image's Example is built
    there (examples_in_worker: a LoadedExample comes out, not a LoadedImage);
    its key feature is compared with the row's key in each record copied from
    a previous dataset. fingerprint_fetches: an http(s) row without a
    fingerprint gets its GET's (FingerprintFn left it to this step: no HEAD
    when no previous dataset needs it first)."""
    super().__init__(spec, PoolSize(threads, processes, timeout_s or None, harnesses),
                     convert_on_thread, convert_in_process, http)
    self._progress_dir = progress_dir
    self._example_spec = example_spec
    self._copy_check = copy_check(example_spec.table()) if example_spec else NO_CHECK
    self._fingerprint_fetches = fingerprint_fetches
    self._images = counter('images_loaded')
    self._bytes = counter('source_bytes')

  def setup(self):
    self._progress = ProgressFile(self._progress_dir)
    super().setup()

  def start_bundle(self):
    # [element, result, fell back] in arrival order; fell back: a reused
    # row whose copy failed, converted instead
    self._arrived = collections.deque()
    self._waiting = collections.deque()  # those whose result the pool gives
    self._ahead = collections.deque()  # those fetching, not yet given to the pool
    self._fetching = {}  # id(row) -> the Future of its http(s) fetch
    self._fingerprints = {}  # id(row) -> the fingerprint its GET answered with
    self._held = HeldBytes()  # by id(row), until its result is taken
    # the previous shards reused records are copied from
    self._shards = ShardReader(self._copy_check)
    self._counted = [0, 0]  # images and source bytes not yet added to the counters
    self._copies_waiting = [0, 0]  # copied rows in _arrived, and their bytes

  def process(self, element):
    self._progress.tick()
    copied = self._copy_here(element.row)
    entry = [element, copied, element.row.previous is not None and copied is None]
    self._arrived.append(entry)
    if copied is not None:
      waiting = self._copies_waiting
      waiting[0] += 1
      waiting[1] += len(copied.framed)  # its data a view into them
      if waiting[0] > self.MAX_COPIES_WAITING or waiting[1] > self.MAX_COPY_BYTES_WAITING:
        self._catch_up()
      elif waiting[0] % self.SEND_AFTER_COPIES == 0:
        self._took(self._step.send())
    if entry[1] is None:
      source = super().source_of(element.row)
      if http_fetch.is_http(source):  # fetched now, ahead of the pool
        self._make_room()
        fetch = start_fingerprinted_fetch(
            source, self._spec, self._http,
            functools.partial(self._fingerprints.__setitem__, id(element.row))
        ) if self._fingerprint_fetches and not element.row.fingerprint else start_fetches(
            [source], self._spec, self._http)[0]
        self._fetching[id(element.row)] = fetch
        self._held.started(id(element.row))
        fetch.add_done_callback(functools.partial(self._fetched, id(element.row)))
      if self._fetching or self._ahead:  # rows reach the pool in their order
        self._ahead.append(entry)
        while len(self._ahead) > FETCH_AHEAD_MAX:
          self._give(self._ahead.popleft())
      else:
        self._give(entry)
    yield from self._ready()

  def teardown(self):
    # Fetches of rows never given to the pool (an interrupted or failed
    # run): those not started yet never start, each running one ends on its
    # own thread, waited for by nobody (PooledSourceFn.teardown).
    # A copy: on a gRPC worker, teardown may come while process() still
    # runs on another thread, and a dict changed while iterated raises.
    for fetch in list(getattr(self, '_fetching', {}).values()):
      fetch.cancel()
    super().teardown()

  def _fetched(self, key: int, fetch) -> None:
    """On a fetch thread: the bytes a finished fetch holds, while its row is ahead."""
    result = None if fetch.cancelled() else fetch.result()  # bytes or a RowError
    self._held.finished(key, len(result) if isinstance(result, bytes) else 0)

  def _give_ahead(self) -> None:
    """Every row still fetching ahead to the pool, in order (each waits for its fetch)."""
    while self._ahead:
      self._give(self._ahead.popleft())

  def _make_room(self) -> None:
    """Waits, before another fetch starts, until the rows not yet converted
    hold FETCH_AHEAD_BYTES or less: the rows ahead go to the pool (in full
    batches: giving one row and waiting for it left a process idle), then
    its oldest calls are waited for. Only FETCH_IN_FLIGHT fetches running
    already: one of them is waited for, and the rows ahead stay there."""
    while not room_for_fetch(self._held):
      if room_for_fetch(self._held, count_fetches=False) and self._a_fetch_ends():
        continue  # only the fetches in flight were too many (the rows ahead stay)
      if self._ahead:
        self._give(self._ahead.popleft())
        continue
      done = self._step.oldest() if self._waiting else []
      if not done:
        break
      self._took(done)

  def _a_fetch_ends(self) -> bool:
    """Waits until a fetch of a row ahead ends; False: none is running."""
    running = [fetch for fetch in self._fetching.values() if not fetch.done()]
    if running:
      concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
    return bool(running)

  def _give(self, entry) -> None:
    self._waiting.append(entry)
    self._took(self._step.add(entry[0]))

  def finish_bundle(self):
    self._progress.flush()
    self._give_ahead()
    self._took(self._step.flush())
    self._shards.close()
    for output in self._ready():
      yield in_global_window(output)
    self._count_loaded()

  def _catch_up(self) -> None:
    """Waits for the pool until the row at the head of the arrival order is
    done (its copies behind it can then go out)."""
    self._give_ahead()
    while self._arrived and self._arrived[0][1] is None:
      done = self._step.oldest()
      if not done:
        break
      self._took(done)

  def _count_loaded(self) -> None:
    # Added to Beam's counters a few hundred at a time: an inc() costs 0.6 us.
    images, source_bytes = self._counted
    self._counted = [0, 0]
    if images:
      self._images.inc(images)
      self._bytes.inc(source_bytes)

  def _took(self, done: list) -> None:
    for _, result in done:  # the pool's results come in the order it was given rows
      entry = self._waiting.popleft()
      entry[1] = result
      self._held.done(id(entry[0].row))

  def _ready(self):
    """The outcomes of the rows at the head of the arrival order that are done."""
    while self._arrived and self._arrived[0][1] is not None:
      element, result, fell_back = self._arrived.popleft()
      if isinstance(result, Copied):
        waiting = self._copies_waiting
        waiting[0] -= 1
        waiting[1] -= len(result.framed)
      output = self.outcome(element, result)
      yield dataclasses.replace(output, reuse=FALLBACK) if fell_back and isinstance(
          output, (LoadedImage, LoadedExample)) else output

  def _copy_here(self, row) -> Optional[Copied]:
    """A reused row's record copied on this thread (a read, two CRCs, its
    sidecar CRC and key compared): cheaper than a trip to an image process.
    None: no reused row, or its copy failed: the pool converts its image."""
    if row.previous is None:
      return None
    try:
      return self._shards.copy(row.previous, row.key)
    except COPY_ERRORS:
      return None

  def row_of(self, element):
    return element.row

  def _call(self, batch: list) -> tuple:
    call = super()._call(batch)
    if call[0] is not self._in_process or self._example_spec is None:
      return call
    return (examples_in_worker, *call[1:], call[0], batch, self._example_spec)

  def source_of(self, row):
    """Its fetch, for a row whose http(s) image is already being fetched."""
    return self._fetching.pop(id(row), None) or super().source_of(row)

  def outcome(self, element, result):
    """The LoadedImage (a LoadedCopy for a copied record), or the row's
    Rejection under REJECTED."""
    row = element.row
    fingerprint = self._fingerprints.pop(id(row), '')
    if isinstance(result, Copied):
      return LoadedCopy(element, result.data, row.previous.source_sha256, result.framed)
    if isinstance(result, WorkerTimedOut):  # alone in its call: this image is the slow one
      return beam.pvalue.TaggedOutput(REJECTED, row.reject(
          STAGE_DECODE, 'timeout', f'reading, decoding, resizing and encoding took longer '
          f'than --image_timeout_s {self._timeout_s:g}: stopped'))
    if isinstance(result, RowError):
      return beam.pvalue.TaggedOutput(
          REJECTED, row.reject(result.stage, result.code, result.reason))
    if isinstance(result, Exception):
      # Something nobody foresaw (a Pillow plugin bug, a crashed worker, ...):
      # this row is rejected with the exception; the element in hand is not blamed.
      return beam.pvalue.TaggedOutput(REJECTED, unexpected_rejection(row, result))
    if fingerprint:
      element = replaced(element, row=replaced(row, fingerprint=fingerprint))
    loaded = loaded_image(element, result)
    counted = self._counted
    counted[0] += 1
    counted[1] += loaded.source_bytes
    if counted[0] >= COUNT_EVERY:
      self._count_loaded()
    return loaded



class EncodeRows(beam.PTransform):
  """Batches of rows -> {'examples': batches of BuiltExamples, 'rejected':
  Rejection} (transforms/batches.py: each step runs its per-row DoFn over a
  batch; a rejected row leaves alone, the others in the batches).

  Rows keep their order (the local write order) through every step.

  The label map arrives as a singleton side input, so label ids are fixed
  before any image is decoded.
  """

  def __init__(self, image_spec: ImageSpec, example_spec: ExampleSpec, label_map,
               progress_dir=None, image_threads: int = 1, image_processes: int = 0,
               convert_on_thread=convert_sources, convert_in_process=convert_in_worker,
               image_timeout_s: float = 0.0, ordering: Ordering = DEFAULT_ORDERING,
               harnesses: Optional[int] = None, options_digest: str = '',
               http: Optional[http_fetch.HttpConfig] = None, fingerprint_fetches: bool = False):
    """harnesses: not None, the image pool is sized in each worker
    (pooled_step.in_worker; image_threads and image_processes are then the
    distributed default until it is). options_digest: the run's
    (core/fingerprints.options_digest), recorded with each example.
    fingerprint_fetches: see LoadImageFn."""
    super().__init__()
    self._load_image = LoadImageFn(image_spec, progress_dir, image_threads, image_processes,
                                   convert_on_thread, convert_in_process, image_timeout_s,
                                   harnesses, http, example_spec, fingerprint_fetches)
    self._example_spec = example_spec
    self._ordering = ordering
    self._label_map = label_map
    self._options_digest = options_digest

  def expand(self, rows):
    labelled = rows | 'AssignLabel' >> beam.ParDo(
        AssignLabelFn(), label_map_side_input(self._label_map)).with_outputs(
            REJECTED, main=LABELLED)
    loaded = labelled[LABELLED] | 'LoadImage' >> beam.ParDo(
        BatchedFn(self._load_image, held_bytes)).with_outputs(REJECTED, main=LOADED)
    spec, ordering, digest = self._example_spec, self._ordering, self._options_digest
    examples = loaded[LOADED] | 'BuildExample' >> beam.Map(
        lambda images: RowBatch(built_example(image, spec, ordering, digest)
                                for image in images)).with_output_types(RowBatch)
    rejected = (labelled[REJECTED], loaded[REJECTED]) | 'FlattenRejected' >> beam.Flatten()
    return {EXAMPLES: examples, REJECTED: rejected}
