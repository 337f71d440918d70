"""The order records are written in, and the shard each one goes to: plain functions.

By default records are ordered by a salted SHA-256 of their key (as TensorFlow
Datasets writes its datasets): a folder-per-class manifest, sorted by class,
then does not give shards of long single-class runs. The order depends only on
the key and --seed, so it is the same on every run and every runner.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib

SHUFFLE_MODES = ('on', 'off')


@dataclasses.dataclass(frozen=True)
class Ordering:
  """shuffle: order by the salted hash of the key; else in manifest order."""
  shuffle: bool = True
  seed: int = 0

  def key(self, row_key: str, place: int) -> int:
    """The record's place: an unsigned 64-bit integer, smaller comes first.
    place: the row's place in manifest order (ManifestRow.place)."""
    if not self.shuffle:
      return place
    # Salted apart from the --split hash, so a split's order is independent of
    # which rows the split received.
    digest = hashlib.sha256(f'{self.seed}\x00order\x00{row_key}'.encode()).digest()
    return int.from_bytes(digest[:8], 'big')


def sort_rows(rows, ordering: Ordering) -> list:
  """ManifestRows in write order (ties, if ever, broken by key)."""
  return sorted(rows, key=lambda row: (ordering.key(row.key, row.place), row.key))


def shard_of(rank: int, num_shards: int) -> int:
  """Round robin over the write order: shard sizes differ by at most one and
  every shard is a pseudo-random sample of its split."""
  return rank % num_shards


def rank_of(order: int, sorted_orders) -> int:
  """Position of `order` among all of a split's orders (sorted)."""
  return bisect.bisect_left(sorted_orders, order)


def framed_size(data_length: int) -> int:
  """Bytes a record takes in an uncompressed TFRecord file (length, its CRC,
  data, data CRC): what --shard_size_mb counts, before any gzip."""
  return data_length + 16


class SizeCappedShards:
  """Records in write order -> shard indices, rolling over to the next shard
  once the current one holds >= max_bytes (Beam's file-sink rule): shards are
  consecutive runs of the write order, each about max_bytes. The same sizes in
  the same order give the same shards, on a single local writer and when a
  distributed runner computes the split points from all sizes at once."""

  def __init__(self, max_bytes: int):
    self._max_bytes = max_bytes
    self.shard = -1
    self._filled = max_bytes  # the first record opens shard 0

  def add(self, framed_bytes: int) -> int:
    """The shard of the next record of `framed_bytes`."""
    if self._filled >= self._max_bytes:
      self.shard, self._filled = self.shard + 1, 0
    self._filled += framed_bytes
    return self.shard


def size_capped_starts(orders_and_sizes, max_bytes: int) -> list:
  """[(order, framed bytes), ...] of a split, any order -> the order of the
  first record of each shard (sorted), as SizeCappedShards cuts them."""
  shards, starts = SizeCappedShards(max_bytes), []
  for order, size in sorted(orders_and_sizes):
    if shards.add(size) == len(starts):
      starts.append(order)
  return starts


def shard_of_order(order: int, starts) -> int:
  """The shard (index into size_capped_starts) a record of `order` falls in."""
  return bisect.bisect_right(starts, order) - 1
DEFAULT_ORDERING = Ordering()
