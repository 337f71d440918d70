"""pipeline.api: keywords for flags, rows from Python, exceptions for exit
codes, results, progress, and a process left as it was found."""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

from pipeline import api
from pipeline import convert as convert_command
from pipeline.configuration.flags import ConvertOptions
from pipeline.configuration.flags import ValidateOptions
from pipeline.errors import EXIT_USAGE
from pipeline.runs import in_process_errors
from pipeline.runs import progress
from tests.conftest import COLOURS
from tests.conftest import feature
from tests.conftest import pixels
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import write_image

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_public_names_are_those_docs_api_md_documents():
  assert sorted(api.__all__) == ['ConvertResult', 'ErrorBudgetExceeded', 'UsageError',
                                 'ValidationReport', 'convert', 'validate']
  page = (pathlib.Path(__file__).parent.parent / 'docs' / 'api.md').read_text()
  assert [name for name in api.__all__ if f'`{name}`' not in page and
          f'`api.{name}' not in page] == []
  namespace = {}
  exec('from pipeline.api import *', namespace)
  assert sorted(n for n in namespace if n != '__builtins__') == sorted(api.__all__)
  # the other exception classes the page names exist, and api's are them
  import importlib
  named = re.findall(r'`((?:pipeline\.)?\w+)\.(UsageError|ErrorBudgetExceeded)`', page)
  assert named
  for module, name in named:
    found = getattr(importlib.import_module(module if '.' in module else f'pipeline.{module}'),
                    name)
    assert issubclass(getattr(api, name), found), (module, name)


def _rows(sample) -> list:
  """The sample's manifest as dicts, image paths relative to sample.root."""
  return [{'image': image, 'label': label} for image, label in sample.labels.items()]


# --- keywords ----------------------------------------------------------------------


def test_keywords_become_the_flags_a_config_file_would_give():
  argv = api.keyword_argv(
      {'height': 224, 'overwrite': True, 'write_index': False, 'seed': None,
       'split': ('train=0.9', 'validation=0.1'), 'manifest': pathlib.Path('data/m.csv'),
       'experiments': ['a', 'b'], 'max_error_rate': 0.5},
      ConvertOptions, 'convert')
  assert argv == ['--height=224', '--overwrite', '--split=train=0.9,validation=0.1',
                  '--manifest=data/m.csv', '--experiments=a,b',
                  '--max_error_rate=0.5']


@pytest.mark.parametrize('keyword, message', [
    ('num_shard', "convert() got an unexpected keyword argument 'num_shard'; "
                  'did you mean num_shards?'),
    ('direct_num_worker', "convert() got an unexpected keyword argument "
                          "'direct_num_worker'; did you mean direct_num_workers?"),
    ('help', "convert() got an unexpected keyword argument 'help'"),
    ('zzzz', "convert() got an unexpected keyword argument 'zzzz'"),
])
def test_an_unknown_keyword_is_a_type_error_naming_the_closest_flag(tmp_path, keyword, message):
  with pytest.raises(TypeError) as caught:
    api.convert(output_dir=str(tmp_path / 'out'), manifest='m.csv', **{keyword: 1})
  assert str(caught.value) == message
  assert not (tmp_path / 'out').exists()


def test_validate_keywords_are_validate_flags():
  with pytest.raises(TypeError) as caught:
    api.validate(input_dir='out', expected=3)
  assert str(caught.value) == ("validate() got an unexpected keyword argument 'expected'; "
                               'did you mean expected_count?')
  assert api.keyword_argv({'strict': True, 'expected_count': 3}, ValidateOptions,
                          'validate') == ['--strict', '--expected_count=3']


@pytest.mark.parametrize('keywords, message', [
    ({'height': 'x'}, "argument --height: invalid positive integer value: 'x'"),
    ({'overwrite': 'yes'}, "keyword 'overwrite' takes true or false, not 'yes'"),
    ({'encoding': 'gif'}, "argument --encoding: invalid choice: 'gif' (choose from 'raw', 'jpeg', 'png')"),
    ({'direct_num_workers': 'many'}, "argument --direct_num_workers: invalid int value: 'many'"),
    ({'output_dir': None}, '--output_dir is required'),
    ({'image_dir': 'photos'}, 'give rows or image_dir, not both'),
    ({'progress': 'sometimes'}, "argument --progress: invalid choice: 'sometimes' (choose "
                                "from 'auto', 'on', 'off')"),
])
def test_usage_errors_are_exceptions_never_exits(sample, monkeypatch, keywords, message):
  monkeypatch.chdir(sample.root)
  with pytest.raises(api.UsageError) as caught:
    api.convert(**{'output_dir': 'out', 'rows': _rows(sample), **keywords})
  assert str(caught.value) == message
  assert isinstance(caught.value, ValueError)
  assert not (sample.root / 'out').exists()


def test_a_null_extra_feature_cell_is_empty_a_row_without_the_column_misses_it(sample,
                                                                             monkeypatch):
  monkeypatch.chdir(sample.root)
  rows = _rows(sample)[:3]
  rows[0]['w'], rows[2]['w'] = float('nan'), 1.0  # rows[1] has no 'w' at all
  result = api.convert(output_dir='out', rows=rows, height=4, width=4, extra_features='w:float',
                       max_error_rate=1)
  assert [(r['line'], r['code'], r['reason']) for r in result.rejected] == [
      (1, 'missing_feature', "column 'w' is empty; it holds one value (a scalar)"),
      (2, 'missing_feature', "column 'w' is missing")]


def test_validate_usage_error(tmp_path):
  with pytest.raises(api.UsageError) as caught:
    api.validate(input_dir=str(tmp_path / 'nowhere'))
  assert str(caught.value) == f'--input_dir {tmp_path / "nowhere"} is not a folder'


def test_validate_of_a_folder_holding_no_dataset_is_a_usage_error(tmp_path):
  (tmp_path / 'photo.jpg').write_bytes(b'x')
  with pytest.raises(api.UsageError) as caught:
    api.validate(input_dir=str(tmp_path))
  assert str(caught.value).endswith('(and nothing else convert writes is there: not a folder '
                                    'written by convert)')
  assert [p.name for p in tmp_path.iterdir()] == ['photo.jpg']


def test_a_usage_error_about_rows_names_them_not_their_temp_file(sample, monkeypatch):
  monkeypatch.chdir(sample.root)
  with pytest.raises(api.UsageError) as caught:
    api.convert(output_dir='out', rows=_rows(sample), image_column='file')
  assert str(caught.value) == 'rows= has no column(s) file (its columns: image, label)'


def test_rows_without_an_image_column_are_refused_as_the_command_line_refuses(
    sample, monkeypatch, tmp_path, capsys):
  """One preflight: rows= without an image column are refused before anything
  is written, with the command line's message for the same rows in a CSV
  manifest, worded for rows=."""
  rows = [{'file': image, 'label': label} for image, label in sample.labels.items()]
  manifest = tmp_path / 'files.csv'
  manifest.write_text('file,label\n' + ''.join(f'{r["file"]},{r["label"]}\n' for r in rows))
  assert convert_command.main(['--manifest', str(manifest), '--output_dir',
                               str(tmp_path / 'cli')]) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: manifest {manifest} has no column(s) image (its columns: file, label)\n')
  monkeypatch.chdir(sample.root)
  with pytest.raises(api.UsageError) as caught:
    api.convert(output_dir='out', rows=rows)
  assert str(caught.value) == 'rows= has no column(s) image (its columns: file, label)'
  assert not (sample.root / 'out').exists() and not (tmp_path / 'cli').exists()
  # The columns are every row's: a column only later rows have is there.
  result = api.convert(output_dir='out', rows=[rows[0], {'image': rows[1]['file'], 'label': 'x'}],
                       image_column='file', max_error_rate=0.5)
  assert (result.num_examples, [r['code'] for r in result.rejected]) == (1, ['empty_image'])


def test_no_rows_are_refused_naming_rows_not_a_manifest(tmp_path):
  out = tmp_path / 'out'
  with pytest.raises(api.UsageError) as caught:
    api.convert(output_dir=str(out), rows=[])
  assert str(caught.value) == 'rows= has no rows'
  assert not out.exists()
  result = api.convert(output_dir=str(out), rows=[], allow_empty=True)  # as --allow_empty
  assert (result.num_examples, result.num_rejected, read_info(out)['num_examples']) == (0, 0, 0)


# --- rows ------------------------------------------------------------------------


def test_rows_give_the_dataset_the_same_rows_in_a_manifest_give(sample, monkeypatch):
  """Relative image paths resolve against the current folder; keys, records
  and shards are those of the CLI's run on the same rows."""
  assert convert_command.main(['--manifest', str(sample.manifest), '--output_dir',
                               str(sample.root / 'cli')]) == 0
  monkeypatch.chdir(sample.root)
  result = api.convert(output_dir='api', rows=iter(_rows(sample)))
  assert (result.output_dir, result.num_examples, result.num_rejected) == ('api', 9, 0)
  assert result.splits['train']['num_examples'] == 9 and result.rejected == []
  cli_info, api_info = read_info(sample.root / 'cli'), read_info(sample.root / 'api')
  assert result.info == api_info
  assert api_info['config']['manifest'] == api_info['options']['manifest'] == '<rows>'
  for shard in cli_info['splits']['train']['shards']:
    assert (sample.root / 'api' / shard).read_bytes() == (sample.root / 'cli' / shard).read_bytes()
  for example in read_examples(sample.root / 'api'):
    name = feature(example, 'image/filename').decode()
    assert tuple(pixels(example)[0, 0]) == COLOURS[sample.labels[name]]


def test_recompute_of_a_rows_dataset_asks_for_a_manifest_of_its_rows(sample, monkeypatch):
  """rows= were in a temp file, gone with the run: --recompute says to give a
  manifest of them, not "cannot tell the format of manifest '<rows>'"; given
  one, it converts the records again and finds them sound."""
  monkeypatch.chdir(sample.root)
  api.convert(output_dir='api', rows=_rows(sample))
  with pytest.raises(api.UsageError) as refused:
    api.validate(input_dir='api', recompute=3)
  assert str(refused.value) == (
      '--recompute: api/dataset_info.json was converted from rows= (pipeline.api), which no '
      'file holds: give --manifest (manifest=), a manifest of those rows')
  report = api.validate(input_dir='api', recompute=3, manifest=str(sample.manifest))
  assert (report.ok, report.counts, report.problems) == (True, {'train': 9}, [])
  assert report.report['num_recomputed'] == 3


def test_a_dataframe_with_rejected_rows_and_the_error_budget(sample, monkeypatch):
  pandas = pytest.importorskip('pandas')
  monkeypatch.chdir(sample.root)
  (sample.root / 'images' / 'broken.png').write_bytes(b'not a png')
  images = [*sample.labels, 'images/broken.png', 'images/gone.png']
  frame = pandas.DataFrame({
      'image': images,
      'label': [*sample.labels.values(), 'red', 'red'],
      'weight': np.arange(len(images), dtype=np.float32) / 2,
      'count': np.arange(len(images), dtype=np.int64)})
  frame.loc[2, 'weight'] = np.nan  # an empty cell: its row is rejected, as in a CSV
  with pytest.raises(api.ErrorBudgetExceeded) as caught:
    api.convert(output_dir='out', rows=frame, height=4, width=4,
                extra_features='weight:float,count:int64')
  result = caught.value.result
  assert str(caught.value) == ('3 of 11 rows rejected (27.27%), above max_error_rate 0.00%: '
                               'see .result.rejected')
  assert (result.num_examples, result.num_rejected) == (8, 3)
  # rows= rows are named <rows>, their line is their position from 1
  assert sorted((r['source'], r['line'], r['stage'], r['code']) for r in result.rejected) == [
      ('<rows>', 3, 'manifest', 'missing_feature'), ('<rows>', 10, 'decode', 'not_an_image'),
      ('<rows>', 11, 'read', 'missing_file')]
  empty = next(r for r in result.rejected if r['line'] == 3)
  assert empty['reason'] == "column 'weight' is empty; it holds one value (a scalar)"
  gone = next(r for r in result.rejected if r['line'] == 11)
  assert gone['row'] == {'image': 'images/gone.png', 'label': 'red', 'weight': 5.0, 'count': 10}
  assert gone['reason'] == f'file not found: {sample.root / "images" / "gone.png"}'
  frame = result.rejected_frame()
  assert list(frame.columns) == ['source', 'line', 'stage', 'code', 'reason', 'row']
  assert sorted(frame['line']) == [3, 10, 11]
  weights = sorted(float(feature(e, 'weight')) for e in read_examples(sample.root / 'out'))
  assert weights == [0.0, 0.5, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
  again = api.convert(output_dir='out', overwrite=True, rows=pandas.DataFrame(_rows(sample)),
                      height=4, width=4)
  assert (again.num_examples, again.num_rejected, again.rejected) == (9, 0, [])


def test_rejected_frame_without_pandas(monkeypatch):
  monkeypatch.setitem(sys.modules, 'pandas', None)
  result = api.ConvertResult('out', {}, [])
  with pytest.raises(ImportError) as caught:
    result.rejected_frame()
  assert str(caught.value) == ('rejected_frame() needs pandas (pip install pandas); '
                               '.rejected holds the same rows as dicts')


def test_rows_are_written_in_one_pass_one_row_held_at_a_time(tmp_path):
  class Row(dict):
    pass

  alive = []

  def rows():
    for i in range(1000):
      row = Row(image=f'{i}.png', label=np.int64(i % 3), extra=np.array([i, i + 1]),
                path=pathlib.Path('a') / 'b')
      alive.append(sum(ref() is not None for ref in refs))
      refs.append(weakref.ref(row))
      yield row

  refs = []
  path = tmp_path / 'rows.jsonl'
  assert api.write_rows(rows(), str(path)) == (1000, ('image', 'label', 'extra', 'path'))
  assert max(alive) <= 1  # no list of rows: each goes once written
  lines = path.read_text().splitlines()
  assert json.loads(lines[4]) == {'image': '4.png', 'label': 1, 'extra': [4, 5], 'path': 'a/b'}


def test_write_rows_values_and_refusals(tmp_path):
  path = str(tmp_path / 'rows.jsonl')
  api.write_rows([{'image': 'a.png', 'label': float('nan'), 'w': np.float32('nan'),
                   'x': np.float64(1.5), 'k': None, 'é': 'ü'}], path)
  assert pathlib.Path(path).read_text(encoding='utf-8') == (
      '{"image": "a.png", "label": null, "w": null, "x": 1.5, "k": null, "é": "ü"}\n')
  for rows, message in [
      ([{'image': 'a'}, ['b', 'c']], 'rows: row 2 is a list, not a dict of column values'),
      ('a.png,cat', 'rows takes a DataFrame or an iterable of dicts, not a str'),
      ({'image': ['a.png']}, 'rows takes a DataFrame or an iterable of dicts, not a dict'),
      # not iterable: the same refusal, not Python's "'PosixPath' object is not iterable"
      (pathlib.Path('manifest.csv'), 'rows takes a DataFrame or an iterable of dicts, not a '
                                     f'{type(pathlib.Path()).__name__}'),
      (5, 'rows takes a DataFrame or an iterable of dicts, not a int'),
      ([{'image': object()}], 'rows: row 1 cannot be written as a manifest row: a object is '
                              'not a manifest value'),
      ([{'w': [float('inf')]}], 'rows: row 1 cannot be written as a manifest row: Out of range '
                                'float values are not JSON compliant'),
  ]:
    with pytest.raises(api.UsageError) as caught:
      api.write_rows(rows, path)
    assert str(caught.value).startswith(message), caught.value


def test_a_dataframe_repeating_a_column_is_refused_not_read_as_its_last_copy(sample, monkeypatch):
  """A DataFrame with two 'label' columns (a merge, a concat) converted every
  row with the second copy's label and no word: a CSV header repeating a
  column exits 2, a JSONL row naming a member twice is rejected. Refused
  before anything is written, as is a dict naming one column twice (1, '1')."""
  pandas = pytest.importorskip('pandas')
  monkeypatch.chdir(sample.root)
  rows = _rows(sample)
  frame = pandas.DataFrame([[r['image'], r['label'], 'other'] for r in rows],
                           columns=['image', 'label', 'label'])
  with pytest.raises(api.UsageError) as caught:
    api.convert(output_dir='out', rows=frame, height=4, width=4)
  assert str(caught.value) == ("rows= repeats column(s) ['label']: no copy's value would win; "
                               "drop or rename the copies")
  assert not (sample.root / 'out').exists()
  with pytest.raises(api.UsageError) as caught:
    api.write_rows([rows[0], {'image': rows[1]['image'], 1: 'a', '1': 'b'}],
                   str(sample.root / 'rows.jsonl'))
  assert str(caught.value) == "rows: row 2 names column '1' twice (1, '1')"
  # a DataFrame whose columns are unique converts all its rows
  result = api.convert(output_dir='out', rows=frame.iloc[:, :2], height=4, width=4)
  assert (result.num_examples, result.num_rejected) == (9, 0)


def test_a_value_that_cannot_be_written_names_its_column(tmp_path):
  """A DataFrame's timestamp or bytes column stops the run: the message names
  the column to drop or convert, not only the value's type."""
  import datetime
  path = str(tmp_path / 'rows.jsonl')
  for row, message in [
      ({'image': 'a.png', 'label': 'x', 'taken': datetime.datetime(2024, 1, 2)},
       "rows: row 2 cannot be written as a manifest row: a datetime is not a manifest value "
       "(column 'taken')"),
      ({'image': b'\x89PNG', 'label': 'x'},
       "rows: row 2 cannot be written as a manifest row: a bytes is not a manifest value "
       "(column 'image')"),
      ({'image': 'a.png', 'label': 'x', 'w': np.array([1.0, np.inf])},
       "rows: row 2 cannot be written as a manifest row: Out of range float values are not "
       "JSON compliant (column 'w')"),
  ]:
    with pytest.raises(api.UsageError) as caught:
      api.write_rows([{'image': 'b.png', 'label': 'y'}, row], path)
    assert str(caught.value) == message


# --- runs --------------------------------------------------------------------------


def test_a_crash_raises_its_own_exception_and_releases_the_folder(sample, monkeypatch):
  def build(*args, **kwargs):
    raise RuntimeError('boom')
  monkeypatch.setattr(convert_command, 'build', build)
  with pytest.raises(RuntimeError) as caught:
    api.convert(output_dir=str(sample.out), manifest=str(sample.manifest))
  assert type(caught.value) is RuntimeError and str(caught.value) == 'boom'
  monkeypatch.undo()
  assert api.convert(output_dir=str(sample.out), manifest=str(sample.manifest),
                     overwrite=True).num_examples == 9


def test_validate_reports_what_it_found(sample, tmp_path):
  api.convert(output_dir=str(sample.out), manifest=str(sample.manifest), num_shards=2)
  report = api.validate(input_dir=str(sample.out), expected_count=9)
  assert (report.ok, report.counts, report.num_examples, report.problems) == (
      True, {'train': 9}, 9, [])
  assert report.report_path == str(sample.out / 'validation_report.json')
  assert report.report == json.loads((sample.out / 'validation_report.json').read_text())
  shard = read_info(sample.out)['splits']['train']['shards'][0]
  (sample.out / shard).unlink()
  report = api.validate(input_dir=str(sample.out), expected_count=9,
                        report=str(tmp_path / 'r.json'))
  assert report.ok is False
  # the sidecar's lines for the deleted shard's records name no record
  assert {p['kind'] for p in report.problems} == {'missing_shard', 'count_mismatch',
                                                 'sidecar_mismatch'}
  assert report.report_path == str(tmp_path / 'r.json')


class _Recorded:
  """A progress display that records what it was shown."""
  made = []

  def __init__(self, total):
    self.total, self.updates, self.closed = total, [], None
    _Recorded.made.append(self)

  def set_total(self, total):  # a manifest's rows, once the pipeline counted them
    self.total = total

  def update(self, done):
    self.updates.append(done)

  def close(self, done):
    self.closed = done


@pytest.mark.parametrize('given, in_notebook, shown', [
    (None, True, 'bar'), (False, True, None), ('auto', False, None), (True, False, 'line')])
def test_progress_keyword_and_the_notebook_bar(sample, monkeypatch, given, in_notebook, shown):
  _Recorded.made = []
  monkeypatch.setattr(progress, 'in_notebook', lambda: in_notebook)
  monkeypatch.setattr(progress, 'BarDisplay', _Recorded)
  monkeypatch.setattr(progress, 'LineDisplay', type('Line', (_Recorded,), {}))
  api.convert(output_dir=str(sample.out), manifest=str(sample.manifest), progress=given)
  kinds = [type(d).__name__ for d in _Recorded.made]
  assert kinds == {'bar': ['_Recorded'], 'line': ['Line'], None: []}[shown]
  for display in _Recorded.made:
    assert (display.total, display.closed) == (9, 9)
    assert all(0 <= done <= 9 for done in display.updates), display.updates


@pytest.mark.parametrize('given', [None, 'auto'])
def test_convert_in_a_process_without_stderr(sample, monkeypatch, given):
  """sys.stderr is None in a process started with it closed (a daemon,
  pythonw): progress 'auto' asked it isatty() and convert raised
  AttributeError, which such a process shows nowhere."""
  monkeypatch.setattr(progress, 'in_notebook', lambda: False)
  monkeypatch.setattr(sys, 'stderr', None)
  result = api.convert(output_dir=str(sample.out), manifest=str(sample.manifest),
                       progress=given)
  monkeypatch.undo()
  assert (result.num_examples, result.num_rejected) == (9, 0)
  assert read_info(sample.out)['num_examples'] == 9


def test_the_bar_counts_rows_done():
  bar = progress.BarDisplay(5)
  bar.update(3)
  assert (bar._bar.n, bar._bar.total) == (3, 5)
  bar.close(5)
  assert bar._bar.n == 5


# --- the process, as it was --------------------------------------------------------

_STATE_SCRIPT = textwrap.dedent("""
    import json, logging, os, random, signal, sys, tempfile, warnings
    from PIL import Image

    data = sys.argv[1]
    # A user's own settings. The root logger has no handler (as in a fresh
    # notebook): Beam's logging.info() calls would give it one.
    logging.getLogger().setLevel(logging.INFO)
    logging.disable(logging.DEBUG)
    Image.MAX_IMAGE_PIXELS = 1000 * 1000
    warnings.simplefilter('default')
    random.seed(7)

    import apache_beam
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.transforms import core
    from pipeline import api

    def state():
      root = logging.getLogger()
      return {
          'root_level': root.level, 'root_handlers': list(root.handlers),
          'logging_disable': logging.root.manager.disable, 'meta_path': list(sys.meta_path),
          'beam_get_function_args_defaults': core.get_function_args_defaults,
          'beam_filesystem_options': FileSystems._pipeline_options,
          'warnings_filters': list(warnings.filters), 'pillow_max_pixels': Image.MAX_IMAGE_PIXELS,
          'signal_handlers': [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)],
          'temp_dir': (tempfile.gettempdir(), os.environ.get('TMPDIR')), 'cwd': os.getcwd(),
          'excepthook': sys.excepthook, 'random_state': random.getstate()}

    modules = dict(sys.modules)
    before = state()
    result = api.convert(rows=[{'image': f'{data}/{i}.png', 'label': 'ab'[i % 2]}
                               for i in range(4)],
                         output_dir=f'{data}/out', height=4, width=4, max_pixels=200000000,
                         s3_region_name='eu-west-1', progress=False)
    report = api.validate(input_dir=f'{data}/out')
    after = state()
    changed = {name: before[name] != after[name] for name in before}
    # Filters a module adds when the run first imports it stay, as the module does.
    imported = set(sys.modules) - set(modules)
    changed['warnings_filters'] = before['warnings_filters'] != [
        f for f in after['warnings_filters'] if f[2].__module__ not in imported]
    changed['sys_modules'] = [m for m in modules if sys.modules.get(m) is not modules[m]]
    print(json.dumps({'examples': result.num_examples, 'ok': report.ok, 'changed': changed}))
""")


@pytest.mark.slow
def test_a_run_leaves_the_process_as_it_found_it(tmp_path):
  """In a fresh interpreter: the user's logging, Beam, Pillow and warnings
  settings, sys.meta_path and sys.modules, signal handlers and temp folder,
  all as before a convert and a validate (each item asserted on its own)."""
  for i in range(4):
    write_image(tmp_path / f'{i}.png', (60 * i, 0, 0), size=(6, 5))
  done = subprocess.run([sys.executable, '-c', _STATE_SCRIPT, str(tmp_path)], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  found = json.loads(done.stdout.strip().splitlines()[-1])
  assert (found['examples'], found['ok']) == (4, True)
  changed = found['changed']
  assert changed['root_level'] is False
  assert changed['root_handlers'] is False
  assert changed['logging_disable'] is False
  assert changed['meta_path'] is False
  assert changed['sys_modules'] == []
  assert changed['beam_get_function_args_defaults'] is False
  assert changed['beam_filesystem_options'] is False
  assert changed['warnings_filters'] is False
  assert changed['pillow_max_pixels'] is False
  assert changed['signal_handlers'] is False
  assert changed['temp_dir'] is False
  assert changed['cwd'] is False
  assert changed['excepthook'] is False
  assert changed['random_state'] is False  # Beam's Reshuffle drew from it
  assert set(changed) == {'root_level', 'root_handlers', 'logging_disable', 'meta_path',
                          'sys_modules', 'beam_get_function_args_defaults',
                          'beam_filesystem_options', 'warnings_filters', 'pillow_max_pixels',
                          'signal_handlers', 'temp_dir', 'cwd', 'excepthook', 'random_state'}


_INTERRUPT_SCRIPT = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from pipeline import api
    from transforms import encode

    data = sys.argv[1]
    # Ctrl-C, as a notebook's interrupt sends it, mid-run: when the first
    # image comes back (the progress line's first update with a row done came
    # only after the last row once the run was fast enough)
    loaded = encode.LoadImageFn.outcome
    def outcome(self, element, result):
      if not hasattr(encode, 'sent'):
        encode.sent = True
        os.kill(os.getpid(), signal.SIGINT)
      return loaded(self, element, result)
    encode.LoadImageFn.outcome = outcome
    try:
      api.convert(rows=[{'image': f'{data}/{i % 4}.png', 'label': 'ab'[i % 2],
                         'key': str(i)} for i in range(400)],
                  output_dir=f'{data}/out', height=64, width=64, encoding='jpeg',
                  progress=True)
      print('finished')
    except KeyboardInterrupt:
      print('KeyboardInterrupt')
    # The image processes are stopped, not waited for: on a loaded machine
    # they take a moment to go. None may stay.
    for _ in range(100):
      children = subprocess.run(['ps', '--ppid', str(os.getpid()), '-o', 'comm='],
                                capture_output=True, text=True).stdout.split()
      if not set(children) - {'ps'}:
        break
      time.sleep(0.1)
    print(sorted(set(children) - {'ps'}))
    print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
""")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='lists children with ps')
def test_ctrl_c_raises_keyboard_interrupt_after_the_clean_up(tmp_path):
  for i in range(4):
    write_image(tmp_path / f'{i}.png', (60 * i, 0, 0), size=(300, 200))
  temp = tmp_path / 'temp'
  temp.mkdir()
  done = subprocess.run([sys.executable, '-c', _INTERRUPT_SCRIPT, str(tmp_path)], cwd=ROOT,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, TMPDIR=str(temp)))
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.splitlines() == ['KeyboardInterrupt', '[]', 'True'], done.stderr[-3000:]
  assert 'Traceback' not in done.stderr, done.stderr[-3000:]  # Beam logs none either
  left = [p.name for p in (tmp_path / 'out').iterdir()]
  assert 'dataset_info.json' not in left  # nothing published
  assert not [name for name in left if name.startswith('.convert.lock')]  # released
  assert list(temp.iterdir()) == []  # the run's temp folder is gone
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_what_a_step_raises_is_not_logged_by_beam_during_a_run(caplog):
  """Beam's DoFnRunner logs what a step raises, traceback and all, before
  re-raising it: during a run that log is held, dropped when the run raises
  (the caller gets the exception), logged after a run that ends well; a
  KeyboardInterrupt's never. After the run, Beam's logger is as it was."""
  import logging
  step_logger = logging.getLogger('apache_beam.runners.common')

  def log(error):
    try:
      raise error
    except BaseException as raised:  # as Beam's _reraise_augmented, in its except
      step_logger.exception(RuntimeError(f'{type(raised).__name__} [while running x]'))

  with pytest.raises(KeyboardInterrupt):
    with in_process_errors.interruptible():
      log(KeyboardInterrupt())
      log(ValueError('a bug'))
      raise RuntimeError('KeyboardInterrupt [while running x]') from KeyboardInterrupt()
  with pytest.raises(RuntimeError):
    with in_process_errors.interruptible():
      log(OSError(28, 'No space left on device'))
      raise RuntimeError('OSError [while running x]')
  assert caplog.records == []
  with in_process_errors.interruptible():
    log(ValueError('retried'))
    log(KeyboardInterrupt())
    step_logger.error('no exception')  # not held: no exception with it
    assert [r.getMessage() for r in caplog.records] == ['no exception']
  assert [r.getMessage() for r in caplog.records] == ['no exception',
                                                      'ValueError [while running x]']
  log(KeyboardInterrupt())
  assert len(caplog.records) == 3 and step_logger.filters == []


def test_a_failed_step_is_raised_not_also_logged(sample, monkeypatch, caplog):
  """A shard write failing on a full disk: api.convert raises it, and Beam's
  ERROR log of it (its traceback, 14 lines on stderr) is not shown too."""
  import errno

  from transforms import shard_file

  def full(*args):
    raise OSError(errno.ENOSPC, 'No space left on device')
  monkeypatch.setattr(shard_file.ShardFile, 'write_record', full)
  with pytest.raises(RuntimeError, match=r'No space left on device \[while running'):
    api.convert(output_dir=str(sample.out), manifest=str(sample.manifest), progress=False)
  assert [r.getMessage() for r in caplog.records if r.exc_info] == []
  assert 'dataset_info.json' not in os.listdir(sample.out)


def test_in_ipython_the_run_s_pipelines_stay_out_of_interactive_beam(sample, monkeypatch):
  """Beam hands transforms built in IPython to Interactive Beam (its whole
  interactive stack, a warning, JavaScript in the notebook): not the run's.
  A run sees no IPython in apache_beam.pipeline, and Beam's functions are
  back afterwards."""
  from apache_beam import pipeline as beam_pipeline
  from apache_beam.utils import interactive_utils
  shell = type('ZMQInteractiveShell', (), {'config': {'IPKernelApp': {}},
                                           'execution_count': 1})()
  monkeypatch.setitem(sys.modules, 'IPython', type(sys)('IPython'))
  sys.modules['IPython'].get_ipython = lambda: shell
  assert interactive_utils.is_in_ipython() and progress.in_notebook()
  before = (beam_pipeline.is_in_ipython, beam_pipeline.alter_label_if_ipython)
  seen = []
  real_build = convert_command.build

  def build(p, *args, **kwargs):
    seen.append(beam_pipeline.is_in_ipython())
    return real_build(p, *args, **kwargs)
  monkeypatch.setattr(convert_command, 'build', build)
  result = api.convert(output_dir=str(sample.out), manifest=str(sample.manifest), progress=False)
  assert (result.num_examples, seen) == (9, [False])
  assert (beam_pipeline.is_in_ipython, beam_pipeline.alter_label_if_ipython) == before


def test_a_config_file_keyword_with_keywords_overriding_it(sample, tmp_path):
  config = tmp_path / 'nightly.yaml'
  config.write_text(f'manifest: {sample.manifest}\noutput_dir: {sample.out}\n'
                    'height: 8\nwidth: 6\nencoding: png\n')
  result = api.convert(config=config, width=5, progress=False)
  assert result.num_examples == 9
  assert (result.info['image']['height'], result.info['image']['width'],
          result.info['image']['encoding']) == (8, 5, 'png')
  assert result.info['config_file'] == str(config)


def test_a_switch_keyword_false_overrides_the_config_file_s_true(sample, tmp_path):
  """overwrite=False over a config file's `overwrite: true`: False gives no
  token, and the file's true had stood (a second convert replaced the dataset)."""
  config = tmp_path / 'nightly.yaml'
  config.write_text(f'manifest: {sample.manifest}\noutput_dir: {sample.out}\noverwrite: true\n')
  assert api.convert(config=config, progress=False).num_examples == 9
  with pytest.raises(api.UsageError, match='is not empty'):
    api.convert(config=config, overwrite=False, progress=False)
  assert api.convert(config=config, overwrite=None, progress=False).num_examples == 9


def test_a_handler_a_runner_installs_during_the_run_is_put_back():
  # Beam's job server for Flink and Spark installs a SIGINT handler and never
  # removes it (StopOnExitJobServer); the run must not leave it behind.
  from pipeline.runs import in_process
  before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
  with in_process.restored_process_state():
    signal.signal(signal.SIGINT, lambda *_: None)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
  assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_the_run_draws_random_numbers_the_caller_s_generator_never_gives_again():
  """The random module's state is put back after a run, so numbers drawn from
  it during the run (by Beam's Reshuffle, or by a caller's other thread,
  which the one-run lock does not hold back) came again after it: ids
  drawn by a thread repeated, each of them. The run draws from a generator
  seeded afresh; the caller's own sequence goes on where it was."""
  from pipeline.runs import in_process
  random.seed(7)
  expected = random.Random(7)
  with in_process.restored_process_state():
    during = [random.getrandbits(64) for _ in range(50)]
  after = [random.getrandbits(64) for _ in range(50)]
  assert after == [expected.getrandbits(64) for _ in range(50)]  # the caller's, as before
  assert not set(during) & set(after)


def test_a_call_leaves_tempfile_unset_and_tmpdir_honoured(tmp_path):
  # tempfile.mkdtemp caches the system folder in tempfile.tempdir: a call that
  # did so would make TMPDIR set later ignored.
  script = (
      'import os, tempfile\n'
      'from pipeline import api\n'
      'try:\n'
      '  api.convert(output_dir="x", num_shard=1)\n'
      'except TypeError:\n'
      '  pass\n'
      f'os.environ["TMPDIR"] = {str(tmp_path)!r}\n'
      'print(tempfile.tempdir, tempfile.mkdtemp().startswith(os.environ["TMPDIR"]))\n')
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop('TMPDIR', None)
  out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                       env=env, timeout=120, check=True).stdout
  assert out.split() == ['None', 'True']


_WORKER_PROCESSES_SCRIPT = textwrap.dedent("""
    import json, logging, sys
    from pipeline import api

    data = sys.argv[1]
    beam = dict(runner='DirectRunner', direct_num_workers=2,
                direct_running_mode='multi_processing')
    result = api.convert(manifest=f'{data}/m.csv', output_dir=f'{data}/out', progress=False,
                         **beam)
    report = api.validate(input_dir=f'{data}/out', **beam)
    relay = logging.getLogger('apache_beam.runners.portability.local_job_service')
    print(json.dumps([result.num_examples, report.ok, len(relay.filters)]))
""")


@pytest.mark.slow
def test_beam_worker_processes_warnings_are_not_printed(tmp_path):
  """direct_running_mode='multi_processing': Beam relays each worker
  process's WARNINGs (no semi_persistent_directory, discarded args) to this
  process's logging, which printed 4 lines per run on stderr; the command
  line prints none, and a run in process prints nothing but progress."""
  for i in range(4):
    write_image(tmp_path / f'{i}.png', (60 * i, 0, 0), size=(6, 5))
  (tmp_path / 'm.csv').write_text('image,label\n' + ''.join(
      f'{i}.png,{"ab"[i % 2]}\n' for i in range(4)))
  done = subprocess.run([sys.executable, '-c', _WORKER_PROCESSES_SCRIPT, str(tmp_path)],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert json.loads(done.stdout.strip().splitlines()[-1]) == [4, True, 0]
  assert done.stderr == ''


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_runs_from_two_threads_go_one_at_a_time_each_in_its_own_temp_folder(sample, monkeypatch):
  """api.convert from two threads at once, on different output folders: TMPDIR
  and tempfile's folder are one per process. Run B started while run A ran
  saved A's temp folder as the one to put back and made its own inside it; A's
  end put the caller's back under B (B's temp files in the caller's folder)
  and removed B's folder with A's; B's end left A's removed folder as TMPDIR
  and tempfile's for good. A's convert waits (a while at most) for B's to
  start: B starts only once A has ended."""
  import tempfile
  import threading
  before = os.environ.get('TMPDIR'), tempfile.tempdir
  started = {name: threading.Event() for name in 'AB'}
  seen = {}

  def fake_convert(config, pipeline_options, display):
    name = pathlib.Path(config.output_dir).name
    own = os.environ['TMPDIR']
    seen[name] = [(own, tempfile.gettempdir(), os.path.isdir(own))]
    started[name].set()
    if name == 'A':
      started['B'].wait(timeout=5)  # B overlaps A, unless B waits for A to end
    seen[name].append((os.environ['TMPDIR'], tempfile.gettempdir(), os.path.isdir(own)))
  monkeypatch.setattr(convert_command, 'convert', fake_convert)
  errors = []

  def run(name):
    try:
      api.convert(manifest=str(sample.manifest), output_dir=str(sample.root / name),
                  progress=False)
    except Exception as error:  # reported by the assert below
      errors.append(repr(error))
  threads = {name: threading.Thread(target=run, args=(name,)) for name in 'AB'}
  threads['A'].start()
  assert started['A'].wait(timeout=60)
  threads['B'].start()
  for thread in threads.values():
    thread.join(timeout=120)
  assert errors == []
  for name in 'AB':  # each run in its own folder, beside the caller's, the whole run
    own = seen[name][0][0]
    assert seen[name] == [(own, own, True)] * 2, name
    assert os.path.dirname(own) == before[0], name
    assert not os.path.exists(own), name
  assert seen['A'][0][0] != seen['B'][0][0]
  assert (os.environ.get('TMPDIR'), tempfile.tempdir) == before
