"""One convert per output folder at a time, and recovery from a SIGKILL at any point."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from pipeline.runs import lock_stores
from pipeline.runs import run_lock
from pipeline.runs.run_lock import RunInfo
from pipeline.runs.run_lock import RunLock
from pipeline.runs.run_lock import stale_reason
from tests.conftest import COLOURS
from tests.conftest import write_image
from tests.conftest import write_manifest

# One worker builds the reference dataset (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('run_lock')

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOW = 1_800_000_000.0
HOST, NAMESPACE = 'here', 'pid:[1]'
TIMEOUT = 180


def holder(**changes) -> RunInfo:
  fields = dict(run_id='abc123def456', host=HOST, pid=4242, started='2027-01-15T08:00:00Z',
                heartbeat='2027-01-15T08:00:00Z', pid_start='777', pid_namespace=NAMESPACE)
  fields.update(changes)
  return RunInfo(**fields)


# ---------------------------------------------------------------- staleness, plain


def test_same_host_is_judged_by_its_process():
  old = NOW + 3600 * 24  # heartbeats do not matter on the same host
  assert stale_reason(holder(), old, HOST, NAMESPACE, lambda pid: '777') is None
  assert 'process 4242 on this host is gone' in stale_reason(
      holder(), NOW, HOST, NAMESPACE, lambda pid: None)
  assert 'now belongs to another process' in stale_reason(
      holder(), NOW, HOST, NAMESPACE, lambda pid: '999')
  # a system that cannot tell start times: alive is alive
  assert stale_reason(holder(), NOW, HOST, NAMESPACE, lambda pid: '') is None


def test_another_host_or_pid_namespace_is_judged_by_its_heartbeat():
  beat = RunInfo.from_text(holder().to_text())
  beat_at = run_lock._unix(beat.heartbeat)
  never = lambda pid: pytest.fail('a process on another host was looked up')  # noqa: E731
  for host, namespace in (('elsewhere', NAMESPACE), (HOST, 'pid:[2]')):
    fresh = beat_at + run_lock.STALE_AFTER_SECONDS - 1
    assert stale_reason(beat, fresh, host, namespace, never) is None
    why = stale_reason(beat, beat_at + run_lock.STALE_AFTER_SECONDS + 5, host, namespace,
                       never)
    assert why.startswith('no heartbeat for 605 s'), why


def test_lock_text_round_trip_and_foreign_files():
  assert RunInfo.from_text(holder().to_text()) == holder()
  for text in ('', 'not json', '[]', '{"run_id": "x"}', json.dumps(
      {**json.loads(holder().to_text()), 'heartbeat': 'yesterday'})):
    assert RunInfo.from_text(text) is None, text
  assert stale_reason(None, NOW, HOST, NAMESPACE) == (
      'its lock file is not a lock this program wrote')
  assert holder().describe() == ('run abc123def456 (host here, pid 4242, started '
                                 '2027-01-15T08:00:00Z, last heartbeat 2027-01-15T08:00:00Z)')


# ---------------------------------------------------------------- the lock, local files


def lock_files(folder: pathlib.Path) -> list:
  return sorted(p.name for p in folder.iterdir() if p.name.startswith('.convert.lock'))


def test_second_acquire_is_refused_naming_the_holder_then_free_after_release(tmp_path):
  out = tmp_path / 'out'
  first = RunLock.acquire(str(out), False, None)
  assert lock_files(out) == ['.convert.lock.000000']
  on_disk = RunInfo.from_text((out / '.convert.lock.000000').read_text())
  assert on_disk == first.me and on_disk.pid == os.getpid()
  assert on_disk.host == socket.gethostname()
  for overwrite in (False, True):  # --overwrite never takes a live lock
    with pytest.raises(UsageError) as refused:
      RunLock.acquire(str(out), overwrite, None)
    message = str(refused.value)
    assert f'is being written by run {first.me.run_id} (host {first.me.host}, pid ' \
           f'{os.getpid()}, started {first.me.started}' in message
  first.release()
  assert lock_files(out) == []
  with RunLock.acquire(str(out), False, None) as again:
    assert again.generation == 0
  assert lock_files(out) == []


def test_a_lock_interrupted_before_it_is_returned_is_taken_back(tmp_path, monkeypatch):
  """A signal's Interrupted (here a KeyboardInterrupt) raised after the lock
  file is written, before acquire returns: no `with` releases it, so
  acquire does; the next run finds the folder free."""
  from pipeline.runs import lock_stores

  def interrupted(self):
    raise KeyboardInterrupt

  out = tmp_path / 'out'
  with monkeypatch.context() as patched:
    patched.setattr(lock_stores._LocalLocks, 'delete_orphans', interrupted)
    with pytest.raises(KeyboardInterrupt):
      RunLock.acquire(str(out), False, None)
  assert lock_files(out) == []
  with RunLock.acquire(str(out), False, None) as again:
    assert again.generation == 0


def test_a_stale_lock_needs_overwrite_and_is_taken_over(tmp_path):
  out = tmp_path / 'out'
  out.mkdir()
  dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True)
  stale = dict(json.loads(RunInfo.this_process(NOW).to_text()), pid=int(dead.stdout),
               run_id='deadbeef0000')
  (out / '.convert.lock.000003').write_text(json.dumps(stale))
  with pytest.raises(UsageError) as refused:
    RunLock.acquire(str(out), False, None)
  assert 'holds the lock of a run that is no longer running (run deadbeef0000' in str(
      refused.value)
  assert f'its process {int(dead.stdout)} on this host is gone' in str(refused.value)
  assert '--overwrite' in str(refused.value)
  assert lock_files(out) == ['.convert.lock.000003']
  lock = RunLock.acquire(str(out), True, None)
  assert lock.generation == 4 and lock_files(out) == ['.convert.lock.000004']
  lock.release()
  assert lock_files(out) == []


def test_the_lock_of_a_killed_run_not_yet_collected_is_stale(tmp_path, zombie_pid):
  """A run killed by `timeout -s KILL` (which kills itself too, so nobody
  collects the run's process) or in a container whose first process
  collects none stays a zombie: its /proc entry remains. Its lock was taken
  for a live run's: `is being written by run ...; wait for it`, even with
  --overwrite, for as long as the zombie stayed (for ever in such a
  container)."""
  out = tmp_path / 'out'
  out.mkdir()
  with open(f'/proc/{zombie_pid}/stat', encoding='ascii') as stat:
    start = stat.read().rsplit(')', 1)[1].split()[19]
  stale = dict(json.loads(RunInfo.this_process(NOW).to_text()), pid=zombie_pid,
               pid_start=start, run_id='deadbeef0001')
  (out / '.convert.lock.000000').write_text(json.dumps(stale))
  assert run_lock.process_start(zombie_pid) is None
  with pytest.raises(UsageError) as refused:
    RunLock.acquire(str(out), False, None)
  assert f'its process {zombie_pid} on this host is gone' in str(refused.value)
  assert '--overwrite' in str(refused.value)
  lock = RunLock.acquire(str(out), True, None)
  assert lock.generation == 1 and lock_files(out) == ['.convert.lock.000001']
  lock.release()
  assert lock_files(out) == []


def test_of_many_acquiring_at_once_exactly_one_wins(tmp_path):
  out, start = tmp_path / 'out', threading.Barrier(8)
  won, refused = [], []

  def attempt():
    start.wait()
    try:
      won.append(RunLock.acquire(str(out), True, None))
    except UsageError as error:
      refused.append(str(error))

  threads = [threading.Thread(target=attempt) for _ in range(8)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert len(won) == 1 and len(refused) == 7
  assert all(f'being written by run {won[0].me.run_id}' in r for r in refused), refused
  won[0].release()
  assert lock_files(out) == []


def test_orphan_temps_old_ones_go_young_ones_stay_vanished_ones_are_skipped(tmp_path):
  """A temp listed, then removed by another run's create() before its age is
  read, is skipped (it once failed the winner of a race with FileNotFoundError)."""

  class ListsAVanishedTemp(lock_stores._LocalLocks):
    def names(self) -> list:
      return super().names() + ['.convert.lock.tmp-gone']

  old, young = tmp_path / '.convert.lock.tmp-old', tmp_path / '.convert.lock.tmp-young'
  old.write_text('x')
  young.write_text('x')
  os.utime(old, (time.time() - 120, time.time() - 120))
  ListsAVanishedTemp(str(tmp_path)).delete_orphans()
  assert sorted(p.name for p in tmp_path.iterdir()) == ['.convert.lock.tmp-young']


def test_the_holder_beats_its_own_lock(tmp_path, monkeypatch):
  monkeypatch.setattr(run_lock, 'HEARTBEAT_SECONDS', 0.05)
  out = tmp_path / 'out'
  with RunLock.acquire(str(out), False, None) as lock:
    first = (out / '.convert.lock.000000').read_text()
    deadline = time.monotonic() + 10
    while RunInfo.from_text((out / '.convert.lock.000000').read_text()).heartbeat == (
        RunInfo.from_text(first).heartbeat) and time.monotonic() < deadline:
      time.sleep(0.05)
    beat = RunInfo.from_text((out / '.convert.lock.000000').read_text())
    assert beat.heartbeat > RunInfo.from_text(first).heartbeat
    assert (beat.run_id, beat.started) == (lock.me.run_id, RunInfo.from_text(first).started)
  assert lock_files(out) == []


def test_a_missed_beat_is_one_warning_line(tmp_path, monkeypatch, capsys):
  """A store's error whose message runs over lines (Beam's S3 errors carry
  botocore's, a traceback's text too) is the warning's first line only."""
  monkeypatch.setattr(run_lock, 'HEARTBEAT_SECONDS', 0.05)
  out = tmp_path / 'out'
  missed = threading.Event()

  class Unanswered(Exception):
    pass

  with RunLock.acquire(str(out), False, None) as lock:
    def replace(name, text):
      missed.set()
      raise Unanswered('Could not connect to the endpoint URL: "http://127.0.0.1:9/b/out"\n'
                       'Traceback (most recent call last):\n  File "x.py", line 1\n')
    monkeypatch.setattr(lock._store, 'replace', replace)
    assert missed.wait(10)
    time.sleep(0.2)  # a few more missed beats
  warnings = capsys.readouterr().err.splitlines()
  assert len(warnings) >= 2, warnings
  assert set(warnings) == {f'warning: run lock heartbeat on {out} failed: Unanswered: Could not '
                           'connect to the endpoint URL: "http://127.0.0.1:9/b/out"'}
  assert lock_files(out) == []


def test_output_dir_that_is_a_file_is_a_usage_error(tmp_path):
  (tmp_path / 'file').write_text('x')
  with pytest.raises(UsageError, match='exists and is not a folder'):
    RunLock.acquire(str(tmp_path / 'file'), False, None)


# ---------------------------------------------------------------- convert, end to end


@pytest.fixture(scope='module')
def data(tmp_path_factory) -> pathlib.Path:
  root = tmp_path_factory.mktemp('lockdata')
  rows = []
  for i in range(12):
    name = list(COLOURS)[i % 3]
    write_image(root / f'images/{name}_{i}.png', COLOURS[name], size=(30 + i, 20 + i))
    rows.append((f'images/{name}_{i}.png', name))
  write_manifest(root / 'manifest.csv', rows)
  return root


def convert_flags(data: pathlib.Path, out, *extra) -> list:
  return ['--manifest', str(data / 'manifest.csv'), '--output_dir', str(out),
          '--height', '16', '--width', '16', '--progress', 'off', *extra]


def start(point: str, flags: list, go=None) -> subprocess.Popen:
  """The run, in a TMPDIR of its own: a run killed at `point` leaves its
  img2tfrecord-run-* temp folder there (only a killed run does), and
  finish() removes it."""
  command = [sys.executable, '-m', 'tests.lock_helpers', point, *([str(go)] if go else []),
             '--', *flags]
  temp = tempfile.mkdtemp(prefix='killed-run-')
  process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TMPDIR=temp))
  process.temp_dir = temp
  return process


def finish(process: subprocess.Popen) -> tuple:
  try:
    out, err = process.communicate(timeout=TIMEOUT)
  finally:
    shutil.rmtree(process.temp_dir, ignore_errors=True)
  return process.returncode, out, err


def kill_at(point: str, flags: list) -> tuple:
  return finish(start(point, flags))


def in_process(main, argv: list, capsys) -> tuple:
  """(exit code, stdout + stderr) of convert.main or validate.main run here."""
  capsys.readouterr()
  code = main(argv)
  captured = capsys.readouterr()
  return code, captured.out + captured.err


@pytest.fixture(scope='module')
def reference(data, tmp_path_factory) -> dict:
  """name -> bytes of a clean run's dataset (dataset_info.json left out)."""
  out = tmp_path_factory.mktemp('reference') / 'out'
  assert convert.main(convert_flags(data, out)) == EXIT_OK
  return {p.name: p.read_bytes() for p in out.iterdir() if p.name != 'dataset_info.json'}


def assert_same_dataset(out: pathlib.Path, reference: dict) -> None:
  names = sorted(p.name for p in out.iterdir())
  assert names == sorted([*reference, 'dataset_info.json']), names
  for name, data in reference.items():
    assert (out / name).read_bytes() == data, name
  info = json.loads((out / 'dataset_info.json').read_text())
  assert info['num_examples'] == 12 and info['num_rejected'] == 0


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
def test_two_converts_at_once_exactly_one_proceeds(data, tmp_path, reference):
  out, sync = tmp_path / 'out', tmp_path / 'sync'
  sync.mkdir()
  go = sync / 'go'
  runs = [start(f'hold:{sync}', convert_flags(data, out), go) for _ in range(2)]
  time.sleep(0.5)
  go.write_text('')
  deadline = time.monotonic() + TIMEOUT
  while not any(r.poll() is not None for r in runs) and time.monotonic() < deadline:
    time.sleep(0.05)
  (loser,) = [r for r in runs if r.poll() is not None]
  (winner,) = [r for r in runs if r is not loser]
  code, _, err = finish(loser)
  assert code == EXIT_USAGE, err
  while not list(sync.glob('holding-*')) and time.monotonic() < deadline:
    time.sleep(0.05)
  # The loser exited while the winner still holds the lock, paused before writing.
  assert [p.name for p in sync.glob('holding-*')] == [f'holding-{winner.pid}']
  held = RunInfo.from_text((out / '.convert.lock.000000').read_text())
  assert held.pid == winner.pid
  assert err.strip() == (
      f'error: --output_dir {out} is being written by {held.describe()}; wait for it to '
      f'finish or stop it (a killed run is taken over with --overwrite)')
  assert 'Traceback' not in err
  (sync / 'release').write_text('')
  code, _, err = finish(winner)
  assert code == EXIT_OK, err
  assert_same_dataset(out, reference)


KILL_POINTS = [
    pytest.param('locked', id='locked', marks=pytest.mark.slow),
    pytest.param('clearing', id='clearing', marks=pytest.mark.slow),
    pytest.param('shards', id='shards', marks=pytest.mark.slow),
    pytest.param('written', id='written', marks=pytest.mark.slow),
]


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('point', KILL_POINTS)
def test_killed_run_is_incomplete_and_a_rerun_with_overwrite_recovers(
    point, data, tmp_path, reference, capsys):
  out = tmp_path / 'out'
  if point == 'clearing':  # killed while --overwrite clears a previous dataset
    assert convert.main(convert_flags(data, out)) == EXIT_OK
  code, _, err = kill_at(point, convert_flags(data, out, '--overwrite'))
  assert code == -signal.SIGKILL, err
  assert lock_files(out) == ['.convert.lock.000000']
  code, report = in_process(validate.main, ['--input_dir', str(out)], capsys)
  if point == 'written':  # killed once the dataset was complete: only the lock is left
    assert code == EXIT_OK, report
  else:
    assert code == EXIT_FAILED, report
    assert 'dataset_info.json' in report and 'incomplete' in report, report
  code, err = in_process(convert.main, convert_flags(data, out), capsys)
  assert code == EXIT_USAGE, err
  assert 'holds the lock of a run that is no longer running' in err and '--overwrite' in err
  assert convert.main(convert_flags(data, out, '--overwrite')) == EXIT_OK
  assert_same_dataset(out, reference)  # nothing of the dead run, no lock
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK


def test_a_lock_whose_release_was_cut_short_is_no_live_run_of_this_process(tmp_path,
                                                                           monkeypatch):
  """pipeline.api in a notebook: a second Ctrl-C during the clean-up cut the
  lock's release short, its file left. This process, alive, is no longer
  running that run: the next call into the folder finds the lock stale, as a
  killed run's (taken over with --overwrite), not "being written" for good."""
  out = tmp_path / 'out'
  first = RunLock.acquire(str(out), False, None)

  def second_ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt

  monkeypatch.setattr(first._beats, 'join', second_ctrl_c)
  with pytest.raises(KeyboardInterrupt):
    first.release()
  assert lock_files(out) == ['.convert.lock.000000']  # left, as the interrupt left it
  with pytest.raises(UsageError) as refused:
    RunLock.acquire(str(out), False, None)
  assert str(refused.value) == (
      f'--output_dir {out} holds the lock of a run that is no longer running '
      f'({first.me.describe()}: it was a run of this process {os.getpid()} that is over, its '
      f'clean-up cut short); pass --overwrite to take it over and replace what that run left')
  with RunLock.acquire(str(out), True, None) as again:
    assert again.generation == 1
    assert lock_files(out) == ['.convert.lock.000001']
    # while it runs, that lock is live to this process as to any other
    with pytest.raises(UsageError, match='is being written by run ' + again.me.run_id):
      RunLock.acquire(str(out), True, None)
  assert lock_files(out) == []
