"""validate overlapping a convert into the same folder: it gives no verdict
on a folder a live convert holds, nor on a dataset replaced while it read it,
and leaves no report there (pipeline/validate.py, run_lock.live_holder)."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.runs.run_lock import RunInfo
from tests.conftest import COLOURS
from tests.conftest import write_image
from tests.conftest import write_manifest
from tests.test_run_lock import TIMEOUT
from tests.test_run_lock import convert_flags
from tests.test_run_lock import data  # noqa: F401  (the module's images, a fixture)
from tests.test_run_lock import finish
from tests.test_run_lock import in_process
from tests.test_run_lock import start
from transforms import filesystem


def wait_for_file(folder: pathlib.Path, name: str) -> None:
  deadline = time.monotonic() + TIMEOUT
  while not (folder / name).exists():
    assert time.monotonic() < deadline, f'{folder / name} never appeared'
    time.sleep(0.02)


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_validate_while_a_convert_holds_the_folder_is_refused_and_writes_nothing(
    data, tmp_path, capsys):  # noqa: F811
  """A convert paused with the lock held (over a complete previous dataset,
  with --overwrite: about to clear it). validate gave that dataset a verdict
  and wrote validation_report.json there; into a fresh folder it said
  INVALID (missing_dataset_info, exit 1) and its report stayed beside the
  dataset the convert then completed."""
  for previous in (False, True):
    out, sync = tmp_path / f'out-{previous}', tmp_path / f'sync-{previous}'
    sync.mkdir()
    if previous:
      assert convert.main(convert_flags(data, out)) == EXIT_OK
    run = start(f'hold:{sync}', convert_flags(data, out, '--overwrite'))
    try:
      wait_for_file(sync, f'holding-{run.pid}')
      held = RunInfo.from_text((out / '.convert.lock.000000').read_text())
      code, said = in_process(validate.main, ['--input_dir', str(out)], capsys)
      reported = (out / 'validation_report.json').exists()
    finally:
      (sync / 'release').write_text('')
      code_of_convert, _, err = finish(run)
    assert code == EXIT_USAGE, said
    assert said.strip() == (f'error: --input_dir {out} is being written by {held.describe()}; '
                            f'validate it once that run has ended')
    assert not reported
    code = code_of_convert
    assert code == EXIT_OK, err
    assert sorted(p.name for p in out.iterdir()) == [
        'dataset_info.json', 'label_map.txt', 'rejected.jsonl',
        'train-00000-of-00001.tfrecord', 'train.sources.jsonl.gz']
    assert validate.main(['--input_dir', str(out)]) == EXIT_OK


def test_a_dataset_replaced_while_validate_reads_it_gets_no_report(
    data, tmp_path, capsys, monkeypatch):  # noqa: F811
  """convert --overwrite of other rows between validate's read of
  dataset_info.json and its end: validate judged the new records by the old
  dataset_info.json (INVALID, count_mismatch 12 != 3, exit 1, for a valid
  dataset) and left that report in the new dataset."""
  out = tmp_path / 'out'
  assert convert.main(convert_flags(data, out)) == EXIT_OK
  other = tmp_path / 'other'
  rows = []
  for i in range(3):
    write_image(other / f'images/red_{i}.png', COLOURS['red'], size=(20, 20))
    rows.append((f'images/red_{i}.png', 'red'))
  write_manifest(other / 'manifest.csv', rows)
  listing = validate.shard_listing

  def replaced_after_the_read(input_dir, info, files):
    assert convert.main(convert_flags(other, out, '--overwrite')) == EXIT_OK
    return listing(input_dir, info, files)

  monkeypatch.setattr(validate, 'shard_listing', replaced_after_the_read)
  assert_replaced(out, capsys)
  monkeypatch.setattr(validate, 'shard_listing', listing)
  code, said = in_process(validate.main, ['--input_dir', str(out)], capsys)
  assert code == EXIT_OK, said
  assert 'OK: 3 examples' in said


def assert_replaced(out: pathlib.Path, capsys) -> None:
  code, said = in_process(validate.main, ['--input_dir', str(out)], capsys)
  assert code == EXIT_USAGE, said
  assert said.strip().splitlines()[-1] == (
      f'error: --input_dir {out} changed while validate read it (its dataset_info.json was '
      f'rewritten); nothing was reported: validate it again')
  assert not [p.name for p in out.iterdir() if p.name.startswith('validation_report')]


def test_a_convert_clearing_the_report_being_written_is_said_so(
    data, tmp_path, capsys, monkeypatch):  # noqa: F811
  """convert --overwrite's clear deletes validate's temp report (its
  validation_report.json.*.tmp) just before validate renames it into place:
  that was 'error: the job failed: RuntimeError: FileNotFoundError: ...',
  exit 1, saying nothing of the convert."""
  out = tmp_path / 'out'
  assert convert.main(convert_flags(data, out)) == EXIT_OK
  real = os.replace
  cleared = []

  def convert_clears_first(source, target):
    if 'validation_report.json.' in str(source) and not cleared:
      cleared.append(source)
      flags = convert_flags(data, out, '--overwrite', '--height', '12')
      assert convert.main(flags) == EXIT_OK  # its clear deletes `source`
    return real(source, target)

  monkeypatch.setattr(filesystem.os, 'replace', convert_clears_first)
  assert_replaced(out, capsys)
  assert len(cleared) == 1
  monkeypatch.setattr(filesystem.os, 'replace', real)
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK
