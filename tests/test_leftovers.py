"""What failed and killed runs leave in OUT, and how --overwrite clears it: a
run that fails removes its partial output, a full disk is recovered with
--overwrite (on a real 2 MiB tmpfs), and --overwrite clears the shards of
every split the dead run wrote, not only the splits the new run writes."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.runs import lock_stores
from pipeline.runs import staged_dir
from pipeline.runs.run_lock import RunInfo
from pipeline.runs.run_lock import RunLock
from tests.conftest import COLOURS
from tests.conftest import write_image
from tests.conftest import write_manifest
from transforms import write_metadata

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLEAN = ['dataset_info.json', 'label_map.txt', 'rejected.jsonl', 'train-00000-of-00001.tfrecord',
         'train.sources.jsonl.gz']


@pytest.fixture(scope='module')
def data(tmp_path_factory) -> pathlib.Path:
  """manifest.csv: 12 images (3.2 MB of raw 300x300 records: more than the
  2 MiB disk); small.csv: 4 of them."""
  root = tmp_path_factory.mktemp('leftovers')
  rows = []
  for i in range(12):
    name = list(COLOURS)[i % 3]
    write_image(root / f'images/{name}_{i}.png', COLOURS[name], size=(30 + i, 20 + i))
    rows.append((f'{root}/images/{name}_{i}.png', name))
  write_manifest(root / 'manifest.csv', rows)
  write_manifest(root / 'small.csv', rows[:4])
  return root


def small_run(data: pathlib.Path, out: pathlib.Path, *extra) -> list:
  return ['--manifest', str(data / 'small.csv'), '--output_dir', str(out), '--height', '8',
          '--width', '8', '--progress', 'off', *extra]


def run(main, argv: list, capsys) -> tuple:
  """(exit code, stdout, stderr) of convert.main or validate.main run here."""
  capsys.readouterr()
  code = main([str(a) for a in argv])
  captured = capsys.readouterr()
  return code, captured.out, captured.err


def names(folder: pathlib.Path) -> list:
  """Every entry below `folder`, hidden ones (locks, lock temps) too."""
  return sorted(str(p.relative_to(folder)) for p in folder.rglob('*'))


def dead_pid() -> int:
  done = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True)
  return int(done.stdout)


def dead_lock(out: pathlib.Path, generation: int = 0, splits=None) -> RunInfo:
  """The lock of a run that was SIGKILLed (its process is gone); splits None:
  a lock written before locks named their splits."""
  fields = json.loads(RunInfo.this_process(time.time()).to_text())
  fields.update(pid=dead_pid(), run_id='deadbeef0000')
  fields.pop('splits', None)
  if splits is not None:
    fields['splits'] = list(splits)
  out.mkdir(parents=True, exist_ok=True)
  (out / f'.convert.lock.{generation:06d}').write_text(json.dumps(fields))
  return RunInfo.from_text(json.dumps(fields))


def assert_valid(out: pathlib.Path, capsys, examples: int = 4) -> None:
  code, printed, _ = run(validate.main, ['--input_dir', out], capsys)
  assert code == EXIT_OK, printed
  assert printed.startswith(f'OK: {examples} examples')
  (out / 'validation_report.json').unlink()


# ------------------------------------------------------------ a failed run cleans up


def test_a_failed_run_removes_its_partial_output(data, tmp_path, capsys, monkeypatch):
  """Killed by a bug after every shard is written, before dataset_info.json."""
  def fails(*_):
    raise RuntimeError('disk on fire')

  monkeypatch.setattr(write_metadata.WriteInfoFn, 'process', fails)
  out = tmp_path / 'out'
  code, _, err = run(convert.main, small_run(data, out, '--split', 'train=0.5,test=0.5',
                                             '--write_index'), capsys)
  assert code == EXIT_FAILED
  assert err.splitlines()[0] == ("error: the job failed: RuntimeError: disk on fire "
                                 "[while running 'WriteDatasetInfo']")
  assert names(out) == []  # no shard, index, temp folder, lock or lock temp
  monkeypatch.undo()
  code, _, err = run(convert.main, small_run(data, out), capsys)  # no --overwrite needed
  assert code == EXIT_OK, err
  assert names(out) == CLEAN
  assert_valid(out, capsys)


# ------------------------------------------- --overwrite: every split the dead run wrote


def fake_shard(out: pathlib.Path, name: str) -> None:
  (out / name).write_bytes(b'partial shard of a killed run')


def test_overwrite_clears_the_splits_of_a_killed_split_run(data, tmp_path, capsys):
  """A run with --split train=0.5,test=0.5 killed after its shards; the rerun
  writes no split (train only). The dead run's lock predates split names in
  locks: test is one of --split_names."""
  out = tmp_path / 'out'
  dead_lock(out)
  for name in ('train-00000-of-00001.tfrecord', 'test-00000-of-00001.tfrecord',
               'test-00000-of-00001.tfrecord.index'):
    fake_shard(out, name)
  (out / 'beam-temp-test-shards').mkdir()
  fake_shard(out / 'beam-temp-test-shards', '00000.tfrecord')
  code, printed, err = run(convert.main, small_run(data, out, '--overwrite'), capsys)
  assert (code, err) == (EXIT_OK, '')
  assert printed.startswith('Converted 4 of 4 rows')
  assert names(out) == CLEAN
  assert_valid(out, capsys)


def test_overwrite_clears_splits_named_by_the_dead_runs_lock(data, tmp_path, capsys):
  """Splits of any name: the dead run's lock names them."""
  out = tmp_path / 'out'
  dead_lock(out, 3, splits=('left', 'right'))
  for name in ('left-00000-of-00002.tfrecord', 'left-00001-of-00002.tfrecord.gz',
               'right-00000-of-00001.tfrecord'):
    fake_shard(out, name)
  (out / 'notes-00000-of-00001.txt').write_text('mine')  # not a shard name: stays
  code, _, err = run(convert.main, small_run(data, out, '--overwrite'), capsys)
  assert (code, err) == (EXIT_OK, '')
  assert names(out) == sorted([*CLEAN, 'notes-00000-of-00001.txt'])
  assert_valid(out, capsys)


def test_a_takeover_lock_carries_the_dead_runs_splits(tmp_path):
  """Killed again after taking over: the next run still learns every split."""
  out = tmp_path / 'out'
  dead_lock(out, 0, splits=('left', 'right'))
  lock = RunLock.acquire(str(out), True, None, splits=('train',))
  assert lock.me.splits == ('train', 'left', 'right')
  assert RunInfo.from_text((out / '.convert.lock.000001').read_text()).splits == (
      'train', 'left', 'right')
  lock.release()


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
def test_overwrite_after_a_real_sigkill_of_a_split_run(data, tmp_path, capsys):
  out = tmp_path / 'out'
  # Keys relative to the manifest: the hash split is the same on every
  # machine (absolute keys under a temp folder left `test` empty 1 run in 16).
  relative = data / 'small-relative.csv'
  relative.write_text((data / 'small.csv').read_text().replace(f'{data}/', ''))
  split_run = small_run(data, out, '--split', 'train=0.5,test=0.5', '--split_names', 'train')
  split_run[1] = str(relative)
  temp = tmp_path / 'temp'  # the killed run's img2tfrecord-run-* folder stays there
  temp.mkdir()
  killed = subprocess.run(
      [sys.executable, '-m', 'tests.lock_helpers', 'shards', '--', *split_run],
      cwd=ROOT, capture_output=True, text=True, timeout=180,
      env=dict(os.environ, TMPDIR=str(temp)))
  assert killed.returncode == -signal.SIGKILL, killed.stderr
  left = names(out)
  assert any(n.startswith('test-') for n in left) and '.convert.lock.000000' in left, left
  code, _, err = run(convert.main, small_run(data, out, '--overwrite', '--split_names',
                                             'train'), capsys)
  assert (code, err) == (EXIT_OK, '')
  assert names(out) == CLEAN
  assert_valid(out, capsys)


def test_an_overwrite_stopped_mid_clear_leaves_no_folder_that_looks_complete(tmp_path,
                                                                             monkeypatch):
  """--overwrite deletes the previous dataset_info.json before anything else:
  a run stopped after its first deletion (Ctrl-C) leaves no folder that
  readers take as a complete dataset with a shard gone. Names sort before it
  here (a split 'apples', a killed run's beam-temp-* folder), so the order
  is the clear's, not the listing's."""
  from pipeline.runs import output_dir
  out = tmp_path / 'out'
  (out / 'beam-temp-apples-shards').mkdir(parents=True)
  (out / 'apples-00000-of-00001.tfrecord').write_bytes(b'records')
  (out / 'label_map.txt').write_text('cat\n')
  (out / 'dataset_info.json').write_text(json.dumps(
      {'splits': {'apples': {'shards': ['apples-00000-of-00001.tfrecord']}}}))
  deleted, delete = [], output_dir._delete

  def stopped_after_one(folder, name, files):
    if deleted:
      raise KeyboardInterrupt
    deleted.append(name)
    delete(folder, name, files)

  monkeypatch.setattr(output_dir, '_delete', stopped_after_one)
  with pytest.raises(KeyboardInterrupt):
    output_dir.prepare_output_dir(str(out), True, ('apples',))
  assert deleted == ['dataset_info.json']
  assert sorted(p.name for p in out.iterdir()) == [
      'apples-00000-of-00001.tfrecord', 'beam-temp-apples-shards', 'label_map.txt']


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def disk(tmp_path):
  """A real 2 MiB tmpfs (mounting needs root), unmounted afterwards."""
  mount = tmp_path / 'disk'
  mount.mkdir()
  try:
    done = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', str(mount)],
                          capture_output=True, text=True)
  except FileNotFoundError:
    pytest.skip('no mount command: the full-disk tests need a small tmpfs')
  if done.returncode:
    pytest.skip(f'cannot mount a 2 MiB tmpfs ({done.stderr.strip()}): the full-disk tests '
                f'need root')
  yield mount
  subprocess.run(['umount', str(mount)], check=True)


def fill(path: pathlib.Path) -> None:
  """Writes `path` until the disk is full."""
  path.parent.mkdir(parents=True, exist_ok=True)
  handle = os.open(path, os.O_WRONLY | os.O_CREAT)
  try:
    while True:
      os.write(handle, b'\xab' * 65536)
  except OSError as error:
    assert error.errno == errno.ENOSPC
  finally:
    os.close(handle)
  assert os.statvfs(path.parent).f_bavail == 0


def test_a_run_that_fills_the_disk_removes_its_partial_shards(data, disk, capsys):
  out = disk / 'out'
  code, _, err = run(convert.main, ['--manifest', data / 'manifest.csv', '--output_dir', out,
                                    '--progress', 'off'], capsys)
  assert code == EXIT_FAILED
  assert [line for line in err.splitlines() if line.startswith('error:')] == [
      "error: the job failed: RuntimeError: OSError: [Errno 28] No space left on device "
      "[while running 'Write[train]/WriteSizeCapped']"]
  # the machine's state, not a bug: one line, no traceback (there were two, ~100 lines)
  assert 'Traceback' not in err and 'ERROR:' not in err
  assert names(out) == []  # the disk is free again: no shard, temp folder or lock
  code, _, err = run(convert.main, small_run(data, out), capsys)
  assert (code, err) == (EXIT_OK, '')
  assert names(out) == CLEAN
  assert_valid(out, capsys)


def test_overwrite_recovers_a_disk_filled_by_a_killed_run(data, disk, capsys):
  out = disk / 'out'
  holder = dead_lock(out, 2, splits=('train',))
  orphan = out / '.convert.lock.tmp-0123456789abcdef0123456789abcdef'  # killed in create()
  orphan.write_text('')
  os.utime(orphan, (time.time() - 120, time.time() - 120))
  fill(out / 'beam-temp-train-shards' / '00000.tfrecord')
  left = names(out)
  code, _, err = run(convert.main, small_run(data, out), capsys)
  assert code == EXIT_USAGE
  assert err.startswith(f'error: --output_dir {out} holds the lock of a run that is no longer '
                        f'running ({holder.describe()}: its process {holder.pid} on this host '
                        f'is gone); pass --overwrite')
  assert len(err.splitlines()) == 1 and names(out) == left
  code, printed, err = run(convert.main, small_run(data, out, '--overwrite'), capsys)
  assert (code, err) == (EXIT_OK, '')
  assert printed.startswith('Converted 4 of 4 rows')
  assert names(out) == CLEAN  # no lock, no lock temp, no leftover
  assert_valid(out, capsys)


def test_overwrite_recovers_a_full_disk_without_a_lock(data, disk, capsys):
  """Leftovers of a failed run (before failed runs cleaned up): no lock."""
  out = disk / 'out'
  fill(out / 'train-00000-of-00003.tfrecord')
  left = names(out)
  code, _, err = run(convert.main, small_run(data, out), capsys)
  assert code == EXIT_USAGE
  assert err == (f'error: --output_dir {out}: no space left on the device to write the run '
                 f'lock (No space left on device); free space there, or pass --overwrite to '
                 f'remove what a previous run left\n')
  assert names(out) == left  # and no lock temp left behind
  code, _, err = run(convert.main, small_run(data, out, '--overwrite'), capsys)
  assert (code, err) == (EXIT_OK, '')
  assert names(out) == CLEAN
  assert_valid(out, capsys)


def test_a_disk_full_of_other_files_is_a_one_line_error(data, disk, capsys):
  out = disk / 'out'
  fill(disk / 'someone-elses.bin')
  code, _, err = run(convert.main, small_run(data, out, '--overwrite'), capsys)
  assert code == EXIT_USAGE
  assert err == (f'error: --output_dir {out}: no space left on the device to write the run '
                 f'lock, even after removing what a previous run left (No space left on '
                 f'device); free space there\n')
  assert names(out) == []
  assert (disk / 'someone-elses.bin').stat().st_size > 0


def test_a_lock_that_cannot_be_written_leaves_no_temp_file(disk):
  fill(disk / 'filler.bin')
  store = lock_stores.lock_store(str(disk), None)
  with pytest.raises(OSError) as error:
    store.create('.convert.lock.000000', 'x' * 100)
  assert error.value.errno == errno.ENOSPC
  assert names(disk) == ['filler.bin']


# ------------------------------------------------------- a killed run's temp folder


def test_a_run_removes_the_temp_folders_of_this_hosts_killed_runs(tmp_path, monkeypatch):
  """A SIGKILLed run leaves its img2tfrecord-run-* folder in TMPDIR (nothing
  can run after SIGKILL); the next run removes it, and only it: not a live
  process's, another host's, nor a name of another shape."""
  import socket
  import tempfile

  from pipeline.runs import run_temp
  gone = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True)
  dead = int(gone.stdout)
  host = socket.gethostname()
  names = {'killed': f'img2tfrecord-run-{host}-{dead}-ab12cd34',
           'running': f'img2tfrecord-run-{host}-{os.getpid()}-ef56gh78',
           'elsewhere': f'img2tfrecord-run-otherhost-{dead}-ij90kl12',
           'older shape': 'img2tfrecord-run-mn34op56', 'unrelated': 'notes'}
  for name in names.values():
    (tmp_path / name).mkdir()
    (tmp_path / name / 'beam-temp-x').write_bytes(b'left behind')
  monkeypatch.setenv('TMPDIR', str(tmp_path))
  monkeypatch.setattr(tempfile, 'tempdir', None)
  with run_temp.private_temp_dir() as mine:
    assert os.path.basename(mine).startswith(f'img2tfrecord-run-{host}-{os.getpid()}-')
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(mine)] + [n for k, n in names.items() if k != 'killed'])
  assert sorted(os.listdir(tmp_path)) == sorted(n for k, n in names.items() if k != 'killed')
  assert run_temp.killed_run_owner(names['killed'], host) == dead
  assert run_temp.killed_run_owner(names['elsewhere'], host) is None
  assert run_temp.killed_run_owner(names['older shape'], host) is None


def test_the_temp_folder_of_a_killed_run_not_yet_collected_is_removed(tmp_path, monkeypatch,
                                                                      zombie_pid):
  """A run killed by `timeout -s KILL` (which kills itself too) stays a
  zombie no one collects in some containers: its temp folder was kept, as a
  live run's, for as long as the zombie stayed."""
  import socket
  import tempfile

  from pipeline.runs import run_temp
  host = socket.gethostname()
  killed = tmp_path / f'img2tfrecord-run-{host}-{zombie_pid}-ab12cd34'
  killed.mkdir()
  (killed / 'beam-temp-x').write_bytes(b'left behind')
  monkeypatch.setenv('TMPDIR', str(tmp_path))
  monkeypatch.setattr(tempfile, 'tempdir', None)
  with run_temp.private_temp_dir() as mine:
    assert os.listdir(tmp_path) == [os.path.basename(mine)]
  assert os.listdir(tmp_path) == []


def test_overwrite_removes_an_export_linking_to_the_replaced_shards(data, tmp_path, capsys):
  """export --format tfds's default folder, OUT/tfds, links to OUT's shards:
  after --overwrite TFDS would read the new records under the export's old
  class names and counts. It goes, said in a note; a folder of copies, or of
  links elsewhere, is the user's and stays."""
  out = tmp_path / 'out'
  small = ['--height', '8', '--width', '8', '--progress', 'off']
  assert convert.main(['--manifest', str(data / 'small.csv'), '--output_dir', str(out),
                       *small]) == EXIT_OK
  shard = json.loads((out / 'dataset_info.json').read_text())['splits']['train']['shards'][0]
  for name, link in (('tfds', f'../{shard}'), ('copies', None), ('elsewhere', '/dev/null')):
    (out / name).mkdir()
    (out / name / 'features.json').write_text('{}')
    if link:
      (out / name / shard).symlink_to(link)
    else:
      (out / name / shard).write_bytes((out / shard).read_bytes())
  capsys.readouterr()
  assert convert.main(['--manifest', str(data / 'manifest.csv'), '--output_dir', str(out),
                       '--overwrite', *small]) == EXIT_OK
  assert capsys.readouterr().err.splitlines() == [
      f"note: removed {out / 'tfds'}, an export whose shards are links to the replaced "
      "dataset's; export again"]
  assert not (out / 'tfds').exists()
  assert sorted(p.name for p in (out / 'copies').iterdir()) == ['features.json', shard]
  assert (out / 'elsewhere' / shard).is_symlink()


def test_overwrite_removes_what_a_killed_export_left_but_not_a_live_ones(data, tmp_path,
                                                                         capsys):
  """An export killed while writing OUT/tfds (kill -9 too) leaves
  OUT/.tfds.partial-export-XXXXXXXX (pipeline/runs/staged_dir.py), with no
  features.json: every --overwrite left it there. It goes now, with export's
  note, and so does a replaced-export folder; one a live export holds (its
  flock) stays, as does a symlink of such a name (no build makes one)."""
  out = tmp_path / 'out'
  small = ['--height', '8', '--width', '8', '--progress', 'off']
  assert convert.main(['--manifest', str(data / 'small.csv'), '--output_dir', str(out),
                       *small]) == EXIT_OK
  shard = json.loads((out / 'dataset_info.json').read_text())['splits']['train']['shards'][0]
  dead, replaced = out / '.tfds.partial-export-0123abcd', out / '.mine.replaced-export-89abcdef'
  for folder in (dead, replaced):
    folder.mkdir()
    (folder / shard).symlink_to(f'../{shard}')
  (tmp_path / 'elsewhere').mkdir()
  (out / '.link.partial-export-01234567').symlink_to(tmp_path / 'elsewhere')
  with staged_dir.Staging.beside(str(out / 'tfds')) as live:
    (pathlib.Path(live.path) / shard).symlink_to(f'../{shard}')
    capsys.readouterr()
    assert convert.main(['--manifest', str(data / 'manifest.csv'), '--output_dir', str(out),
                         '--overwrite', *small]) == EXIT_OK
    assert capsys.readouterr().err.splitlines() == [
        f'note: removed {path}, left by an export that did not finish' for path in (
            replaced, dead)]  # sorted
    assert sorted(os.listdir(out)) == sorted(
        ['.link.partial-export-01234567', os.path.basename(live.path), *CLEAN])
    assert (pathlib.Path(live.path) / shard).is_symlink()
  assert (tmp_path / 'elsewhere').is_dir()


def test_a_staging_folder_past_its_metadata_is_staged_dirs_not_a_linked_export(data, tmp_path,
                                                                               capsys):
  """An export killed (kill -9) once its metadata is written leaves its
  staging folder with features.json and the shard links (measured: 3 of 3
  kills as the folder appeared). linked_exports took it for an export and
  removed it with "an export whose shards are links to the replaced
  dataset's; export again", not export's note, and without the flock check:
  a live export's folder at that point was removed under it. Now both are
  staged_dir's: the dead one goes with export's note, the live one stays."""
  out = tmp_path / 'out'
  small = ['--height', '8', '--width', '8', '--progress', 'off']
  assert convert.main(['--manifest', str(data / 'small.csv'), '--output_dir', str(out),
                       *small]) == EXIT_OK
  shard = json.loads((out / 'dataset_info.json').read_text())['splits']['train']['shards'][0]
  dead = out / '.tfds.partial-export-0123abcd'
  dead.mkdir()
  with staged_dir.Staging.beside(str(out / 'tfds')) as live:
    for folder in (dead, pathlib.Path(live.path)):
      (folder / 'features.json').write_text('{}')
      (folder / shard).symlink_to(f'../{shard}')
    capsys.readouterr()
    assert convert.main(['--manifest', str(data / 'manifest.csv'), '--output_dir', str(out),
                         '--overwrite', *small]) == EXIT_OK
    assert capsys.readouterr().err.splitlines() == [
        f'note: removed {dead}, left by an export that did not finish']
    assert sorted(os.listdir(out)) == sorted([os.path.basename(live.path), *CLEAN])
    assert (pathlib.Path(live.path) / 'features.json').is_file()


def test_a_folder_holding_only_a_killed_exports_folder_needs_overwrite(data, tmp_path, capsys):
  """Like any entry, the folder a killed export left makes OUT not empty;
  --overwrite, which said it replaced OUT, now removes it too."""
  out = tmp_path / 'out'
  (out / '.tfds.partial-export-0123abcd').mkdir(parents=True)
  code, _, err = run(convert.main, small_run(data, out), capsys)
  assert code == EXIT_USAGE
  assert f"error: --output_dir {out} is not empty (1 entries, e.g. " \
         f"'.tfds.partial-export-0123abcd')" in err
  code, _, err = run(convert.main, small_run(data, out, '--overwrite'), capsys)
  assert (code, err.splitlines()) == (EXIT_OK, [
      f"note: removed {out / '.tfds.partial-export-0123abcd'}, left by an export that did "
      f"not finish"])
  assert sorted(os.listdir(out)) == CLEAN


def test_a_failed_run_of_100000_shards_or_more_removes_them_too(tmp_path):
  """From 100,000 shards on, shard numbers have 6 digits: a failed or
  interrupted run (and --overwrite, after a killed one) left every such shard
  behind, matched by 5-digit patterns only. Other files stay."""
  from pipeline.runs.output_dir import removed_on_failure
  names = ['train-00000-of-100000.tfrecord', 'train-99999-of-100000.tfrecord.gz',
           'train-100000-of-100001.tfrecord', 'train-100000-of-100001.tfrecord.index',
           'test-00001-of-100000.tfrecord', 'notes-00000-of-100000.tfrecord', 'mine.txt']
  for name in names:
    (tmp_path / name).write_bytes(b'x')
  with pytest.raises(RuntimeError, match='the job failed'):
    with removed_on_failure(str(tmp_path), ('train', 'test')):
      raise RuntimeError('the job failed')
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      'mine.txt', 'notes-00000-of-100000.tfrecord']
