"""The pooled part of a DoFn that hands its items to a pool (LoadImageFn: rows
to convert; HashSourceFn: rows to hash; ReadShardFn: records to check), and
how big that pool is."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import math
import os
from typing import Optional

from transforms.workers import source_refs
from transforms.workers.ordered_pool import OrderedPool
from transforms.workers.shared_pool import SharedProcesses


@dataclasses.dataclass(frozen=True)
class PoolSize:
  """Threads, or child processes when processes > 0, working for one DoFn.

  timeout_s (processes only): a call still running after that long has its
  child killed and replaced (WorkerTimedOut); None: no limit.
  harnesses: not None when the pool is sized in each worker (in_worker):
  this many SDK harnesses share a machine's cores (0: one harness per core).
  shared: the processes are the ones every DoFn instance of the harness
  process shares (SharedProcesses), not this instance's own.
  """
  threads: int = 1
  processes: int = 0
  timeout_s: Optional[float] = None
  harnesses: Optional[int] = None
  shared: bool = False


def pool_size(threads: int, processes: int, encoding: str, single_local_worker: bool,
              cpu_count: int, inline_raw: bool = False, timeout_s: float = 0.0,
              records_here: bool = True, harnesses: Optional[int] = None) -> PoolSize:
  """The pool converting images (convert) or checking records (validate) in
  one worker. threads/processes: what the user asked for (0: choose);
  encoding: of the output images; inline_raw: raw images need no pool (validate
  only tests their length).

  Threads, when not asked for: cores + 1 on a single local worker, else 1 (the
  runner parallelises). The extra thread covers the worker's own thread, which
  holds the GIL for Beam's per-element work: 3,000 JPEGs on 2 cores took 5.7 s
  with 2 threads, 5.25 s with 3 and 5.5 s with 4. Raw records with inline_raw
  are checked inline: handing each to a thread cost more than it saved
  (12,000 raw 300x300 records: 2.4 s inline, 2.9 s on 3 threads).

  Processes, when not asked for: one per core for JPEG/PNG images on a single
  local worker (unless threads were asked for), else none. Measured on 2
  cores, 3,000 JPEGs -> JPEG 224x224: the image stage took 3.18 s in processes
  against 3.58 s on threads (Pillow's Python parts share the GIL). Raw 300x300
  output was slower in processes (4.18 s against 3.79 s): 270 KB of pixels per
  image cost more to pass back than the GIL.

  With a time limit (timeout_s, convert's --image_timeout_s), processes
  unless threads were asked for, for every encoding: only a process can be
  stopped. One per core on a single local worker, else one per worker.

  records_here=False: the step gets no records of its own (validate's span
  processes read every shard): no processes to start.

  harnesses (not a single local worker, nothing asked for): the size is
  chosen in each worker instead (in_worker), from the cores it finds there
  and this many SDK harnesses sharing them; until then, the distributed
  default below.
  """
  if harnesses is not None and not single_local_worker and not (threads or processes):
    return dataclasses.replace(
        pool_size(0, 0, encoding, False, cpu_count, inline_raw, timeout_s, records_here),
        harnesses=harnesses)
  if threads:
    chosen_threads = threads
  elif inline_raw and encoding == 'raw':
    chosen_threads = 1
  else:
    chosen_threads = cpu_count + 1 if single_local_worker else 1
  if processes:
    chosen_processes = processes
  elif timeout_s and not threads:
    chosen_processes = cpu_count if single_local_worker else 1
  elif threads or encoding == 'raw' or not single_local_worker or not records_here:
    chosen_processes = 0
  else:
    chosen_processes = cpu_count
  return PoolSize(chosen_threads, chosen_processes,
                  (timeout_s or None) if chosen_processes else None)


def in_worker(size: PoolSize, encoding: str, cores: int) -> PoolSize:
  """The pool one worker starts: `size` as it is, or, sized in the worker
  (size.harnesses), its harness's share of the machine's `cores`
  (cores // harnesses) used as a single local worker uses a machine: one
  image process per core of the share (cores + 1 threads for raw output
  without a time limit). A share of one core keeps the distributed default
  (the runner runs a harness per core). Processes are then shared by every
  DoFn instance of the harness process (shared=True): a runner running
  several bundles at once in one harness (Flink's slots, Spark's tasks with
  LOOPBACK) does not multiply them.
  """
  if size.harnesses is None:
    return size
  share = cores // size.harnesses if size.harnesses else 1
  if share > 1:
    size = pool_size(0, 0, encoding, True, share, timeout_s=size.timeout_s or 0.0)
  return dataclasses.replace(size, harnesses=None, shared=size.processes > 0)


def available_cores() -> int:
  """The cores this process may use: its CPU affinity, capped by its
  cgroup's CPU quota (a container's limit; os.cpu_count() counts the host's)."""
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    cores = os.cpu_count() or 1
  quota = _cgroup_quota()
  return max(1, min(cores, math.ceil(quota))) if quota else cores


# Where a cgroup's CPU quota is: (quota file, period file or None when the
# quota file holds both): cgroup v2, then v1.
CGROUP_QUOTAS = (('/sys/fs/cgroup/cpu.max', None),
                 ('/sys/fs/cgroup/cpu/cpu.cfs_quota_us', '/sys/fs/cgroup/cpu/cpu.cfs_period_us'))


def _cgroup_quota() -> Optional[float]:
  """CPUs of the cgroup's quota, None if unlimited or unknown."""
  for path, period_path in CGROUP_QUOTAS:
    try:
      with open(path, encoding='ascii') as handle:
        text = handle.read().split()
      if period_path:
        with open(period_path, encoding='ascii') as handle:
          text += handle.read().split()
      quota, period = text[0], text[1]
      if quota in ('max', '-1'):
        return None
      return int(quota) / int(period)
    except (OSError, ValueError, IndexError):
      continue
  return None


# Where a cgroup's memory limit is (v2, then v1); 'max' or a huge number: none.
CGROUP_MEMORY_LIMITS = ('/sys/fs/cgroup/memory.max',
                        '/sys/fs/cgroup/memory/memory.limit_in_bytes')


def available_memory_mib(meminfo: str = '/proc/meminfo',
                         limits: tuple = CGROUP_MEMORY_LIMITS) -> Optional[int]:
  """MiB of memory this machine has available (MemAvailable), capped by the
  cgroup's limit (a container's); None where neither can be read (not Linux)."""
  found = [mib for mib in [_first_mib(meminfo, 'MemAvailable:')] + [
      _first_mib(path) for path in limits] if mib is not None]
  return min(found) if found else None


def _first_mib(path: str, prefix: str = '') -> Optional[int]:
  """MiB in the file at `path`: a line's kB after `prefix` (/proc/meminfo),
  or with no prefix the bytes the file holds; None if it cannot be read or
  holds no number ('max')."""
  try:
    with open(path, encoding='ascii') as handle:
      text = handle.read()
  except OSError:
    return None
  if prefix:
    line = next((line for line in text.splitlines() if line.startswith(prefix)), '')
    kib = line[len(prefix):].split()[:1]
    return int(kib[0]) // 1024 if kib and kib[0].isdigit() else None
  text = text.strip()
  return int(text) >> 20 if text.isdigit() else None


class PooledStep:
  """Items in, (item, result) pairs out, in the order the items came in.

  call(items) -> (fn, *args): the call handling these items, whose result
  is one result per item (an item's failure as its result, not raised). In
  processes, items go in batches of `process_batch` (one pipe round trip per
  batch); on threads one by one (inline with a single thread). A batch whose
  worker process died (or overran size.timeout_s: WorkerTimedOut) is rerun
  item by item, so only the item that kills a worker gets the WorkerDied as
  its result. Any other failure of a call (e.g.
  WorkerFailedToStart) is raised: a set-up problem fails the job.

  max_batch (processes only): batches grow up to that many items while the
  children spend less than CALL_S a call on the items so far (their busy
  time over the items done), never below process_batch: cheap items (16x16
  thumbnails) go 64 a round trip, photos stay at process_batch.

  weigh(result) -> its bytes (processes only): batches then also hold at
  most CALL_BYTES of results (the items so far weighed on average), down to
  one item; before any result is in, row_bytes is what an item may weigh
  (None: unknown, one item a call).

  Built with the DoFn (picklable); start() in DoFn.setup, close() in
  DoFn.teardown (safe when start() never ran or failed).
  """

  # The children's time a batch aims at: a round trip (pickles, pipes, a
  # future, the pool thread) costs ~0.1-0.2 ms of CPU. On 20,000 16x16 PNGs
  # (2 cores), 64 a call against 8: the launcher 0.067-0.074 against
  # 0.095-0.108 ms a row, the image processes 0.11 against 0.13-0.20.
  CALL_S = 0.025
  # The results' bytes a call aims at: 8 rows a call of 27 MB raw images
  # (--resize_mode none on 3000x3000 JPEGs) held 2.6 GB across the processes
  # (a worker's results, their Examples and its reply's pickle, two calls a
  # process in flight, the replies waiting their turn in the launcher).
  CALL_BYTES = 32 << 20

  def __init__(self, size: PoolSize, process_batch: int, max_batch: int = 0,
               weigh: Optional[Callable] = None, row_bytes: Optional[int] = None):
    self._size = size
    self._batch_size = process_batch if size.processes else 1
    self._min_batch = self._batch_size
    self._max_batch = max(max_batch, self._batch_size) if size.processes else 1
    self._weigh = weigh if size.processes else None
    self._weighed = 0  # the bytes of the results done
    if self._weigh is not None:
      self._batch_size = self._within_bytes(self._batch_size, row_bytes)
    self._pool = None
    self._shared = None
    self._call = None
    self._batch = []
    self._done = 0  # items whose results came back

  def start(self, call: Callable, prepare: Optional[Callable] = None,
            shared: Optional[SharedProcesses] = None) -> None:
    """prepare (processes only): maps a call's arguments on the pool's thread
    before they are sent to a child (see ProcessPool). shared: where the
    processes come from when size.shared (the harness process's own)."""
    self._call = call
    self._batch = []
    if self._size.processes and self._size.shared and shared is not None:
      self._shared = shared
      self._pool = OrderedPool(self._size.processes, prepare=prepare, executor=shared.open())
    elif self._size.processes:
      self._pool = OrderedPool(self._size.processes, processes=True, prepare=prepare,
                               timeout_s=self._size.timeout_s)
    else:
      self._pool = OrderedPool(self._size.threads)

  def add(self, item) -> list:
    """Takes `item`; returns the (item, result) pairs now done."""
    self._batch.append(item)
    if len(self._batch) >= self._batch_size:
      return self._submit()
    return []

  def send(self) -> list:
    """Runs the batch being filled now, however small, and takes the oldest
    calls that have finished, without waiting; returns the (item, result)
    pairs now done."""
    done = self._submit()
    for batch, future in self._pool.drain_finished():
      done += self._results(batch, future)
    return done

  def oldest(self) -> list:
    """Runs the batch being filled and waits for the oldest call still
    running; returns the (item, result) pairs now done ([]: none running)."""
    done = self._submit()
    if not done:
      for batch, future in self._pool.drain(1):
        done += self._results(batch, future)
    return done

  def flush(self) -> list:
    """Runs what is left; returns every (item, result) pair not yet returned."""
    done = self._submit()
    for batch, future in self._pool.drain():
      done += self._results(batch, future)
    return done

  def close(self) -> None:
    if self._pool is not None:
      self._pool.shutdown()
      self._pool = None
      source_refs.release_columns()  # the run's threads read them: not kept past it
    if self._shared is not None:
      self._shared.close()
      self._shared = None

  def _submit(self) -> list:
    batch, self._batch = self._batch, []
    done = []
    if batch:
      for due in self._pool.submit(batch, *self._call(batch)):
        done += self._results(*due)
    return done

  def _results(self, batch: list, future) -> list:
    results = self._pool.batch_results(future, len(batch),
                                       lambda i: self._call(batch[i:i + 1]))
    if self._weigh is not None:
      self._weighed += sum(self._weigh(result) for result in results)
    if self._max_batch > self._min_batch or self._weigh is not None:
      self._resize(len(batch))
    return list(zip(batch, results, strict=True))

  def _resize(self, done: int) -> None:
    """The next batches' size, from the children's time (and the results'
    bytes) per item so far."""
    self._done += done
    busy = self._pool.busy_s
    if busy is None:  # a pool that keeps no time: batches of process_batch
      size = self._min_batch
    else:
      wanted = int(self.CALL_S * self._done / busy) if busy > 0 else self._max_batch
      size = min(max(wanted, self._min_batch), self._max_batch)
    if self._weigh is not None:
      size = self._within_bytes(size, self._weighed / self._done)
    self._batch_size = size

  def _within_bytes(self, size: int, item_bytes: Optional[float]) -> int:
    """`size` items, or fewer (one at least) to stay within CALL_BYTES."""
    if item_bytes is None:
      return 1
    return max(1, min(size, int(self.CALL_BYTES // max(item_bytes, 1))))
