"""Rows in batches (transforms/batches.py): a per-row DoFn over lists of rows."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import pytest

from tests.conftest import local_pipeline
from transforms.batches import Batch
from transforms.batches import BatchedFn
from transforms.batches import BatchFn
from transforms.batches import PartitionBatches
from transforms.batches import Unbatch
from transforms.batches import chunks
from transforms.batches import in_batches
from transforms.beam_util import in_global_window


class _Halves(beam.DoFn):
  """n -> n / 2 plus the side input, odd n under 'odd'; at the end of a
  bundle how many it saw (main output) and a tagged 'end'."""

  def start_bundle(self):
    self.seen = 0

  def process(self, number, offset):
    self.seen += 1
    if number % 2:
      yield beam.pvalue.TaggedOutput('odd', number)
    else:
      yield number // 2 + offset

  def finish_bundle(self):
    yield in_global_window(-self.seen)
    yield beam.pvalue.TaggedOutput('odd', in_global_window('end'))


def test_chunks_keep_order_and_size():
  assert list(chunks(list(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
  assert list(chunks([], 3)) == []


def test_in_batches_gives_every_element_s_values():
  assert in_batches(lambda n: [(n, 1)] * n)([1, 2]) == [(1, 1), (2, 1), (2, 1)]


def test_batched_fn_keeps_the_batch_and_sends_rejects_alone():
  with local_pipeline() as p:
    offset = p | 'Offset' >> beam.Create([100])
    outputs = (p | beam.Create([[0, 1, 2, 3], [5], [4, 6]])
               | beam.ParDo(BatchedFn(_Halves()), beam.pvalue.AsSingleton(offset))
               .with_outputs('odd', main='halves'))
    # one list per batch that made something (the all-odd [5] made none),
    # plus the bundle's end as a list of its own
    assert_that(outputs.halves, equal_to([[100, 101], [102, 103], [-7]]), label='Halves')
    assert_that(outputs.odd, equal_to([1, 3, 5, 'end']), label='Odd')


class _Repeat(beam.DoFn):
  """n -> 'x' * n, twice at the end of a bundle."""

  def process(self, number):
    yield 'x' * number

  def finish_bundle(self):
    yield in_global_window('yy')
    yield in_global_window('zzz')


def test_batched_fn_cuts_its_lists_at_max_bytes_in_order():
  fn = BatchedFn(_Repeat(), len, max_bytes=5)
  fn.start_bundle()
  made = list(fn.process([1, 2, 3, 1, 1, 9, 2]))
  # 1+2+3 reaches 5: a list; 1+1+9 too; the 2 left leaves at the batch's end
  assert made == [['x', 'xx', 'xxx'], ['x', 'x', 'x' * 9], ['xx']]
  assert [w.value for w in fn.finish_bundle()] == [['yy', 'zzz']]
  assert [len(batch) for batch in BatchedFn(_Repeat()).process([1] * 300)] == [300]  # no cap


def test_batched_fn_cuts_a_list_that_holds_exactly_max_bytes():
  """A list leaves once its outputs hold max_bytes, not only past them: a
  cap of BATCH_BYTES is the most a list leaving an image step holds."""
  fn = BatchedFn(_Repeat(), len, max_bytes=5)
  fn.start_bundle()
  assert list(fn.process([2, 3, 5, 1, 4])) == [['xx', 'xxx'], ['x' * 5], ['x', 'xxxx']]


def test_batch_fn_cuts_in_arrival_order():
  fn = BatchFn(2)
  fn.start_bundle()
  made = [batch for n in range(5) for batch in fn.process(n)]
  assert made == [[0, 1], [2, 3]]
  assert [w.value for w in fn.finish_bundle()] == [[4]]
  assert list(fn.finish_bundle()) == []  # nothing held twice


def test_batch_and_unbatch_round_trip():
  with local_pipeline() as p:
    numbers = p | beam.Create(list(range(10)))
    batches = numbers | Batch(3)
    assert_that(batches | beam.Map(len) | beam.CombineGlobally(sum), equal_to([10]),
                label='Count')
    assert_that(batches | 'Longest' >> beam.Map(len) | beam.CombineGlobally(max),
                equal_to([3]), label='Longest')
    assert_that(batches | Unbatch(), equal_to(list(range(10))), label='Same')


def test_partition_batches_by_index_in_order():
  with local_pipeline() as p:
    evens, odds, none = (p | beam.Create([[1, 2, 3, 4], [6, 8]])
                         | PartitionBatches(lambda n: n % 2, 3))
    assert_that(evens, equal_to([[2, 4], [6, 8]]), label='Evens')
    assert_that(odds, equal_to([[1, 3]]), label='Odds')
    assert_that(none, equal_to([]), label='None')


def test_a_batch_is_coded_as_one_pickle_and_sized_from_its_first_row():
  import pickle

  from transforms.batches import RowBatch
  from transforms.batches import RowBatchCoder
  from transforms.core import manifest
  rows = RowBatch(manifest.ManifestRow({'image': f'{i}.png'}, 'm.csv', i, image=f'{i}.png',
                                       key=f'{i}.png', label='cat') for i in range(5))
  coder = beam.coders.registry.get_coder(RowBatch)
  assert isinstance(coder, RowBatchCoder)
  decoded = coder.decode(coder.encode(rows))
  assert type(decoded) is RowBatch and decoded == rows
  assert decoded[3].image == '3.png' and decoded[3].line == 3
  # Beam sizes a sample of every output: from one row, not by pickling all
  assert coder.estimate_size(rows) == 5 * len(pickle.dumps(rows[0], pickle.HIGHEST_PROTOCOL))
  assert coder.estimate_size(RowBatch()) == 1


def test_a_batch_holding_a_view_is_coded_with_the_bytes_it_shows():
  import threading

  from transforms.batches import RowBatch
  from transforms.batches import RowBatchCoder
  coder = RowBatchCoder()
  framed = b'headerDATAfooter'
  batch = RowBatch([('k', memoryview(framed)[6:10])])  # a copied record's data
  assert coder.decode(coder.encode(batch)) == [('k', b'DATA')]
  assert coder.estimate_size(batch) > len(b'DATA')
  with pytest.raises(TypeError, match='lock'):  # anything else unpicklable still fails
    coder.encode(RowBatch([threading.Lock()]))


def test_the_batch_steps_outputs_are_typed_batches():
  from transforms.batches import RowBatch
  with local_pipeline() as p:
    batches = p | beam.Create(list(range(5))) | Batch(2)
    halves = batches | beam.ParDo(BatchedFn(_Halves()), 0).with_outputs('odd', main='m')
    parts = batches | PartitionBatches(lambda n: n % 2, 2)
    assert batches.element_type is RowBatch
    assert halves.m.element_type is RowBatch
    assert [part.element_type for part in parts] == [RowBatch, RowBatch]
    assert_that(halves.m | beam.Map(type), equal_to([RowBatch, RowBatch, RowBatch, RowBatch]))


def test_batch_and_spread_keeps_every_element_in_typed_batches():
  from transforms.batches import BatchAndSpread
  from transforms.batches import RowBatch
  with local_pipeline() as p:
    spread = p | beam.Create(list(range(7))) | BatchAndSpread(3)
    assert spread.element_type is RowBatch
    assert_that(spread | 'Sizes' >> beam.Map(len), equal_to([3, 3, 1]), label='Sizes')
    assert_that(spread | Unbatch(), equal_to(list(range(7))), label='All')


def test_a_buckets_list_crosses_its_shuffle_as_one_pickle():
  import pickle
  from unittest import mock

  from transforms.batches import RowBatchCoder
  from transforms.buckets import BufferByBucketFn
  from transforms.buckets import row_bytes
  from transforms.core.manifest import ManifestRow
  fn = BufferByBucketFn(lambda row: [(0, row)], row_bytes)
  # the coder Beam takes for the step's output, and so for its GroupByKey
  coder = beam.coders.registry.get_coder(fn.default_type_hints().output_types[0][0])
  assert isinstance(coder.coders()[1], RowBatchCoder)
  rows = [ManifestRow({'image': f'{i}.png'}, 'm.csv', i) for i in range(3)]
  fn.start_bundle()
  assert [list(fn.process(row)) for row in rows] == [[], [], []]
  (bucket, values), = [bucket_values.value for bucket_values in fn.finish_bundle()]
  with mock.patch('pickle.dumps', wraps=pickle.dumps) as dumps:
    encoded = coder.encode((bucket, values))
  assert dumps.call_count == 1  # the list at once, not a pickle a row
  assert coder.decode(encoded) == (0, rows)
