"""validate --recompute of datasets converted from Parquet files (image bytes
in a cell, ClassLabel labels, splits from the Hub's file names) and
WebDataset tars (an image member by offset): each sampled record's row found
again in its file, its bytes read as convert reads them and converted
again. A record rewritten with other pixels (every CRC, sidecar line and
index entry made to match) is a recompute_mismatch naming its key; a file
rewritten since the run is a warning."""

import gzip
import io
import json
import os
import pathlib

from PIL import Image
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.test_parquet import NAMES
from tests.test_parquet import png
from tests.test_parquet import write_hf
from tests.test_validate_cli import first_shard
from tests.test_validate_cli import records_of
from tests.test_validate_cli import rewrite_first_record
from tests.test_webdataset import write_tar
from transforms.core import recompute
from transforms.core.example_proto import parse_example
from transforms.core.shuffle import Ordering

pytestmark = pytest.mark.xdist_group('recompute')

FLAGS = ('--height', '8', '--width', '8', '--progress', 'off', '--num_shards', '2',
         '--encoding', 'png', '--write_index')


def _parquet(root: pathlib.Path) -> pathlib.Path:
  """Two train files (row groups of 2) and a test file in the Hub's data/
  layout, Image structs of bytes and ClassLabel labels, converted to root/out."""
  data = root / 'data'
  for name, seeds, labels in (('train-00000-of-00002.parquet', [0, 1, 2], [0, 1, 2]),
                              ('train-00001-of-00002.parquet', [3, 4, 5, 6, 7], [2, 2, 1, 0, 0]),
                              ('test-00000-of-00001.parquet', [8, 9], [1, 0])):
    write_hf(data / name, [{'bytes': png(seed), 'path': f'{seed}.png'} for seed in seeds],
             labels)
  assert convert.main(['--manifest', str(data / '*.parquet'), '--output_dir', str(root / 'out'),
                       *FLAGS]) == EXIT_OK
  return root / 'out'


def _tars(root: pathlib.Path) -> pathlib.Path:
  """Two train tars (.cls ids named by --label_map) and a test .tar.gz,
  converted to root/out."""
  def members(seeds):
    return [member for seed in seeds for member in (
        (f'{seed:04d}.png', png(seed)), (f'{seed:04d}.cls', str(seed % 3).encode()))]
  write_tar(root / 'shards' / 'train-000.tar', members([0, 1, 2, 3]))
  write_tar(root / 'shards' / 'train-001.tar', members([4, 5, 6]))
  write_tar(root / 'shards' / 'test-000.tar.gz', members([7, 8]))
  (root / 'names.txt').write_text(''.join(f'{name}\n' for name in NAMES))
  assert convert.main(['--manifest', str(root / 'shards' / '*-{000,001}.tar*'),
                       '--output_dir', str(root / 'out'), '--label_map',
                       str(root / 'names.txt'), *FLAGS]) == EXIT_OK
  return root / 'out'


BUILDERS = {'parquet': _parquet, 'webdataset': _tars}


def _validate(out: pathlib.Path, *flags: str):
  code = validate.main(['--input_dir', str(out), *flags])
  return code, json.loads((out / 'validation_report.json').read_text())


def _first_key(out: pathlib.Path) -> str:
  return parse_example(records_of(first_shard(out))[0])['image/key'][1][0].decode()


@pytest.mark.parametrize('kind', sorted(BUILDERS))
def test_an_untouched_dataset_recomputes_every_record(tmp_path, kind, capsys):
  out = BUILDERS[kind](tmp_path)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['valid'], report['num_warnings']) == (EXIT_OK, True, 0), report
  total = 10 if kind == 'parquet' else 9
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (total, 0)
  assert f'--recompute: {total} record(s) converted again' in capsys.readouterr().out


def _other_pixels(features: dict) -> None:
  """The record's image as a converter bug might write it: other pixels, a
  PNG of the same size."""
  image = Image.open(io.BytesIO(features['image/encoded'][1][0]))
  buffer = io.BytesIO()
  Image.new(image.mode, image.size, 0).save(buffer, 'PNG')
  features['image/encoded'] = ('bytes', [buffer.getvalue()])


@pytest.mark.parametrize('kind', sorted(BUILDERS))
def test_a_record_of_other_pixels_is_a_mismatch_naming_its_key(tmp_path, kind):
  out = BUILDERS[kind](tmp_path)
  key = _first_key(out)
  shard = rewrite_first_record(out, _other_pixels)
  _reindex(out / shard)
  code, report = _validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0), report['problems']  # passes the rest
  code, report = _validate(out, '--recompute', '1.0')
  assert code == EXIT_FAILED
  assert report['problems_by_kind'] == {recompute.RECOMPUTE_MISMATCH: 1}
  problem = report['problems'][0]
  assert (problem['file'], problem['record']) == (shard, 0)
  assert problem['detail'].startswith(f'key {key!r}: image bytes differ from its unchanged '
                                       f'source ')


def _reindex(shard: pathlib.Path) -> None:
  """The shard's .index made that of its records, as a careful tamperer would."""
  lines, offset = [], 0
  for data in records_of(shard):
    framed = len(data) + 16
    lines.append(f'{offset} {framed}\n')
    offset += framed
  pathlib.Path(f'{shard}.index').write_text(''.join(lines))


def _source_of(out: pathlib.Path, key: str) -> pathlib.Path:
  """The Parquet file or tar that holds the row of `key`."""
  root = out.parent
  if ':' in key:  # a Parquet key: {file name}:{row}
    return root / 'data' / key.split(':', maxsplit=1)[0]
  return next((root / 'shards').glob(key.split('/', maxsplit=1)[0]))


@pytest.mark.parametrize('kind', sorted(BUILDERS))
def test_a_source_file_rewritten_since_the_run_is_a_warning(tmp_path, kind, capsys):
  out = BUILDERS[kind](tmp_path)
  key = _first_key(out)
  source = _source_of(out, key)
  data = source.read_bytes()
  source.write_bytes(data)  # the same bytes, written again: another version of the file
  stat = source.stat()
  os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['valid'], report['num_problems']) == (EXIT_OK, True, 0), report
  changed = [w for w in report['warnings'] if w['kind'] == recompute.SOURCE_CHANGED]
  assert any(w['detail'].startswith(f'key {key!r}: its source ') for w in changed)
  assert all('changed since the run (or is gone): not compared' in w['detail']
             for w in changed)
  # every record of that file, and none of the others
  held = sum(1 for line in _sidecar_keys(out) if _source_of(out, line) == source)
  assert report['num_recompute_skipped'] == len(changed) == held > 0
  assert report['num_recomputed'] + held == (10 if kind == 'parquet' else 9)


def _sidecar_keys(out: pathlib.Path) -> list:
  return [json.loads(line)['key'] for path in out.glob('*.sources.jsonl.gz')
          for line in gzip.open(path)]


def _rename_first_record(out: pathlib.Path, new: str) -> pathlib.Path:
  """train's first record given the key `new`, in it and its sidecar line,
  every CRC, offset and index entry made to match: -> its shard."""
  shard = out / rewrite_first_record(
      out, lambda features: features.__setitem__('image/key', ('bytes', [new.encode()])))
  _reindex(shard)
  entry = json.loads((out / 'dataset_info.json').read_text())['splits']['train']
  sidecar = out / entry['sources']
  lines = [json.loads(line) for line in gzip.open(sidecar)]
  for line in lines:
    if (line['shard'], line['ordinal']) == (entry['shards'].index(shard.name), 0):
      line['key'] = new
  sidecar.write_bytes(gzip.compress(b''.join(json.dumps(line).encode() + b'\n'
                                             for line in lines), mtime=0))
  return shard


@pytest.mark.parametrize('kind', sorted(BUILDERS))
def test_a_key_no_row_gives_in_files_unchanged_since_is_a_mismatch(tmp_path, kind):
  """The files are at the versions the run recorded, every row counted: a
  record under a key none of their rows gives was not written by the run."""
  out = BUILDERS[kind](tmp_path)
  # a key that keeps the shard in its write order (record_order), as a
  # careful tamperer would pick it
  second = parse_example(records_of(first_shard(out))[1])['image/key'][1][0].decode()
  new = next(key for key in (f'train-00000-of-00002.parquet:{n}' if kind == 'parquet'
                             else f'train-000.tar/{n:04d}' for n in range(90, 200))
             if Ordering().key(key, 0) < Ordering().key(second, 0))
  _rename_first_record(out, new)
  code, report = _validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0), report['problems']
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind'], report['num_warnings']) == (
      EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1}, 0)
  assert report['problems'][0]['detail'] == (
      f"key '{new}': no row of the run's manifest gives it, and the manifest is unchanged "
      'since the run: the run wrote no such record')


def test_a_null_image_cell_reads_its_path_and_a_rewritten_path_is_a_warning(tmp_path):
  """An Image struct whose bytes are null is read from its path (convert's
  fallback); its record's fingerprint holds that file's: the Parquet file
  unchanged, a rewritten image file is a changed source, not a mismatch."""
  (tmp_path / 'x.png').write_bytes(png(9))
  path = write_hf(tmp_path / 'train.parquet', [{'bytes': png(0), 'path': '0.png'},
                                               {'bytes': None, 'path': 'x.png'}], [0, 1])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['num_recomputed'], report['num_warnings']) == (EXIT_OK, 2, 0)
  (tmp_path / 'x.png').write_bytes(png(8))
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['num_problems'], report['warnings_by_kind']) == (
      EXIT_OK, 0, {recompute.SOURCE_CHANGED: 1})
  assert report['warnings'][0]['detail'] == (
      f"key 'train.parquet:1': its source {path} row 1 changed since the run (or is gone): "
      f'not compared')
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (1, 1)


def test_a_moved_image_dir_dataset_is_not_told_to_pass_manifest(tmp_path, capsys):
  """An --image_dir run has no manifest: the error of a moved folder named
  --manifest as the way out, and --manifest then failed on 'give either
  --manifest or --image_dir, not both'."""
  folder = tmp_path / 'folder'
  for number, label in enumerate(('cat', 'cat', 'dog')):
    (folder / label).mkdir(parents=True, exist_ok=True)
    (folder / label / f'{number}.png').write_bytes(png(number))
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(folder), '--output_dir', str(out),
                       '--progress', 'off']) == EXIT_OK
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_OK
  folder.rename(tmp_path / 'moved')
  capsys.readouterr()
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_USAGE
  error = capsys.readouterr().err
  assert '--manifest' not in error
  assert f'an --image_dir run has no manifest: its folder ({folder})' in error
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0',
                        '--manifest', str(tmp_path / 'moved')]) == EXIT_USAGE
  error = capsys.readouterr().err
  assert f'--recompute: --manifest does not apply to {out}' in error
  assert 'not both' not in error


@pytest.mark.parametrize('kind', sorted(BUILDERS))
def test_a_source_file_renamed_since_the_run_is_a_warning_not_a_mismatch(tmp_path, kind):
  """A key names its Parquet file or tar; the file renamed (mv: its size and
  time kept, so the manifest's versions read as unchanged) gives other keys:
  each of its records was a recompute_mismatch 'the run wrote no such
  record' (exit 1 on a good dataset)."""
  out = BUILDERS[kind](tmp_path)
  source = _source_of(out, _first_key(out))
  held = sum(1 for line in _sidecar_keys(out) if _source_of(out, line) == source)
  # a name the same files' order keeps, matched by the (moved) corpus's pattern
  os.rename(source, source.with_name(source.name.replace('.', 'b.', 1)))
  code, report = _validate(out, '--recompute', '1.0', '--manifest', str(
      tmp_path / 'data' / '*.parquet' if kind == 'parquet' else tmp_path / 'shards' / '*.tar*'))
  assert (code, report['valid'], report['num_problems']) == (EXIT_OK, True, 0), report
  assert [w['kind'] for w in report['warnings']] == [recompute.SOURCE_CHANGED] * held
  assert all("no row of the run's input gives it now" in w['detail']
             for w in report['warnings'])
  assert report['num_recompute_skipped'] == held > 0
  assert report['num_recomputed'] + held == (10 if kind == 'parquet' else 9)
