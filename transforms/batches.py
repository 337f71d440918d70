"""Rows in batches: the element of convert's per-row steps is a list of rows
(or of the records made from them), in write order within a bundle.

Every element crossing a Beam step costs the same whatever it holds: on a
single local worker several µs per step (windowed values, receivers,
counters, a sampled size estimate), on Flink and Spark also a trip through
the Fn API data plane and the engine's network stack at each stage boundary.
A 16x16 thumbnail, a reused record or a row on a portable runner paid that
per row, per step; a batch pays it once for up to BATCH_ROWS rows.

The per-row DoFns stay as they are, tested alone: `BatchedFn` runs one over
each row of a batch. What it cannot turn into its main output still leaves
row by row, under its tag (a rejection is one line of its own, whatever batch
its row came in); what it makes of a batch's rows leaves as one list.

Shuffles likewise (transforms/buckets.py): a bundle's rows cross a GroupByKey
as one list per bucket of keys.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
import pickle

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput
from apache_beam.utils.windowed_value import WindowedValue

from transforms.beam_util import in_global_window
from transforms.core.pickling import pickled

# Rows per batch. Rows are small (a few hundred bytes): on 20,000 16x16 PNGs
# (2 cores) batches of 256 through the steps alone took the launcher's CPU per
# row, marginal over 2,000, from 0.47 to 0.27 ms.
BATCH_ROWS = 256
# Records are as large as their images: a list leaving an image step is cut
# at this many bytes (lists of 256 raw 300x300 records, 69 MB, raised the
# launcher's peak from 163 to 231 MiB on 2,000 images; 4 MiB holds 15).
BATCH_BYTES = 4 << 20


class RowBatch(list):
  """A batch: rows, or what the steps make of them, in their order. Its
  PCollections are typed RowBatch, so that Beam codes them with
  RowBatchCoder."""

  __slots__ = ()


class RowBatchCoder(beam.coders.Coder):
  """A batch as one pickle (the rows' class written once, not per row: 26 KB
  against 47 KB for 256 manifest rows, 2.4 against 3.8 us a row to encode),
  and its size estimated from its first element. Beam estimates the size of
  a sample of every step's outputs by encoding them: at least the first ten
  of each PCollection, then about 10 ln(n/10) of n, which for batches of 256
  pickled 8 rows per row of a 20,000-row run (157,288 pickles)."""

  def encode(self, value: RowBatch) -> bytes:
    return pickled(list(value))

  def decode(self, encoded: bytes) -> RowBatch:
    return RowBatch(pickle.loads(encoded))

  def estimate_size(self, value: RowBatch) -> int:
    if not value:
      return 1
    return len(pickled(value[0])) * len(value)

  def is_deterministic(self) -> bool:
    return False

  def to_type_hint(self):
    return RowBatch

  def __eq__(self, other):
    return type(self) is type(other)

  def __hash__(self):
    return hash(type(self))


beam.coders.registry.register_coder(RowBatch, RowBatchCoder)


class BatchesOut:
  """A DoFn mixin: its main output is batches (typed RowBatch, so coded by
  RowBatchCoder), whatever its process() says."""

  def default_type_hints(self):
    return super().default_type_hints().with_output_types(RowBatch)


def chunks(items: list, size: int = BATCH_ROWS) -> Iterable[RowBatch]:
  """`items` cut into batches of at most `size`, in order."""
  for start in range(0, len(items), size):
    yield RowBatch(items[start:start + size])


def in_batches(per_element: Callable[[object], Iterable]) -> Callable[[list], list]:
  """A function of one element giving several values -> the same over a batch
  (TallyPerBundle's tallies of a batch are its rows' tallies)."""
  return lambda batch: [value for element in batch for value in per_element(element)]


class WrappingFn(beam.DoFn):
  """A DoFn that runs another's process(): its set-up, bundles and teardown too."""

  def __init__(self, fn: beam.DoFn):
    self._fn = fn

  def setup(self):
    self._fn.setup()

  def start_bundle(self):
    self._fn.start_bundle()

  def finish_bundle(self):
    return self._fn.finish_bundle()

  def teardown(self):
    self._fn.teardown()


class BatchedFn(BatchesOut, WrappingFn):
  """A per-element DoFn run over each element of a batch (a list): its main
  outputs for one batch leave as one list (none for none), its tagged outputs
  one by one as it gave them. Outputs made at the end of a bundle likewise.
  Side inputs reach the wrapped process() as they would alone. size_of: the
  bytes an output holds; a list leaves once its outputs hold max_bytes."""

  def __init__(self, fn: beam.DoFn, size_of: Callable[[object], int] | None = None,
               max_bytes: int = BATCH_BYTES):
    super().__init__(fn)
    self._size_of = size_of
    self._max_bytes = max_bytes

  def process(self, batch, *side_inputs):
    yield from self._lists(output for element in batch
                           for output in self._fn.process(element, *side_inputs) or ())

  def finish_bundle(self):
    for output in self._lists(self._fn.finish_bundle() or ()):
      yield output if isinstance(output, TaggedOutput) else in_global_window(output)

  def _lists(self, outputs: Iterable):
    """Tagged outputs as they come; the others in lists (cut at max_bytes)."""
    made, held, size_of = RowBatch(), 0, self._size_of
    for output in outputs:
      if isinstance(output, TaggedOutput):
        yield output
        continue
      made.append(output.value if isinstance(output, WindowedValue) else output)
      if size_of is not None:
        held += size_of(made[-1])
        if held >= self._max_bytes:
          yield made
          made, held = RowBatch(), 0
    if made:
      yield made


class BatchFn(BatchesOut, beam.DoFn):
  """Elements -> lists of at most BATCH_ROWS of them, in the order they came
  within a bundle (no shuffle, no reordering: what Beam's GroupIntoBatches
  would do)."""

  def __init__(self, size: int = BATCH_ROWS):
    self._size = size

  def start_bundle(self):
    self._batch = RowBatch()

  def process(self, element):
    self._batch.append(element)
    if len(self._batch) >= self._size:
      batch, self._batch = self._batch, RowBatch()
      yield batch

  def finish_bundle(self):
    if self._batch:
      batch, self._batch = self._batch, RowBatch()
      yield in_global_window(batch)


@beam.ptransform_fn
def Batch(elements, size: int = BATCH_ROWS):
  """PCollection of elements -> PCollection of lists of them (BatchFn)."""
  return elements | 'Batch' >> beam.ParDo(BatchFn(size))


@beam.ptransform_fn
def BatchAndSpread(elements, size: int = BATCH_ROWS):
  """Elements after a bucketed shuffle -> batches spread over the workers
  again (a Reshuffle by batch): a bucket is one element after its shuffle,
  and the image step fused after it would otherwise run on as many workers
  as there are buckets with rows, not on all of them."""
  return (elements | 'Batch' >> Batch(size)
          | 'Spread' >> beam.Reshuffle().with_output_types(RowBatch))


@beam.ptransform_fn
def Unbatch(batches):
  """PCollection of lists -> PCollection of their elements, in order: for a
  step that works row by row (a shuffle by row key, Beam's own sinks)."""
  return batches | 'Unbatch' >> beam.FlatMap(lambda batch: batch)


def _part(batch, index_of, index):
  part = RowBatch(element for element in batch if index_of(element) == index)
  return [part] if part else []


@beam.ptransform_fn
def PartitionBatches(batches, index_of: Callable[[object], int], count: int):
  """Batches -> `count` PCollections of batches: each element goes to number
  index_of(element), in the order it came (beam.Partition, batch by batch)."""
  return [batches | f'Part{index}' >> beam.FlatMap(_part, index_of, index)
          .with_output_types(RowBatch) for index in range(count)]


# --- Shuffles by bucket: one element per (bundle, bucket), not one per row ---
#
# Each element a GroupByKey or CoGroupByKey gets crosses the Fn API data plane
# and the engine's shuffle: on Flink and Spark ~2.2 ms of JVM CPU each. So
# rows reach every convert shuffle in lists: BufferByBucketFn collects a
# bundle's (bucket, value) pairs into a list per bucket, the shuffle groups
# the lists, and PerKeyFn runs the per-key step on each real key of a bucket,
# in key order, as it ran on that key's group before (ExactKeyFn where the
# bucket is the key: a shard). Never more elements than rows.
# Elements in, row by row against in lists: bench/RESULTS.md, "2026-12-03:
# elements into convert's shuffles" (bench/shuffle_elements.py).
