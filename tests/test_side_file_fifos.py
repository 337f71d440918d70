"""A FIFO where a dataset has a side file (rejected.jsonl, label_map.txt,
dataset_info.json): read through FileAccess.open (or pipeline.read's
read_info), it is refused unopened and named, instead of hanging its reader
until some writer comes. Each test holds the FIFO open to writers
(fifo_writer_that_unblocks_readers): a reader that opens it is let go after
0.2 s and the test fails on `unblocked`, not by hanging. A FIFO or device
where a file is written (validate's --report) is never renamed over."""

from __future__ import annotations

import functools
import os
import stat

import pytest

from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_USAGE
from pipeline.reading import dataset
from tests.conftest import copy_dataset
from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
from tests.test_validate_cli import RAW_16
from tests.test_validate_cli import run_validate
from transforms import filesystem
from transforms.core import file_kinds
from transforms.core import validation
from transforms.core.dataset_info import InfoError

pytestmark = pytest.mark.xdist_group('converted_sample')


@pytest.fixture
def converted(converted_sample, tmp_path):
  return copy_dataset(converted_sample(*RAW_16)[1], tmp_path)


def _fifo_line(path) -> str:
  return f'{path} is a FIFO (named pipe), not a regular file: not read'


@pytest.mark.parametrize('name, kind', [('rejected.jsonl', 'row_accounting'),
                                        ('label_map.txt', 'label_map_mismatch')])
def test_validate_names_a_side_file_that_is_a_fifo_unopened(converted, name, kind):
  side = converted / name
  side.unlink(missing_ok=True)
  with fifo_writer_that_unblocks_readers(side) as unblocked:
    code, report = run_validate(converted)
  assert not unblocked  # never opened
  assert code == EXIT_FAILED
  assert [(p['kind'], p['detail']) for p in report['problems'] if p['file'] == name] == [
      (kind, f'cannot be read: NotRegularFile: {_fifo_line(side)}')]


def test_validate_names_a_dataset_info_that_is_a_fifo_unopened(converted):
  info = converted / 'dataset_info.json'
  info.unlink()
  with fifo_writer_that_unblocks_readers(info) as unblocked:
    code, report = run_validate(converted)
  assert not unblocked
  assert code == EXIT_FAILED
  assert [(p['kind'], p['detail']) for p in report['problems']] == [
      ('missing_dataset_info', _fifo_line(info))]


def test_read_info_of_pipeline_read_refuses_a_fifo_unopened(converted):
  info = converted / 'dataset_info.json'
  info.unlink()
  with fifo_writer_that_unblocks_readers(info) as unblocked:
    with pytest.raises(InfoError) as error:
      dataset.read_info(str(converted))
  assert not unblocked
  assert str(error.value) == _fifo_line(info)


@pytest.mark.parametrize('name', ['label_map.pbtxt', 'rejected.jsonl.gz'])
def test_file_access_refuses_a_local_fifo_unopened(tmp_path, name):
  """Every reader of FileAccess (read_text, read_bytes, open_checked, open)."""
  fifo = tmp_path / name
  with fifo_writer_that_unblocks_readers(fifo) as unblocked:
    files = filesystem.FileAccess()
    for read_it in (files.read_text, files.read_bytes, files.open):
      with pytest.raises(file_kinds.NotRegularFile) as error:
        read_it(str(fifo))
      assert str(error.value) == _fifo_line(fifo)
  assert not unblocked


def _not_replaced_line(path, kind='FIFO (named pipe)') -> str:
  return f'{path} is a {kind}, not a regular file: not replaced'


def test_file_access_never_renames_over_a_fifo_made_while_it_writes(tmp_path):
  """The target asked again just before the rename: a FIFO made since the
  write began stays a FIFO, and the temp file is removed."""
  target = tmp_path / 'r.json'
  files = filesystem.FileAccess()
  with pytest.raises(file_kinds.NotReplaced) as error:
    with files.replacing(str(target)) as handle:
      handle.write(b'{}')
      os.mkfifo(target)
  assert str(error.value) == _not_replaced_line(target)
  assert stat.S_ISFIFO(os.stat(target).st_mode)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['r.json']


def test_file_access_writes_over_no_device(tmp_path):
  """A device at the target: refused before any byte is written (a copy of
  /dev/null's node: written to, it would swallow them). One at r.json.tmp,
  the temp name every writer shared before, is no one's temp now: left as
  it is, never written to."""
  node = tmp_path / 'r.json'
  os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
  with pytest.raises(file_kinds.NotReplaced) as error:
    filesystem.FileAccess().write_text(str(tmp_path / 'r.json'), '{}')
  assert str(error.value) == _not_replaced_line(node, 'character device')
  assert [p.name for p in tmp_path.iterdir()] == ['r.json']
  assert stat.S_ISCHR(os.stat(node).st_mode)
  os.rename(node, tmp_path / 'r.json.tmp')
  filesystem.FileAccess().write_text(str(tmp_path / 'r.json'), '{}')
  assert (tmp_path / 'r.json').read_text() == '{}'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['r.json', 'r.json.tmp']
  assert stat.S_ISCHR(os.stat(tmp_path / 'r.json.tmp').st_mode)


def _fifo_at_report_then_check(report: str, records: list, expected) -> list:
  """validate's check_records, making a FIFO at the report's path first: one
  made after the launcher's check, while the job runs."""
  if not os.path.lexists(report):
    os.mkfifo(report)
  return validation.check_records(records, expected)


def test_validate_leaves_a_fifo_made_at_the_report_while_it_runs(converted, tmp_path, capsys):
  report = tmp_path / 'r.json'
  code = validate.main(['--input_dir', str(converted), '--report', str(report)],
                       check_records=functools.partial(_fifo_at_report_then_check,
                                                       str(report)))
  err = capsys.readouterr().err
  assert code == EXIT_USAGE, err
  assert 'Traceback' not in err and len(err.strip().splitlines()) == 1, err
  assert err.startswith(f'error: --report {report} cannot be written: '
                        f'{_not_replaced_line(report)}'), err
  assert stat.S_ISFIFO(os.stat(report).st_mode)
  assert [p.name for p in tmp_path.iterdir() if p.name.startswith('r.json')] == [
      'r.json']  # no temp left


def test_validate_writes_its_report_under_a_temp_name_of_its_own(converted):
  """Another validate of the dataset writing its report at the same time
  (its temp file there): this run neither truncates, renames nor deletes
  it, and publishes its own whole report (was: both wrote
  validation_report.json.tmp, the one name of every run)."""
  other = converted / 'validation_report.json.tmp'
  other.write_bytes(b'{"another run": "half written')
  before = sorted(p.name for p in converted.iterdir())
  code, report = run_validate(converted)
  assert (code, report['valid'], report['num_examples']) == (0, True, 9)
  assert other.read_bytes() == b'{"another run": "half written'
  assert sorted(p.name for p in converted.iterdir()) == sorted(
      [*before, 'validation_report.json'])
