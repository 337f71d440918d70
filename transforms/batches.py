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

Shuffles likewise (below): a bundle's rows cross a GroupByKey as one list per
bucket of keys (BufferByBucketFn), and the per-key step runs on each real key
of a bucket as it ran on that key's group (PerKeyFn, ExactKeyFn).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
import itertools
import pickle
import zlib

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


class _WrappingFn(beam.DoFn):
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


class BatchedFn(BatchesOut, _WrappingFn):
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

# Buckets of row keys and content hashes. After the shuffle, a bucket is one
# unit of work for the per-key step, spread over the engine's slots by key
# hash: simulated, the busiest of 64 slots gets 1.63x the mean work with
# 1,024 buckets, 2.35x with 256 (per-row keys: ~1.0x); the rows it keeps go
# on in batches spread again (BatchAndSpread), so the image step after it
# runs on every slot. A bucket holds 1/1,024 of the rows (~20 MB for 10M
# rows of ~2 KB). A bundle sends at most 1,024
# lists each time it empties (at the end, or once it holds HELD_BYTES: ~32,000
# rows, ~32 a list).
KEY_BUCKETS = 1024
# Values in one bucket's list before it leaves: the engine serializes an
# element whole, so one hot key (a placeholder image repeated 100,000 times,
# a split's sidecar lines under one key) never makes a list of them all.
BUCKET_VALUES = 4096
# Bytes held over all buckets before every list leaves (size_of each value):
# records are as large as their images (MBs), rows ROW_BYTES.
HELD_BYTES = 64 * 1024 * 1024
# Bytes of one list before it leaves. Flink sorts a shuffle's records in
# pages and spills one larger than its buffers on its own path: with whole
# shards' records in a list (tens of MB), embedded Flink's JVM spent 4.7 ms of
# CPU a row on 8,000 JPEGs, against 2.4 ms on 2,000.
LIST_BYTES = 1024 * 1024
# A row as a Python object (a ManifestRow, a PreviousRecord, a Copy): ~1.2 KB
# measured (deep sys.getsizeof of a row with its fields, key, path,
# fingerprint and SHA-256), rounded up; a detection object: a box ~0.4 KB, a
# 20-point polygon ~1.9 KB.
ROW_BYTES = 2048
OBJECT_BYTES = 2048


def row_bytes(row) -> int:
  """What a row (or a record's metadata) holds, estimated: ROW_BYTES, plus
  OBJECT_BYTES an object of a detection row's annotation."""
  annotation = getattr(row, 'annotation', None)
  return ROW_BYTES + (OBJECT_BYTES * len(annotation.objects) if annotation else 0)


def bucket_of(key: str, buckets: int) -> int:
  """A stable bucket of `key`: the same in every worker and every run
  (Python's hash() of a str is salted per process)."""
  return zlib.crc32(key.encode('utf-8', 'surrogatepass')) % buckets


class BufferByBucketFn(beam.DoFn):
  """element -> (bucket, [value, ...]): the (bucket, value) pairs
  `pairs_of(element, *side_inputs)` gives, collected per bucket within a
  bundle. A bucket's list leaves once it holds max_values or list_bytes;
  every list leaves once all of them hold over max_bytes (size_of each
  value), and at the end of the bundle. Values keep their arrival order
  within a list."""

  def default_type_hints(self):
    # Each list crosses the shuffle as one pickle (RowBatchCoder): typed as a
    # plain list, Beam's FastPrimitivesCoder pickled every value in it alone.
    return super().default_type_hints().with_output_types(
        beam.typehints.Tuple[beam.typehints.Any, RowBatch])

  def __init__(self, pairs_of: Callable[..., Iterable[tuple]],
               size_of: Callable[[object], int] = row_bytes,
               max_values: int = BUCKET_VALUES, max_bytes: int = HELD_BYTES,
               list_bytes: int = LIST_BYTES):
    self._pairs_of = pairs_of
    self._size_of = size_of
    self._max_values = max_values
    self._max_bytes = max_bytes
    self._list_bytes = list_bytes

  def start_bundle(self):
    self._held = {}  # bucket -> [values, their bytes]
    self._bytes = 0

  def process(self, element, *side_inputs):
    for bucket, value in self._pairs_of(element, *side_inputs):
      held = self._held.get(bucket)
      if held is None:
        held = self._held[bucket] = [RowBatch(), 0]
      size = self._size_of(value)
      held[0].append(value)
      held[1] += size
      self._bytes += size
      if len(held[0]) >= self._max_values or held[1] >= self._list_bytes:
        del self._held[bucket]
        self._bytes -= held[1]
        yield bucket, held[0]
      if self._bytes > self._max_bytes:
        yield from self._all()

  def finish_bundle(self):
    for bucket_values in self._all():
      yield in_global_window(bucket_values)

  def _all(self) -> list:
    held, self._held, self._bytes = self._held, {}, 0
    return [(bucket, values) for bucket, (values, _) in held.items()]


def _in_buckets(pairs_of: Callable[..., Iterable[tuple]], buckets: int) -> Callable[..., list]:
  def in_buckets(element, *side_inputs) -> list:
    return [(bucket_of(key, buckets), (key, value))
            for key, value in pairs_of(element, *side_inputs)]
  return in_buckets


def _value_bytes(size_of: Callable[[object], int]) -> Callable[[tuple], int]:
  return lambda key_value: size_of(key_value[1])


def buffer_by_key(pairs_of: Callable[..., Iterable[tuple]], buckets: int = KEY_BUCKETS,
                  size_of: Callable[[object], int] = row_bytes) -> BufferByBucketFn:
  """element -> (bucket, [(key, value), ...]) for PerKeyFn: the (key, value)
  pairs `pairs_of(element, *side_inputs)` gives, each in the bucket of its key
  (bucket_of), buffered by BufferByBucketFn (size_of: a value's bytes)."""
  return BufferByBucketFn(_in_buckets(pairs_of, buckets), _value_bytes(size_of))


def _by_key(lists: Iterable[list]) -> dict:
  """Lists of (key, value) -> {key: [its values]}, in arrival order."""
  by_key = {}
  for pairs in lists:
    for key, value in pairs:
      values = by_key.get(key)
      if values is None:
        values = by_key[key] = []
      values.append(value)
  return by_key


def _by_key_and_tag(tagged: dict) -> dict:
  """{tag: lists of (key, value)} -> {key: {tag: [its values]}}, every tag
  present for every key (as CoGroupByKey gives them)."""
  by_key = {}
  for tag, lists in tagged.items():
    for key, values in _by_key(lists).items():
      sides = by_key.get(key)
      if sides is None:
        sides = by_key[key] = {name: [] for name in tagged}
      sides[tag] = values
  return by_key


class PerKeyFn(_WrappingFn):
  """(bucket, lists of (key, value)) -> fn.process((key, [values]), *side_inputs)
  for each key of the bucket, in key order; after a CoGroupByKey, (bucket,
  {tag: lists of (key, value)}) -> fn.process((key, {tag: [values]})), every
  tag present. What a GroupByKey by the real key gave fn, one key at a time:
  a bucket holds only its keys' rows."""

  def process(self, grouped, *side_inputs):
    lists = grouped[1]
    by_key = _by_key_and_tag(lists) if isinstance(lists, dict) else _by_key(lists)
    process = self._fn.process
    for key in sorted(by_key):
      yield from process((key, by_key.pop(key)), *side_inputs) or ()


class ExactKeyFn(_WrappingFn):
  """(key, lists of values) -> fn.process((key, its values), *side_inputs):
  for a bucket that is the key itself (a shard), the lists read one after
  another, as a GroupByKey by key gave fn its values."""

  def process(self, grouped, *side_inputs):
    key, lists = grouped
    yield from self._fn.process((key, itertools.chain.from_iterable(lists)),
                                *side_inputs) or ()
