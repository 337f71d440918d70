"""export while a convert --overwrite rewrites its --input_dir: the export
links the dataset's shards and describes them with the metadata it read
first, so one that outlives the dataset it read is refused (exit 2) and
leaves no folder, never the old dataset's metadata over the new shards."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from pipeline import convert
from pipeline import export
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.runs import staged_dir
from tests.conftest import make_sample
from transforms.core.spec import DATASET_INFO

# TensorFlow and tensorflow-datasets in the test's process (make test-integration).
pytestmark = pytest.mark.slow


@pytest.fixture
def out(tmp_path) -> pathlib.Path:
  """A converted dataset (9 images, one shard)."""
  sample = make_sample(tmp_path)
  folder = tmp_path / 'out'
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(folder),
                       '--height', '8', '--width', '8', '--progress', 'off']) == EXIT_OK
  return folder


def _rewritten(out: pathlib.Path) -> None:
  """What a convert --overwrite of `out` does to it, as far as the export can
  see: the dataset_info.json of another run (its run id), new shard bytes."""
  info = json.loads((out / DATASET_INFO).read_text())
  info['run_id'] = 'a0a0a0a0a0a0'
  (out / DATASET_INFO).write_text(json.dumps(info))


def _flags(out: pathlib.Path, target: pathlib.Path) -> list:
  return ['--format', 'tfds', '--input_dir', str(out), '--output_dir', str(target)]


def _changed_line(out: pathlib.Path, why: str) -> str:
  return (f'error: --input_dir {out} changed while the export read it ({why}: a '
          f'convert wrote it again); nothing was exported: export it again once that '
          f'convert has ended\n')


@pytest.mark.parametrize('change,why', [
    (_rewritten, 'its dataset_info.json was rewritten'),
    (lambda out: (out / DATASET_INFO).unlink(), 'its dataset_info.json is gone')])
def test_a_dataset_rewritten_while_the_export_links_it_is_refused(out, tmp_path, monkeypatch,
                                                                 capsys, change, why):
  """Before: exit 0, and TFDS read the new shards by the old split lengths."""
  written = export._write_tfds_folder

  def write_then_convert(*args):
    done = written(*args)
    change(out)
    return done
  monkeypatch.setattr(export, '_write_tfds_folder', write_then_convert)
  target = tmp_path / 'tfds'
  capsys.readouterr()
  assert export.main(_flags(out, target)) == EXIT_USAGE
  assert capsys.readouterr().err == _changed_line(out, why)
  assert not target.exists()
  assert staged_dir.leftovers(str(target)) == []


def test_a_convert_between_the_check_and_the_rename_removes_the_placed_export(
    out, tmp_path, monkeypatch, capsys):
  placed = staged_dir.Staging.put_in_place

  def place_then_convert(self, line):
    placed(self, line)
    assert os.path.isdir(self.target)
    _rewritten(out)
  monkeypatch.setattr(staged_dir.Staging, 'put_in_place', place_then_convert)
  target = tmp_path / 'tfds'
  capsys.readouterr()
  assert export.main(_flags(out, target)) == EXIT_USAGE
  assert capsys.readouterr().err == _changed_line(out, 'its dataset_info.json was rewritten')
  assert not target.exists()
  assert staged_dir.leftovers(str(target)) == []


def test_an_unchanged_dataset_is_exported(out, tmp_path):
  target = tmp_path / 'tfds'
  assert export.main(_flags(out, target)) == EXIT_OK
  assert os.readlink(target / 'train-00000-of-00001.tfrecord') == os.path.relpath(
      out / 'train-00000-of-00001.tfrecord', target)
