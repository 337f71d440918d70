"""Empty input is not success: no row at all exits 2 before anything is
written, a run whose every row is rejected exits 2 with nothing published,
--allow_empty keeps an empty dataset, and validate calls an empty dataset a
problem unless it was asked for."""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.configuration import command_line
from pipeline.configuration import preflight
from pipeline.configuration import preflight_input
from pipeline.configuration.flags import ConvertOptions
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_OVER_BUDGET
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.conftest import write_image
from tests.conftest import write_manifest


def run(main, argv: list, capsys) -> tuple:
  """(exit code, stdout, stderr) of convert.main or validate.main run here."""
  capsys.readouterr()
  code = main([str(a) for a in argv])
  captured = capsys.readouterr()
  return code, captured.out, captured.err


def files_in(folder: pathlib.Path) -> dict:
  """Every file below `folder` (hidden ones too: locks) -> its bytes."""
  return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob('*'))
          if p.is_file()}


# ----------------------------------------------------- no row at all: exit 2 up front


def test_image_dir_without_image_files_names_what_it_skipped(tmp_path, capsys):
  photos = tmp_path / 'photos'
  (photos / 'cats').mkdir(parents=True)
  (photos / 'a.txt').write_text('x')
  (photos / 'cats' / 'b.json').write_text('{}')
  (photos / 'c.md').write_text('y')
  write_image(photos / '.thumbs' / 'hidden.png')  # hidden: never a row, never named
  write_image(photos / 'cats' / '.hidden.jpg')
  out = tmp_path / 'out'
  code, _, err = run(convert.main, ['--image_dir', f'{photos}/', '--output_dir', out], capsys)
  assert code == EXIT_USAGE
  assert err == (f'error: --image_dir {photos}/ has no image files (3 files skipped by '
                 f'extension: a.txt, c.md, cats/b.json)\n')
  assert not out.exists()


def test_image_dir_lists_a_few_skipped_names_then_dots(tmp_path, capsys):
  photos = tmp_path / 'photos'
  for name in ('e.txt', 'd.txt', 'c.txt', 'b.txt', 'a.txt'):
    (photos / 'dogs' / name).parent.mkdir(parents=True, exist_ok=True)
    (photos / 'dogs' / name).write_text('')
  code, _, err = run(convert.main, ['--image_dir', photos, '--output_dir', tmp_path / 'out'],
                     capsys)
  assert code == EXIT_USAGE
  assert err == (f'error: --image_dir {photos} has no image files (5 files skipped by '
                 f'extension: dogs/a.txt, dogs/b.txt, dogs/c.txt, ...)\n')
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('text', ['', '\n', '\nimage,label\na.png,cat\n'])
def test_a_manifest_without_a_header_line_is_called_so(tmp_path, capsys, text):
  manifest = tmp_path / 'm.csv'
  manifest.write_text(text)
  code, _, err = run(convert.main, ['--manifest', manifest, '--output_dir', tmp_path / 'out'],
                     capsys)
  assert (code, err) == (EXIT_USAGE, f'error: manifest {manifest} has no header line (the '
                         'file is empty or its first line is blank): it needs the column(s) '
                         'image, label\n')
  assert not (tmp_path / 'out').exists()


def test_empty_image_dir(tmp_path, capsys):
  (tmp_path / 'photos' / 'cats').mkdir(parents=True)
  (tmp_path / 'photos' / 'dogs' / 'a.txt').parent.mkdir()
  (tmp_path / 'photos' / 'dogs' / 'a.txt').write_text('')
  code, _, err = run(convert.main, ['--image_dir', tmp_path / 'photos', '--output_dir',
                                    tmp_path / 'out', '--image_extensions', 'png'], capsys)
  assert code == EXIT_USAGE
  assert err == (f'error: --image_dir {tmp_path / "photos"} has no image files (1 file '
                 f'skipped by extension: dogs/a.txt)\n')
  (tmp_path / 'photos' / 'dogs' / 'a.txt').unlink()
  code, _, err = run(convert.main, ['--image_dir', tmp_path / 'photos', '--output_dir',
                                    tmp_path / 'out'], capsys)
  assert code == EXIT_USAGE
  assert err == f'error: --image_dir {tmp_path / "photos"} has no image files\n'
  assert not (tmp_path / 'out').exists()


def test_skipped_names_with_control_characters_keep_the_error_one_line(tmp_path, capsys):
  """A skipped file whose name holds a line break or an ESC sequence was
  printed raw: the one-line error was two lines, the ESC coloured the terminal."""
  dogs = tmp_path / 'photos' / 'dogs'
  dogs.mkdir(parents=True)
  (dogs / 'two\nlines.txt').write_text('')
  (dogs / 'red\x1b[31m.txt').write_text('')
  code, _, err = run(convert.main, ['--image_dir', tmp_path / 'photos', '--output_dir',
                                    tmp_path / 'out'], capsys)
  assert code == EXIT_USAGE
  assert err == (f'error: --image_dir {tmp_path / "photos"} has no image files (2 files '
                 f'skipped by extension: dogs/red<U+001B>[31m.txt, '
                 f'dogs/two<U+000A>lines.txt)\n')


def test_image_dir_listing_stops_at_the_first_image(tmp_path, monkeypatch):
  for i in range(20):
    write_image(tmp_path / 'photos' / f'class{i}' / f'{i}.png')
  walked = []
  walk = preflight_input._walk

  def counted(*args):
    for relative in walk(*args):
      walked.append(relative)
      yield relative

  monkeypatch.setattr(preflight_input, '_walk', counted)
  preflight_input.require_input((), str(tmp_path / 'photos'), ('png',))
  assert len(walked) == 1


def test_an_unlistable_folder_is_left_to_the_run(tmp_path, monkeypatch):
  """A folder that cannot be listed may hold images: not called empty (the run
  says what it finds). Faked: as root, chmod 000 does not stop a listing."""
  (tmp_path / 'photos').mkdir()

  def walk(top, onerror, followlinks=False):
    onerror(PermissionError(13, 'Permission denied', f'{top}/locked'))
    yield top, [], ['notes.txt']

  monkeypatch.setattr(preflight_input.os, 'walk', walk)
  assert preflight_input._skipped_if_no_image(str(tmp_path / 'photos'), ('png',)) is None


@pytest.mark.parametrize('name,text,what', [
    ('data.csv', 'image,label\n', 'has a header and no data lines'),
    ('data.csv', 'image,label\n\n  \n', 'has a header and no data lines'),
    ('data.tsv', 'image\tlabel\r\n', 'has a header and no data lines'),
    ('data.jsonl', '\n\n', 'has no data lines'),
    ('data.txt', '', 'has no data lines'),
])
def test_manifest_without_data_lines(tmp_path, capsys, name, text, what):
  (tmp_path / name).write_text(text)
  out = tmp_path / 'out'
  code, _, err = run(convert.main, ['--manifest', tmp_path / name, '--output_dir', out], capsys)
  assert code == EXIT_USAGE
  assert err == f'error: --manifest {tmp_path / name} {what}\n'
  assert not out.exists()


def test_gzip_manifest_and_label_manifest_without_data_lines(tmp_path, capsys):
  (tmp_path / 'm.csv.gz').write_bytes(gzip.compress(b'image,label\n'))
  code, _, err = run(convert.main, ['--manifest', tmp_path / 'm.csv.gz', '--output_dir',
                                    tmp_path / 'out'], capsys)
  assert (code, err) == (EXIT_USAGE, f'error: --manifest {tmp_path / "m.csv.gz"} has a '
                                     f'header and no data lines\n')
  write_image(tmp_path / 'a.png')
  write_manifest(tmp_path / 'images.csv', [('k1', 'a.png')], header=('key', 'image'))
  write_manifest(tmp_path / 'labels.csv', [], header=('key', 'label'))
  code, _, err = run(convert.main, ['--manifest', tmp_path / 'images.csv', '--label_manifest',
                                    tmp_path / 'labels.csv', '--output_dir', tmp_path / 'out'],
                     capsys)
  assert (code, err) == (EXIT_USAGE, f'error: --label_manifest {tmp_path / "labels.csv"} has '
                                     f'a header and no data lines\n')
  assert not (tmp_path / 'out').exists()


def test_manifest_check_reads_only_to_the_first_data_line(tmp_path):
  """A .gz cut off after its first lines: reading it whole would raise EOFError."""
  rows = ''.join(f'img{i}.png,cat\n' for i in range(20000))
  data = gzip.compress(('image,label\n' + rows).encode())
  (tmp_path / 'm.csv.gz').write_bytes(data[:len(data) // 2])
  config = preflight.manifest_config(str(tmp_path / 'm.csv.gz'), 'combined',
                                     preflight.splits.SplitConfig(), ())
  preflight_input.require_input((config,), None, None)  # no EOFError: stopped at line 2
  blanks = b''.join(b' ' * (i * 7919 % 13) + b'\n' for i in range(200000))
  data = gzip.compress(b'image,label\n' + blanks)
  (tmp_path / 'h.csv.gz').write_bytes(data[:len(data) // 2])
  config = preflight.manifest_config(str(tmp_path / 'h.csv.gz'), 'combined',
                                     preflight.splits.SplitConfig(), ())
  with pytest.raises(UsageError) as error:  # no data line before the cut: say so
    preflight_input.require_input((config,), None, None)
  assert str(error.value).startswith(f'cannot read manifest {tmp_path / "h.csv.gz"}: EOFError')


def test_header_only_manifest_with_overwrite_keeps_the_good_dataset(sample, capsys):
  argv = ['--manifest', sample.manifest, '--output_dir', sample.out, '--height', '8',
          '--width', '8']
  assert run(convert.main, argv, capsys)[0] == EXIT_OK
  before = files_in(sample.out)
  (sample.root / 'header.csv').write_text('image,label\n')
  code, out, err = run(convert.main, ['--manifest', sample.root / 'header.csv', '--output_dir',
                                      sample.out, '--overwrite'], capsys)
  assert (code, out) == (EXIT_USAGE, '')
  assert err == f'error: --manifest {sample.root / "header.csv"} has a header and no data lines\n'
  assert files_in(sample.out) == before  # byte for byte, and no lock
  assert run(validate.main, ['--input_dir', sample.out], capsys)[0] == EXIT_OK


# ------------------------------------------- every row rejected: exit 2, nothing published


def test_every_row_rejected_publishes_nothing_but_rejected_jsonl(tmp_path, capsys):
  (tmp_path / 'broken.png').write_bytes(b'not an image')
  manifest = write_manifest(tmp_path / 'm.csv', [('missing.png', 'cat'), ('broken.png', 'dog'),
                                                 ('gone.png', 'cat')])
  out = tmp_path / 'out'
  code, printed, err = run(convert.main, ['--manifest', manifest, '--output_dir', out,
                                          '--max_error_rate', '1'], capsys)
  assert code == EXIT_USAGE
  assert printed == '  rejected decode/not_an_image: 1\n  rejected read/missing_file: 2\n'
  assert err == (f'error: all 3 rows were rejected (see {out / "rejected.jsonl"}); '
                 f'nothing was published\n')
  assert sorted(p.name for p in out.iterdir()) == ['rejected.jsonl']
  assert sorted(r['code'] for r in rejected_lines(out)) == [
      'missing_file', 'missing_file', 'not_an_image']
  code, printed, _ = run(validate.main, ['--input_dir', out], capsys)
  assert code == EXIT_FAILED and 'missing_dataset_info: 1' in printed
  # Fixed, the same command runs again: a lone rejected.jsonl is no dataset.
  write_image(tmp_path / 'missing.png')
  write_image(tmp_path / 'gone.png')
  write_image(tmp_path / 'broken.png')
  code, printed, err = run(convert.main, ['--manifest', manifest, '--output_dir', out,
                                          '--height', '8', '--width', '8'], capsys)
  assert code == EXIT_OK, err
  assert read_info(out)['num_examples'] == 3 and rejected_lines(out) == []


def test_every_row_rejected_over_budget_is_still_exit_2(tmp_path, capsys):
  manifest = write_manifest(tmp_path / 'm.csv', [('missing.png', 'cat')])
  out = tmp_path / 'out'
  code, printed, err = run(convert.main, ['--manifest', manifest, '--output_dir', out], capsys)
  assert code == EXIT_USAGE
  assert printed == '  rejected read/missing_file: 1\n'
  assert err == (f'error: all 1 rows were rejected (see {out / "rejected.jsonl"}); '
                 f'nothing was published\n')
  assert sorted(p.name for p in out.iterdir()) == ['rejected.jsonl']


def test_rows_that_vanished_after_the_check_publish_nothing_either(tmp_path, capsys,
                                                                  monkeypatch):
  """The input had a row when checked and none when the job read it (the
  --image_dir's one image deleted in between): the end check still says so."""
  image = tmp_path / 'photos' / 'cat' / 'a.png'
  image.parent.mkdir(parents=True)
  write_image(image)
  checked = convert.opts.parse_convert

  def check_then_delete(argv, *args):
    parsed = checked(argv, *args)
    image.unlink()
    return parsed

  monkeypatch.setattr(convert.opts, 'parse_convert', check_then_delete)
  out = tmp_path / 'out'
  code, stdout, err = run(convert.main, ['--image_dir', tmp_path / 'photos', '--output_dir', out],
                          capsys)
  assert (code, stdout, err) == (
      EXIT_USAGE, '', 'error: the input had no rows when the job read it; nothing was published\n')
  assert sorted(p.name for p in out.iterdir()) == ['rejected.jsonl']


def preflight_config(tmp_path: pathlib.Path):
  write_image(tmp_path / 'a.png')
  manifest = write_manifest(tmp_path / 'one.csv', [('a.png', 'cat')])
  config, _ = convert.opts.parse_convert(['--manifest', str(manifest), '--output_dir',
                                          str(tmp_path / 'elsewhere')])
  return config


def test_an_empty_split_in_a_non_empty_dataset_is_no_error(tmp_path, capsys):
  write_image(tmp_path / 'a.png')
  manifest = write_manifest(tmp_path / 'm.csv', [('a.png', 'cat')])
  code, _, err = run(convert.main, ['--manifest', manifest, '--output_dir', tmp_path / 'out',
                                    '--split', 'train=0.5,test=0.5', '--height', '4',
                                    '--width', '4'], capsys)
  assert (code, err) == (EXIT_OK, '')
  info = read_info(tmp_path / 'out')
  assert info['num_examples'] == 1 and len(info['splits']) == 1


# ---------------------------------------------------------------- --allow_empty


def test_allow_empty_publishes_an_empty_dataset_that_validates(tmp_path, capsys):
  (tmp_path / 'm.csv').write_text('image,label\n\n')
  out = tmp_path / 'out'
  code, printed, err = run(convert.main, ['--manifest', tmp_path / 'm.csv', '--output_dir', out,
                                          '--allow_empty'], capsys)
  assert (code, err) == (EXIT_OK, '')
  assert printed.splitlines()[-1] == 'Warning: the manifest has no rows; the dataset is empty.'
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['splits']) == (0, 0, {})
  assert info['options']['allow_empty'] is True
  code, printed, _ = run(validate.main, ['--input_dir', out], capsys)
  assert code == EXIT_OK and printed.startswith('OK: 0 examples, every record checked')


def test_allow_empty_with_every_row_rejected(tmp_path, capsys):
  manifest = write_manifest(tmp_path / 'm.csv', [('missing.png', 'cat')])
  out = tmp_path / 'out'
  code, _, err = run(convert.main, ['--manifest', manifest, '--output_dir', out,
                                    '--allow_empty', '--max_error_rate', '1'], capsys)
  assert (code, err) == (EXIT_OK, '')
  assert sorted(p.name for p in out.iterdir()) == ['dataset_info.json', 'label_map.txt',
                                                   'rejected.jsonl']
  code, printed, err = run(convert.main, ['--manifest', manifest, '--output_dir', out,
                                          '--allow_empty', '--overwrite'], capsys)
  assert code == EXIT_OVER_BUDGET  # the error budget still applies
  # on stderr, where a cron job that keeps only stderr sees why it exited 3
  assert err == 'Error rate 100.00% is above --max_error_rate 0.00%: exit code 3.\n'
  assert 'Error rate' not in printed and 'Traceback' not in err
  assert read_info(out)['over_budget'] is True


def test_allow_empty_says_the_error_budget_still_applies():
  """Its help (and the flag table generated from it) once promised exit 0
  with every row rejected; that run exits 3 unless --max_error_rate is 1
  (test_allow_empty_with_every_row_rejected)."""
  parser = command_line.own_parser(ConvertOptions)
  text = next(a.help for a in parser._actions if '--allow_empty' in a.option_strings)
  assert 'has no rows (exit 0)' in text
  assert 'every row is rejected (--max_error_rate decides as for any run: exit 3 unless it is 1)' \
      in text, text


# ---------------------------------------------------------------- validate


def test_validate_calls_an_empty_dataset_a_problem_unless_asked_for(tmp_path, capsys):
  (tmp_path / 'm.csv').write_text('image,label\n')
  out = tmp_path / 'out'
  assert run(convert.main, ['--manifest', tmp_path / 'm.csv', '--output_dir', out,
                            '--allow_empty'], capsys)[0] == EXIT_OK
  info = read_info(out)  # as a dataset written before --allow_empty existed
  del info['options']['allow_empty']
  (out / 'dataset_info.json').write_text(json.dumps(info))
  code, printed, _ = run(validate.main, ['--input_dir', out], capsys)
  assert code == EXIT_FAILED
  assert printed.splitlines()[:3] == [
      f'INVALID: 1 problem(s) found. Report: {out / "validation_report.json"}',
      '  empty_dataset: 1',
      '  e.g. the dataset has no examples (convert writes one only with --allow_empty; '
      '--expected_count 0 accepts it)']
  code, printed, _ = run(validate.main, ['--input_dir', out, '--expected_count', '0'], capsys)
  assert code == EXIT_OK and printed.startswith('OK: 0 examples')
  code, printed, _ = run(validate.main, ['--input_dir', out, '--expected_count', '2'], capsys)
  assert code == EXIT_FAILED and 'count_mismatch: 1' in printed and 'empty_dataset' not in printed


@pytest.mark.parametrize('info,expected_count,kinds', [
    ({'splits': {}, 'num_examples': 0}, None, ['empty_dataset']),
    ({'splits': {}, 'num_examples': 0, 'options': {'allow_empty': True}}, None, []),
    ({'splits': {}, 'num_examples': 0}, 0, []),
    # declares examples, none readable: the count says so, not "empty"
    ({'splits': {'train': {'num_examples': 3}}, 'num_examples': 3}, None, ['count_mismatch']),
])
def test_empty_dataset_problem(info, expected_count, kinds):
  from transforms.core import dataset_checks
  problems = dataset_checks.count_problems(info, {}, expected_count)
  assert [p.kind for p in problems] == kinds
