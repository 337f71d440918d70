"""`make demo`'s inputs are what the examples of README and docs/ read: each
snippet that names a local input file runs as pasted after `make demo`."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import sys

import pytest

from pipeline import convert
from pipeline import demo
from pipeline.configuration import config as opts
from tests.conftest import read_info

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / 'README.md'] + sorted((ROOT / 'docs').glob('*.md'))
TEXTS = {page.relative_to(ROOT).as_posix(): page.read_text() for page in PAGES}
CONVERT = ('pipeline.convert', 'convert')


def code_blocks(page: str = '') -> list:
  """The fenced blocks of one page, or of README and every docs/ page."""
  texts = [TEXTS[page]] if page else TEXTS.values()
  return [block for text in texts
          for block in re.findall(r'^```[^\n]*\n(.*?)^```', text, re.S | re.M)]


def example_runs() -> list:
  """docs/convert.md's Examples block as convert argv lists, in order: `$C ...` lines,
  `C="$C --overwrite"` adding to the lines after it."""
  (block,) = [b for b in code_blocks('docs/convert.md')
              if b.startswith('C=".venv/bin/python -m pipeline.convert"')]
  prefix, runs = [], []
  for line in block.splitlines():
    words = shlex.split(line, comments=True)
    if not words:
      continue
    if words[0].startswith('C='):
      value = shlex.split(words[0][2:])
      if value[0] == '$C':
        prefix = prefix + value[1:]
      else:
        assert value == ['.venv/bin/python', '-m', 'pipeline.convert'], line
        prefix = []
    else:
      assert words[0] == '$C', line
      runs.append(prefix + words[1:])
  return runs


def convert_argv(line: str) -> list:
  """The arguments of a pasted convert command line (also one quoted in a
  comment, `# after: .venv/bin/img2tfrecord convert ...`), else []."""
  words = shlex.split(line[line.index('.venv/'):] if '.venv/' in line else line, comments=True)
  for command in CONVERT:
    if command in words:
      return words[words.index(command) + 1:]
  return []


def tour_converts() -> list:
  """The README tour's convert command lines that read make demo's inputs
  (the nightly ones left out: their second night needs the first)."""
  runs = [argv for block in code_blocks('README.md') for line in block.replace('\\\n', ' ').splitlines()
          for argv in [convert_argv(line)] if argv and 'demo_data/' in line
          and '--previous_dataset' not in argv]
  assert len(runs) >= 4, runs
  return runs


def pasted_converts() -> list:
  """Every convert command line of README and docs/ that reads make demo's
  files, outside the `$C` Examples block (a line ending in \\ goes on)."""
  return [argv for block in code_blocks() for line in block.replace('\\\n', ' ').splitlines()
          if 'demo_data/' in line and not line.startswith(('$C', 'C='))
          for argv in [convert_argv(line)] if argv]


@pytest.fixture(scope='module')
def demo_dir(tmp_path_factory) -> pathlib.Path:
  """A folder as `make demo` leaves its inputs (demo_data/), 4 images a class."""
  root = tmp_path_factory.mktemp('demo')
  demo.make_sample(str(root / demo.DATA_DIR), per_class=4)
  return root


def test_readme_names_no_input_the_demo_does_not_write(demo_dir):
  named = set()
  for block in code_blocks():
    named.update(re.findall(r'\bdemo_data/[\w./]*\w', block))
  assert named >= {'demo_data/manifest.csv', 'demo_data/tags.csv', 'demo_data/folders'}
  assert sorted(p for p in named if not (demo_dir / p).exists()) == []
  for inputs in demo.OTHER_INPUTS:
    assert (demo_dir / demo.DATA_DIR / inputs).exists(), inputs
  for page, text in TEXTS.items():
    assert 'data/train.csv' not in text.replace('gs://B/data/train.csv', ''), page


def test_each_example_parses_with_the_demo_inputs(demo_dir, monkeypatch):
  """Every flag, manifest header, column, label map and folder of the
  examples checked (parse_convert's reads), no pipeline run."""
  monkeypatch.chdir(demo_dir)
  runs = example_runs()
  assert len(runs) == 19
  assert [('--overwrite' in argv) for argv in runs] == [False] + [True] * 18
  for argv in runs:
    config, _ = opts.parse_convert(argv)
    assert config.output_dir == 'out'
  for argv in tour_converts():
    assert opts.parse_convert(argv)[0].output_dir.startswith('tour/'), argv
  pasted = pasted_converts()
  assert len(pasted) >= 5, pasted  # the tour's, docs/reading.md's --write_index
  for argv in pasted:
    if '--previous_dataset' in argv:
      continue  # the second night needs the first
    # (/shared/out: the cluster examples write where every worker can;
    # out-flink, out-spark: the engines' pages, one folder each)
    output_dir = opts.parse_convert(argv)[0].output_dir
    assert output_dir in ('out', 'indexed', '/shared/out', 'out-flink', 'out-spark') or (
        output_dir.startswith('tour/')), argv
  by_flag = {argv[argv.index('--manifest') + 1]: opts.parse_convert(argv)[0]
             for argv in runs if '--manifest' in argv}
  assert by_flag['demo_data/tags.csv'].example.multi_label
  assert by_flag['demo_data/columns.csv'].manifests[0].path == 'demo_data/columns.csv'


def test_the_demo_inputs_hold_the_same_rows(demo_dir):
  data = demo_dir / demo.DATA_DIR
  csv_rows = (data / 'manifest.csv').read_text().splitlines()[1:]
  assert len(csv_rows) == 12
  txt = [line.replace(' ', ',') for line in (data / 'manifest.txt').read_text().splitlines()]
  assert txt == csv_rows
  tags = (data / 'tags.csv').read_text().splitlines()[1:]
  assert tags[0] == 'images/circle_00.jpg,circle|jpg'
  extras = [json.loads(line) for line in (data / 'extras.jsonl').read_text().splitlines()]
  first = extras[0]
  assert (first['image'], first['label'], first['weight'], first['tags']) == (
      'images/circle_00.jpg', 'circle', 0.5, ['jpg', 'RGB'])
  assert len(first['bbox']) == 4 and first['boxes'] == [first['bbox']]
  assert 0 < first['bbox'][0] < first['bbox'][2] < 1 and 0 < first['bbox'][1] < first['bbox'][3] < 1
  folders = sorted(str(p.relative_to(data / 'folders')) for p in (data / 'folders').rglob('*.*'))
  assert len(folders) == 12 and folders[0] == 'train/circle/circle_00.jpg'
  assert 'validation/circle/circle_03.gif' in folders
  assert (data / 'classes.txt').read_text().split() == list(demo.CLASSES)


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
def test_every_example_runs_as_pasted(demo_dir, monkeypatch):
  """The Examples block in order, into out/ as it says: every run exits 0 with
  every row an example."""
  monkeypatch.chdir(demo_dir)
  for argv in example_runs():
    assert convert.main(argv + ['--progress', 'off']) == 0, argv
    info = read_info(demo_dir / 'out')
    assert (info['num_rejected'], info['num_examples']) == (0, info['num_manifest_rows']), argv
    assert info['num_examples'] in (12, 9), argv  # 9: the train folders alone


@pytest.mark.slow
@pytest.mark.integration  # a system test: a server, three sources, three runs
def test_demo_sources_converts_and_validates_each_source(tmp_path, monkeypatch, capsys):
  from pipeline import demo_sources
  monkeypatch.chdir(tmp_path)
  assert demo_sources.main([]) == 0
  out = capsys.readouterr().out
  assert out.count('OK: 12 examples') == 3, out
  assert 'OK: 12 examples (train 9, test 3)' in out  # the Parquet splits from the Hub names
  assert (tmp_path / 'demo_output_sources' / 'parquet' / 'label_map.txt').read_text() == (
      'circle\nsquare\ntriangle\n')


def test_demo_detection_without_scikit_image_is_one_line_and_exit_2(tmp_path, monkeypatch,
                                                                     capsys):
  """Its photos come from scikit-image, a test requirement: a user who
  pip-installed the package (runtime requirements only) got a
  ModuleNotFoundError traceback and exit 1 from `python -m
  pipeline.demo_detection`. Now one line naming what to install, exit 2,
  nothing written."""
  from pipeline import demo_detection
  from pipeline.errors import EXIT_USAGE
  from pipeline.runs import exits
  monkeypatch.chdir(tmp_path)
  monkeypatch.setitem(sys.modules, 'skimage', None)
  monkeypatch.setitem(sys.modules, 'skimage.data', None)
  assert exits.main_with_usage_errors(demo_detection.main, []) == EXIT_USAGE
  out, err = capsys.readouterr()
  assert out == ''
  assert err.count('\n') == 1
  assert err.startswith('error: the detection demo takes its photos from scikit-image')
  assert err.endswith('pip install scikit-image==0.26.0\n')
  assert list(tmp_path.iterdir()) == []
