"""Reading and checking one span of a local shard, in a check worker process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import read_framed


def read_failure(error: Exception, read: int) -> tuple:
  """(kind, record, detail) of a read that failed after `read` whole records."""
  return ('corrupt_shard', read, f'cannot read the file from record {read} ({read} read '
          f'whole): {type(error).__name__}: {error}')


def check_span(path: str, offset: int, first_index: int, count: Optional[int],
               check: Callable, expected) -> tuple:
  """Reads records first_index.. (`count` of them, None: to the end) of the
  local shard `path` from byte `offset`, both CRCs checked, and checks each
  with check([record], expected) -> (first_index, [check result per record
  read], None or the (kind, record, detail) that ended the reading: ShardError
  as read_records raises it, or a failed read, [(offset, framed length, data
  CRC) per record read]: what its index line and sidecar line must say).

  One record at a time, each checked as soon as it is read: memory stays at a
  record, and its buffer is reused for the next (a batch of 32 raw 300x300
  records took twice as long, faulting in fresh pages for every read).
  """
  results, places, failure, read = [], [], None, first_index
  try:
    with open(path, 'rb') as stream:
      stream.seek(offset)
      for index, data, place in read_framed(stream, first_index, count, offset):
        read = index + 1
        results += check([data], expected)
        places.append(place)
  except ShardError as error:
    failure = (error.kind, error.index, error.detail)
  except OSError as error:
    failure = read_failure(error, read)
  return first_index, results, failure, places
