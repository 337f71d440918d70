"""The Dataflow Flex Template: generated from convert's own flags, never drifting."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from pipeline import convert
from pipeline import flex_launch
from pipeline import flex_template
from pipeline.configuration import command_line
from pipeline.configuration.flags import ConvertOptions
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from pipeline.runs import interrupts
from tests.conftest import noise_png
from tests.conftest import read_info
from tests.conftest import write_image
from tests.conftest import write_manifest

# One worker builds the generated template (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('flex_template')

ROOT = pathlib.Path(__file__).resolve().parents[1]


def command_line_flags() -> dict:
  """--flag -> argparse action, from the parser convert's command line builds."""
  parser = command_line.own_parser(ConvertOptions)
  return {flag: action for action in parser._actions
          for flag in action.option_strings if flag not in ('-h', '--help')}


@pytest.fixture(scope='module')
def generated(tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp('flex')
  done = subprocess.run([sys.executable, '-m', 'pipeline.flex_template', '--output_dir',
                         str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == [str(out / 'metadata.json'), str(out / 'Dockerfile')]
  return out


def test_one_parameter_per_convert_flag_both_ways(generated):
  parameters = json.loads((generated / 'metadata.json').read_text())['parameters']
  names = [p['name'] for p in parameters]
  assert len(names) == len(set(names))
  flags = command_line_flags()
  missing = sorted(set(flags) - {f'--{n}' for n in names})
  extra = sorted({f'--{n}' for n in names} - set(flags))
  assert missing == [], f'convert flags without a template parameter: {missing}'
  assert extra == [], f'template parameters convert does not accept: {extra}'
  assert {'config', 'manifest', 'output_dir', 'overwrite', 'encoding', 'num_shards'} <= set(
      names)


def test_parameters_carry_label_help_and_optionality(generated):
  metadata = json.loads((generated / 'metadata.json').read_text())
  assert metadata['name'] and metadata['description']
  for parameter in metadata['parameters']:
    assert set(parameter) <= {'name', 'label', 'helpText', 'isOptional', 'regexes'}
    assert parameter['label'] and parameter['helpText'], parameter
    assert parameter['isOptional'] is (parameter['name'] != 'output_dir'), parameter
  by_name = {p['name']: p for p in metadata['parameters']}
  assert by_name['num_shards']['label'] == 'Num shards'
  assert by_name['num_shards']['helpText'].startswith('Shards per split (0: per worker')
  assert by_name['num_shards']['helpText'].endswith('(default 0)')
  assert by_name['manifest']['helpText'].startswith('CSV/TSV/JSONL manifest')
  assert 'TXT manifest of "path label" lines' in by_name['manifest']['helpText']
  # a flag without a default says so in its own words, never "default None"
  assert by_name['manifest_format']['helpText'] == (
      'Format of the manifests (default: from the file name; txt: "path label" per line; '
      'parquet: read by row group; webdataset: .tar/.tar.gz shards of samples) '
      '(one of csv, tsv, jsonl, txt, parquet, webdataset)')
  assert not [p['name'] for p in metadata['parameters'] if 'None' in p['helpText']]


def test_image_processes_help_is_the_flag_help_and_says_what_raw_output_does(generated):
  """One text: --help and the template both print flags.py's help."""
  by_name = {p['name']: p for p in
             json.loads((generated / 'metadata.json').read_text())['parameters']}
  help_text = ' '.join(command_line_flags()['--image_processes'].help.split())
  assert by_name['image_processes']['helpText'] == (
      help_text[0].upper() + help_text[1:] + ' (default 0)')
  assert 'none for raw' not in help_text
  assert 'for every encoding' in help_text
  printed = subprocess.run([sys.executable, '-m', 'pipeline.convert', '--help'], cwd=ROOT,
                           capture_output=True, text=True, timeout=120).stdout
  assert help_text in ' '.join(printed.split())


# Values each numeric flag's parser accepts and refuses, typed as a user would.
NUMERIC_CANDIDATES = ('0', '1', '7', '007', '+3', '-1', '-0', '95', '100', '101', '300',
                      '0.5', '.5', '5.', '1.0', '1.5', '2', '0.01', '00', 'abc', '', ' 1',
                      '1 ', '1e3', 'inf', 'nan', '1,5', '0x10', '1.2.3', '+', '.', '--1')


def _accepted(action, text: str) -> bool:
  try:
    action.type(text)
  except (ValueError, argparse.ArgumentTypeError):
    return False
  return True


def test_numeric_flags_have_a_regex_letting_in_exactly_what_the_parser_takes(generated):
  parameters = {p['name']: p for p in
                json.loads((generated / 'metadata.json').read_text())['parameters']}
  numeric = {flag[2:]: action for flag, action in command_line_flags().items()
             if action.type not in (None, str) and not action.choices}
  assert {'num_shards', 'shard_size_mb', 'seed', 'height', 'width', 'jpeg_quality',
          'image_threads', 'image_processes', 'max_pixels', 'image_timeout_s',
          'max_error_rate', 'max_image_bytes', 'job_endpoint_connect_timeout',
          'min_box_visibility', 'http_timeout_s', 'http_retries',
          'http_max_per_host'} == set(numeric)
  for name, action in numeric.items():
    (regex,) = parameters[name]['regexes']
    for text in NUMERIC_CANDIDATES:
      matched = re.search(regex, text) is not None
      # never lets in what convert refuses; refuses only exotic spellings
      if matched:
        assert _accepted(action, text), (name, regex, text)
      elif _accepted(action, text):
        assert text in (' 1', '1 ', '1e3', 'inf', 'nan', '-0'), (name, regex, text)
  assert parameters['height']['regexes'] == [r'^\+?0*[1-9][0-9]*$']
  match = {name: [t for t in NUMERIC_CANDIDATES if re.search(parameters[name]['regexes'][0], t)]
           for name in ('height', 'num_shards', 'seed', 'jpeg_quality', 'image_timeout_s',
                        'max_error_rate')}
  assert match == {
      'height': ['1', '7', '007', '+3', '95', '100', '101', '300', '2'],
      'num_shards': ['0', '1', '7', '007', '+3', '95', '100', '101', '300', '2', '00'],
      'seed': ['0', '1', '7', '007', '+3', '-1', '-0', '95', '100', '101', '300', '2', '00'],
      'jpeg_quality': ['1', '7', '007', '+3', '95', '100', '2'],
      'image_timeout_s': ['0', '1', '7', '007', '+3', '95', '100', '101', '300', '0.5', '.5',
                          '5.', '1.0', '1.5', '2', '0.01', '00'],
      'max_error_rate': ['0', '1', '0.5', '.5', '1.0', '0.01', '00'],
  }


def test_output_dir_is_the_one_flag_convert_cannot_run_without(tmp_path, capsys):
  manifest = write_manifest(tmp_path / 'm.csv', [('a.png', 'x')])
  assert convert.main(['--manifest', str(manifest)]) == EXIT_USAGE
  assert '--output_dir is required' in capsys.readouterr().err


def test_closed_choices_and_switches_have_a_regex(generated):
  parameters = {p['name']: p for p in
                json.loads((generated / 'metadata.json').read_text())['parameters']}
  closed = 0
  for flag, action in command_line_flags().items():
    parameter = parameters[flag[2:]]
    if action.nargs == 0:
      allowed = ['true', 'false']
    elif action.choices:
      allowed = [str(c) for c in action.choices]
    else:
      assert ('regexes' in parameter) is (action.type not in (None, str)), parameter
      continue
    closed += 1
    (regex,) = parameter['regexes']
    assert [v for v in allowed if re.fullmatch(regex, v)] == allowed, (regex, allowed)
    for wrong in ('', 'bogus', allowed[0] + 'x', f'{allowed[0]}|{allowed[-1]}'):
      assert not re.search(regex, wrong), (regex, wrong)
  assert parameters['encoding']['regexes'] == ['^(raw|jpeg|png)$']
  assert parameters['overwrite']['regexes'] == ['^(true|false)$']
  assert closed >= 7  # schema, compression, channels, encoding, resize x2, progress, overwrite


def test_dockerfile_pins_the_launcher_installs_the_package_and_sets_the_entry_point(generated):
  lines = [line for line in (generated / 'Dockerfile').read_text().splitlines()
           if line and not line.startswith('#')]
  steps = [tuple(line.split(None, 1)) for line in lines]
  python = f'{sys.version_info.major}{sys.version_info.minor}'
  (base,) = [args for op, args in steps if op == 'FROM']
  image, tag = base.rsplit(':', 1)
  assert image == f'gcr.io/dataflow-templates-base/python{python}-template-launcher-base'
  assert re.fullmatch(r'flex_templates_base_image_release_\d{8}_RC\d\d', tag), tag
  copied = [p.rstrip('/') for op, args in steps if op == 'COPY' for p in args.split()[:-1]]
  for name in copied:
    assert (ROOT / name).exists(), name
  assert {'setup.py', 'requirements.txt', 'pipeline', 'transforms'} <= set(copied)
  assert ('RUN', 'pip install --no-cache-dir .') in steps
  env = dict(args.split('=', 1) for op, args in steps if op == 'ENV')
  assert env == {'FLEX_TEMPLATE_PYTHON_PY_FILE': '/template/pipeline/flex_launch.py',
                 'FLEX_TEMPLATE_PYTHON_SETUP_FILE': '/template/setup.py'}
  assert (ROOT / 'pipeline' / 'flex_launch.py').is_file()


def test_generation_is_deterministic(generated, tmp_path):
  flex_template.write(str(tmp_path))
  for name in ('metadata.json', 'Dockerfile'):
    assert (tmp_path / name).read_text() == (generated / name).read_text()


def test_template_parameters_become_convert_flags():
  assert flex_launch.convert_argv(
      ['--manifest=gs://b/m.csv', '--overwrite=true', '--num_shards=4',
       '--runner=DataflowRunner']) == [
           '--manifest=gs://b/m.csv', '--overwrite', '--num_shards=4', '--runner=DataflowRunner']
  assert flex_launch.convert_argv(['--overwrite=false', '--overwrite']) == ['--overwrite']
  with pytest.raises(UsageError, match='--overwrite=yes: give true or false'):
    flex_launch.convert_argv(['--overwrite=yes'])


@pytest.mark.slow
@pytest.mark.integration  # the launcher's own command in a subprocess, a whole run
def test_the_entry_point_runs_convert_as_the_launcher_calls_it(tmp_path):
  """`python FLEX_TEMPLATE_PYTHON_PY_FILE --name=value ...`, on the DirectRunner here."""
  write_image(tmp_path / 'a.png', (255, 0, 0))
  write_image(tmp_path / 'b.png', (0, 0, 255))
  manifest = write_manifest(tmp_path / 'm.csv', [('a.png', 'red'), ('b.png', 'blue')])
  out = tmp_path / 'out'
  (out).mkdir()
  # a previous dataset (a shard of its own and its label map): needs --overwrite=true
  (out / 'label_map.txt').write_text('old\n')
  (out / 'train-00000-of-00001.tfrecord').write_bytes(b'')
  done = subprocess.run(
      [sys.executable, str(ROOT / 'pipeline' / 'flex_launch.py'), f'--manifest={manifest}',
       f'--output_dir={out}', '--overwrite=true', '--height=8', '--width=8',
       '--progress=off', '--runner=DirectRunner'],
      cwd=tmp_path, capture_output=True, text=True, timeout=180)
  assert done.returncode == EXIT_OK, done.stderr
  info = read_info(out)
  assert info['num_examples'] == 2 and info['label_map'] == ['blue', 'red']


@pytest.mark.slow
@pytest.mark.integration  # the launcher's own command in a subprocess, signalled mid-run
def test_the_entry_point_stopped_by_sigterm_cleans_up_as_convert_does(tmp_path):
  """A cancelled launch (SIGTERM to the launcher): the run stops as `convert`
  does, ending by the signal with its one line, nothing left in OUT or the temp
  folder. flex_launch.py ran convert without its handlers and temp folder:
  OUT kept the run's lock and beam-temp folder, TMPDIR Beam's temp files."""
  (tmp_path / 'a.png').write_bytes(noise_png(1, (600, 600)))  # ~0.1 s a row to encode
  manifest = write_manifest(tmp_path / 'm.csv', [('a.png', 'ab'[n % 2], f'k{n}')
                                                 for n in range(400)],
                            header=('image', 'label', 'key'))
  out, temp = tmp_path / 'out', tmp_path / 'tmp'
  temp.mkdir()
  launcher = subprocess.Popen(
      [sys.executable, str(ROOT / 'pipeline' / 'flex_launch.py'), f'--manifest={manifest}',
       f'--output_dir={out}', '--encoding=png', '--image_processes=1', '--progress=off'],
      cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(ROOT)))
  deadline = time.monotonic() + 120
  while not (out.is_dir() and any(p.name.startswith('.convert.lock') for p in out.iterdir())):
    assert time.monotonic() < deadline and launcher.poll() is None, launcher.communicate()
    time.sleep(0.05)
  launcher.send_signal(signal.SIGTERM)
  _, err = launcher.communicate(timeout=180)
  assert launcher.returncode == -signal.SIGTERM, err
  assert err.strip().splitlines()[-1:] == [interrupts.CONVERT_LINES[0]], err
  assert sorted(p.name for p in out.iterdir()) == [] and list(temp.iterdir()) == []
