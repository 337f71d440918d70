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
import math

SHUFFLE_MODES = ('on', 'off')


@dataclasses.dataclass(frozen=True)
class Ordering:
  """shuffle: order by the salted hash of the key; else by manifest line."""
  shuffle: bool = True
  seed: int = 0

  def key(self, row_key: str, line: int) -> int:
    """The record's place: an unsigned 64-bit integer, smaller comes first."""
    if not self.shuffle:
      return line
    # Salted apart from the --split hash, so a split's order is independent of
    # which rows the split received.
    digest = hashlib.sha256(f'{self.seed}\x00order\x00{row_key}'.encode()).digest()
    return int.from_bytes(digest[:8], 'big')


def sort_rows(rows, ordering: Ordering) -> list:
  """ManifestRows in write order (ties, if ever, broken by key)."""
  return sorted(rows, key=lambda row: (ordering.key(row.key, row.line), row.key))


def shard_of(rank: int, num_shards: int) -> int:
  """Round robin over the write order: shard sizes differ by at most one and
  every shard is a pseudo-random sample of its split."""
  return rank % num_shards


def rank_of(order: int, sorted_orders) -> int:
  """Position of `order` among all of a split's orders (sorted)."""
  return bisect.bisect_left(sorted_orders, order)


def shards_for_size(total_bytes: int, shard_bytes: int) -> int:
  """Shards of about `shard_bytes` each for a split of `total_bytes`."""
  return max(1, math.ceil(total_bytes / shard_bytes))
DEFAULT_ORDERING = Ordering()
