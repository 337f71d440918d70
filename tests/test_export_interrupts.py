"""export and inspect stopped by a signal or killed: export builds its folder
beside --output_dir and renames it into place once complete
(pipeline/runs/staged_dir.py), and both handle SIGINT, SIGTERM and SIGHUP
as convert does (pipeline/runs/interrupts.py): the clean-up, one line, the
end by the signal.

Each signal comes at a fixed point: the command line runs in a process of
its own whose code signals itself there (after export linked its first
shard, before its metadata; between its two renames into place; between
inspect's open of an image and its write).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from pipeline import convert
from pipeline import export
from pipeline.errors import EXIT_OK
from pipeline.runs import export_target
from pipeline.runs import interrupts
from pipeline.runs import staged_dir
from tests.conftest import make_sample
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import TFDS_FEATURES_FILE

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXPORT_LINE, EXPORT_AGAIN = interrupts.EXPORT_LINES
SIGNALS = [pytest.param(signal.SIGINT, id='SIGINT'), pytest.param(signal.SIGTERM, id='SIGTERM'),
           pytest.param(signal.SIGHUP, id='SIGHUP')]


@pytest.fixture(scope='module')
def out(tmp_path_factory) -> pathlib.Path:
  """A converted dataset (9 images, one shard); the tests export it elsewhere."""
  root = tmp_path_factory.mktemp('export-interrupts')
  sample = make_sample(root)
  folder = root / 'out'
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(folder),
                       '--height', '8', '--width', '8', '--progress', 'off']) == EXIT_OK
  return folder


def _run(script: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-c', script], cwd=ROOT, capture_output=True,
                        text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _export_flags(out: pathlib.Path, target: pathlib.Path, *more) -> list:
  return ['--format', 'tfds', '--input_dir', str(out), '--output_dir', str(target), *more]


def _previous_export(target: pathlib.Path) -> None:
  """Stands for a previous export: its marks (export_target.is_our_export) and a folder."""
  (target / 'old').mkdir(parents=True)
  (target / TFDS_FEATURES_FILE).write_text('{}')
  (target / DATASET_INFO).write_text(json.dumps(
      {'description': f'{export_target.DESCRIPTION_PREFIX}OUT (schema default)'}))


def _folder(path: pathlib.Path) -> dict:
  """{name: what a symlink points to, or the file's bytes}."""
  return {p.name: os.readlink(p) if p.is_symlink() else p.read_bytes()
          for p in sorted(path.iterdir())}


# --- export: signalled, or killed, while it writes its folder ----------------------

_SIGNAL_WHILE_WRITING = """
import os, signal, sys
from pipeline import export
from pipeline.runs import exits
if {ignored!r}:
  signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts it
link = export._link_or_copy
def link_then_signal(source, target):
  how = link(source, target)  # a shard in the folder, no metadata yet
  os.kill(os.getpid(), {signum})
  return how
export._link_or_copy = link_then_signal
exits.exit_with(lambda: export.main({argv!r}))
"""


def _signalled_while_writing(signum: int, argv: list, ignored: bool = False):
  return _run(_SIGNAL_WHILE_WRITING.format(signum=int(signum), argv=argv, ignored=ignored))


@pytest.mark.slow  # TensorFlow, in subprocesses and here
def test_a_killed_export_leaves_no_half_folder_and_the_rerun_exports(out, tmp_path, capsys):
  """SIGKILL once the first shard was linked: the folder held that link
  alone, and the rerun exited 2 without --overwrite ("not empty") and with
  it ("features.json is missing: not replacing it"): the user had to delete
  it. Now no --output_dir at all, only the folder it was built in, which
  the rerun removes (a note); killed with --overwrite, the previous export
  is as it was."""
  target = tmp_path / 'tfds'
  done = _signalled_while_writing(signal.SIGKILL, _export_flags(out, target))
  assert done.returncode == -signal.SIGKILL, done.stderr
  assert not target.exists()
  left = staged_dir.leftovers(str(target))
  assert [pathlib.Path(p).name[:len('.tfds.partial-export-')] for p in left] == [
      '.tfds.partial-export-']
  capsys.readouterr()
  assert export.main(_export_flags(out, target)) == EXIT_OK  # no --overwrite needed
  assert capsys.readouterr().err == (f'note: removed {left[0]}, left by an export that did '
                                     'not finish\n')
  assert sorted(os.listdir(tmp_path)) == ['tfds']
  previous = _folder(target)
  assert TFDS_FEATURES_FILE in previous
  shard = 'train-00000-of-00001.tfrecord'
  assert previous[shard] == os.path.relpath(out / shard, target)

  done = _signalled_while_writing(signal.SIGKILL, _export_flags(out, target, '--overwrite'))
  assert done.returncode == -signal.SIGKILL, done.stderr
  assert _folder(target) == previous  # the previous export, whole
  assert len(staged_dir.leftovers(str(target))) == 1
  assert export.main(_export_flags(out, target, '--overwrite')) == EXIT_OK
  assert sorted(os.listdir(tmp_path)) == ['tfds']
  assert _folder(target) == previous


@pytest.mark.slow  # TensorFlow, in subprocesses
@pytest.mark.parametrize('signum', SIGNALS)
def test_a_signalled_export_removes_its_folder_says_so_and_ends_by_the_signal(
        signum, out, tmp_path):
  """SIGTERM and SIGHUP ended export where it stood, silently, its half
  folder left (Ctrl-C's KeyboardInterrupt removed it, with the line
  `interrupted`). Now each: no folder, one line, the end by the signal; a
  previous export (--overwrite) is as it was."""
  target = tmp_path / 'tfds'
  done = _signalled_while_writing(signum, _export_flags(out, target))
  assert (done.returncode, done.stdout, done.stderr) == (-signum, '', EXPORT_LINE + '\n')
  assert os.listdir(tmp_path) == []
  if signum != signal.SIGHUP:
    return
  _previous_export(target)
  done = _signalled_while_writing(signum, _export_flags(out, target, '--overwrite'))
  assert (done.returncode, done.stderr) == (-signum, EXPORT_LINE + '\n')
  assert sorted(os.listdir(tmp_path)) == ['tfds']
  assert sorted(os.listdir(target)) == [DATASET_INFO, TFDS_FEATURES_FILE, 'old']


@pytest.mark.slow  # TensorFlow, in a subprocess
def test_an_export_started_under_nohup_keeps_going_on_sighup(out, tmp_path):
  target = tmp_path / 'tfds'
  done = _signalled_while_writing(signal.SIGHUP, _export_flags(out, target), ignored=True)
  assert (done.returncode, done.stderr) == (EXIT_OK, ''), done.stderr
  assert done.stdout.startswith(f'TFDS metadata in {target} (shards: 1 linked)')
  assert sorted(os.listdir(tmp_path)) == ['tfds']
  assert (target / TFDS_FEATURES_FILE).is_file()


_SIGNAL_WHILE_PLACING = """
import os, signal, sys
from pipeline import export
from pipeline.runs import exits
rename = os.rename
def signal_then_rename(source, destination):
  if os.path.basename(source).startswith('.tfds.partial-export-'):
    os.kill(os.getpid(), signal.SIGTERM)  # the previous export is moved aside already
  return rename(source, destination)
os.rename = signal_then_rename
exits.exit_with(lambda: export.main({argv!r}))
"""


@pytest.mark.slow  # TensorFlow, in a subprocess
def test_a_signal_while_the_export_is_put_in_place_lets_it_finish(out, tmp_path):
  """Between moving a previous export aside and renaming the new one into
  place, the signal waits: the new export is in place, said so, and the
  process still ends by the signal."""
  target = tmp_path / 'tfds'
  _previous_export(target)
  done = _run(_SIGNAL_WHILE_PLACING.format(argv=_export_flags(out, target, '--overwrite')))
  assert done.returncode == -signal.SIGTERM, done.stderr
  assert done.stderr == interrupts.EXPORT_PLACED_LINE + '\n'
  assert done.stdout.startswith(f'TFDS metadata in {target} (shards: 1 linked)')
  assert sorted(os.listdir(tmp_path)) == ['tfds']
  assert 'old' not in os.listdir(target)
  assert (target / 'train-00000-of-00001.tfrecord').is_symlink()


# --- the staging folder ----------------------------------------------------------


def test_leftovers_of_a_live_build_or_of_another_folder_stay(tmp_path):
  """Only the staging and replaced folders of `target` that no live process
  holds are removed: a build under way holds its folder's flock."""
  target = str(tmp_path / 'tfds')
  dead = tmp_path / '.tfds.partial-export-0123abcd'
  replaced = tmp_path / '.tfds.replaced-export-89abcdef'
  others = ['.tfds.partial-export-0123abc', '.other.partial-export-0123abcd', 'tfds.x']
  for folder in [dead, replaced, *(tmp_path / name for name in others)]:
    (folder / 'shard').mkdir(parents=True)
  # No build makes a symlink: rmtree refused it ("Cannot call rmtree on a
  # symbolic link"), and the export failed.
  others.append('.tfds.partial-export-fedcba98')
  (tmp_path / others[-1]).symlink_to(tmp_path / 'tfds.x')
  with staged_dir.Staging.beside(target) as live:
    assert staged_dir.remove_leftovers(target) == [str(dead), str(replaced)]
    assert sorted(os.listdir(tmp_path)) == sorted([*others, os.path.basename(live.path)])
  assert sorted(os.listdir(tmp_path)) == sorted(others)  # never placed: removed
  assert (tmp_path / 'tfds.x' / 'shard').is_dir()


def test_a_build_that_fails_leaves_the_target_as_it_was(tmp_path):
  target = tmp_path / 'deeper' / 'tfds'
  with pytest.raises(KeyboardInterrupt), staged_dir.Staging.beside(str(target)) as staging:
    (pathlib.Path(staging.path) / 'half').write_text('x')
    raise KeyboardInterrupt
  assert os.listdir(tmp_path / 'deeper') == []


def test_held_signals_wait_for_the_block():
  handlers = interrupts.Handlers('line', 'again').install()
  try:
    with interrupts.held():
      os.kill(os.getpid(), signal.SIGHUP)
      assert handlers.signum is None
      interrupts.published('done')
    assert handlers.signum == signal.SIGHUP  # remembered: finish() ends the process by it
  finally:
    handlers.restore()


# --- inspect ---------------------------------------------------------------------

_SIGNAL_BETWEEN_OPEN_AND_WRITE = """
import builtins, os, signal
from pipeline import look
from pipeline.looking import export_files
from pipeline.runs import exits
images = []
def open_then_signal(path, *args, **kwargs):
  handle = builtins.open(path, *args, **kwargs)
  if str(path).endswith('.jpg'):
    images.append(path)
    if len(images) == 2:  # the second image's file is made, nothing in it yet
      os.kill(os.getpid(), {signum})
  return handle
export_files.open = open_then_signal
exits.exit_with(lambda: look.main({argv!r}))
"""


@pytest.mark.parametrize('signum', SIGNALS)
def test_a_signalled_inspect_keeps_whole_files_only_and_ends_by_the_signal(
        signum, out, tmp_path):
  """SIGTERM and SIGHUP ended inspect silently; any signal between an
  image's open and its write left that image empty. Now: the line
  `interrupted`, the end by the signal, and the files written before it."""
  look = tmp_path / 'look'
  argv = ['--input_dir', str(out), '--export_dir', str(look)]
  done = _run(_SIGNAL_BETWEEN_OPEN_AND_WRITE.format(signum=int(signum), argv=argv))
  assert (done.returncode, done.stderr) == (-signum, 'interrupted\n')
  [first] = os.listdir(look)  # the second image's file removed, nothing after it written
  assert first.startswith('0_Label_') and first.endswith('.jpg')
  assert (look / first).read_bytes()[:2] == b'\xff\xd8'  # a JPEG, whole


@pytest.mark.slow  # TensorFlow, in a subprocess
@pytest.mark.parametrize('signum', SIGNALS)
def test_a_signal_once_the_export_printed_its_summary_says_it_is_complete(
        signum, out, tmp_path):
  """A Ctrl-C (to the whole group) just after the export printed its
  summary: Python's teardown of TensorFlow took 1.5 s more, with the
  signals' default actions back, and the process ended by the signal
  without a word (exit 130, stderr empty, on 3 runs of 3), as if the
  export had been cut short. Now it ends at once after its summary (as
  convert and validate do): exit 0, or the line saying it is complete."""
  target = tmp_path / 'tfds'
  process = subprocess.Popen(
      [sys.executable, '-m', 'pipeline.export', *_export_flags(out, target)], cwd=ROOT,
      env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
  summary = process.stdout.readline()  # the summary, flushed before the process ends
  assert summary.startswith(f'TFDS metadata in {target} (shards: 1 linked)'), summary
  time.sleep(0.3)  # past the last Python code: in the teardown (1.5 s with TensorFlow)
  with contextlib.suppress(ProcessLookupError):
    os.killpg(process.pid, signum)
  stdout, stderr = process.communicate(timeout=600)
  assert (process.returncode, stdout, stderr) in [
      (EXIT_OK, '', ''), (-signum, '', interrupts.EXPORT_PLACED_LINE + '\n')]
  assert (target / TFDS_FEATURES_FILE).is_file()
