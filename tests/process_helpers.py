"""Functions image worker processes run in tests (importable by the children)."""

import os
import time

from transforms.workers.source_image import convert_in_worker
from transforms.workers.source_image import hash_in_worker


def crash_on_marked(sources: list, spec) -> list:
  """convert_in_worker, except that a path containing CRASH kills the process."""
  if any('CRASH' in str(source) for source in sources):
    os._exit(9)
  return convert_in_worker(sources, spec)


def sleep_on_marked(sources: list, spec) -> list:
  """convert_in_worker, except that a path containing SLOW stalls the process
  (a decoder that never finishes)."""
  if any('SLOW' in str(source) for source in sources):
    time.sleep(600)
  return convert_in_worker(sources, spec)


def sleep_on_marked_hash(sources: list, spec) -> list:
  """hash_in_worker, except that a path containing SLOW stalls the process
  (a file system that never answers)."""
  if any('SLOW' in str(source) for source in sources):
    time.sleep(600)
  return hash_in_worker(sources, spec)


def print_to_stdout(text: str) -> str:
  os.write(1, text.encode())
  print(text)
  return text


def crash_on_marked_record(records: list, expected) -> list:
  """check_records, except that a record holding 'not really a jpeg' kills the process."""
  from transforms.core import validation
  if any(b'not really a jpeg' in record for record in records):
    os._exit(9)
  return validation.check_records(records, expected)


def times_ten_or_crash(items: list) -> list:
  """Each item x 10, except that an item 13 kills the process."""
  if 13 in items:
    os._exit(9)
  return [item * 10 for item in items]


def pids(items: list) -> list:
  """The process id of whoever runs this, once per item."""
  return [os.getpid() for _ in items]


def block_opening(fifo: str, marker: str) -> bytes:
  """Leaves `marker`, then opens the FIFO `fifo` for reading: blocked until a
  writer opens it (an image path that is a FIFO)."""
  # Written whole then renamed: a parent polling for the marker never reads it
  # empty (it did once, in CI: int('') and the child left running).
  with open(marker + '.part', 'w', encoding='utf-8') as started:
    started.write(str(os.getpid()))
  os.replace(marker + '.part', marker)
  with open(fifo, 'rb') as stream:
    return stream.read()


def sleep_each(seconds: list) -> list:
  """Sleeps each item's seconds in turn, telling the parent after each as an
  image worker does after each row (progress_ticks)."""
  from transforms.workers import progress_ticks
  for each in seconds:
    time.sleep(each)
    progress_ticks.row_done()
  return seconds


def times_ten_killed_twice(items: list, tally: str) -> list:
  """Each item x 10, except that the first two calls holding 13 end their
  process, as a kill from outside would (kill -9, the OOM killer): the file
  `tally` counts them."""
  if 13 in items:
    with open(tally, 'a', encoding='utf-8') as calls:
      calls.write('x')
    with open(tally, encoding='utf-8') as calls:
      if len(calls.read()) <= 2:
        os._exit(9)
  return [item * 10 for item in items]
