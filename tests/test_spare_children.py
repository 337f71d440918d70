"""spare_children (transforms/workers/spare_children.py): image worker
processes a run starts before its pool asks for them; the pool takes them,
and those no pool took are killed at the run's end."""

import os

import pytest

from pipeline import api
from pipeline import convert
from tests.conftest import read_info
from transforms.workers import child_process
from transforms.workers import spare_children
from transforms.workers.process_pool import WORKER_MODULE
from transforms.workers.process_pool import ProcessPool

MODULE = 'transforms.workers.source_image'


# Image worker children this pytest process had before the test: another
# file's test (run earlier in the same xdist worker) may leave one a moment.
_BEFORE: set = set()


@pytest.fixture(autouse=True)
def no_spares_left():
  _BEFORE.clear()
  _BEFORE.update(_children_of_this_process(since_start=False))
  yield
  spare_children.discard()
  assert spare_children._SPARES == []


def _children_of_this_process(since_start: bool = True) -> set:
  """The pids of this process's living image worker children (those started
  during the test, unless `since_start` is False)."""
  found = set()
  for pid in os.listdir('/proc'):
    if not pid.isdigit():
      continue
    try:
      with open(f'/proc/{pid}/stat') as stat:
        fields = stat.read().rsplit(')', 1)[1].split()
      with open(f'/proc/{pid}/cmdline', 'rb') as cmdline:
        command = cmdline.read()
    except OSError:
      continue  # ended meanwhile
    if int(fields[1]) == os.getpid() and fields[0] != 'Z' and WORKER_MODULE.encode() in command:
      found.add(int(pid))
  return found - _BEFORE if since_start else found


def test_a_pool_takes_the_children_started_for_it_with_their_modules_imported():
  spare_children.start(2, WORKER_MODULE, None, (MODULE,))
  first = spare_children.take(WORKER_MODULE, None)
  second = spare_children.take(WORKER_MODULE, None)
  try:
    assert first is not second and first.alive and second.alive
    assert first.imported == second.imported == {MODULE}
    assert spare_children.take(WORKER_MODULE, None) is None  # two were started
  finally:
    first.kill()
    second.kill()


def test_a_child_is_taken_only_by_a_pool_of_its_module_and_time_limit():
  spare_children.start(1, WORKER_MODULE, 60.0, (MODULE,))
  assert spare_children.take(WORKER_MODULE, None) is None  # its calls tick: another child
  assert spare_children.take('tests.killed_at_start_worker', 60.0) is None
  child = spare_children.take(WORKER_MODULE, 60.0)
  try:
    assert child.alive
  finally:
    child.kill()


def test_the_pool_runs_its_calls_in_the_child_started_ahead():
  spare_children.start(1, WORKER_MODULE, None, (MODULE,))
  spare_children._SPARES[0][2].result(timeout=60)  # started on its own thread: wait for it
  started = set(_children_of_this_process())
  assert len(started) == 1
  pool = ProcessPool(1)
  try:
    assert pool.submit(os.getpid).result() in started  # no second child
    assert spare_children._SPARES == []
  finally:
    pool.shutdown()
  assert _children_of_this_process() == set()


def test_children_no_pool_took_are_killed_by_discard():
  spare_children.start(2, WORKER_MODULE, None, (MODULE,))
  futures = [future for _, _, future in spare_children._SPARES]
  children = [future.result(timeout=60) for future in futures]
  assert _children_of_this_process() == {child._process.pid for child in children}
  spare_children.discard()
  assert _children_of_this_process() == set()
  assert not any(child.alive for child in children)


def test_a_child_that_failed_to_start_leaves_the_pool_to_start_its_own_and_say_why():
  spare_children.start(1, 'transforms.no_such_module', None, ())
  assert spare_children.take('transforms.no_such_module', None) is None
  spare_children.start(1, 'transforms.no_such_module', None, ())
  pool = ProcessPool(1, worker_module='transforms.no_such_module')
  try:
    error = pool.submit(os.getpid).exception()
    assert isinstance(error, child_process.WorkerFailedToStart)
  finally:
    pool.shutdown()


def test_a_local_run_converts_in_its_spare_children_and_leaves_none(tmp_path):
  from PIL import Image
  (tmp_path / 'img').mkdir()
  lines = ['image,label']
  for i in range(6):
    Image.new('RGB', (20 + i, 16), (40 * i, 0, 0)).save(tmp_path / 'img' / f'{i}.png')
    lines.append(f'img/{i}.png,{"ab"[i % 2]}')
  (tmp_path / 'm.csv').write_text('\n'.join(lines) + '\n')
  taken = []
  real_take = spare_children.take

  def counted(*args):
    child = real_take(*args)
    taken.append(child is not None)
    return child
  spare_children.take = counted
  try:
    code = convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir',
                         str(tmp_path / 'out'), '--encoding', 'jpeg', '--image_processes', '2',
                         '--progress', 'off'])
  finally:
    spare_children.take = real_take
  assert code == 0
  assert read_info(tmp_path / 'out')['num_examples'] == 6
  assert taken and all(taken)  # the pool started none of its own
  assert _children_of_this_process() == set()
  assert spare_children._SPARES == []


def _manifest(tmp_path, rows: int):
  from PIL import Image
  (tmp_path / 'img').mkdir()
  lines = ['image,label']
  for i in range(rows):
    Image.new('RGB', (20 + i, 16), (40 * i, 0, 0)).save(tmp_path / 'img' / f'{i}.png')
    lines.append(f'img/{i}.png,{"ab"[i % 2]}')
  (tmp_path / 'm.csv').write_text('\n'.join(lines) + '\n')
  return tmp_path / 'm.csv'


def test_a_signal_while_the_spares_start_leaves_none_running(tmp_path, monkeypatch):
  # A Ctrl-C (api: a notebook's KeyboardInterrupt) landing in start(), once
  # its children were on their way: the run's discard() must still kill them.
  started = []
  real_start = spare_children.start

  def interrupted(*args):
    real_start(*args)
    started.extend(future for _, _, future in spare_children._SPARES)
    raise KeyboardInterrupt
  monkeypatch.setattr(spare_children, 'start', interrupted)
  with pytest.raises(KeyboardInterrupt):
    api.convert(manifest=str(_manifest(tmp_path, 2)), output_dir=str(tmp_path / 'out'),
                encoding='jpeg', image_processes=2, progress='off')
  assert len(started) == 2
  children = [future.result(timeout=60) for future in started]
  assert [child.alive for child in children] == [False, False]
  assert _children_of_this_process() == set()
  assert spare_children._SPARES == []


def test_a_spare_whose_import_raised_does_not_keep_discard_from_the_others():
  # The first spare's import fails in the child (ModuleNotFoundError, not a
  # failed start): discard() raised it and never killed the second.
  spare_children.start(1, WORKER_MODULE, None, ('tests.no_such_module',))
  spare_children.start(1, WORKER_MODULE, None, (MODULE,))
  futures = [future for _, _, future in spare_children._SPARES]
  spare_children.discard()
  assert isinstance(futures[0].exception(timeout=60), ModuleNotFoundError)
  assert not futures[1].result(timeout=60).alive
  assert _children_of_this_process() == set()


def test_no_more_than_at_most_are_started_ahead_whatever_the_pool():
  spare_children.start(12, WORKER_MODULE, None, (MODULE,))
  futures = [future for _, _, future in spare_children._SPARES]
  assert len(futures) == spare_children.AT_MOST == 2
  children = [future.result(timeout=60) for future in futures]
  assert _children_of_this_process() == {child._process.pid for child in children}


def test_a_child_is_killed_by_one_thread_at_a_time(monkeypatch):
  # discard() and its future's callback may both kill a child at once: two
  # closing its pipes together could close a descriptor reused meanwhile
  import threading
  import time
  spare_children.start(1, WORKER_MODULE, None, (MODULE,))
  future = spare_children._SPARES[0][2]
  child = future.result(timeout=60)
  inside, most = [0], [0]
  real_kill = child.kill

  def watched_kill():
    inside[0] += 1
    most[0] = max(most[0], inside[0])
    time.sleep(0.05)  # a kill that takes a while: another would overlap it
    real_kill()
    inside[0] -= 1
  monkeypatch.setattr(child, 'kill', watched_kill)
  killers = [threading.Thread(target=spare_children._kill_started, args=(future,))
             for _ in range(2)]
  for killer in killers:
    killer.start()
  for killer in killers:
    killer.join(timeout=60)
  assert most[0] == 1 and not child.alive
  spare_children._SPARES.clear()
