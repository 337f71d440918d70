"""--sink tfrecordio: Beam's WriteToTFRecord writes the shards; validate, read,
inspect and the recorded options take its output as they take the ordered sink's."""

from __future__ import annotations

import fnmatch
import json
import pathlib

import pytest

from pipeline import convert
from pipeline import look
from pipeline import read
from pipeline import validate
from pipeline.configuration import config as opts
from pipeline.configuration.convert_plan import info_settings
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.reading import dataset
from tests.conftest import copy_dataset
from tests.conftest import make_sample
from tests.conftest import read_info
from transforms import write_metadata
from transforms.core import duplicates
from transforms.core import tally
from transforms.core.dataset_info import sink_info
from transforms.core.labels import LabelMap
from transforms.core.spec import SHARD_NUMBERS_GLOB
from transforms.core.tfrecord import read_records
from transforms.write_tfrecordio import _written_shards

# One worker converts the module's datasets (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('sink')

SPLIT = ['--split', 'train=0.5,validation=0.5']
SMALL = ['--height', '8', '--width', '6']
RUNS = {
    'ordered': [*SPLIT],
    'tfrecordio': ['--sink', 'tfrecordio', '--num_shards', '3', *SPLIT],
    'tfrecordio_gzip': ['--sink', 'tfrecordio', '--compression', 'gzip', *SPLIT],
}


class _Runs(dict):
  """RUNS name -> (Sample, output folder), converted on first use."""

  def __init__(self, root: pathlib.Path):
    super().__init__()
    self.sample = make_sample(root)

  def __missing__(self, name):
    out = self.sample.root / name
    assert convert.main(['--manifest', str(self.sample.manifest), '--output_dir', str(out),
                         *SMALL, *RUNS[name]]) == EXIT_OK
    self[name] = out
    return out


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """The nine-image sample converted with each of RUNS (read only: validate
  writes its report elsewhere)."""
  return _Runs(tmp_path_factory.mktemp('sink'))


def shard_records(out: pathlib.Path, split: str) -> list:
  """Every record's bytes of the split, as its listed shards hold them."""
  found = []
  for shard in read_info(out)['splits'][split]['shards']:
    with dataset.open_binary(str(out / shard)) as stream:
      found += [data for _, data in read_records(stream)]
  return found


@pytest.mark.parametrize('name', ['tfrecordio', 'tfrecordio_gzip'])
def test_tfrecordio_writes_the_ordered_sinks_records_in_beams_shards(runs, name):
  out, ordered = runs[name], runs['ordered']
  info, ordered_info = read_info(out), read_info(ordered)
  assert list(info['splits']) == list(ordered_info['splits']) == ['train', 'validation']
  suffix = '.tfrecord.gz' if name.endswith('gzip') else '.tfrecord'
  for split, declared in info['splits'].items():
    # the same serialized Examples, byte for byte; other shards, another order
    assert sorted(shard_records(out, split)) == sorted(shard_records(ordered, split))
    assert declared['num_examples'] == ordered_info['splits'][split]['num_examples'] > 0
    assert declared['examples_per_class'] == ordered_info['splits'][split]['examples_per_class']
    # Beam's names: --num_shards 3 gives 3; 0 lets the runner choose (the
    # DirectRunner's one bundle: one shard)
    count = 3 if name == 'tfrecordio' else 1
    assert declared['shards'] == [f'{split}-{i:05d}-of-{count:05d}{suffix}'
                                  for i in range(count)]
    assert declared['num_bytes'] == sum((out / s).stat().st_size for s in declared['shards'])
  on_disk = sorted(p.name for p in out.iterdir())
  listed = [s for declared in info['splits'].values() for s in declared['shards']]
  # no index files, no Beam temp folder left, nothing unlisted that looks like a shard
  assert on_disk == sorted(listed + ['dataset_info.json', 'label_map.txt', 'rejected.jsonl'])
  assert info['compression'] == ('gzip' if name.endswith('gzip') else 'none')


def test_dataset_info_records_the_sink_and_its_trade_offs(runs):
  assert read_info(runs['ordered'])['sink'] == {
      'name': 'ordered', 'deterministic': True, 'index_files': False,
      'record_order': 'shuffled'}
  info = read_info(runs['tfrecordio'])
  assert info['sink'] == {'name': 'tfrecordio', 'deterministic': False,
                          'index_files': False, 'record_order': 'arrival'}
  assert info['config']['sink'] == 'tfrecordio' and 'sink' not in read_info(
      runs['ordered'])['config']
  # --shard_size_mb does not apply to Beam's sink: recorded as not set
  assert info['config']['shard_size_mb'] is None and info['options']['shard_size_mb'] is None
  assert info['options']['sink'] == 'tfrecordio' and info['options']['num_shards'] == 3
  assert read_info(runs['ordered'])['options']['shard_size_mb'] == 128


def test_sink_info_of_each_sink():
  assert sink_info('ordered', True, False) == {
      'name': 'ordered', 'deterministic': True, 'index_files': True,
      'record_order': 'manifest'}
  assert sink_info('tfrecordio', False, True)['record_order'] == 'arrival'


@pytest.mark.parametrize('name', ['tfrecordio', 'tfrecordio_gzip'])
def test_validate_accepts_tfrecordio_output_with_exact_counts(runs, name, tmp_path):
  out, report_path = runs[name], tmp_path / 'report.json'
  assert validate.main(['--input_dir', str(out), '--expected_count', '9',
                        '--report', str(report_path)]) == EXIT_OK
  report = json.loads(report_path.read_text())
  expected = {s: d['num_examples'] for s, d in read_info(out)['splits'].items()}
  assert report['valid'] is True and report['num_problems'] == report['num_warnings'] == 0
  assert report['num_examples'] == 9 == sum(expected.values())
  assert {s: d['num_examples'] for s, d in report['splits'].items()} == expected
  assert report['label_histogram'] == {'blue': 3, 'green': 3, 'red': 3}
  # every shard is read, an empty one of the round robin too
  assert {s: sorted(d['shards']) for s, d in report['splits'].items()} == {
      s: d['shards'] for s, d in read_info(out)['splits'].items()}


@pytest.mark.parametrize('name', ['tfrecordio', 'tfrecordio_gzip'])
def test_read_examples_gives_every_record_with_its_label(runs, name):
  out, sample = runs[name], runs.sample
  info = read_info(out)
  seen = {}
  for split in info['splits']:
    examples = list(read.examples(str(out), split))
    assert len(examples) == info['splits'][split]['num_examples']
    for example in examples:
      assert example['class_text'] == sample.labels[example['key']]
      assert info['label_map'][example['label']] == example['class_text']
      assert example['image'].shape == (8, 6, 3)
      seen[example['key']] = split
  assert sorted(seen) == sorted(sample.labels)


def test_inspect_shows_a_record_of_tfrecordio_output(runs, capsys, tmp_path):
  out = runs['tfrecordio_gzip']
  assert look.main(['--input_dir', str(out), '--export_dir', str(tmp_path / 'look')]) == 0
  text = capsys.readouterr().out
  assert 'compression gzip' in text and '(no readable record)' not in text
  assert 'First record of train-00000-of-00001.tfrecord.gz:' in text
  assert len(list((tmp_path / 'look').glob('*_Label_*.jpg'))) == 9


def test_inspect_shows_the_first_shard_that_holds_a_record(runs, capsys, tmp_path):
  # Beam's round robin starts at a random shard: with fewer records than
  # shards, the first one may be empty.
  out = copy_dataset(runs['tfrecordio'], tmp_path)
  shards = read_info(out)['splits']['train']['shards']
  (out / shards[0]).write_bytes(b'')
  assert look.main(['--input_dir', str(out)]) == 0
  text = capsys.readouterr().out
  assert f'First record of {shards[1]}:' in text and '(no readable record)' not in text


def _shard_files(folder: pathlib.Path, *names: str) -> list:
  for name in names:
    (folder / name).write_bytes(b'')
  return [str(folder / name) for name in names]


def test_written_shards_lists_what_beam_wrote_and_drops_an_empty_splits_shard(tmp_path):
  prefix = str(tmp_path / 'train')
  written = _shard_files(tmp_path, 'train-00000-of-00002.tfrecord',
                         'train-00001-of-00002.tfrecord')
  _shard_files(tmp_path, 'train-00000-of-00001.tfrecord.gz', 'trainee-00000-of-00001.tfrecord',
               'validation-00000-of-00001.tfrecord')
  # a retried finalize reports only what it renamed: the folder has the rest
  assert _written_shards(None, prefix, '.tfrecord', written[1:], 5) == written
  # Beam's sink writes one empty shard for a split without examples: deleted
  assert _written_shards(None, prefix, '.tfrecord', written, 0) == []
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      'train-00000-of-00001.tfrecord.gz', 'trainee-00000-of-00001.tfrecord',
      'validation-00000-of-00001.tfrecord']
  assert fnmatch.fnmatchcase('train-00000-of-00002.tfrecord', f'train{SHARD_NUMBERS_GLOB}*')


def test_written_shards_finds_those_of_100000_shards_or_more(tmp_path):
  """Beam names them with 6 digits: a retried finalize's unreported ones were
  missed (left out of dataset_info.json, then validate's extra shards)."""
  prefix = str(tmp_path / 'train')
  written = _shard_files(tmp_path, 'train-99999-of-100001.tfrecord',
                         'train-100000-of-100001.tfrecord')
  assert _written_shards(None, prefix, '.tfrecord', [], 2) == sorted(written)


@pytest.mark.parametrize('flags,line', [
    (['--sink', 'parquet'],
     "error: argument --sink: invalid choice: 'parquet' (choose from 'ordered', 'tfrecordio')"),
    (['--sink', 'tfrecordio', '--shard_size_mb', '64'],
     'error: --shard_size_mb needs --sink ordered: with --sink tfrecordio the runner sizes '
     'the shards (--num_shards 0) or --num_shards N sets their number'),
    # given explicitly, even at its default
    (['--sink', 'tfrecordio', '--shard_size_mb', '128', '--num_shards', '4'],
     'error: --shard_size_mb needs --sink ordered: with --sink tfrecordio the runner sizes '
     'the shards (--num_shards 0) or --num_shards N sets their number'),
    (['--sink', 'tfrecordio', '--write_index'],
     "error: --write_index needs --sink ordered: Beam's WriteToTFRecord writes no index files"),
])
def test_bad_sink_flags_exit_2_with_one_line(sample, capsys, flags, line):
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       *flags])
  assert code == EXIT_USAGE
  assert capsys.readouterr().err.strip() == line
  assert not sample.out.exists()


def test_shard_size_mb_in_a_config_file_is_refused_with_tfrecordio(sample, capsys, tmp_path):
  (tmp_path / 'c.yaml').write_text('sink: tfrecordio\nshard_size_mb: 64\n')
  code = convert.main(['--config', str(tmp_path / 'c.yaml'), '--manifest',
                       str(sample.manifest), '--output_dir', str(sample.out)])
  assert code == EXIT_USAGE
  assert capsys.readouterr().err.startswith('error: --shard_size_mb needs --sink ordered')
  assert not sample.out.exists()


def test_tfrecordio_into_a_folder_named_with_glob_characters_exits_2_unwritten(
    sample, capsys, tmp_path):
  # Beam's sink took the path as a pattern: exit 1 once every shard was written.
  out = tmp_path / 'runs [v2]'
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out),
                       '--sink', 'tfrecordio'])
  assert code == EXIT_USAGE
  assert capsys.readouterr().err.strip() == (
      f"error: --output_dir {out} has a glob character (*, ?, [), which Beam's "
      'WriteToTFRecord takes as a pattern: use --sink ordered, or a folder without them')
  assert not out.exists()


def test_the_recorded_options_of_a_tfrecordio_run_are_its_config_file(runs, tmp_path):
  options = read_info(runs['tfrecordio'])['options']
  (tmp_path / 'again.json').write_text(json.dumps(options))
  config, _ = opts.parse_convert(['--config', str(tmp_path / 'again.json')])
  assert (config.sink, config.num_shards, config.compression) == ('tfrecordio', 3, 'none')
  assert config.split.fractions == (('train', 0.5), ('validation', 0.5))


def test_dataset_info_lists_100000_shards_or_more_in_their_numbers_order(sample, tmp_path):
  """From shard 100,000 on, names have 6 digits: text order listed
  -100000- between -10000- and -10001- (a reader going by the list read
  the split out of its write order)."""
  out = tmp_path / 'out'
  out.mkdir()
  config, options = opts.parse_convert(
      ['--manifest', str(sample.manifest), '--output_dir', str(out), '--runner', 'DirectRunner'])
  numbers = [9999, 10000, 10001, 99999, 100000, 100001]
  names = [f'train-{n:05d}-of-100002.tfrecord' for n in numbers]
  for name in names:
    (out / name).write_bytes(b'')
  shard_paths = [('train', str(out / name)) for name in sorted(names)]
  sums = {tally.lines_key(False): 6, tally.example_key('train', 0): 6}
  write = write_metadata.WriteInfoFn(str(out), ('train',), False, info_settings(config, options))
  list(write.process(None, shard_paths, sums, LabelMap(('cat',)), [],
                     duplicates.empty_report()))
  listed = read_info(out)['splits']['train']['shards']
  assert listed == names
  assert [int(name.split('-')[1]) for name in listed] == numbers
