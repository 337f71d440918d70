"""--config FILE: any convert/validate flag (Beam's too) in a YAML or JSON file;
the command line wins; every error is one line and exit 2; the options in
effect are recorded in dataset_info.json."""

from __future__ import annotations

import json
import re
import time

from apache_beam.options.pipeline_options import DebugOptions
from apache_beam.options.pipeline_options import StandardOptions
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.configuration import command_line
from pipeline.configuration import config as opts
from pipeline.configuration import config_file
from pipeline.configuration import configs
from pipeline.configuration import flags
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from tests.conftest import read_info
from tests.conftest import write_manifest


def write(path, text: str):
  path.write_text(text)
  return str(path)


def test_file_values_as_on_the_command_line_and_the_command_line_wins(sample, tmp_path):
  config_file = write(tmp_path / 'nightly.yaml', f"""
manifest: {sample.manifest}
output_dir: {sample.out}
height: 8          # the command line says 4
width: 6
encoding: png
split: [train=0.75, test=0.25]    # a list where the flag takes a comma list
split_names: [train, test]
background: [0, 0, 0]
progress: off      # the word, as on the command line (not YAML 1.1's false)
overwrite: true
max_error_rate: 0.5
experiments: [from_file_a, from_file_b]   # a repeated Beam flag
direct_num_workers: 2
""")
  config, options = opts.parse_convert(['--config', config_file, '--height', '4',
                                        '--experiments', 'from_command_line'])
  assert (config.image.height, config.image.width, config.image.encoding) == (4, 6, 'png')
  assert config.split.fractions == (('train', 0.75), ('test', 0.25))
  assert config.split.names == ('train', 'test') and config.image.background == (0, 0, 0)
  assert config.overwrite is True and config.max_error_rate == 0.5
  assert config.progress == 'off'
  assert config.output_dir == str(sample.out)
  assert options.view_as(DebugOptions).experiments == ['from_command_line']
  assert options.view_as(StandardOptions).runner == 'DirectRunner'
  assert config.config_file == config_file
  assert config.options['height'] == 4 and config.options['split'] == 'train=0.75,test=0.25'
  assert config.options['direct_running_mode'] == 'multi_processing'


def test_json_config_for_validate(tmp_path):
  config_file = write(tmp_path / 'validate.json', json.dumps(
      {'input_dir': str(tmp_path), 'expected_count': 12, 'max_problems': 5}))
  config, _ = opts.parse_validate(['--config', config_file, '--expected_count', '13'])
  assert (config.input_dir, config.expected_count, config.max_problems) == (
      str(tmp_path), 13, 5)


def test_the_recorded_options_are_a_config_file_of_the_same_run(sample, tmp_path):
  write_manifest(sample.manifest, [(image, label, 0.5) for image, label in sample.labels.items()],
                 header=('image', 'label', 'w'))
  config, _ = opts.parse_convert([
      '--manifest', str(sample.manifest), '--output_dir', str(sample.out), '--split',
      'a=0.5,b=0.5', '--extra_features', 'w:float', '--resize_mode', 'pad'])
  again = write(tmp_path / 'again.json', json.dumps(config.options))
  replayed, _ = opts.parse_convert(['--config', again])
  assert replayed.options == config.options
  assert replayed.image == config.image and replayed.split == config.split
  assert replayed.example == config.example and replayed.manifests == config.manifests


@pytest.mark.parametrize('flags, checked', [([], True), (['--no_pipeline_type_check'], False)])
def test_a_beam_switch_that_only_turns_off_is_recorded_in_its_own_sense(sample, tmp_path,
                                                                         flags, checked):
  """Beam's --no_pipeline_type_check has no --pipeline_type_check: its setting
  was recorded as `no_pipeline_type_check: false` after the switch was given,
  the value of its dest, and that config replayed turned type checking on."""
  from apache_beam.options.pipeline_options import TypeOptions
  config, options = opts.parse_convert(['--manifest', str(sample.manifest), '--output_dir',
                                        str(sample.out), *flags])
  assert options.view_as(TypeOptions).pipeline_type_check is checked
  assert config.options.get('no_pipeline_type_check', False) is (not checked)
  again = write(tmp_path / 'again.json', json.dumps(config.options))
  replayed, replayed_options = opts.parse_convert(['--config', again])
  assert replayed.options == config.options
  assert replayed_options.view_as(TypeOptions).pipeline_type_check is checked


def test_convert_records_the_merged_options_and_the_file(sample, tmp_path, monkeypatch):
  config_file = write(tmp_path / 'c.yaml', f"""
manifest: {sample.manifest}
output_dir: {sample.out}
height: 6
width: 6
s3_secret_access_key: not-for-the-record
""")
  (tmp_path / 'elsewhere').mkdir()
  monkeypatch.chdir(tmp_path / 'elsewhere')
  # typed relative: recorded absolute, so the record names the file from anywhere
  assert convert.main(['--config', '../c.yaml', '--width', '5']) == 0
  info = read_info(sample.out)
  assert info['config_file'] == config_file == str(tmp_path / 'c.yaml')
  assert (info['image']['height'], info['image']['width']) == (6, 5)
  options = info['options']
  assert (options['height'], options['width'], options['manifest']) == (
      6, 5, str(sample.manifest))
  assert options['runner'] == 'DirectRunner' and options['encoding'] == 'raw'
  assert options['s3_secret_access_key'] == '<redacted>'
  assert 'not-for-the-record' not in (sample.out / 'dataset_info.json').read_text()
  assert 'config' not in options
  # no --config: recorded as null
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--overwrite', '--height', '6', '--width', '6']) == 0
  assert read_info(sample.out)['config_file'] is None


def test_the_recorded_config_file_is_absolute_or_the_url(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert configs.recorded_config_file('conf/c.yaml') == str(tmp_path / 'conf' / 'c.yaml')
  assert configs.recorded_config_file('./c.yaml') == str(tmp_path / 'c.yaml')
  assert configs.recorded_config_file(str(tmp_path / 'c.yaml')) == str(tmp_path / 'c.yaml')
  assert configs.recorded_config_file('gs://b/conf/c.yaml') == 'gs://b/conf/c.yaml'
  assert configs.recorded_config_file('s3://b/c.yaml') == 's3://b/c.yaml'
  assert configs.recorded_config_file('https://u:hunter2@h/c.yaml?sig=abc') == (
      'https://<redacted>@h/c.yaml?sig=<redacted>')
  assert configs.recorded_config_file(None) is None


@pytest.mark.parametrize('name,text,message', [
    ('c.yaml', 'num_shard: 3\n', "unknown key 'num_shard'; did you mean num_shards?"),
    ('c.yaml', 'zzz: 1\n', "unknown key 'zzz'"),
    # flags of the command line alone (was "unknown key 'config'; did you mean config?")
    ('c.yaml', 'config: other.yaml\n', "c.yaml: key 'config' is a command-line flag only, not "
     'an option a config file sets'),
    ('c.yaml', 'help: true\n', "key 'help' is a command-line flag only"),
    ('c.yaml', 'expected_count: 3\n', "unknown key 'expected_count'"),  # validate's
    ('c.yaml', '--height: 3\n', "unknown key '--height'"),
    ('c.yaml', 'height: abc\n', "key 'height': invalid positive integer value: 'abc'"),
    ('c.yaml', 'encoding: gif\n', "key 'encoding': invalid choice: 'gif'"),
    ('c.yaml', "overwrite: 'yes'\n", "key 'overwrite' takes true or false, not 'yes'"),
    ('c.yaml', 'height: [1, 2]\n', "key 'height' takes one value, not [1, 2]"),
    ('c.yaml', 'split_names: [train, [a, b]]\n',
     "key 'split_names' takes a list of plain values, not ['train', ['a', 'b']]"),
    ('c.yaml', 'split_names: [train, true]\n',
     "key 'split_names' takes a list of plain values, not ['train', True]"),
    ('c.yaml', 'overwrite: yes\n', "key 'overwrite' takes true or false, not 'yes'"),
    ('c.yaml', 'height: {a: 1}\n', "key 'height': invalid positive integer value"),
    ('c.yaml', 'runner: DaskRunner\n', '--runner DaskRunner cannot run this pipeline'),
    ('c.yaml', 'height: 8\nwidth: [1, 2\n',
     "does not parse: line 3: expected ',' or ']', but got '<stream end>' "
     '(while parsing a flow sequence started at line 2)'),
    ('c.yaml', 'height: 8\n  width: 2\n', 'does not parse: line 2: mapping values are '
     'not allowed here'),
    ('c.json', '{\n  "height": 8,\n}\n', 'does not parse: line 3: Expecting property name'),
    ('c.yaml', '- height\n- 8\n', 'must hold a mapping of option names to values, not a '
     'list'),
    ('c.yaml', '# nothing yet\n', 'is empty'),
    ('c.yaml', None, 'does not exist or is not a file'),
    # a key twice is an error, never "last wins"; nested mappings too
    ('c.yaml', 'height: 3\nwidth: 4\nheight: 5\n',
     "c.yaml: key 'height' is given twice (lines 1 and 3)"),
    ('c.yaml', "height: 3\n'height': 5\n", "key 'height' is given twice (lines 1 and 2)"),
    ('c.yaml', 'beam_services: {a: x, b: y, a: z}\n', "key 'a' is given twice (lines 1 and 1)"),
    ('c.json', '{"height": 3, "width": 4, "height": 5}', "c.json: key 'height' is given twice"),
    ('c.json', '{"beam_services": {"a": "x", "a": "z"}}', "key 'a' is given twice"),
    # anchors and aliases are refused where they stand, an anchor unused too
    ('c.yaml', 'height: 3\nwidth: &w 4\n', 'c.yaml: line 2: YAML anchors and aliases (&name, '
     '*name) are not accepted; write the value out'),
    ('c.yaml', 'height: 3\nwidth: *w\n', 'line 2: YAML anchors and aliases'),
    ('c.yaml', 'labels: &l {a: b}\nbeam_services: *l\n', 'line 1: YAML anchors and aliases'),
    ('c.yaml', 'labels: ' + '[' * 33 + ']' * 33 + '\n', 'line 1: nested deeper than 32 levels'),
    ('c.json', '{"labels": ' + '[' * 32 + ']' * 32 + '}', 'c.json: nested deeper than 32 levels'),
])
def test_config_file_errors_are_one_line_usage_errors(sample, tmp_path, capsys, name, text,
                                                      message):
  path = tmp_path / name
  if text is not None:
    path.write_text(text)
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--config', str(path)])
  err = capsys.readouterr().err.strip()
  assert code == EXIT_USAGE
  assert len(err.splitlines()) == 1 and err.startswith('error: ') and message in err, err
  assert not re.search(r"key '(\w+)'.*did you mean \1\?", err), err  # itself, no hint
  if 'DaskRunner' not in message:
    assert err.startswith(f'error: --config {path}'), err
  assert not sample.out.exists()


def test_a_user_agent_no_http_header_can_carry_is_a_usage_error(sample, tmp_path, capsys):
  """A folded YAML value (`http_user_agent: >`) ends with a line break, which
  http.client refuses in every request: each http(s) row was rejected as
  read/unexpected_error, OUT made and the run ended 2 or 3. Now exit 2 at once."""
  path = write(tmp_path / 'c.yaml', f'manifest: {sample.manifest}\noutput_dir: {sample.out}\n'
               'http_user_agent: >\n  my agent\n')
  assert convert.main(['--config', path]) == EXIT_USAGE
  assert capsys.readouterr().err == (
      "error: --http_user_agent 'my agent\\n' holds '\\n', which no HTTP header can carry "
      '(Latin-1 text on one line; a YAML > or | value ends with a line break: use >- or '
      'one line)\n')
  assert not sample.out.exists()
  line = ['--manifest', str(sample.manifest), '--output_dir', str(sample.out)]
  for agent, bad in (('bot \u20ac', "'\u20ac'"), ('bot\r\nX-A: 1', "'\\r'")):
    with pytest.raises(UsageError, match=re.escape(f'holds {bad}, which no HTTP header')):
      opts.parse_convert([*line, '--http_user_agent', agent])
  for agent in ('bot \u00fc/1.0', 'bot\t1', ''):  # Latin-1 and a tab go out as they are
    config, _ = opts.parse_convert([*line, '--http_user_agent', agent])
    assert config.http.user_agent == agent


def billion_laughs(levels: int = 9) -> str:
  """The classic alias bomb: each level 9 aliases of the one before, the
  last one a mapping value (which is passed on as JSON): 9**9 strings."""
  lines = ['a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]']
  lines += [f'a{i}: &a{i} [{", ".join([f"*a{i - 1}"] * 9)}]' for i in range(1, levels)]
  return '\n'.join(lines + [f'beam_services: {{x: *a{levels - 1}}}']) + '\n'


def deep_json(depth: int) -> str:
  return '{"labels": ' + '[' * depth + ']' * depth + '}'


def deep_yaml(depth: int) -> str:
  return 'labels: ' + '[' * depth + ']' * depth + '\n'


@pytest.mark.parametrize('name,text,message', [
    ('bomb.yaml', billion_laughs(), 'line 1: YAML anchors and aliases (&name, *name) are not '
     'accepted'),
    ('deep.json', deep_json(100_000), 'nested deeper than 32 levels'),
    ('deep.yaml', deep_yaml(100_000), 'line 1: nested deeper than 32 levels'),
    ('open.json', '[' * 100_000, 'nested deeper than 32 levels'),
    ('open.yaml', '[' * 100_000, 'line 1: nested deeper than 32 levels'),
], ids=['billion-laughs', 'deep-json', 'deep-yaml-flow', 'unclosed-json', 'unclosed-yaml'])
def test_alias_bombs_and_deep_nesting_are_refused_at_once(sample, tmp_path, capsys, name, text,
                                                          message):
  """The bomb took 55 s and 3.6 GB, then exit 1; 100,000 levels were a
  RecursionError traceback. Both are one line, exit 2, before anything is
  built from the file."""
  path = write(tmp_path / name, text)
  started = time.perf_counter()
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--config', path])
  elapsed = time.perf_counter() - started
  err = capsys.readouterr().err
  assert code == EXIT_USAGE
  assert err == f'error: --config {path}: {message}' + (
      '; write the value out\n' if 'aliases' in message else '\n'), err
  assert elapsed < 5, elapsed  # ~0.5 s for the 100,000-level YAML
  assert not sample.out.exists()


@pytest.mark.parametrize('name', ['ok.json', 'ok.yaml'])
def test_nesting_up_to_the_limit_is_read(tmp_path, name):
  """32 levels, the file's own mapping included, are read; 33 are refused."""
  parser = command_line._full_parser(flags.ConvertOptions)
  value = 'x'
  for _ in range(config_file.MAX_CONFIG_DEPTH - 1):
    value = {'a': value}
  path = write(tmp_path / name, json.dumps({'direct_test_splits': value}))  # JSON is YAML
  assert command_line.read_config_file(path, parser, [])['direct_test_splits'] == value
  write(tmp_path / name, json.dumps({'direct_test_splits': {'a': value}}))
  with pytest.raises(UsageError, match='nested deeper than 32 levels'):
    command_line.read_config_file(path, parser, [])


def test_validate_config_errors_name_the_file_and_key(tmp_path, capsys):
  path = write(tmp_path / 'v.yaml', 'image_dir: images\n')  # a convert key
  assert validate.main(['--input_dir', str(tmp_path), '--config', path]) == EXIT_USAGE
  assert capsys.readouterr().err.strip() == f"error: --config {path}: unknown key 'image_dir'"


def test_config_given_twice_is_a_usage_error_not_the_last_file_alone(sample, tmp_path, capsys):
  """argparse kept the last --config: base.yaml's height and width were
  ignored without a word, and the run went on at 300x300 (exit 0)."""
  base = write(tmp_path / 'base.yaml', 'height: 8\nwidth: 8\n')
  nightly = write(tmp_path / 'nightly.yaml', 'num_shards: 2\n')
  message = (f'error: --config is given twice ({base}, then {nightly}): only one file is read; '
             'merge them into one (flags on the command line override it)')
  assert convert.main(['--config', base, f'--config={nightly}', '--manifest',
                       str(sample.manifest), '--output_dir', str(sample.out)]) == EXIT_USAGE
  assert capsys.readouterr().err.strip() == message
  assert not sample.out.exists()
  assert validate.main(['--input_dir', str(tmp_path), '--config', base,
                        '--config', nightly]) == EXIT_USAGE
  assert capsys.readouterr().err.strip() == message
  config, _ = opts.parse_convert(['--config', base, '--manifest', str(sample.manifest),
                                  '--output_dir', str(sample.out)])
  assert (config.image.height, config.image.width) == (8, 8)  # once is as before


def test_config_given_twice_is_named_without_its_credentials(tmp_path, capsys):
  assert validate.main(['--input_dir', str(tmp_path), '--config', 's3://AKIA:sekrit@b/a.yaml',
                        '--config', 'https://h/b.yaml?X-Amz-Signature=abc']) == EXIT_USAGE
  assert capsys.readouterr().err.strip() == (
      'error: --config is given twice (s3://<redacted>@b/a.yaml, then '
      'https://h/b.yaml?X-Amz-Signature=<redacted>): only one file is read; merge them into '
      'one (flags on the command line override it)')


def test_credentials_are_redacted_from_the_record(tmp_path):
  parsed = command_line.parse(['--input_dir', str(tmp_path), '--s3_access_key_id', 'AKIA',
                               '--s3_secret_access_key', 'shh', '--s3_region_name', 'eu'],
                              flags.ValidateOptions, '')
  assert parsed.effective['s3_access_key_id'] == '<redacted>'
  assert parsed.effective['s3_secret_access_key'] == '<redacted>'
  assert parsed.effective['s3_region_name'] == 'eu'


def test_the_documented_nightly_config_is_valid(tmp_path):
  """docs/convert.md's nightly.yaml holds only known keys of the right types."""
  import pathlib
  page = (pathlib.Path(__file__).parents[1] / 'docs' / 'convert.md').read_text()
  path = write(tmp_path / 'nightly.yaml', page.split('# nightly.yaml\n', 1)[1].split('```')[0])
  parser = command_line._full_parser(flags.ConvertOptions)
  given = command_line.read_config_file(path, parser, [])
  assert given['split'] == 'train=0.9,validation=0.1' and given['overwrite'] is True
  assert given['runner'] == 'DataflowRunner' and given['height'] == 224
