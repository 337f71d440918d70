"""A FIFO where a dataset has a side file (rejected.jsonl, label_map.txt,
dataset_info.json): read through FileAccess.open (or pipeline.read's
read_info), it is refused unopened and named, instead of hanging its reader
until some writer comes. Each test holds the FIFO open to writers
(fifo_writer_that_unblocks_readers): a reader that opens it is let go after
0.2 s and the test fails on `unblocked`, not by hanging."""

from __future__ import annotations

import pytest

from pipeline.errors import EXIT_FAILED
from pipeline.reading import dataset
from tests.conftest import copy_dataset
from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
from tests.test_validate_cli import RAW_16
from tests.test_validate_cli import run_validate
from transforms import filesystem
from transforms.core import file_kinds
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
