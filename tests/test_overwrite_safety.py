"""--overwrite removes only what this tool wrote: convert into a folder of
the user's own (a manifest's folder holding its own label_map.txt, another
tool's dataset_info.json) and export over a TFDS dataset it did not write,
or over a folder holding --input_dir, are one line and exit 2 with every
file left as it was."""

from __future__ import annotations

import json
import pathlib

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from pipeline.runs import export_target
from pipeline.runs import output_dir
from tests.conftest import COLOURS
from tests.conftest import write_image
from tests.conftest import write_manifest


def snapshot(folder: pathlib.Path) -> dict:
  """{relative path: bytes (None for a folder)} of everything below folder."""
  return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
          for p in sorted(folder.rglob('*'))}


@pytest.fixture
def manifest_folder(tmp_path) -> pathlib.Path:
  """A user's folder: images, the manifest, their own label map and notes."""
  folder = tmp_path / 'data'
  rows = []
  for i, name in enumerate(list(COLOURS)[:2] * 2):
    write_image(folder / f'{name}_{i}.png', COLOURS[name], size=(10, 10))
    rows.append((f'{name}_{i}.png', name))
  write_manifest(folder / 'manifest.csv', rows)
  (folder / 'label_map.txt').write_text('red\ngreen\nblue\n')  # theirs: three classes
  (folder / 'SENTINEL').write_text('keep\n')
  return folder


def test_overwrite_into_the_manifests_folder_removes_nothing(manifest_folder, capsys):
  """Was exit 0: the user's label_map.txt replaced by the run's (two classes)."""
  before = snapshot(manifest_folder)
  code = convert.main(['--manifest', str(manifest_folder / 'manifest.csv'), '--output_dir',
                       str(manifest_folder), '--overwrite', '--progress', 'off',
                       '--height', '8', '--width', '8'])
  err = capsys.readouterr().err
  assert code == EXIT_USAGE
  assert err == (f'error: --output_dir {manifest_folder} holds label_map.txt but no dataset '
                 f'convert wrote (no dataset_info.json of its own, no shard): --overwrite '
                 f'replaces only a previous dataset; give a new or empty --output_dir\n')
  assert snapshot(manifest_folder) == before


def test_overwrite_leaves_another_tools_dataset_info(tmp_path):
  """A TFDS folder's dataset_info.json (and rejected.jsonl of the user's) was deleted."""
  out = tmp_path / 'out'
  out.mkdir()
  (out / 'dataset_info.json').write_text(json.dumps({'name': 'mnist', 'splits': []}))
  (out / 'rejected.jsonl').write_text('mine\n')
  (out / 'SENTINEL').write_text('keep\n')
  before = snapshot(out)
  with pytest.raises(UsageError, match=r'holds dataset_info\.json, rejected\.jsonl but no dataset'):
    output_dir.prepare_output_dir(str(out), True, ('train',))
  assert snapshot(out) == before


def test_overwrite_still_clears_a_previous_dataset_and_a_killed_runs_leftovers(
        manifest_folder, tmp_path, capsys):
  out = tmp_path / 'out'
  argv = ['--manifest', str(manifest_folder / 'manifest.csv'), '--output_dir', str(out),
          '--progress', 'off', '--height', '8', '--width', '8']
  assert convert.main(argv) == EXIT_OK
  (out / 'SENTINEL').write_text('keep\n')
  assert convert.main(argv + ['--overwrite']) == EXIT_OK
  assert (out / 'SENTINEL').read_text() == 'keep\n'
  assert (out / 'label_map.txt').read_text() == 'green\nred\n'
  # a killed run: shards and a label map, no dataset_info.json
  (out / 'dataset_info.json').unlink()
  assert output_dir.not_ours(str(out), output_dir.list_entries(str(out))) == []
  capsys.readouterr()


def _export_like(folder: pathlib.Path, description: str) -> None:
  folder.mkdir(parents=True)
  (folder / 'features.json').write_text('{}')
  (folder / 'dataset_info.json').write_text(json.dumps({'description': description}))
  (folder / 'SENTINEL').write_text('keep\n')


def test_export_replaces_only_its_own_export(tmp_path):
  """A TFDS dataset of another source (features.json and all) was replaced
  whole by export --overwrite, its files deleted."""
  source = tmp_path / 'out'
  source.mkdir()
  theirs = tmp_path / 'mnist' / '3.0.1'
  _export_like(theirs, 'The MNIST database of handwritten digits.')
  before = snapshot(theirs)
  with pytest.raises(UsageError, match='holds a TFDS dataset this export did not write'):
    export_target.check_output_dir(str(theirs), True, str(source))
  assert snapshot(theirs) == before
  ours = tmp_path / 'tfds'
  _export_like(ours, f'{export_target.DESCRIPTION_PREFIX}{source} (schema default)')
  export_target.check_output_dir(str(ours), True, str(source))  # replaceable


@pytest.mark.parametrize('given', ['proj', 'proj/', 'link', './proj//'])
def test_export_refuses_an_output_dir_holding_the_input(tmp_path, monkeypatch, given):
  """--input_dir inside a previous export's folder went with it on
  --overwrite: the dataset deleted, the new links dangling."""
  monkeypatch.chdir(tmp_path)
  _export_like(tmp_path / 'proj', f'{export_target.DESCRIPTION_PREFIX}x (schema default)')
  (tmp_path / 'proj' / 'data').mkdir()
  (tmp_path / 'link').symlink_to('proj')
  for input_dir in ('proj/data', 'link/data/', 'proj'):
    with pytest.raises(UsageError, match=f'^--output_dir {given} holds --input_dir'):
      export_target.check_output_dir(given, True, input_dir)
  export_target.check_output_dir('proj/data/tfds', True, 'proj/data')  # the default: inside


def test_validate_report_never_replaces_a_file_of_the_dataset(manifest_folder, tmp_path,
                                                              capsys):
  """`--report OUT/dataset_info.json` replaced the dataset's own file, then
  deleted it (exit 2, "changed while validate read it"); a shard's name lost
  the shard (exit 1). Now one line, exit 2, the dataset as it was."""
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest_folder / 'manifest.csv'), '--output_dir',
                       str(out), '--progress', 'off', '--height', '8', '--width', '8']) == EXIT_OK
  before = snapshot(out)
  for name in ('dataset_info.json', 'train-00000-of-00001.tfrecord', 'label_map.txt',
               'train.sources.jsonl.gz', 'rejected.jsonl'):
    capsys.readouterr()
    assert validate.main(['--input_dir', str(out), '--report', f'{out}//{name}']) == EXIT_USAGE
    assert capsys.readouterr().err == (
        f"error: --report {out}//{name} is a file convert writes (a dataset's {name}): not "
        f'replaced; give --report another name\n')
    assert snapshot(out) == before
  elsewhere = tmp_path / 'reports' / 'label_map.txt'  # no file there: a name like any other
  assert validate.main(['--input_dir', str(out), '--report', str(elsewhere)]) == EXIT_OK
  assert json.loads(elsewhere.read_text())['valid'] is True
  assert snapshot(out) == before
