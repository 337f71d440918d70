"""Shuffles by bucket: a bundle's rows cross a GroupByKey as one list per
bucket of keys (BufferByBucketFn, buffer_by_key), and the per-key step runs on
each real key of a bucket as it ran on that key's group (PerKeyFn,
ExactKeyFn). A shuffle's element costs what a step's does (transforms/batches.py):
a list per bucket pays it once for the rows of that bucket in a bundle.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
import itertools
import zlib

import apache_beam as beam

from transforms.batches import RowBatch
from transforms.batches import WrappingFn
from transforms.beam_util import in_global_window

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


class PerKeyFn(WrappingFn):
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


class ExactKeyFn(WrappingFn):
  """(key, lists of values) -> fn.process((key, its values), *side_inputs):
  for a bucket that is the key itself (a shard), the lists read one after
  another, as a GroupByKey by key gave fn its values."""

  def process(self, grouped, *side_inputs):
    key, lists = grouped
    yield from self._fn.process((key, itertools.chain.from_iterable(lists)),
                                *side_inputs) or ()
