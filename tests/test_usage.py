"""Usage errors exit 2 with one line before any output; the output folder is safe."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys

import pytest

from pipeline import api
from pipeline import cli
from pipeline import convert
from pipeline import validate
from pipeline.configuration import config as opts
from pipeline.errors import EXIT_USAGE
from pipeline.runs import lock_stores
from tests.conftest import read_info
from transforms import filesystem

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize('flags,message', [
    (['--encoding', 'gif'], "invalid choice: 'gif'"),
    (['--height', 'abc'], "invalid positive integer value: 'abc'"),
    (['--width', '0'], 'invalid positive integer value'),
    (['--channels', '2'], 'invalid choice'),
    (['--resize_mode', 'squash'], 'invalid choice'),
    (['--no_such_flag', '1'], "unrecognized argument '--no_such_flag'"),
    (['--split', 'train=0.5,test=0.2'], 'add up to 0.7'),
    (['--split', 'train'], 'NAME=FRACTION'),
    # the name that is not one, and what a name may hold (it names shard files)
    (['--split_names', 'train,val-a,test'],
     "--split_names: 'val-a' is not a split name (letters, digits and _ only)"),
    (['--split_names', ' , '], "--split_names ' , ' names no split"),
    (['--split', 'train=0.5,dev.1=0.5'],
     "--split: 'dev.1' is not a split name (letters, digits and _ only)"),
    # two names one file on a case-insensitive disk (macOS, Windows): the shards
    # train-... and Train-... were written, one over the other there
    (['--split', 'train=0.8,Train=0.2'],
     "--split: 'train' and 'Train' differ only in case: their shard files would be one"),
    (['--split_names', 'train,validation,TRAIN'],
     "--split_names: 'train' and 'TRAIN' differ only in case"),
    (['--extra_features', 'weight:double'], 'COLUMN:bytes|float|int64'),
    # a name a reader gives each record already: read.load's class_text was the
    # column's value, read.examples' the class's name (and the column lost)
    (['--extra_features', 'class_text:bytes'],
     "--extra_features: 'class_text' is a reserved column/feature name"),
    (['--extra_features', 'key:bytes'], "--extra_features: 'key' is a reserved"),
    (['--schema', 'seed', '--encoding', 'jpeg'], '--schema seed'),
    (['--max_error_rate', '2'], 'not in 0..1'),
    (['--background', 'white'], 'R,G,B'),
    (['--label_map', '/nonexistent/classes.txt'], '--label_map'),
    (['--direct_num_workers', 'many'], 'direct_num_workers'),
])
def test_bad_flags_exit_2_with_one_line_and_write_nothing(sample, capsys, flags, message):
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir',
                       str(sample.out), *flags])
  err = capsys.readouterr().err.strip()
  assert code == EXIT_USAGE
  assert len(err.splitlines()) == 1 and err.startswith('error: ') and message in err, err
  assert not sample.out.exists()


@pytest.mark.parametrize('names,message', [
    ('test,Test', "--split_names: 'test' and 'Test' differ only in case"),
    ('train,a b', "--split_names: 'a b' is not a split name"),  # was not checked
])
def test_detection_split_names_are_checked_as_convert_checks_them(tmp_path, capsys, names,
                                                                  message):
  (tmp_path / 'a.json').write_text('{}')
  code = convert.main(['--image_dir', str(tmp_path), '--annotations', str(tmp_path / 'a.json'),
                       '--annotation_format', 'coco', '--output_dir', str(tmp_path / 'out'),
                       '--split_names', names])
  err = capsys.readouterr().err.strip()
  assert code == EXIT_USAGE and len(err.splitlines()) == 1 and message in err, err
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('name,text,flags,column', [
    ('labels.csv', 'key,label,split\nk1,cat,test\n', [], 'split'),
    ('labels.csv', 'key,label,Split\nk1,cat,test\n', [], 'Split'),
    ('labels.jsonl', '{"key": "k1", "label": "cat", "split": "test"}\n', [], 'split'),
    ('labels.tsv', 'key\tlabel\tfold\nk1\tcat\ttest\n', ['--split_column', 'fold'], 'fold'),
])
def test_a_split_column_of_the_label_manifest_is_refused(tmp_path, capsys, name, text, flags,
                                                         column):
  """key,label,split: the split column went unread and every row to train
  (the test rows it names trained on), exit 0."""
  # with --split_column, --manifest has that column (read) and so does the label manifest
  (tmp_path / 'images.csv').write_text('key,image,fold\nk1,a.png,train\n' if flags else
                                       'key,image\nk1,a.png\n')
  (tmp_path / name).write_text(text)
  argv = ['--manifest', str(tmp_path / 'images.csv'), '--label_manifest', str(tmp_path / name),
          '--output_dir', str(tmp_path / 'out'), *flags]
  assert convert.main(argv) == EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert err == (f'error: --label_manifest {tmp_path / name} has a column {column!r}, which is '
                 f"not read (a row's split is its --manifest split cell or --split's hash; "
                 f'without either, train): move the column to --manifest, or drop it')
  assert not (tmp_path / 'out').exists()
  # --split overrides any split column: the label manifest's too
  config, _ = opts.parse_convert([*argv, '--split', 'train=0.5,test=0.5'])
  assert config.split.fractions == (('train', 0.5), ('test', 0.5))


@pytest.mark.parametrize('manifest_text,message', [
    ('path,label\na.png,x\n', 'no column(s) image'),
    ('image\na.png\n', 'no column(s) label'),
    ('image,image,label\n', 'repeats column'),
])
def test_unusable_manifests_exit_2(tmp_path, capsys, manifest_text, message):
  (tmp_path / 'm.csv').write_text(manifest_text)
  code = convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir',
                       str(tmp_path / 'out')])
  assert code == EXIT_USAGE and message in capsys.readouterr().err
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('argv,message', [
    ([], '--manifest is required'),
    (['--manifest', 'x.csv'], '--output_dir is required'),
    (['--manifest', 'missing.csv', '--output_dir', 'o'], 'does not exist'),
    (['--manifest', 'm.xlsx', '--output_dir', 'o'], 'cannot tell the format'),
])
def test_missing_or_unreadable_manifest(tmp_path, monkeypatch, capsys, argv, message):
  monkeypatch.chdir(tmp_path)
  assert convert.main(argv) == EXIT_USAGE
  assert message in capsys.readouterr().err
  assert not (tmp_path / 'o').exists()


@pytest.mark.parametrize('flag', ['--previous_dataset', '--label_map', '--image_dir'])
def test_an_empty_path_flag_is_one_line_and_exit_2(sample, capsys, flag):
  """`--previous_dataset "$PREV"` with PREV unset was no flag at all: a full
  run, exit 0, and no `latest` written, every night; an empty --label_map
  made the label map from the rows. Every flag naming a path refuses it."""
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       flag, ''])
  assert (code, capsys.readouterr().err) == (EXIT_USAGE, (
      f'error: {flag} is empty (a variable left unset?): give a path, or leave the flag out\n'))
  assert not sample.out.exists()


def test_non_empty_output_is_refused_and_untouched(sample, capsys):
  sample.out.mkdir()
  (sample.out / 'notes.txt').write_text('mine')
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out)])
  assert code == EXIT_USAGE and '--overwrite' in capsys.readouterr().err
  assert sorted(p.name for p in sample.out.iterdir()) == ['notes.txt']


@pytest.mark.slow
def test_overwrite_replaces_only_the_previous_dataset(sample):
  argv = ['--manifest', str(sample.manifest), '--output_dir', str(sample.out)]
  assert convert.main(argv + ['--num_shards', '3']) == 0
  (sample.out / 'notes.txt').write_text('mine')
  (sample.out / 'beam-temp-train-leftover').mkdir()
  (sample.out / 'beam-temp-train-leftover' / 'part').write_text('x')
  assert convert.main(argv + ['--overwrite', '--num_shards', '1', '--split',
                              'eval=1']) == 0
  names = sorted(p.name for p in sample.out.iterdir())
  assert names == ['dataset_info.json', 'eval-00000-of-00001.tfrecord',
                   'eval.sources.jsonl.gz', 'label_map.txt', 'notes.txt', 'rejected.jsonl']
  assert read_info(sample.out)['splits']['eval']['num_examples'] == 9


def test_validate_usage_errors(capsys, tmp_path):
  assert validate.main([]) == EXIT_USAGE
  assert '--input_dir is required' in capsys.readouterr().err
  assert validate.main(['--input_dir', str(tmp_path), '--expected_count', '-1']) == EXIT_USAGE
  assert validate.main(['--input_dir', str(tmp_path), '--manifest', 'x']) == EXIT_USAGE


def test_console_script_dispatches(sample, capsys):
  assert cli.main(['convert', '--manifest', str(sample.manifest), '--output_dir',
                   str(sample.out), '--height', '4', '--width', '4']) == 0
  assert cli.main(['validate', '--input_dir', str(sample.out)]) == 0
  assert cli.main(['frobnicate']) == EXIT_USAGE


@pytest.mark.integration  # a real console in subprocesses: make test-integration (6-min make test)
def test_real_command_line_exit_codes(sample):
  """python -m pipeline.convert as a user types it: no traceback, right codes."""
  base = [sys.executable, '-m', 'pipeline.convert', '--manifest', str(sample.manifest),
          '--output_dir', str(sample.out)]
  bad = subprocess.run(base + ['--height', 'x'], capture_output=True, text=True)
  assert bad.returncode == 2 and 'Traceback' not in bad.stderr
  good = subprocess.run(base + ['--height', '8', '--width', '8'], capture_output=True,
                        text=True)
  assert good.returncode == 0, good.stderr
  assert 'Converted 9 of 9 rows' in good.stdout and 'Traceback' not in good.stderr
  checked = subprocess.run([sys.executable, '-m', 'pipeline.validate', '--input_dir',
                            str(sample.out)], capture_output=True, text=True)
  assert checked.returncode == 0 and checked.stdout.startswith('OK: 9 examples')


def test_fast_exit_flushes_piped_output_and_keeps_the_code():
  code = ('import logging, sys; from pipeline.beam_runtime.fast_exit import exit_now; '
          'print("to stdout"); print("to stderr", file=sys.stderr); exit_now(7)')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
  assert (done.returncode, done.stdout, done.stderr) == (7, 'to stdout\n', 'to stderr\n')


@pytest.mark.integration  # a real console in subprocesses: make test-integration (6-min make test)
def test_command_line_over_budget_and_invalid_codes(sample):
  """Exit codes 3 (convert over --max_error_rate) and 1 (validate found problems)."""
  (sample.root / 'images' / 'broken.jpg').write_bytes(b'not an image')
  with open(sample.manifest, 'a') as manifest:
    manifest.write('images/broken.jpg,red\n')
  over = subprocess.run([sys.executable, '-m', 'pipeline.convert', '--manifest',
                         str(sample.manifest), '--output_dir', str(sample.out),
                         '--height', '4', '--width', '4'], capture_output=True, text=True)
  assert over.returncode == 3, over.stderr
  assert 'Converted 9 of 10 rows' in over.stdout and '1 rejected' in over.stdout
  checked = subprocess.run([sys.executable, '-m', 'pipeline.validate', '--input_dir',
                            str(sample.out), '--expected_count', '10'],
                           capture_output=True, text=True)
  assert checked.returncode == 1 and 'expected' in checked.stdout + checked.stderr


def test_empty_manifest_with_allow_empty_makes_an_empty_valid_dataset_with_a_warning(
    tmp_path, capsys):
  (tmp_path / 'm.csv').write_text('image,label\n\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--allow_empty']) == 0
  assert 'the manifest has no rows' in capsys.readouterr().out
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['splits']) == (0, 0, {})
  assert validate.main(['--input_dir', str(out), '--expected_count', '0']) == 0
  assert capsys.readouterr().out.startswith('OK: 0 examples, every record checked')


@pytest.mark.integration  # a real console in subprocesses: make test-integration (6-min make test)
def test_installed_console_script(sample):
  import pathlib
  script = pathlib.Path(sys.executable).with_name('img2tfrecord')
  assert script.exists(), 'make install puts the img2tfrecord console script in the venv'
  done = subprocess.run([str(script), 'convert', '--manifest', str(sample.manifest),
                         '--output_dir', str(sample.out), '--height', '4', '--width', '4'],
                        capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  assert read_info(sample.out)['num_examples'] == 9
  checked = subprocess.run([str(script), 'validate', '--input_dir', str(sample.out)],
                           capture_output=True, text=True)
  assert checked.returncode == 0 and 'OK: 9 examples' in checked.stdout


@pytest.mark.parametrize('flags,message', [
    (['--height', '100000', '--width', '100000'], 'more than --max_pixels'),
    (['--schema', 'seed', '--channels', '1'], '--channels 3'),
    (['--jpeg_quality', '0'], 'invalid JPEG quality (1..100) value'),
    # accepted and ignored before: a user who gave it expected it to act
    (['--jpeg_quality', '50'], '--jpeg_quality 50 has no effect with --encoding raw: it is '
     'the quality of --encoding jpeg'),
    (['--encoding', 'png', '--jpeg_quality', '50'], '--jpeg_quality 50 has no effect with '
     '--encoding png'),
    (['--num_shards', '2', '--shard_size_mb', '8'], '--shard_size_mb 8 has no effect with '
     '--num_shards 2: with --num_shards N each split has N shards, whatever their size'),
    (['--label_separator', '|'], "--label_separator '|' has no effect without --multi_label"),
    (['--label_separator', ';'], "--label_separator ';' has no effect without --multi_label"),
])
def test_more_bad_flag_combinations(sample, capsys, flags, message):
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir',
                       str(sample.out), *flags])
  err = capsys.readouterr().err.strip()
  assert code == EXIT_USAGE and len(err.splitlines()) == 1 and message in err, err
  assert not sample.out.exists()


@pytest.mark.parametrize('name, text, separator, role, held', [
    ('m.tsv', 'image\tlabel\na.png\tx\ty\n', '\t', '--manifest',
     'a TSV cell cannot hold a tab'),
    ('m.txt', 'a.png x y\n', ' ', '--manifest',
     'the label of a txt line ("path label") is its last field, which holds no space'),
    ('l.tsv', 'key\tlabel\nk\tx\ty\n', '\t', '--label_manifest',
     'a TSV cell cannot hold a tab'),
    ('m.csv', 'image,label\na.png,x\n', '\n', '--manifest',
     'a cell cannot hold a line break (each line is one row)')])
def test_a_label_separator_no_cell_of_the_format_holds_exits_2(tmp_path, capsys, name, text,
                                                               separator, role, held):
  """--label_separator '\t' with a TSV rejected every row of several labels as
  wrong_field_count; ' ' with a txt list read 'a.png x y' as the image 'a.png x'
  (read/missing_file)."""
  path = tmp_path / name
  path.write_text(text)
  images = ['--manifest', str(tmp_path / 'i.csv')] if role == '--label_manifest' else []
  (tmp_path / 'i.csv').write_text('key,image\nk,a.png\n')
  out = tmp_path / 'out'
  assert convert.main([*images, role, str(path), '--output_dir', str(out), '--multi_label',
                       '--label_separator', separator]) == EXIT_USAGE
  assert capsys.readouterr().err == (f'error: --label_separator {separator!r} cannot separate '
                                     f'the labels of manifest {path}: {held}\n')
  assert not out.exists()


def test_a_label_separator_without_multi_label_is_refused_not_ignored(tmp_path, capsys):
  """--label_separator '|' without --multi_label was ignored: the cell 'red|blue'
  became the one class 'red|blue', exit 0. Refused (exit 2, nothing written);
  with --multi_label the cell is two labels; a run's recorded options, which
  hold label_separator ';' and multi_label false, still load as a --config."""
  from tests.conftest import read_examples
  from tests.conftest import write_image
  for name in ('a', 'b'):
    write_image(tmp_path / f'{name}.png')
  manifest = tmp_path / 'm.csv'
  manifest.write_text('image,label\na.png,red|blue\nb.png,blue\n')
  out = tmp_path / 'out'
  argv = ['--manifest', str(manifest), '--height', '4', '--width', '4', '--progress', 'off']
  assert convert.main([*argv, '--output_dir', str(out), '--label_separator', '|']) == EXIT_USAGE
  assert capsys.readouterr().err == (
      "error: --label_separator '|' has no effect without --multi_label: it splits a label "
      'cell into several labels with --multi_label (give it too, or drop --label_separator)\n')
  assert not out.exists()
  with pytest.raises(api.UsageError, match='has no effect without --multi_label'):
    api.convert(manifest=str(manifest), output_dir=str(out), label_separator='|')
  assert not out.exists()
  assert convert.main([*argv, '--output_dir', str(out), '--label_separator', '|',
                       '--multi_label']) == 0
  assert sorted((e['image/filename'][1][0], tuple(e['image/class/label'][1]),
                 tuple(e['image/class/text'][1])) for e in read_examples(out)) == [
      (b'a.png', (1, 0), (b'red', b'blue')), (b'b.png', (0,), (b'blue',))]
  single = tmp_path / 'single'
  assert convert.main([*argv, '--output_dir', str(single)]) == 0
  options = read_info(single)['options']
  assert (options['label_separator'], options['multi_label']) == (';', False)
  config = tmp_path / 'recorded.json'
  config.write_text(json.dumps({**options, 'output_dir': str(tmp_path / 'again')}))
  assert convert.main(['--config', str(config)]) == 0
  assert (tmp_path / 'again' / 'label_map.txt').read_text() == 'blue\nred|blue\n'
  assert validate.main(['--input_dir', str(single), '--recompute', '2']) == 0


def test_validate_a_missing_folder_is_a_usage_error(tmp_path, capsys):
  assert validate.main(['--input_dir', str(tmp_path / 'nope')]) == EXIT_USAGE
  assert 'is not a folder' in capsys.readouterr().err
  assert not (tmp_path / 'nope').exists()


def test_overwrite_keeps_user_files_that_look_like_ours(sample):
  argv = ['--manifest', str(sample.manifest), '--output_dir', str(sample.out)]
  assert convert.main(argv) == 0
  (sample.out / 'rejected_by_reviewer.jsonl').write_text('{}\n')
  (sample.out / 'mydata-00000-of-00001.tfrecord').write_bytes(b'mine')
  assert convert.main(argv + ['--overwrite']) == 0
  assert (sample.out / 'rejected_by_reviewer.jsonl').read_text() == '{}\n'
  assert (sample.out / 'mydata-00000-of-00001.tfrecord').read_bytes() == b'mine'


def test_truncated_gzip_manifest_fails_instead_of_losing_rows(tmp_path, capsys):
  import gzip
  rows = ''.join(f'img{i}.png,cat\n' for i in range(20000))
  data = gzip.compress(('image,label\n' + rows).encode())
  (tmp_path / 'm.csv.gz').write_bytes(data[:len(data) // 2])
  code = convert.main(['--manifest', str(tmp_path / 'm.csv.gz'), '--output_dir',
                       str(tmp_path / 'out'), '--max_error_rate', '1'])
  assert code == 1
  assert 'EOFError' in capsys.readouterr().err
  assert not (tmp_path / 'out' / 'dataset_info.json').exists()


def test_a_cut_gzip_part_of_a_pattern_is_named_in_one_line(tmp_path, capsys):
  # It printed `EOFError: Compressed file ended before the end-of-stream
  # marker was reached` and 80 lines of traceback, naming no file of the 2.
  import gzip
  rows = ''.join(f'img{i}.png,cat,k{i}\n' for i in range(20000))
  (tmp_path / 'a.csv.gz').write_bytes(gzip.compress(b'image,label,key\nx.png,cat,x\n'))
  data = gzip.compress(('image,label,key\n' + rows).encode())
  (tmp_path / 'b.csv.gz').write_bytes(data[:len(data) // 2])
  code = convert.main(['--manifest', str(tmp_path / '*.csv.gz'), '--output_dir',
                       str(tmp_path / 'out'), '--max_error_rate', '1'])
  assert code == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1, err
  assert re.fullmatch(
      r'error: the job failed: ManifestCutShortError: manifest .*/b\.csv\.gz: its compressed '
      r'stream breaks off after line \d+: the lines after it are lost \(EOFError: Compressed '
      r'file ended before the end-of-stream marker was reached\)', err[0]), err
  assert not (tmp_path / 'out' / 'dataset_info.json').exists()


def test_gzip_manifest_cut_inside_its_header_is_a_usage_error(tmp_path, capsys):
  import gzip
  data = gzip.compress(b'image,label\nimg0.png,cat\n')
  (tmp_path / 'm.csv.gz').write_bytes(data[:15])
  code = convert.main(['--manifest', str(tmp_path / 'm.csv.gz'), '--output_dir',
                       str(tmp_path / 'out')])
  assert code == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith(f'error: cannot read manifest {tmp_path / "m.csv.gz"}: EOFError: ')
  assert len(err.strip().splitlines()) == 1
  assert not (tmp_path / 'out').exists()


def test_threads_and_processes_are_one_choice(sample, capsys):
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--image_threads', '2', '--image_processes', '2'])
  assert code == EXIT_USAGE
  assert 'either --image_threads or --image_processes' in capsys.readouterr().err
  assert not sample.out.exists()
  assert validate.main(['--input_dir', str(sample.root), '--check_threads', '2',
                        '--check_processes', '2']) == EXIT_USAGE
  assert 'either --check_threads or --check_processes' in capsys.readouterr().err


def test_exit_codes_and_the_usage_parser_are_defined_once_in_errors():
  """Every command exits with errors's codes and parses with errors.UsageParser (a
  parser of its own may add Beam's argument kinds to it, not its own errors)."""
  import ast
  import pathlib
  root = pathlib.Path(__file__).resolve().parent.parent
  found = []
  for path in sorted((root / 'pipeline').rglob('*.py')):
    for node in ast.walk(ast.parse(path.read_text())):
      targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                 if isinstance(node, ast.AnnAssign) else [])
      names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
      found += [f'{path.name}: {name}' for name in names if name.startswith('EXIT_')]
      if isinstance(node, ast.ClassDef):
        bases = [ast.unparse(base) for base in node.bases]
        if any(b.endswith('ArgumentParser') for b in bases) and 'errors.UsageParser' not in bases:
          found.append(f'{path.name}: class {node.name}')
  assert found == ['errors.py: EXIT_OK', 'errors.py: EXIT_FAILED', 'errors.py: EXIT_USAGE',
                   'errors.py: EXIT_OVER_BUDGET', 'errors.py: EXIT_STORE_NOT_ANSWERING',
                   'errors.py: EXIT_STDOUT_CLOSED',
                   'errors.py: class UsageParser']


@pytest.mark.parametrize('command,argv,message', [
    ('inspect', ['--num', '-1', '--input_dir', 'x'], '--num and --per_class must not be negative'),
    ('inspect', ['--input_dir'], 'argument --input_dir: expected one argument'),
    ('export', ['--format', 'tfds'], 'the following arguments are required: --input_dir'),
])
def test_inspect_and_export_usage_errors_are_clis_one_line_exit_2(capsys, command, argv,
                                                                   message):
  assert cli.main([command, *argv]) == EXIT_USAGE
  captured = capsys.readouterr()
  assert (captured.out, captured.err) == ('', f'error: {message}\n')


def _one_error_line(err: str, *words: str) -> None:
  """stderr is exactly one `error: ` line holding `words`, no traceback."""
  assert 'Traceback' not in err, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), err
  assert all(word in lines[0] for word in words), err


def test_an_output_dir_below_a_file_is_a_usage_error(sample, tmp_path, capsys):
  (tmp_path / 'afile').write_text('mine')
  out = tmp_path / 'afile' / 'sub'
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out)])
  _one_error_line(capsys.readouterr().err, f'--output_dir {out} cannot be created',
                  f'{tmp_path / "afile"} is on the way and is not a folder')
  assert code == EXIT_USAGE and (tmp_path / 'afile').read_text() == 'mine'


def test_an_output_dir_whose_name_is_too_long_is_a_usage_error(sample, tmp_path, capsys):
  """A part over 255 bytes (ENAMETOOLONG): was the job failed, exit 1, a traceback."""
  out = tmp_path / ('o' * 300) / 'out'
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out)])
  _one_error_line(capsys.readouterr().err, f'--output_dir {out} cannot be created',
                  f'a name in it is too long for the file system under {tmp_path}')
  assert code == EXIT_USAGE
  assert sorted(p.name for p in tmp_path.iterdir()) == ['images', 'manifest.csv']


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='no /proc')
def test_an_output_dir_where_no_folder_can_be_made_is_a_usage_error(sample, capsys):
  """/proc takes no new folder (mkdir: ENOENT, even for root)."""
  out = '/proc/img2tfrecord-test-out'
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', out])
  _one_error_line(capsys.readouterr().err, f'--output_dir {out} cannot be created',
                  '/proc takes no new folder')
  assert code == EXIT_USAGE and not os.path.exists(out)


def _without_permission_bypass() -> list:
  """A command prefix running it as a user the kernel holds to file
  permissions: root without the capabilities that bypass them."""
  if os.geteuid() != 0:
    return []
  setpriv = shutil.which('setpriv')
  if setpriv is None:
    pytest.skip('needs setpriv to drop root permission bypass')
  return [setpriv, '--bounding-set=-dac_override,-dac_read_search']


@pytest.mark.slow
@pytest.mark.parametrize('existing', [False, True])
def test_an_output_dir_this_user_may_not_write_is_a_usage_error(sample, tmp_path, existing):
  locked = tmp_path / 'locked'
  out = locked / 'out'
  out.mkdir(parents=True) if existing else locked.mkdir()
  os.chmod(out if existing else locked, 0o555)
  try:
    done = subprocess.run(
        [*_without_permission_bypass(), sys.executable, '-m', 'pipeline.convert',
         '--manifest', str(sample.manifest), '--output_dir', str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  finally:
    os.chmod(out if existing else locked, 0o755)
  _one_error_line(done.stderr, f'--output_dir {out} cannot be created or written',
                  f'permission denied: this user may not write in {out if existing else locked}')
  assert done.returncode == EXIT_USAGE and done.stdout == ''
  assert [p.name for p in locked.rglob('*')] == (['out'] if existing else [])


@pytest.mark.parametrize('raised,message', [
    (errno.EROFS, 'Read-only file system in'),
    (errno.EACCES, 'Permission denied in'),
])
def test_an_output_dir_refused_by_the_kernel_is_a_usage_error(sample, tmp_path, capsys,
                                                              monkeypatch, raised, message):
  """What only the try tells (a read-only mount, an ACL): the error of
  making the folder, and where."""
  def refused(path, *args, **kwargs):
    raise OSError(raised, os.strerror(raised), path)
  monkeypatch.setattr(lock_stores.os, 'makedirs', refused)
  out = tmp_path / 'out'
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out)])
  _one_error_line(capsys.readouterr().err, f'--output_dir {out} cannot be created or written',
                  f'{message} {tmp_path}')
  assert code == EXIT_USAGE and not out.exists()


@pytest.mark.parametrize('raised', [errno.EIO, errno.ENOSPC])
def test_other_errors_making_the_output_dir_are_not_usage_errors(tmp_path, raised):
  """A broken disk or a full one (which RunLock handles itself) is no bad
  flag: no reason is found for it, and the error is raised as it was."""
  error = OSError(raised, os.strerror(raised), str(tmp_path / 'out'))
  assert filesystem.local_write_problem(str(tmp_path / 'out'), error) is None
  assert filesystem.local_write_problem(str(tmp_path / 'out')) is None


@pytest.mark.parametrize('report,words', [
    ('afile/r.json', ['cannot be written', 'afile exists and is not a folder']),
    ('afile/sub/r.json', ['cannot be written', 'afile is on the way and is not a folder']),
    ('folder', ['is a folder']),
    # Only trying tells: /proc takes no new file, nor a folder below /proc/self.
    ('/proc/r.json', ['cannot be written: /proc takes no new file']),
    ('/proc/self/nonexistent/r.json', ['cannot be written', '/proc/self']),
    # The report is renamed over its target: as root, over the device node itself.
    ('device', ['is a character device, not a regular file: not replaced']),
    ('fifo', ['is a FIFO (named pipe), not a regular file: not replaced']),
])
def test_validate_a_report_that_cannot_be_written_is_a_usage_error(tmp_path, capsys, report,
                                                                   words):
  """Told before the job: its exit 1 would read as "the dataset has problems"."""
  (tmp_path / 'in').mkdir()
  (tmp_path / 'afile').write_text('mine')
  (tmp_path / 'folder').mkdir()
  os.mknod(tmp_path / 'device', 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's
  os.mkfifo(tmp_path / 'fifo')
  before = sorted(tmp_path.rglob('*'))
  path = tmp_path / report
  code = validate.main(['--input_dir', str(tmp_path / 'in'), '--report', str(path)])
  _one_error_line(capsys.readouterr().err, f'--report {path}', *words)
  assert code == EXIT_USAGE and sorted(tmp_path.rglob('*')) == before
  assert stat.S_ISCHR(os.stat(tmp_path / 'device').st_mode)
  assert not list(pathlib.Path('/proc').glob('.img2tfrecord-try-*'))


@pytest.mark.slow
@pytest.mark.parametrize('given', [True, False])
def test_validate_a_report_this_user_may_not_write_is_a_usage_error(tmp_path, given):
  """--report in a folder this user may not write in; no --report, an input
  folder this user may not write in (a dataset on a read-only share)."""
  locked = tmp_path / 'locked'
  locked.mkdir()
  report = ['--report', str(locked / 'r.json')] if given else []
  os.chmod(locked, 0o555)
  try:
    done = subprocess.run(
        [*_without_permission_bypass(), sys.executable, '-m', 'pipeline.validate',
         '--input_dir', str(locked), *report],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  finally:
    os.chmod(locked, 0o755)
  named = (f'--report {locked / "r.json"}' if given else
           f"the report {locked / 'validation_report.json'} (--report's default")
  _one_error_line(done.stderr, named, 'cannot be written',
                  f'permission denied: this user may not write in {locked}')
  assert done.returncode == EXIT_USAGE and done.stdout == '' and not any(locked.iterdir())


NONE_SIZED = ('need{} --resize_mode stretch, pad or crop: with --resize_mode none each image '
              'keeps its own size')


@pytest.mark.parametrize('flags,given', [
    (['--height', '64', '--width', '48'], '--height 64 and --width 48'),
    (['--width', '300'], '--width 300'),  # given, even at its default
])
def test_a_size_given_with_resize_mode_none_exits_2_with_one_line(sample, capsys, tmp_path,
                                                                  flags, given):
  line = f'error: {given} {NONE_SIZED.format("" if " and " in given else "s")}'
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--resize_mode', 'none', *flags])
  assert (code, capsys.readouterr().err.strip()) == (EXIT_USAGE, line)
  sizes = {flags[i][2:]: flags[i + 1] for i in range(0, len(flags), 2)}
  (tmp_path / 'c.yaml').write_text(''.join(f'{k}: {v}\n' for k, v in sizes.items()))
  code = convert.main(['--config', str(tmp_path / 'c.yaml'), '--manifest',
                       str(sample.manifest), '--output_dir', str(sample.out),
                       '--resize_mode', 'none'])
  assert (code, capsys.readouterr().err.strip()) == (EXIT_USAGE, line)
  with pytest.raises(api.UsageError) as error:
    api.convert(manifest=str(sample.manifest), output_dir=str(sample.out), resize_mode='none',
                **{k: int(v) for k, v in sizes.items()})
  assert f'error: {error.value}' == line
  assert not sample.out.exists()


def test_resize_mode_none_alone_records_no_size(sample, tmp_path, capsys):
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--resize_mode', 'none', '--progress', 'off']) == 0
  info = read_info(sample.out)
  assert {k: info['options'][k] for k in ('height', 'width', 'resize_mode')} == {
      'height': None, 'width': None, 'resize_mode': 'none'}
  # The recorded options are a config file of the run.
  (tmp_path / 'again.json').write_text(json.dumps(info['options']))
  config, _ = opts.parse_convert(['--config', str(tmp_path / 'again.json')])
  assert (config.image.resize_mode, config.image.fixed_size) == ('none', False)
  # A dataset of an earlier version recorded the default size: --recompute
  # still loads its options.
  info['options']['height'] = info['options']['width'] = 300
  (sample.out / 'dataset_info.json').write_text(json.dumps(info))
  assert validate.main(['--input_dir', str(sample.out), '--recompute', '2']) == 0
  assert '--recompute: 2 record(s) converted again' in capsys.readouterr().out


def test_an_options_block_recorded_with_resize_mode_none_before_sizes_were_refused_runs(
    sample, tmp_path):
  """A dataset's `options` is a --config file of its run (output.md). One
  recorded before --height/--width were refused with --resize_mode none
  holds them (300, the defaults): run again, it converts as it did. A size
  given on the command line beside it is still refused."""
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--resize_mode', 'none', '--progress', 'off']) == 0
  options = {**read_info(sample.out)['options'], 'height': 300, 'width': 300}
  config = tmp_path / 'recorded.json'
  config.write_text(json.dumps({**options, 'output_dir': str(tmp_path / 'again')}))
  assert convert.main(['--config', str(config), '--progress', 'off']) == 0
  again = read_info(tmp_path / 'again')
  assert {k: again['options'][k] for k in ('height', 'width', 'resize_mode')} == {
      'height': None, 'width': None, 'resize_mode': 'none'}
  shards = sorted(p.name for p in sample.out.glob('*.tfrecord'))
  assert shards and all((sample.out / name).read_bytes() ==
                        (tmp_path / 'again' / name).read_bytes() for name in shards)
  assert convert.main(['--config', str(config), '--output_dir', str(tmp_path / 'third'),
                       '--height', '64']) == EXIT_USAGE


def test_options_meaningless_beside_others_are_refused_given_not_recorded(sample, tmp_path,
                                                                           capsys):
  """A PNG dataset of 2 shards records --jpeg_quality 95 and --shard_size_mb
  128 among its options (every option is recorded): read back as a --config
  file, and converted again by validate --recompute, they are taken; given on
  the command line beside that file, refused."""
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--encoding', 'png', '--num_shards', '2', '--progress', 'off']) == 0
  options = read_info(sample.out)['options']
  assert (options['jpeg_quality'], options['shard_size_mb']) == (95, 128)
  assert validate.main(['--input_dir', str(sample.out), '--recompute', '3']) == 0
  assert '--recompute: 3 record(s) converted again' in capsys.readouterr().out
  config = tmp_path / 'recorded.json'
  config.write_text(json.dumps({**options, 'output_dir': str(tmp_path / 'again')}))
  assert convert.main(['--config', str(config), '--progress', 'off']) == 0
  assert sorted(p.name for p in (tmp_path / 'again').glob('*.tfrecord')) == [
      p.name for p in sorted(sample.out.glob('*.tfrecord'))]
  capsys.readouterr()
  assert convert.main(['--config', str(config), '--output_dir', str(tmp_path / 'third'),
                       '--jpeg_quality', '60']) == EXIT_USAGE
  assert capsys.readouterr().err.strip() == (
      'error: --jpeg_quality 60 has no effect with --encoding png: it is the quality of '
      '--encoding jpeg')


@pytest.mark.parametrize('fmt, header', [('csv', 'image,label'), ('txt', None)])
def test_a_csv_pattern_whose_file_names_say_two_splits_exits_2(tmp_path, capsys, fmt, header):
  # train.csv and test.csv as one pattern: a CSV takes no split from its file
  # name (datasets would), so every row went to train, the test rows with them.
  from PIL import Image
  Image.new('RGB', (8, 8)).save(tmp_path / 'a.png')
  sep = ',' if fmt == 'csv' else ' '
  for name in ('train', 'test'):
    (tmp_path / f'{name}.{fmt}').write_text(
        (f'{header}\n' if header else '') + f'a.png{sep}cat\n')
  out = tmp_path / 'out'
  pattern = str(tmp_path / f'*.{fmt}')
  assert convert.main(['--manifest', pattern, '--output_dir', str(out),
                       '--progress', 'off']) == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and err.startswith(
      f'error: manifest {pattern}: its files name splits ({tmp_path}/test.{fmt} (test), '
      f'{tmp_path}/train.{fmt} (train)), which a {fmt} manifest does not take'), err
  assert not out.exists()
  # a name saying two splits says none a CSV would miss: converted, not a traceback
  (tmp_path / f'test.{fmt}').rename(tmp_path / f'train_test.{fmt}')
  assert convert.main(['--manifest', pattern, '--output_dir', str(out), '--progress', 'off',
                       '--height', '8', '--width', '8']) == 3  # a.png twice: one duplicate key
  assert read_info(out)['num_examples'] == 1
  shutil.rmtree(out)
  (tmp_path / f'train_test.{fmt}').rename(tmp_path / f'test.{fmt}')
  if header:  # a split column gives each row its split: no question
    for name in ('train', 'test'):
      Image.new('RGB', (8, 8)).save(tmp_path / f'{name}.png')
      (tmp_path / f'{name}.csv').write_text(f'image,label,split\n{name}.png,cat,{name}\n')
    assert convert.main(['--manifest', pattern, '--output_dir', str(out), '--progress',
                         'off', '--height', '8', '--width', '8']) == 0
    assert set(read_info(out)['splits']) == {'train', 'test'}
