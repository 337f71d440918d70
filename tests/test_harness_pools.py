"""The image pool on runners other than a single local worker: sized in each
worker from its cores and the SDK harnesses sharing them
(pooled_step.in_worker, runners.harnesses_per_machine), and one set of image
processes per harness process, whichever DoFn instances run there
(SharedProcesses); on a single local worker, from the cores the launcher
may use."""

from __future__ import annotations

import os
import pickle

from apache_beam.options.pipeline_options import PipelineOptions
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.configuration import config as opts
from pipeline.engines import runners
from tests.conftest import COLOURS
from tests.conftest import write_image
from tests.process_helpers import pids
from tests.process_helpers import times_ten_or_crash
from transforms import encode
from transforms import pooled_source
from transforms.core.example import LabelledRow
from transforms.core.manifest import ManifestRow
from transforms.core.spec import ImageSpec
from transforms.workers import pooled_step
from transforms.workers.pooled_step import PooledStep
from transforms.workers.pooled_step import PoolSize
from transforms.workers.pooled_step import in_worker
from transforms.workers.pooled_step import pool_size
from transforms.workers.shared_pool import SharedProcesses


def test_the_launcher_leaves_the_size_to_the_worker():
  # Not a single local worker, nothing asked for: the distributed default
  # until the worker sizes it (60 s time limit: one process).
  assert pool_size(0, 0, 'jpeg', False, 8, timeout_s=60, harnesses=1) == PoolSize(
      1, 1, 60, harnesses=1)
  assert pool_size(0, 0, 'raw', False, 8, harnesses=0) == PoolSize(1, 0, harnesses=0)
  # A size asked for, or a single local worker: fixed at launch, as before.
  assert pool_size(0, 3, 'jpeg', False, 8, timeout_s=60, harnesses=1) == PoolSize(1, 3, 60)
  assert pool_size(2, 0, 'jpeg', False, 8, harnesses=1) == PoolSize(2, 0)
  assert pool_size(0, 0, 'jpeg', True, 8, timeout_s=60, harnesses=1) == PoolSize(9, 8, 60)


@pytest.mark.parametrize('launched, encoding, cores, expected', [
    # One harness on the machine (LOOPBACK, Flink's or Spark's in the job
    # server, a TaskManager's worker pool): every core, as a local run.
    (PoolSize(1, 1, 60, harnesses=1), 'jpeg', 4, PoolSize(5, 4, 60, shared=True)),
    (PoolSize(1, 1, 60, harnesses=1), 'raw', 2, PoolSize(3, 2, 60, shared=True)),
    (PoolSize(1, 0, harnesses=1), 'jpeg', 2, PoolSize(3, 2, shared=True)),
    # Raw output without a time limit: threads, each instance its own.
    (PoolSize(1, 0, harnesses=1), 'raw', 4, PoolSize(5, 0)),
    # Two harnesses on 4 cores: two cores each.
    (PoolSize(1, 1, 60, harnesses=2), 'jpeg', 4, PoolSize(3, 2, 60, shared=True)),
    # A harness per core (0: Dataflow), or more harnesses than cores: the
    # distributed default, one process per harness process.
    (PoolSize(1, 1, 60, harnesses=0), 'jpeg', 16, PoolSize(1, 1, 60, shared=True)),
    (PoolSize(1, 1, 60, harnesses=4), 'jpeg', 2, PoolSize(1, 1, 60, shared=True)),
    (PoolSize(1, 0, harnesses=4), 'jpeg', 2, PoolSize(1, 0)),
    # Sized at launch: as it is.
    (PoolSize(9, 8, 60), 'jpeg', 2, PoolSize(9, 8, 60)),
])
def test_the_worker_takes_its_share_of_the_cores(launched, encoding, cores, expected):
  assert in_worker(launched, encoding, cores) == expected


@pytest.mark.parametrize('flags, expected', [
    (['--runner', 'DirectRunner'], 1),
    (['--runner', 'DirectRunner', '--direct_running_mode', 'multi_processing',
      '--direct_num_workers', '3'], 3),
    (['--runner', 'DirectRunner', '--direct_running_mode', 'multi_processing',
      '--direct_num_workers', '0'], 0),
    (['--runner', 'DirectRunner', '--direct_running_mode', 'multi_threading',
      '--direct_num_workers', '2'], 1),
    (['--runner', 'FlinkRunner', '--environment_type', 'LOOPBACK', '--parallelism', '2'], 1),
    (['--runner', 'SparkRunner', '--environment_type', 'loopback'], 1),
    (['--runner', 'PortableRunner', '--environment_type', 'LOOPBACK'], 1),
    (['--runner', 'FlinkRunner', '--environment_type', 'EXTERNAL'], 1),
    (['--runner', 'FlinkRunner', '--environment_type', 'EXTERNAL',
      '--sdk_worker_parallelism', '2'], 2),
    (['--runner', 'SparkRunner', '--environment_type', 'PROCESS',
      '--sdk_worker_parallelism', '0'], 0),
    (['--runner', 'DataflowRunner'], 0),
    (['--runner', 'DataflowRunner', '--experiments', 'no_use_multiple_sdk_containers'], 1),
])
def test_harnesses_per_machine(flags, expected):
  assert runners.harnesses_per_machine(PipelineOptions(flags)) == expected


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
    return True
  except ProcessLookupError:
    return False


def test_steps_of_one_process_share_its_processes():
  """Two steps (two bundles of one harness) on one SharedProcesses of 2: at
  most 2 children between them; the pool lives until the last one closes."""
  shared = SharedProcesses(2)
  size = PoolSize(3, 2, shared=True)
  steps = [PooledStep(size, 1), PooledStep(size, 1)]
  for step in steps:
    step.start(lambda items: (pids, list(items)), shared=shared)
  assert shared.users == 2
  children = set()
  for i in range(40):
    for step in steps:
      children.update(child for _, child in step.add(i))
  for step in steps:
    children.update(child for _, child in step.flush())
  assert 1 <= len(children) <= 2 and os.getpid() not in children
  steps[0].close()
  assert shared.users == 1 and all(map(_alive, children))
  assert {child for _, child in steps[1].add('x') + steps[1].flush()} <= children
  steps[1].close()
  assert shared.users == 0 and not any(map(_alive, children))
  # Opened again (a later bundle): new children.
  again = PooledStep(size, 1)
  again.start(lambda items: (pids, list(items)), shared=shared)
  ((_, child),) = again.add('y') + again.flush()
  assert child not in children
  again.close()
  assert not _alive(child)


def test_each_step_prepares_its_own_calls_on_a_shared_pool():
  """A step's `prepare` (its reader of remote files) goes with its calls,
  whoever else uses the processes."""
  shared = SharedProcesses(2)
  size = PoolSize(3, 2, shared=True)
  steps = []
  for offset in (1, 2):
    step = PooledStep(size, 2)
    step.start(lambda items: (times_ten_or_crash, list(items)),
               prepare=lambda args, offset=offset: ([i + offset for i in args[0]],),
               shared=shared)
    steps.append(step)
  done = [[], []]
  for i in range(10):
    for n, step in enumerate(steps):
      done[n] += step.add(i)
  for n, step in enumerate(steps):
    done[n] += step.flush()
    step.close()
  assert done == [[(i, (i + 1) * 10) for i in range(10)], [(i, (i + 2) * 10) for i in range(10)]]


def test_image_steps_of_one_harness_process_share_one_pool(tmp_path, monkeypatch):
  """Two copies of LoadImageFn set up in one process (Flink's two slots with
  LOOPBACK): one pool of a process per core of the machine (3 here), not one
  per copy, and both convert their images."""
  monkeypatch.setattr(pooled_source, 'available_cores', lambda: 3)
  spec = ImageSpec(height=4, width=4, encoding='png')
  fns = [pickle.loads(pickle.dumps(encode.LoadImageFn(spec, threads=1, processes=1,
                                                      timeout_s=60, harnesses=1)))
         for _ in range(2)]
  for fn in fns:
    fn.setup()
  try:
    pools = [fn._step._pool._executor for fn in fns]
    assert pools[0] is pools[1] and fns[0]._processes == 3
    for i, fn in enumerate(fns):
      path = write_image(tmp_path / f'{i}.png', COLOURS['red'], size=(9, 7))
      row = ManifestRow({}, 'm.csv', i + 2, image=str(path), path=str(path), key=str(i))
      fn.start_bundle()
      loaded = list(fn.process(LabelledRow(row, 0, 'red'))) + list(fn.finish_bundle())
      assert len(loaded) == 1
      image = loaded[0].value.image
      assert (image.format, image.height, image.width) == ('png', 4, 4)
  finally:
    for fn in fns:
      fn.teardown()


def test_available_cores_follow_the_cgroup_quota(tmp_path, monkeypatch):
  quota = tmp_path / 'cpu.max'
  monkeypatch.setattr(pooled_step, 'CGROUP_QUOTAS', ((str(quota), None),))
  monkeypatch.setattr(pooled_step.os, 'sched_getaffinity', lambda pid: set(range(8)))
  quota.write_text('150000 100000\n')  # 1.5 CPUs: 2 processes keep them busy
  assert pooled_step.available_cores() == 2
  quota.write_text('max 100000\n')
  assert pooled_step.available_cores() == 8
  quota.unlink()
  assert pooled_step.available_cores() == 8


@pytest.fixture
def two_of_64_cores(monkeypatch):
  """A 64-core host of which this process may use 2 (taskset, a container's
  cpuset): os.cpu_count() says 64."""
  monkeypatch.setattr(pooled_step, 'CGROUP_QUOTAS', ())
  monkeypatch.setattr(os, 'cpu_count', lambda: 64)
  monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1}, raising=False)


def test_a_single_local_worker_s_pool_counts_the_cores_it_may_use(sample, two_of_64_cores):
  """The default local run sized its image pool from os.cpu_count(): pinned
  to 1 core of this 2-core machine, a JPEG convert ran 2 image processes; 2
  CPUs of a 64-core host, 64 (and 65 threads for raw output)."""
  config, options = opts.parse_convert([
      '--manifest', str(sample.manifest), '--output_dir', str(sample.out),
      '--runner', 'DirectRunner', '--encoding', 'jpeg'])
  assert runners.single_local_worker(options)
  assert convert.image_pool(config, options) == PoolSize(3, 2, 60.0)


def test_validate_on_a_single_local_worker_counts_the_cores_it_may_use(
    sample, two_of_64_cores, monkeypatch):
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--runner', 'DirectRunner']) == 0
  cores = []
  check_pools = validate.check_pools

  def recorded(*args):
    cores.append(args[-1])
    return check_pools(*args)
  monkeypatch.setattr(validate, 'check_pools', recorded)
  assert validate.main(['--input_dir', str(sample.out), '--runner', 'DirectRunner']) == 0
  assert cores == [2]
