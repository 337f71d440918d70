"""PooledStep (the pooled part of LoadImageFn and ReadShardFn) and pool_size,
without Beam."""

from __future__ import annotations

import contextlib
import os

import pytest

from tests.process_helpers import pids
from tests.process_helpers import times_ten_or_crash
from transforms.workers.child_process import WorkerDied
from transforms.workers.pooled_step import PooledStep
from transforms.workers.pooled_step import PoolSize
from transforms.workers.pooled_step import pool_size


def _times_ten(items):
  return [item * 10 for item in items]


class Calls:
  """call(items) for a PooledStep that remembers every batch it was asked for."""

  def __init__(self, fn=_times_ten):
    self.batches = []
    self._fn = fn

  def __call__(self, items):
    self.batches.append(list(items))
    return self._fn, list(items)


@contextlib.contextmanager
def started(size: PoolSize, calls: Calls, process_batch: int = 3):
  step = PooledStep(size, process_batch)
  step.start(calls)
  try:
    yield step
  finally:
    step.close()


def add_all(step: PooledStep, items) -> tuple:
  """-> (the pairs add() handed back, every pair once flush() ran too)."""
  done = []
  for item in items:
    done += step.add(item)
  return list(done), done + step.flush()


def test_one_thread_runs_each_item_inline_as_it_comes():
  calls = Calls()
  with started(PoolSize(threads=1), calls) as step:
    assert step.add(1) == [(1, 10)]
    assert step.add(2) == [(2, 20)]
    assert step.flush() == []
    assert calls.batches == [[1], [2]]


def test_threads_keep_the_order_and_flush_hands_back_the_rest():
  calls = Calls()
  with started(PoolSize(threads=3), calls) as step:
    before_flush, done = add_all(step, range(20))
    assert len(before_flush) < 20  # some still in flight: at most 2 x threads
    assert done == [(item, item * 10) for item in range(20)]
    assert calls.batches == [[item] for item in range(20)]


def test_processes_take_items_in_batches():
  calls = Calls(times_ten_or_crash)
  with started(PoolSize(processes=1), calls, process_batch=3) as step:
    _, done = add_all(step, range(7))
    assert done == [(item, item * 10) for item in range(7)]
    assert calls.batches == [[0, 1, 2], [3, 4, 5], [6]]
    assert step.flush() == []


def test_oldest_runs_the_batch_being_filled_and_waits_for_the_oldest_call():
  calls = Calls(times_ten_or_crash)
  with started(PoolSize(processes=1), calls, process_batch=3) as step:
    assert step.add(0) == [] and step.add(1) == []  # a batch of 3 not yet full
    assert step.oldest() == [(0, 0), (1, 10)]
    assert calls.batches == [[0, 1]]
    assert step.oldest() == []  # nothing running
    assert step.add(2) == []
    assert step.flush() == [(2, 20)]


def test_send_runs_the_batch_being_filled_and_takes_only_calls_finished():
  import threading
  gates = {item: threading.Event() for item in range(4)}

  def gated(items):
    for item in items:
      assert gates[item].wait(30)
    return [item * 10 for item in items]

  calls = Calls(gated)
  with started(PoolSize(threads=2), calls) as step:
    step._batch_size = 3  # threads batch as processes do
    assert step.add(0) == [] and step.send() == []  # sent alone; not finished
    assert step.add(1) == [] and step.add(2) == []
    gates[1].set()
    gates[2].set()
    assert step.send() == []  # [1, 2] finished, but behind [0]: nothing out of order
    gates[0].set()
    while not all(future.done() for _, future in step._pool._pending):
      threading.Event().wait(0.01)
    assert step.send() == [(0, 0), (1, 10), (2, 20)]
    assert calls.batches == [[0], [1, 2]]
    assert step.add(3) == [] and step.send() == []
    gates[3].set()
    assert step.flush() == [(3, 30)]


@pytest.mark.parametrize('call_s, sizes', [
    (60.0, [3, 3, 3, 5, 5, 5, 5, 5, 5, 1]),  # any item is cheap next to a minute: up to 5
    (1e-9, [3] * 13 + [1])])  # every item too dear: never below process_batch
def test_batches_grow_to_max_batch_while_the_children_are_quick(monkeypatch, call_s, sizes):
  """The batch size follows the children's busy time per item done: the
  first three batches go before any result is in (two in flight per process)."""
  monkeypatch.setattr(PooledStep, 'CALL_S', call_s)
  calls = Calls(times_ten_or_crash)
  step = PooledStep(PoolSize(processes=1), 3, max_batch=5)
  step.start(calls)
  try:
    _, done = add_all(step, range(20, 60))  # no 13, which kills its worker
  finally:
    step.close()
  assert done == [(item, item * 10) for item in range(20, 60)]
  assert [len(batch) for batch in calls.batches] == sizes


@pytest.mark.parametrize('call_bytes, row_bytes, sizes', [
    # unknown: one item a call until results are in (three go before); then
    # as many as CALL_BYTES holds at the results' average (item * 10: 200 to 590)
    (1000, None, [1, 1, 1, 5, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 1]),
    (1000, 400, [2, 2, 2, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2]),  # 1000 // 400 at first
    (100, 1000, [1] * 40)])  # items larger than CALL_BYTES: one a call, never none
def test_batches_hold_at_most_call_bytes_of_results(monkeypatch, call_bytes, row_bytes, sizes):
  """Large images (--resize_mode none, raw) go fewer a call: 8 rows of 27
  MB held 2.6 GB across the processes. Time alone would take 5 a call here."""
  monkeypatch.setattr(PooledStep, 'CALL_S', 60.0)
  monkeypatch.setattr(PooledStep, 'CALL_BYTES', call_bytes)
  calls = Calls(times_ten_or_crash)
  step = PooledStep(PoolSize(processes=1), 3, max_batch=5, weigh=lambda result: result,
                    row_bytes=row_bytes)
  step.start(calls)
  try:
    _, done = add_all(step, range(20, 60))
  finally:
    step.close()
  assert done == [(item, item * 10) for item in range(20, 60)]
  assert [len(batch) for batch in calls.batches] == sizes


def test_threads_take_items_one_by_one_whatever_max_batch():
  """... and never weigh their results (the weigh here would raise)."""
  calls = Calls()
  step = PooledStep(PoolSize(threads=2), 3, max_batch=5, weigh=lambda result: 1 / 0)
  step.start(calls)
  try:
    _, done = add_all(step, range(6))
  finally:
    step.close()
  assert done == [(item, item * 10) for item in range(6)]
  assert calls.batches == [[item] for item in range(6)]


def test_a_batch_whose_worker_died_is_rerun_item_by_item():
  """Item 13 kills its worker process: only it gets WorkerDied, in its place."""
  calls = Calls(times_ten_or_crash)
  with started(PoolSize(processes=2), calls, process_batch=4) as step:
    _, done = add_all(step, range(10, 20))
    assert [item for item, _ in done] == list(range(10, 20))
    assert [result for item, result in done if item != 13] == [
        item * 10 for item in range(10, 20) if item != 13]
    died = dict(done)[13]
    assert isinstance(died, WorkerDied) and 'exit code 9' in str(died)
    assert calls.batches[:3] == [[10, 11, 12, 13], [14, 15, 16, 17], [18, 19]]
    # 13 kills its worker alone too, and once more: rejected
    assert sorted(calls.batches[3:]) == [[10], [11], [12], [13], [13]]


def test_an_item_whose_worker_is_killed_from_outside_while_it_runs_alone_runs_again(tmp_path):
  """A worker killed from outside (kill -9, the OOM killer) while its batch's
  rows were being redone one by one: the row it held runs alone once more
  and is converted (it was rejected as unexpected_error, a good row lost)."""
  from tests.process_helpers import times_ten_killed_twice
  tally = tmp_path / 'tally'

  class Killed(Calls):
    def __call__(self, items):
      return (*super().__call__(items), str(tally))

  calls = Killed(times_ten_killed_twice)
  with started(PoolSize(processes=1), calls, process_batch=4) as step:
    _, done = add_all(step, range(10, 18))
  assert done == [(item, item * 10) for item in range(10, 18)]
  assert tally.read_text() == 'xxx'  # the batch, 13 alone, 13 alone again
  assert calls.batches == [[10, 11, 12, 13], [14, 15, 16, 17], [10], [11], [12], [13], [13]]


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_an_item_that_overruns_its_time_limit_alone_is_not_run_again():
  """The batch overruns (its child killed), each item runs alone: the one
  that overruns alone gets WorkerTimedOut at once, never a second run (only
  a worker that died, not one stopped for time, earns its row a rerun)."""
  from tests.process_helpers import sleep_each
  from transforms.workers.child_process import WorkerTimedOut
  calls = Calls(sleep_each)
  with started(PoolSize(processes=1, timeout_s=2), calls, process_batch=3) as step:
    _, done = add_all(step, [0.01, 600, 0.02])
  assert [item for item, _ in done] == [0.01, 600, 0.02]
  assert [done[0][1], done[2][1]] == [0.01, 0.02]
  assert isinstance(done[1][1], WorkerTimedOut)
  assert calls.batches == [[0.01, 600, 0.02], [0.01], [600], [0.02]]


def _raise_value_error(items):
  raise ValueError('not a dead worker')


def test_a_call_that_fails_otherwise_is_raised():
  with started(PoolSize(threads=1), Calls(_raise_value_error)) as step:
    with pytest.raises(ValueError, match='not a dead worker'):
      step.add(1)


def test_close_is_safe_before_start_and_ends_the_children():
  PooledStep(PoolSize(processes=2), 4).close()  # setup never ran
  step = PooledStep(PoolSize(processes=1), 1)
  step.start(Calls(pids))
  ((_, child),) = step.add('x') + step.flush()
  assert child != os.getpid()
  step.close()
  step.close()  # a second teardown is harmless
  with pytest.raises(ProcessLookupError):
    os.kill(child, 0)


@pytest.mark.parametrize('threads,processes,encoding,single,inline_raw,expected', [
    # convert: cores + 1 threads for raw on a local worker, processes for JPEG/PNG
    (0, 0, 'raw', True, False, PoolSize(5, 0)),
    (0, 0, 'jpeg', True, False, PoolSize(5, 4)),
    (0, 0, 'png', False, False, PoolSize(1, 0)),  # distributed: the runner spreads
    (3, 0, 'jpeg', True, False, PoolSize(3, 0)),  # threads asked for: no processes
    (0, 2, 'raw', True, False, PoolSize(5, 2)),
    # validate: raw records inline unless threads are asked for
    (0, 0, 'raw', True, True, PoolSize(1, 0)),
    (4, 0, 'raw', True, True, PoolSize(4, 0)),
    (0, 0, 'jpeg', True, True, PoolSize(5, 4)),
    (0, 0, 'jpeg', False, True, PoolSize(1, 0)),
])
def test_pool_size(threads, processes, encoding, single, inline_raw, expected):
  assert pool_size(threads, processes, encoding, single, 4, inline_raw) == expected


def test_close_with_a_call_still_running_kills_its_child_at_once(tmp_path):
  """A bundle that failed or was interrupted tears its step down while a
  child is stuck (on a FIFO named like an image): the child is killed, not
  waited for up to --image_timeout_s."""
  import time

  from tests.process_helpers import block_opening
  fifo, marker = tmp_path / 'x.jpg', tmp_path / 'started'
  os.mkfifo(fifo)
  step = PooledStep(PoolSize(processes=1, timeout_s=60), 1)
  step.start(lambda items: (block_opening, str(fifo), str(marker)))
  try:
    step.add('x')
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
      time.sleep(0.01)
    child = int(marker.read_text())
    started = time.monotonic()
  finally:
    step.close()  # once: a failed wait must not leave the child to later tests
  assert time.monotonic() - started < 10
  with pytest.raises(ProcessLookupError):
    os.kill(child, 0)


class _ClosedPipe:
  """A reply stream whose reader is gone."""

  def write(self, data):
    raise BrokenPipeError(32, 'Broken pipe')

  def flush(self):
    raise BrokenPipeError(32, 'Broken pipe')


def test_a_worker_whose_parent_is_gone_ends_quietly():
  """The parent ended (by a signal) mid-call: the reply finds no reader, or
  the next request was cut off. serve() returns: no BrokenPipeError
  traceback from every worker."""
  import io
  import pickle

  from transforms.workers import process_worker
  request = pickle.dumps((_times_ten, ([1, 2],)))
  process_worker.serve(io.BytesIO(request), _ClosedPipe())
  replies = io.BytesIO()
  process_worker.serve(io.BytesIO(request + request[:len(request) // 2]), replies)
  replies.seek(0)
  assert pickle.load(replies) == process_worker.READY
  assert pickle.load(replies) == (process_worker.OK, [10, 20])


class _Unpicklable:
  def __reduce__(self):
    raise TypeError('not this one')


def _pixels_and(items):
  return [os.urandom(300_000), *items]


def _pixels_and_unpicklable(items):
  return [os.urandom(300_000), _Unpicklable()]


def test_a_worker_sends_large_values_without_copying_them_and_never_half_a_reply():
  """A reply's pickle goes out as the pickler's parts (an image's pixels a
  part of its own, the same object); one that does not pickle is a RAISED
  reply, and nothing of it went out before."""
  import io
  import pickle

  from transforms.workers import process_worker
  pixels = os.urandom(300_000)
  parts = process_worker._dumps((process_worker.OK, [pixels, 'small', 7]))
  assert any(part is pixels for part in parts)
  assert pickle.loads(b''.join(parts)) == (process_worker.OK, [pixels, 'small', 7])
  requests = io.BytesIO(pickle.dumps((_pixels_and, (['a'],))) +
                        pickle.dumps((_pixels_and_unpicklable, ([],))))
  replies = io.BytesIO()
  process_worker.serve(requests, replies)
  replies.seek(0)
  assert pickle.load(replies) == process_worker.READY
  status, values = pickle.load(replies)
  assert status == process_worker.OK and len(values[0]) == 300_000 and values[1:] == ['a']
  status, error = pickle.load(replies)
  assert status == process_worker.RAISED and 'not this one' in str(error)
  assert replies.read() == b''


def test_image_steps_weigh_what_their_images_become():
  """LoadImageFn sizes its calls by its results' bytes: --resize_mode none
  (each image's own size) starts at one row a call, a fixed output size at
  process_batch while CALL_BYTES holds that many of its pixels."""
  from transforms.core.image import EncodedImage
  from transforms.core.spec import ImageSpec
  from transforms.encode import LoadImageFn
  from transforms.pooled_source import PROCESS_BATCH
  from transforms.workers.source_image import result_bytes
  assert result_bytes((EncodedImage(b'x' * 300, 10, 10, 3, 'raw'), 'sha', 7)) == 300
  assert result_bytes((b'example' * 3, 'sha', 7)) == 21  # an Example built in the worker
  assert result_bytes(ValueError('not an image')) == 0
  free_size = LoadImageFn(ImageSpec(resize_mode='none'), processes=2)
  assert free_size._step._weigh is result_bytes and free_size._step._batch_size == 1
  assert LoadImageFn(ImageSpec(height=300, width=300), processes=2)._step._batch_size == (
      PROCESS_BATCH)
  huge = ImageSpec(height=4000, width=4000)  # 48 MB a row: over CALL_BYTES alone
  assert LoadImageFn(huge, processes=2)._step._batch_size == 1
