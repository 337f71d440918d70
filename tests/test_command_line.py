"""One parse of the command line: typed configs, local defaults, every Beam options
class, did-you-mean, runners that cannot run this pipeline, and bugs versus usage errors."""

from __future__ import annotations

import contextlib
import pathlib
import re
import subprocess
import sys

from apache_beam.options.pipeline_options import DebugOptions
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.options.pipeline_options import StandardOptions
import pytest

from pipeline import cli
from pipeline import convert
from pipeline import validate
from pipeline.configuration import command_line
from pipeline.configuration import config as opts
from pipeline.configuration import config_file
from pipeline.configuration import configs
from pipeline.configuration import flag_files
from pipeline.configuration import flags
from pipeline.configuration import locations
from pipeline.configuration.flags import ConvertOptions
from pipeline.engines import runner_flags
from pipeline.engines import runners
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
from transforms import filesystem
from transforms.core import manifest
from transforms.core.labels import LabelMap
from transforms.workers.pooled_step import available_memory_mib


def convert_argv(sample, *flags):
  return ['--manifest', str(sample.manifest), '--output_dir', str(sample.out), *flags]


def one_error_line(capsys) -> str:
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and err.startswith('error: '), err
  return err


# --- typed configs from one parse ------------------------------------------------


def test_convert_flags_become_a_typed_frozen_config(sample):
  config, options = opts.parse_convert(convert_argv(
      sample, '--height', '8', '--width', '6', '--encoding', 'png', '--split',
      'train=0.75,test=0.25', '--num_shards', '2', '--temp_location', '/tmp/t'))
  assert isinstance(config, configs.ConvertConfig)
  assert (config.image.height, config.image.width, config.image.encoding) == (8, 6, 'png')
  assert config.split.fractions == (('train', 0.75), ('test', 0.25))
  assert config.num_shards == 2 and config.manifests[0].path == str(sample.manifest)
  assert options.view_as(GoogleCloudOptions).temp_location == '/tmp/t'
  with pytest.raises(AttributeError):
    config.num_shards = 3  # frozen


def test_validate_flags_become_a_typed_frozen_config(tmp_path):
  config, options = opts.parse_validate(['--input_dir', f'{tmp_path}/', '--expected_count',
                                         '7', '--max_problems', '3', '--check_threads', '2'])
  assert config == configs.ValidateConfig(
      input_dir=str(tmp_path), report_path=f'{tmp_path}/validation_report.json',
      expected_count=7, max_problems=3, check_threads=2, check_processes=0)
  assert options.view_as(StandardOptions).runner == 'DirectRunner'


def test_the_info_settings_are_typed_and_carry_the_options(sample):
  config, _ = opts.parse_convert(convert_argv(sample, '--encoding', 'jpeg'))
  settings = config.info_settings()
  assert settings.image == config.image and settings.example == config.example
  assert settings.options['encoding'] == 'jpeg' and settings.config_file is None
  assert settings.config == config.to_json()


@pytest.mark.parametrize('given,expected', [
    ({}, {'runner': 'DirectRunner', 'direct_running_mode': 'in_memory',
          'default_sdk_harness_log_level': 'WARNING'}),
    ({'direct_num_workers': 2}, {'runner': 'DirectRunner', 'direct_num_workers': 2,
                                 'direct_running_mode': 'multi_processing',
                                 'default_sdk_harness_log_level': 'WARNING'}),
    ({'direct_running_mode': 'multi_threading'},
     {'runner': 'DirectRunner', 'direct_running_mode': 'multi_threading',
      'default_sdk_harness_log_level': 'WARNING'}),
    ({'runner': 'DataflowRunner', 'default_sdk_harness_log_level': 'INFO'},
     {'runner': 'DataflowRunner', 'default_sdk_harness_log_level': 'INFO'}),
])
def test_local_defaults_in_one_place(given, expected):
  assert runners.local_defaults(given) == expected


def test_beam_flags_reach_the_pipeline_options_with_local_defaults(tmp_path):
  options = command_line.parse(['--direct_num_workers', '2', '--experiments', 'a',
                                '--experiments', 'b'], flags.ValidateOptions, '').pipeline_options
  assert options.view_as(DirectOptions).direct_num_workers == 2
  assert options.view_as(DirectOptions).direct_running_mode == 'multi_processing'
  assert options.view_as(DebugOptions).experiments == ['a', 'b']
  assert options.view_as(StandardOptions).runner == 'DirectRunner'


# --- unknown flags, did you mean, --help ---------------------------------------


@pytest.mark.parametrize('command,flag,message', [
    ('convert', '--num_shard', "unrecognized argument '--num_shard'; did you mean --num_shards?"),
    ('convert', '--num_shard=3', "unrecognized argument '--num_shard=3'; did you mean "
     '--num_shards?'),
    ('convert', '--heigth', "unrecognized argument '--heigth'; did you mean --height?"),
    ('convert', '--tmp_location', "unrecognized argument '--tmp_location'; did you mean "
     '--temp_location?'),
    ('convert', '--zzz', "unrecognized argument '--zzz'"),
    ('validate', '--expected_cont', "unrecognized argument '--expected_cont'; did you mean "
     '--expected_count?'),
    ('validate', '--image_dir', "unrecognized argument '--image_dir'"),
    # a long flag given one dash, as some tools spell them: argparse gave no hint
    ('convert', '-num_shards', "unrecognized argument '-num_shards'; did you mean --num_shards?"),
    # argparse took these for -h with an argument: `argument -h/--help: ignored
    # explicit argument 'eight'`
    ('convert', '-height', "unrecognized argument '-height'; did you mean --height?"),
    ('convert', '-heigth', "unrecognized argument '-heigth'; did you mean --height?"),
    ('convert', '-direct_num_workers', "unrecognized argument '-direct_num_workers'; did you "
     'mean --direct_num_workers?'),
    ('convert', '-q', "unrecognized argument '-q'"),
    ('validate', '-expected_count', "unrecognized argument '-expected_count'; did you mean "
     '--expected_count?'),
])
def test_unknown_flags_are_usage_errors_with_a_suggestion(sample, capsys, command, flag,
                                                         message):
  sample.out.mkdir()
  if command == 'convert':
    code = convert.main(convert_argv(sample, flag, '3'))
  else:
    code = validate.main(['--input_dir', str(sample.out), flag, '3'])
  assert code == EXIT_USAGE
  assert one_error_line(capsys) == f'error: {message}'
  assert list(sample.out.iterdir()) == []


@pytest.mark.parametrize('argv,message', [
    (['inspect', '--input_dir', 'x', '--nmu', '3'],
     "unrecognized argument '--nmu'; did you mean --num?"),
    (['inspect', '--input_dir', 'x', '--per_clas=2'],
     "unrecognized argument '--per_clas=2'; did you mean --per_class?"),
    (['inspect', '--export_dri', 'x', '--input_dir', 'x'],
     "unrecognized argument '--export_dri'; did you mean --export_dir?"),
    (['inspect', '--input_dir', 'x', '--zzz'], "unrecognized argument '--zzz'"),
    # before argparse's "--format is required": the misspelling is what to fix
    (['export', '--fromat', 'tfds', '--input_dir', 'x'],
     "unrecognized argument '--fromat'; did you mean --format?"),
    (['export', '--format', 'tfds', '--input_dir', 'x', '--overwrit'],
     "unrecognized argument '--overwrit'; did you mean --overwrite?"),
    (['export', '--format=tfds', '--input_dir=x', '--ouput_dir=y'],
     "unrecognized argument '--ouput_dir=y'; did you mean --output_dir?"),
    # one dash: export said `--input_dir is required`, inspect gave no hint
    (['inspect', '-input_dir', 'x'], "unrecognized argument '-input_dir'; did you mean "
     '--input_dir?'),
    (['export', '--format', 'tfds', '-input_dir', 'x'],
     "unrecognized argument '-input_dir'; did you mean --input_dir?"),
    (['export', '-format=tfds', '--input_dir', 'x'],
     "unrecognized argument '-format=tfds'; did you mean --format?"),
    (['conver', '--manifest', 'm.csv'], "unknown command 'conver'; did you mean convert?"),
    (['valdate'], "unknown command 'valdate'; did you mean validate?"),
    (['inspekt'], "unknown command 'inspekt'; did you mean inspect?"),
    (['exprot'], "unknown command 'exprot'; did you mean export?"),
    (['train'], "unknown command 'train'; give one of convert, validate, inspect, export"),
])
def test_inspect_export_and_commands_suggest_the_closest_name(tmp_path, monkeypatch, capsys,
                                                             argv, message):
  monkeypatch.chdir(tmp_path)
  assert cli.main(argv) == EXIT_USAGE
  assert one_error_line(capsys) == f'error: {message}'
  assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('main,flags', [
    (convert.main, ['--num_shards', '--config', '--height', '--image_processes']),
    (validate.main, ['--input_dir', '--config', '--expected_count', '--check_threads'])])
def test_help_lists_our_flags_and_exits_0(capsys, main, flags):
  with pytest.raises(SystemExit) as exited:
    main(['--help'])
  assert exited.value.code == 0
  out = capsys.readouterr().out
  assert out.startswith('usage: ') and all(f in out for f in flags), out
  assert 'Any Beam pipeline option is accepted too' in out


def test_console_script_help_for_both_commands(capsys):
  for command, flag in (('convert', '--num_shards'), ('validate', '--expected_count')):
    with pytest.raises(SystemExit) as exited:
      cli.main([command, '-h'])
    assert exited.value.code == 0 and flag in capsys.readouterr().out
  script = pathlib.Path(sys.executable).with_name('img2tfrecord')
  done = subprocess.run([str(script), 'validate', '--help'], capture_output=True, text=True)
  assert done.returncode == 0 and '--expected_count' in done.stdout, done.stderr


@pytest.mark.parametrize('command', cli.COMMANDS)
def test_each_commands_help_names_it_as_the_console_script_takes_it(capsys, command):
  """The usage line a user copies works: `img2tfrecord convert [-h] ...`, not
  `img2tfrecord [-h] --config FILE` (an unknown command '--config')."""
  with pytest.raises(SystemExit) as exited:
    cli.main([command, '--help'])
  assert exited.value.code == 0
  assert capsys.readouterr().out.startswith(f'usage: img2tfrecord {command} [-h] ')


def test_no_command_is_a_usage_error_one_line_on_stderr(capsys):
  assert cli.main([]) == EXIT_USAGE
  assert one_error_line(capsys) == ('error: no command given; give one of convert, validate, '
                                    'inspect, export (img2tfrecord --help says what each does)')
  assert capsys.readouterr().out == ''


def test_console_script_help_lists_the_commands_on_stdout_exit_0(capsys):
  assert cli.main(['--help']) == 0
  captured = capsys.readouterr()
  assert captured.out.startswith('usage: img2tfrecord {convert,validate,inspect,export} [options]\n')
  assert captured.err == ''


@pytest.mark.parametrize('flag', ['--version', '-V'])
def test_console_script_version_prints_setup_pys_version_on_stdout_exit_0(capsys, flag):
  setup_py = (pathlib.Path(__file__).parent.parent / 'setup.py').read_text()
  version = re.search(r"version='([^']+)'", setup_py).group(1)
  assert cli.main([flag]) == 0
  captured = capsys.readouterr()
  assert captured.out == f'img2tfrecord {version}\n'
  assert captured.err == ''


def test_python_m_convert_help_names_the_console_scripts_command():
  done = subprocess.run([sys.executable, '-m', 'pipeline.convert', '--help'],
                        capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  assert done.stdout.startswith('usage: img2tfrecord convert [-h] [--config FILE] ')


# --- every Beam options class; runners that cannot run this ----------------------


def test_flags_of_beam_options_classes_outside_the_parse_are_accepted(sample):
  config, options = opts.parse_convert(convert_argv(
      sample, '--dask_client_address', 'tcp://127.0.0.1:8786', '--render_port', '-1',
      '--yaml_experimental_features', 'x'))
  assert config.options['dask_client_address'] == 'tcp://127.0.0.1:8786'
  assert options.get_all_options(retain_unknown_options=True)['address'] == (
      'tcp://127.0.0.1:8786')
  # read from Beam's source, never imported (it needs dask, not installed here)
  assert 'apache_beam.runners.dask.dask_runner' not in sys.modules


def test_the_outlying_options_modules_are_all_of_beams():
  """Every PipelineOptions subclass Beam ships outside pipeline_options.py is in
  OUTLYING_BEAM_OPTION_MODULES (examples and test code aside)."""
  import apache_beam
  root = pathlib.Path(apache_beam.__file__).parent
  found = set()
  for path in root.rglob('*.py'):
    relative = path.relative_to(root)
    if (relative.parts[0] in ('examples', 'testing') or path.name.endswith('_test.py')
        or relative == pathlib.Path('options/pipeline_options.py')):
      continue
    if re.search(r'^class \w+\((?:[\w.]+\.)?PipelineOptions\):', path.read_text(
        encoding='utf-8', errors='replace'), re.MULTILINE):
      found.add('apache_beam.' + '.'.join(relative.with_suffix('').parts))
  assert found == set(command_line.OUTLYING_BEAM_OPTION_MODULES)
  flags = {f for cls in command_line.beam_option_classes()
           for f in _flags_of(cls)}
  assert {'--dask_client_address', '--render_output', '--yaml_experimental_features',
          '--runner', '--s3_endpoint_url', '--direct_num_workers'} <= flags


def _flags_of(cls) -> set:
  import argparse
  parser = argparse.ArgumentParser()
  cls._add_argparse_args(parser)
  return {s for a in parser._actions for s in a.option_strings}


@pytest.mark.parametrize('runner', ['DaskRunner',
                                    'apache_beam.runners.dask.dask_runner.DaskRunner'])
def test_dask_runner_is_refused_before_anything_is_written(sample, capsys, runner):
  assert convert.main(convert_argv(sample, '--runner', runner, '--dask_client_address',
                                   'tcp://127.0.0.1:8786')) == EXIT_USAGE
  err = one_error_line(capsys)
  assert err.startswith('error: --runner DaskRunner cannot run this pipeline: ')
  assert 'merges tagged outputs into the main output' in err and 'finish_bundle' in err
  assert not sample.out.exists()
  # a previous dataset stays as it was, even with --overwrite
  sample.out.mkdir()
  (sample.out / 'dataset_info.json').write_text('{}')
  assert convert.main(convert_argv(sample, '--runner', runner, '--overwrite')) == EXIT_USAGE
  assert 'DaskRunner cannot run' in one_error_line(capsys)
  assert [p.name for p in sample.out.iterdir()] == ['dataset_info.json']
  assert validate.main(['--input_dir', str(sample.out), '--runner', runner]) == EXIT_USAGE
  assert 'DaskRunner cannot run' in one_error_line(capsys)
  assert [p.name for p in sample.out.iterdir()] == ['dataset_info.json']


def test_a_runner_beam_does_not_know_is_a_usage_error(sample, capsys):
  """Refused as the flags are read, listing what --runner takes; not Beam's
  ValueError once the pipeline is made, after OUT was locked (and made)."""
  words = ('error: --runner NoSuchRunner is not a runner Beam knows: give one of ',
           'DirectRunner, ', 'FlinkRunner, ', 'DataflowRunner, ',
           'or the full module path of a PipelineRunner class')
  assert convert.main(convert_argv(sample, '--runner', 'NoSuchRunner')) == EXIT_USAGE
  err = one_error_line(capsys)
  assert all(word in err for word in words) and 'DaskRunner' not in err, err
  assert not sample.out.exists()
  sample.out.mkdir()
  assert validate.main(['--input_dir', str(sample.out), '--runner', 'NoSuchRunner']) == (
      EXIT_USAGE)
  err = one_error_line(capsys)
  assert all(word in err for word in words), err
  assert list(sample.out.iterdir()) == []


@pytest.mark.parametrize('runner,words', [
    ('nonexistent.module.SomeRunner',
     "--runner nonexistent.module.SomeRunner: its module cannot be imported (No module named "
     "'nonexistent')"),
    ('apache_beam.NoSuchRunner', '--runner apache_beam.NoSuchRunner: module apache_beam has '
                                 'no NoSuchRunner'),
    ('apache_beam.Pipeline', '--runner apache_beam.Pipeline is no PipelineRunner class'),
])
def test_a_runner_module_path_that_names_no_runner_is_a_usage_error(sample, capsys, runner,
                                                                    words):
  """Was Beam's ModuleNotFoundError or AttributeError traceback, exit 1."""
  assert convert.main(convert_argv(sample, '--runner', runner)) == EXIT_USAGE
  assert one_error_line(capsys) == f'error: {words}'
  assert not sample.out.exists()
  assert validate.main(['--input_dir', str(sample.out), '--runner', runner]) == EXIT_USAGE
  assert one_error_line(capsys) == f'error: {words}'


@pytest.mark.parametrize('runner,known', [
    ('DirectRunner', True), ('direct', True), ('directrunner', True), ('flink', True),
    ('SparkRunner', True), ('dataflow', True), ('PrismRunner', True),
    ('NoSuchRunner', False), ('pythonrpcdirect', False),  # an alias of a module Beam lacks
])
def test_runner_names_are_known_as_beam_knows_them(runner, known):
  assert runner_flags.known_runner(runner) is known


@pytest.mark.slow  # Beam in a subprocess
def test_dask_runner_refused_on_the_real_command_line(sample):
  done = subprocess.run([sys.executable, '-m', 'pipeline.convert', *convert_argv(
      sample, '--runner', 'DaskRunner')], capture_output=True, text=True)
  assert done.returncode == EXIT_USAGE and 'Traceback' not in done.stderr
  assert done.stderr.startswith('error: --runner DaskRunner cannot run this pipeline')
  assert not sample.out.exists()


# --- bugs are crashes (exit 1, traceback), input problems usage errors (exit 2) ---


def test_a_bug_while_reading_the_manifest_header_is_a_crash(sample, capsys, monkeypatch):
  def buggy(line, fmt):
    raise TypeError('a bug in parse_header')
  monkeypatch.setattr(manifest, 'parse_header', buggy)
  assert convert.main(convert_argv(sample)) == EXIT_FAILED
  err = capsys.readouterr().err
  assert err.startswith('error: the job failed: TypeError: a bug in parse_header')
  assert 'Traceback (most recent call last)' in err
  assert not sample.out.exists()


def test_a_bug_while_reading_the_label_map_is_a_crash(sample, capsys, monkeypatch):
  (sample.root / 'classes.txt').write_text('red\ngreen\nblue\n')
  def buggy(cls, text):
    raise AttributeError('a bug in from_text')
  monkeypatch.setattr(LabelMap, 'from_text', classmethod(buggy))
  assert convert.main(convert_argv(sample, '--label_map',
                                   str(sample.root / 'classes.txt'))) == EXIT_FAILED
  err = capsys.readouterr().err
  assert 'AttributeError: a bug in from_text' in err and 'Traceback' in err


@pytest.mark.parametrize('content,message', [
    (b'red\n\nblue\n', 'blank line'),
    (b'red\nred\n', 'repeats'),
    (b'red\n\xc3(bad', "codec can't decode"),  # not UTF-8 (UTF-16: test_excel_manifests)
    (None, 'does not exist or is not a file'),
])
def test_label_map_input_problems_stay_usage_errors(sample, capsys, content, message):
  path = sample.root / 'classes.txt'
  if content is not None:
    path.write_bytes(content)
  assert convert.main(convert_argv(sample, '--label_map', str(path))) == EXIT_USAGE
  err = one_error_line(capsys)
  assert err.startswith(f'error: --label_map {path}') and message in err, err


@pytest.mark.parametrize('flag', ['--label_map', '--config'])
@pytest.mark.parametrize('kind', ['device', 'fifo', 'folder'])
def test_a_flag_file_that_is_not_a_regular_file_is_refused_unread(sample, tmp_path, capsys,
                                                                   flag, kind):
  """--label_map or --config naming a device (/dev/zero was read whole: a
  MemoryError at 4.3 GB; /dev/null here, which a regression cannot fill the
  memory with), a FIFO (waited on forever) or a folder: the check --manifest
  has, exit 2 in one line, and nothing opened (the FIFO's writer is never
  needed)."""
  path = {'device': pathlib.Path('/dev/null'), 'fifo': tmp_path / 'named.txt',
          'folder': tmp_path}[kind]
  with fifo_writer_that_unblocks_readers(tmp_path / 'named.txt') as unblocked:
    assert convert.main(convert_argv(sample, flag, str(path))) == EXIT_USAGE
  assert one_error_line(capsys) == f'error: {flag} {path} does not exist or is not a file'
  assert not unblocked


@pytest.mark.parametrize('flag,limit', [('--label_map', flag_files.MAX_LABEL_MAP_BYTES),
                                        ('--config', config_file.MAX_CONFIG_BYTES)])
def test_a_flag_file_over_its_size_cap_is_refused_after_reading_the_cap(
    sample, tmp_path, capsys, monkeypatch, flag, limit):
  path = tmp_path / 'huge.txt'
  path.write_bytes(b'a\n' * (limit // 2 + 1))
  reads = []
  real = filesystem.FileAccess.open_checked

  @contextlib.contextmanager
  def counted(self, name):
    with real(self, name) as stream:
      original = stream.read
      stream.read = lambda size=-1: reads.append(size) or original(size)
      yield stream
  monkeypatch.setattr(filesystem.FileAccess, 'open_checked', counted)
  assert convert.main(convert_argv(sample, flag, str(path))) == EXIT_USAGE
  assert one_error_line(capsys) == (f'error: {flag} {path} holds more than {limit} bytes, '
                                    f'more than any {flag} file needs')
  assert reads == [limit + 1]


def test_an_unparseable_header_stays_a_usage_error(tmp_path, capsys):
  (tmp_path / 'm.csv').write_text('image,"label\na.png,x\n')
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir',
                       str(tmp_path / 'out')]) == EXIT_USAGE
  assert 'has an unusable header line' in one_error_line(capsys)


@pytest.mark.parametrize('name, encoding, text, reason', [
    # Excel's "Unicode Text" export: UTF-16 LE, tab-separated. It said
    # "'utf-8' codec can't decode byte 0xff in position 0" (CSV/TSV), or
    # "all 3 rows were rejected" (txt, JSONL: every line bad_encoding).
    ('m.tsv', 'utf-16', 'image\tlabel\r\na.png\tcat\r\n', 'has an unusable header line: it is '
     'UTF-16 text (it starts with the byte order mark FF FE): save it as UTF-8'),
    ('m.txt', 'utf-16', 'a.png cat\r\nb.png dog\r\n', 'cannot be read: it is UTF-16 text (it '
     'starts with the byte order mark FF FE): save it as UTF-8'),
    ('m.jsonl', 'utf-16-be', '\ufeff{"image": "a.png", "label": "cat"}\n', 'cannot be read: it '
     'is UTF-16 text (it starts with the byte order mark FE FF): save it as UTF-8'),
    ('m.csv', 'utf-32', 'image,label\na.png,cat\n', 'has an unusable header line: it is '
     'UTF-32 text (it starts with the byte order mark FF FE 00 00): save it as UTF-8'),
    # Classic Mac OS line ends: the whole file is one line. It said "new-line
    # character seen in unquoted field - do you need to open the file in
    # universal-newline mode?"
    ('m.csv', 'utf-8', 'image,label\ra.png,cat\rb.png,dog\r', 'has an unusable header line: '
     "its lines end with a lone \\r (classic Mac OS line breaks): only \\n or \\r\\n end a "
     "line; convert them (tr '\\r' '\\n')"),
    # A binary file whose bytes before the first \n hold a \r (one in 256
    # bytes is one): it was told to convert its Mac OS line ends.
    ('m.csv', None, b'\xd0\xcf\x11\xe0\r\x00\n', 'has an unusable header line: it is not '
     "UTF-8 text ('utf-8' codec can't decode byte 0xd0 in position 0: invalid continuation "
     "byte)"),
])
def test_a_manifest_not_in_utf8_lines_is_one_line_naming_why(tmp_path, capsys, name, encoding,
                                                              text, reason):
  path = tmp_path / name
  path.write_bytes(text.encode(encoding) if encoding else text)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out)]) == EXIT_USAGE
  assert one_error_line(capsys) == f'error: manifest {path} {reason}'
  assert not out.exists()


@pytest.mark.slow  # Beam in a subprocess
def test_importing_the_package_configures_no_logging():
  code = ('import logging; import pipeline, pipeline.convert, pipeline.validate, '
          'pipeline.configuration.config, pipeline.configuration.flags, pipeline.configuration.preflight, pipeline.cli, pipeline.configuration.command_line; '
          'root = logging.getLogger(); print(len(root.handlers), root.level)')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
  assert done.stdout.split() == ['0', str(30)], done.stderr  # no handler, WARNING


def test_the_entry_point_configures_logging(sample, capsys):
  import logging
  root = logging.getLogger()
  level = root.level
  try:
    assert convert.main(convert_argv(sample, '--height', 'x')) == EXIT_USAGE
    assert root.level == logging.ERROR
  finally:
    root.setLevel(level)


def test_a_negative_number_of_local_workers_is_a_usage_error(sample, capsys):
  """Beam starts no worker for --direct_num_workers -1: the job failed with an
  IndexError's traceback (exit 1) once OUT was made; refused as the flags are
  read now, by convert and validate."""
  assert convert.main(convert_argv(sample, '--direct_num_workers=-1')) == EXIT_USAGE
  assert one_error_line(capsys) == ('error: --direct_num_workers -1 is below 0: give a number '
                                    'of worker processes, or 0 for one per core')
  assert not sample.out.exists()
  sample.out.mkdir()
  assert validate.main(['--input_dir', str(sample.out), '--direct_num_workers', '-2']) == (
      EXIT_USAGE)
  assert '--direct_num_workers -2 is below 0' in one_error_line(capsys)


def test_an_input_given_twice_is_a_usage_error(sample, capsys, tmp_path):
  """argparse keeps the last of a flag given twice: `--manifest a.csv
  --manifest b.csv` converted b.csv alone, exit 0. An input flag given twice
  is refused before anything is made, by convert and validate."""
  other = tmp_path / 'other.csv'
  other.write_text('image,label\n')
  argv = convert_argv(sample) + ['--manifest', str(other)]
  assert convert.main(argv) == EXIT_USAGE
  assert one_error_line(capsys) == (
      f'error: --manifest is given twice ({sample.manifest}, then {other}): only one would be '
      "read; give it once (several manifests are read as one through a pattern, such as "
      "'parts/*.csv')")
  assert not sample.out.exists()
  assert convert.main(['--image_dir', str(tmp_path), f'--image_dir={sample.out}',
                       '--output_dir', str(tmp_path / 'o')]) == EXIT_USAGE
  assert one_error_line(capsys) == (f'error: --image_dir is given twice ({tmp_path}, then '
                                    f'{sample.out}): only one would be read; give it once')
  assert validate.main(['--input_dir', 'a', '--input_dir', 'b']) == EXIT_USAGE
  assert '--input_dir is given twice (a, then b)' in one_error_line(capsys)


def test_an_input_given_twice_is_named_without_its_credentials(capsys):
  """The values are shown as a location's usage error shows them: a URL's
  user part (an S3 key and secret) and a signed URL's signature redacted."""
  assert validate.main(['--input_dir', 's3://AKIA:sekrit@bucket/a',
                        '--input_dir', 'https://h/b?X-Amz-Signature=abc']) == EXIT_USAGE
  assert one_error_line(capsys) == (
      'error: --input_dir is given twice (s3://<redacted>@bucket/a, then '
      'https://h/b?X-Amz-Signature=<redacted>): only one would be read; give it once')


@pytest.mark.parametrize('command, argv', [
    ('export', ['--format', 'tfds', '--input_dir', 'a', '--input_dir=b']),
    ('inspect', ['--input_dir', 'a', '--input_dir', 'b']),
    ('inspect', ['--files', 'a', '--files', 'b']),
])
def test_export_and_inspect_refuse_an_input_given_twice(command, argv, capsys):
  """`img2tfrecord export --input_dir a --input_dir b` exported b alone, exit
  0, as convert and validate did before they refused it."""
  flag = argv[-1].split('=')[0] if '=' in argv[-1] else argv[-2]
  assert cli.main([command, *argv]) == EXIT_USAGE
  assert one_error_line(capsys) == (f'error: {flag} is given twice (a, then b): only one would '
                                    'be read; give it once')


def test_an_output_given_twice_is_the_last_as_any_flag(sample, tmp_path):
  """Only inputs are refused twice: a later --output_dir overrides an earlier
  one, as scripts appending their own flags expect of every other flag."""
  locations.check_inputs_given_once(['--output_dir', 'a', '--output_dir', 'b',
                                     '--manifest', 'm.csv', '--', '--manifest', 'x'],
                                    ConvertOptions.INPUTS)
  config, _ = opts.parse_convert(convert_argv(sample, '--output_dir', str(tmp_path / 'b')))
  assert config.output_dir == str(tmp_path / 'b')


def test_more_local_worker_processes_than_memory_holds_is_a_usage_error(sample, capsys):
  """Beam starts every worker process at once: --direct_num_workers 100000
  had the kernel kill the run (exit 137, nothing said) and other processes
  of the machine. Refused as the flags are read, by convert and validate."""
  assert convert.main(convert_argv(sample, '--direct_num_workers', '100000')) == EXIT_USAGE
  line = one_error_line(capsys)
  assert line.startswith('error: --direct_num_workers 100000 would start 100000 worker '
                         'processes of at least 100 MB each, more than the ')
  assert line.endswith(f'give at most {available_memory_mib() // 100}, or 0 for one per core')
  assert not sample.out.exists()
  sample.out.mkdir()
  assert validate.main(['--input_dir', str(sample.out), '--direct_num_workers', '100000']) == (
      EXIT_USAGE)
  assert 'would start 100000 worker processes' in one_error_line(capsys)


@pytest.mark.parametrize('options, refused', [
    ({'direct_num_workers': 11, 'direct_running_mode': 'multi_processing'}, True),
    ({'direct_num_workers': 10, 'direct_running_mode': 'multi_processing'}, False),
    ({'direct_num_workers': 0, 'direct_running_mode': 'multi_processing'}, False),
    ({'direct_num_workers': 100000, 'direct_running_mode': 'multi_threading'}, False),
    ({'direct_num_workers': 100000, 'direct_running_mode': 'in_memory'}, False),
])
def test_local_worker_processes_are_counted_against_the_memory_given(options, refused):
  if refused:
    with pytest.raises(UsageError, match='more than the 1000 MB of memory available: give at '
                                         'most 10, or 0 for one per core'):
      runner_flags.check_local_workers(options, available_mib=1000, host_cores=2)
  else:
    runner_flags.check_local_workers(options, available_mib=1000, host_cores=2)


def test_zero_local_workers_count_the_host_s_cores_against_the_memory():
  """0 starts one worker process per core of the host (Beam's
  multiprocessing.cpu_count()), not of the container: 64 processes in a
  64-core host's container given 2 GB, which the check let through (and its
  own message advised 0)."""
  options = {'direct_num_workers': 0, 'direct_running_mode': 'multi_processing'}
  with pytest.raises(UsageError) as refused:
    runner_flags.check_local_workers(options, available_mib=2000, host_cores=64)
  assert str(refused.value) == (
      '--direct_num_workers 0 would start 64 worker processes (one per core of the host) of '
      'at least 100 MB each, more than the 2000 MB of memory available: give at most 20')
  with pytest.raises(UsageError) as refused:  # 0 is not advised where it is refused
    runner_flags.check_local_workers({**options, 'direct_num_workers': 21}, available_mib=2000,
                                     host_cores=64)
  assert str(refused.value).endswith('more than the 2000 MB of memory available: give at most 20')
  runner_flags.check_local_workers(options, available_mib=2000, host_cores=20)


def test_available_memory_is_memavailable_capped_by_the_cgroup_limit(tmp_path):
  meminfo = tmp_path / 'meminfo'
  meminfo.write_text('MemTotal:       24000000 kB\nMemAvailable:    2048000 kB\n')
  unlimited, limited = tmp_path / 'unlimited', tmp_path / 'limited'
  unlimited.write_text('max\n')
  limited.write_text(f'{1 << 30}\n')
  assert available_memory_mib(str(meminfo), (str(unlimited),)) == 2000
  assert available_memory_mib(str(meminfo), (str(limited),)) == 1024
  assert available_memory_mib(str(tmp_path / 'none'), (str(limited),)) == 1024
  assert available_memory_mib(str(tmp_path / 'none'), (str(tmp_path / 'gone'),)) is None


@pytest.mark.parametrize('flags, message', [
    (['--runtime_type_check', '--performance_runtime_type_check'],
     'error: --runtime_type_check and --performance_runtime_type_check cannot both be given '
     '(Beam refuses the pair): give one of them'),
    (['--type_check_strictness', 'ALL_REQUIRED'],
     "error: --type_check_strictness ALL_REQUIRED: this pipeline's transforms do not all "
     'declare an output type hint, so Beam would refuse it as it is built; leave it at '
     'DEFAULT_TO_ANY (--runtime_type_check checks the hints they have)'),
], ids=['both_runtime_checks', 'all_required'])
def test_type_checks_every_run_fails_are_usage_errors(sample, capsys, tmp_path, flags, message):
  """Beam refused these only once the pipeline was built or run: `the job
  failed: RuntimeError` or `TypeCheckError` with a traceback (exit 1), an
  empty OUT left; convert and validate refuse them as the flags are read."""
  assert convert.main(convert_argv(sample, '--runner', 'DirectRunner', *flags)) == EXIT_USAGE
  assert one_error_line(capsys) == message
  assert not sample.out.exists()
  dataset = tmp_path / 'dataset'
  dataset.mkdir()
  assert validate.main(['--input_dir', str(dataset), '--runner', 'DirectRunner', *flags]) == (
      EXIT_USAGE)
  assert one_error_line(capsys) == message
  assert list(dataset.iterdir()) == []


def test_one_type_check_option_alone_runs(sample, capsys):
  """Each of the pair alone is a run as any other (its records the same)."""
  assert convert.main(convert_argv(sample, '--runner', 'DirectRunner',
                                   '--performance_runtime_type_check')) == 0
  assert (sample.out / 'dataset_info.json').exists()


@pytest.mark.parametrize('runner, name', [
    ('BundleBasedDirectRunner', 'BundleBasedDirectRunner'),
    ('bundlebaseddirect', 'BundleBasedDirectRunner'),
    ('InteractiveRunner', 'InteractiveRunner'),
    ('apache_beam.runners.interactive.interactive_runner.InteractiveRunner',
     'InteractiveRunner'),
])
def test_runners_that_fail_on_these_pipelines_are_refused(sample, capsys, runner, name):
  """Beam's BundleBasedDirectRunner and InteractiveRunner (in any spelling Beam
  takes) failed every convert and validate with a traceback, exit 1, after
  OUT was made: refused as the flags are read."""
  assert convert.main(convert_argv(sample, '--runner', runner)) == EXIT_USAGE
  assert one_error_line(capsys).startswith(f'error: --runner {name} cannot run this pipeline: ')
  assert not sample.out.exists()
  sample.out.mkdir()
  assert validate.main(['--input_dir', str(sample.out), '--runner', runner]) == EXIT_USAGE
  assert one_error_line(capsys).startswith(f'error: --runner {name} cannot run this pipeline: ')
  assert list(sample.out.iterdir()) == []
