"""A filesystem that misbehaves: inspect's export on a full disk (a real
2 MiB tmpfs: needs root, skipped otherwise), and paths whose bytes are not
UTF-8 (a name Linux allows and Python gives as lone surrogates)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from pipeline import convert
from pipeline import look
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.runs import previous
from tests.conftest import COLOURS
from tests.conftest import write_image
from tests.conftest import write_manifest
from tests.test_leftovers import disk  # noqa: F401  (a fixture: a 2 MiB tmpfs)
from tests.test_leftovers import fill
from tests.test_leftovers import names
from tests.test_usage import _without_permission_bypass
from transforms import write_metadata

NOT_UTF8 = os.fsdecode(b'out\xff')  # 'out\udcff'


@pytest.fixture(scope='module')
def data(tmp_path_factory) -> pathlib.Path:
  """manifest.csv: 4 images of two classes."""
  root = tmp_path_factory.mktemp('fs_faults')
  rows = []
  for i, name in enumerate(['red', 'green'] * 2):
    write_image(root / f'images/{name}/{i}.png', COLOURS[name], size=(20 + i, 10 + i))
    rows.append((f'{root}/images/{name}/{i}.png', name))
  write_manifest(root / 'manifest.csv', rows)
  return root


def converted(data: pathlib.Path, out: pathlib.Path, *extra) -> int:
  return convert.main(['--manifest', str(data / 'manifest.csv'), '--output_dir', str(out),
                       '--height', '8', '--width', '8', '--progress', 'off', *extra])


def test_an_export_on_a_full_disk_is_one_line_exit_2_and_no_cut_off_file(
        data, disk, tmp_path, capsys):  # noqa: F811
  out = tmp_path / 'out'
  assert converted(data, out) == EXIT_OK
  fill(disk / 'filler')
  capsys.readouterr()
  # an OSError out of look.main (a 40-line traceback), and the image's file
  # left in the folder
  assert look.main(['--input_dir', str(out), '--export_dir', str(disk / 'look')]) == EXIT_USAGE
  err = capsys.readouterr().err  # the first sample's label: the keys' order, of tmp_path's name
  assert err in [f'error: --export_dir {disk / "look"}: cannot write 0_Label_{label}.jpg: '
                 'No space left on device\n' for label in (0, 1)]
  assert names(disk / 'look') == []
  os.remove(disk / 'filler')  # space again: the same export is whole
  assert look.main(['--input_dir', str(out), '--export_dir', str(disk / 'look')]) == EXIT_OK
  assert sorted(p for p in names(disk / 'look') if not p.endswith('.jpg')) == [
      'contact_sheet.png', 'label_histogram.png', 'report.html', 'samples.csv']
  assert len([p for p in names(disk / 'look') if p.endswith('.jpg')]) == 4


def _refuses_non_utf8(tmp_path: pathlib.Path, capsys, code: int, flag: str, shown: str):
  assert code == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --{flag} {shown} is not UTF-8 text: the dataset records its options and paths '
      'as UTF-8; rename it (or run from a folder whose path is UTF-8)\n')


def test_an_output_dir_that_is_not_utf8_is_refused_before_anything_is_written(
        data, tmp_path, capsys):
  out = tmp_path / NOT_UTF8
  try:
    out.mkdir()
    out.rmdir()
  except (OSError, UnicodeEncodeError):
    pytest.skip('this filesystem takes no name that is not UTF-8')
  capsys.readouterr()
  # it converted every row, then failed: exit 1, 60 lines of traceback (its
  # dataset_info.json, rejected.jsonl and Beam's job graph hold UTF-8 only)
  code = converted(data, out)
  _refuses_non_utf8(tmp_path, capsys, code, 'output_dir', f'{tmp_path}/out\\xff')
  assert not out.exists()


def test_an_image_dir_or_a_working_folder_that_is_not_utf8_is_refused(
        data, tmp_path, capsys, monkeypatch):
  folder = tmp_path / NOT_UTF8
  try:
    (folder / 'red').mkdir(parents=True)
  except (OSError, UnicodeEncodeError):
    pytest.skip('this filesystem takes no name that is not UTF-8')
  write_image(folder / 'red' / 'a.png', COLOURS['red'])
  capsys.readouterr()
  code = convert.main(['--image_dir', str(folder), '--output_dir', str(tmp_path / 'out'),
                       '--progress', 'off'])
  _refuses_non_utf8(tmp_path, capsys, code, 'image_dir', f'{tmp_path}/out\\xff')
  assert not (tmp_path / 'out').exists()
  # a relative --output_dir in such a folder: its absolute path is recorded
  monkeypatch.chdir(folder)
  code = converted(data, pathlib.Path('night1'))
  _refuses_non_utf8(tmp_path, capsys, code, 'output_dir', f'{tmp_path}/out\\xff/night1')
  assert sorted(os.listdir(folder)) == ['red']


def test_inspect_exports_a_dataset_in_a_folder_named_in_bytes_that_are_not_utf8(data, tmp_path):
  """A dataset folder of such a name: the page's and the histogram's title
  (UTF-8 only) failed, a UnicodeEncodeError out of look.main after the images."""
  folder = tmp_path / NOT_UTF8
  try:
    folder.mkdir()
  except (OSError, UnicodeEncodeError):
    pytest.skip('this filesystem takes no name that is not UTF-8')
  assert converted(data, tmp_path / 'out') == EXIT_OK
  os.rename(tmp_path / 'out', folder / 'ds')
  assert look.main(['--input_dir', str(folder / 'ds'), '--export_dir', str(tmp_path / 'look')]
                   ) == EXIT_OK
  page = (tmp_path / 'look' / 'report.html').read_text(encoding='utf-8')
  assert f'img2tfrecord dataset {tmp_path}/out\ufffd/ds' in page


def test_inspect_files_named_in_bytes_that_are_not_utf8_are_in_samples_csv(data, tmp_path):
  """Their names in samples.csv as the filesystem gives them: the CSV's
  write failed, a UnicodeEncodeError out of look.main after the images."""
  folder = tmp_path / 'files'
  folder.mkdir()
  try:
    (folder / NOT_UTF8).mkdir()
  except (OSError, UnicodeEncodeError):
    pytest.skip('this filesystem takes no name that is not UTF-8')
  assert converted(data, tmp_path / 'out') == EXIT_OK
  os.rename(tmp_path / 'out' / 'train-00000-of-00001.tfrecord',
            folder / os.fsdecode(b'a\xfd.tfrecord'))
  assert look.main(['--files', str(folder / '*.tfrecord'), '--height', '8', '--width', '8',
                    '--export_dir', str(tmp_path / 'files')]) == EXIT_OK
  rows = (tmp_path / 'files' / 'samples.csv').read_bytes().splitlines()
  assert len(rows) == 5 and all(b',a\xfd.tfrecord,' in row for row in rows[1:])


@pytest.fixture
def nights(tmp_path):
  """nights/ that this user may not write in, nights/n1/ that it may: by its
  mode, or as root (whom modes do not stop) a read-only tmpfs holding a
  writable one (skipped when it cannot be mounted); unmounted afterwards."""
  folder = tmp_path / 'nights'
  (folder / 'n1').mkdir(parents=True)
  folder.chmod(0o555)
  if not os.access(folder, os.W_OK):
    yield folder
    folder.chmod(0o755)
    return
  folder.chmod(0o755)
  mounted = []
  try:
    for command in (['mount', '-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', str(folder)],
                    ['mkdir', str(folder / 'n1')],
                    ['mount', '-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', str(folder / 'n1')],
                    ['mount', '-o', 'remount,ro', str(folder)]):
      if subprocess.run(command, capture_output=True).returncode:
        pytest.skip(f'cannot {" ".join(command[:2])}: needs root')
      if command[0] == 'mount' and 'remount,ro' not in command:
        mounted.append(command[-1])
    yield folder
  finally:
    for path in reversed(mounted):
      subprocess.run(['umount', path], check=True)


def test_a_nightly_run_whose_pointer_folder_cannot_be_written_is_refused_first(
        data, nights, capsys):
  capsys.readouterr()
  # it wrote and published the whole dataset, then failed writing latest:
  # exit 1, a traceback, the pointer left naming the night before
  code = converted(data, nights / 'n1', '--previous_dataset', str(nights / 'latest'),
                   '--previous_dataset_missing', 'full')
  assert code == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --output_dir {nights / "n1"}: {nights}, where a run with --previous_dataset '
      'writes its latest pointer, cannot be written by this user: make it writable, or write '
      "the run's folder elsewhere\n")
  assert os.listdir(nights / 'n1') == [] and sorted(os.listdir(nights)) == ['n1']


def test_a_run_whose_output_dir_is_emptied_while_it_runs_fails_in_one_line(
        data, tmp_path, capsys, monkeypatch):
  """OUT deleted or emptied by hand mid-run takes the run's lock: the job
  refuses to publish (RunNotCurrent), as it must, and says so in one line;
  two tracebacks followed it (Beam's log of the step, the launcher's)."""
  out = tmp_path / 'out'
  held = write_metadata.check_lock_held

  def emptied_first(files, output_dir, lock):
    for name in os.listdir(output_dir):  # the lock among them, as `rm -rf OUT/*` does
      if not os.path.isdir(os.path.join(output_dir, name)):
        os.remove(os.path.join(output_dir, name))
    return held(files, output_dir, lock)

  monkeypatch.setattr(write_metadata, 'check_lock_held', emptied_first)
  capsys.readouterr()
  assert converted(data, out) == EXIT_FAILED
  lines = capsys.readouterr().err.splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: the job failed: RunNotCurrent: run ')
  assert '(.convert.lock.000000 is gone)' in lines[0]
  assert os.listdir(out) == []


def test_a_previous_dataset_that_is_the_output_dir_by_a_bind_mount_is_refused(
        data, tmp_path, capsys):
  """realpath does not join a bind mount's two paths: the run replaced the
  shards it was reading (a sidecar then seemed damaged)."""
  night1, other = tmp_path / 'night1', tmp_path / 'other'
  assert converted(data, night1) == EXIT_OK
  other.mkdir()
  if subprocess.run(['mount', '--bind', str(night1), str(other)], capture_output=True).returncode:
    pytest.skip('cannot mount --bind: needs root')
  try:
    before = sorted(os.listdir(night1))
    capsys.readouterr()
    assert converted(data, other, '--overwrite', '--previous_dataset', str(night1)) == EXIT_USAGE
    assert capsys.readouterr().err == (
        f'error: --previous_dataset {night1} is --output_dir: a run cannot read the shards it '
        'replaces (write each run to its own folder)\n')
    assert sorted(os.listdir(night1)) == before
  finally:
    subprocess.run(['umount', str(other)], check=True)


def test_a_pointer_that_cannot_be_written_at_the_end_says_the_dataset_is_complete(
        data, tmp_path, capsys, monkeypatch):
  """A disk filled or a permission changed as the run ended: the dataset was
  published, and the line said "the job failed" with a traceback."""
  def refused(pointer, target, files):
    raise PermissionError(13, 'Permission denied', pointer)

  monkeypatch.setattr(previous, '_write_pointer', refused)
  out, latest = tmp_path / 'n1', tmp_path / 'latest'
  capsys.readouterr()
  assert converted(data, out, '--previous_dataset', str(latest),
                   '--previous_dataset_missing', 'full') == EXIT_FAILED
  err = capsys.readouterr().err.splitlines()
  assert err[-1] == (
      f'error: the dataset in {out} is complete, but its pointer {latest} could not be '
      f"written (PermissionError: [Errno 13] Permission denied: '{latest}'), so a run with "
      f'--previous_dataset {latest} does not read this one: write {out} into it')
  assert not any('Traceback' in line for line in err)
  assert (out / 'dataset_info.json').exists() and not latest.exists()


@pytest.mark.slow
@pytest.mark.parametrize('locked,missing', [('latest', 'error'), ('dataset_info.json', 'error'),
                                            ('n1', 'error'), ('held', 'full')])
def test_a_previous_dataset_this_user_cannot_read_is_one_line_exit_2(
        data, tmp_path, locked, missing):
  """A night run by another user (or under umask 077): its pointer or
  dataset_info.json unreadable was a traceback and exit 1; its folder
  unreadable was "has no dataset_info.json: ... half-written", and in a
  folder it cannot enter "does not exist" (with --previous_dataset_missing
  full, a full run, exit 0)."""
  night1, latest, night2 = tmp_path / 'held' / 'n1', tmp_path / 'latest', tmp_path / 'n2'
  assert converted(data, night1) == EXIT_OK
  latest.write_text(f'{night1}\n')
  target = {'latest': latest, 'dataset_info.json': night1 / 'dataset_info.json',
            'n1': night1, 'held': night1.parent}[locked]
  os.chmod(target, 0o000)
  try:
    done = subprocess.run(
        [*_without_permission_bypass(), sys.executable, '-m', 'pipeline.convert', '--manifest',
         str(data / 'manifest.csv'), '--output_dir', str(night2), '--height', '8', '--width',
         '8', '--previous_dataset', str(latest), '--previous_dataset_missing', missing],
        cwd=pathlib.Path(__file__).resolve().parents[1], capture_output=True, text=True,
        timeout=300)
  finally:
    os.chmod(target, 0o700 if target.is_dir() else 0o644)
  named = f'{latest} (-> {night1})'
  denied = "PermissionError: [Errno 13] Permission denied: '{}'"
  assert (done.returncode, done.stdout, done.stderr) == (EXIT_USAGE, '', {
      'latest': f'error: --previous_dataset {latest} cannot be read: {denied.format(latest)}\n',
      'dataset_info.json': f'error: --previous_dataset {named}: {night1}/dataset_info.json '
                           f'cannot be read: {denied.format(night1 / "dataset_info.json")}\n',
      'n1': f'error: --previous_dataset {named} cannot be read by this user: '
            f'{denied.format(night1 / "dataset_info.json")}\n',
      'held': f'error: --previous_dataset {named} cannot be read by this user: '
              f'{denied.format(night1)}\n'}[locked])
  assert not night2.exists() and latest.read_text() == f'{night1}\n'
