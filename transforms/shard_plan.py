"""The combiners that plan a split's shards on a distributed runner (the
ordered writer, transforms/write_shards.py): every order sorted, to rank
records by (--num_shards N), or where each size-capped shard starts."""

from __future__ import annotations

import array

import apache_beam as beam

from transforms.buckets import ROW_BYTES
from transforms.core import shuffle


class SortedOrdersFn(beam.CombineFn):
  """Orders -> all of them sorted, packed (8 bytes each), to rank examples by."""

  def create_accumulator(self):
    return array.array('Q')  # 8 bytes an order (a list of ints: ~36)

  def add_input(self, orders, order):
    orders.append(order)
    return orders

  def merge_accumulators(self, accumulators):
    merged = array.array('Q')
    for orders in accumulators:
      merged.extend(orders)
    return merged

  def extract_output(self, orders):
    return array.array('Q', sorted(orders))


class ShardStartsFn(beam.CombineFn):
  """(order, framed bytes) of every example -> the order each size-capped shard
  starts at (shuffle.size_capped_starts): N small numbers, the side input
  that places every example. Accumulated as packed arrays, 16 bytes a record."""

  def __init__(self, max_bytes: int):
    self._max_bytes = max_bytes

  def create_accumulator(self):
    return array.array('Q'), array.array('Q')

  def add_input(self, accumulator, order_and_size):
    accumulator[0].append(order_and_size[0])
    accumulator[1].append(order_and_size[1])
    return accumulator

  def merge_accumulators(self, accumulators):
    orders, sizes = self.create_accumulator()
    for more_orders, more_sizes in accumulators:
      orders.extend(more_orders)
      sizes.extend(more_sizes)
    return orders, sizes

  def extract_output(self, accumulator):
    return shuffle.size_capped_starts(zip(*accumulator), self._max_bytes)


def record_bytes(order_example: tuple) -> int:
  """What an (order, BuiltExample) holds while it waits for its shard's list
  (a spilled record: its place only)."""
  return len(order_example[1].data) + ROW_BYTES


def assign_capped_shards(batch, starts) -> list:
  """A batch of BuiltExamples -> (shard, (order, example)) of each, shards
  starting at the orders `starts` (ShardStartsFn)."""
  return [(shuffle.shard_of_order(example.order, starts), (example.order, example))
          for example in batch]


def assign_shards(batch, sorted_orders, num_shards: int) -> list:
  """A batch of BuiltExamples -> (shard, (order, example)) of each, by rank in
  the split's sorted orders (SortedOrdersFn), round robin over num_shards."""
  return [(shuffle.shard_of(shuffle.rank_of(example.order, sorted_orders), num_shards),
           (example.order, example)) for example in batch]
