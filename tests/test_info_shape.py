"""dataset_info.json of any shape. Every field of converted ones is set, one
at a time, to values of other types, or removed: parse_info (through which
validate, pipeline.read, inspect and export read the file) refuses it with an
InfoError naming the field, or validate's checks, read.examples and inspect's
summary take it without an exception. No shape of the file reaches a
traceback (`"image": null`, a `config.split` string, `"rejected_by_reason":
"x"` each did)."""

from __future__ import annotations

import copy
import json

import pytest

from pipeline import convert
from pipeline import export
from pipeline import look
from pipeline import read
from pipeline import validate
from pipeline.errors import EXIT_USAGE
from pipeline.reading.dataset import open_binary
from pipeline.validating import folder_checks
from tests.conftest import copy_dataset
from tests.conftest import read_info
from tests.test_validate_cli import RAW_16
from transforms import filesystem
from transforms.core import dataset_checks
from transforms.core import validation
from transforms.core.dataset_info import InfoError
from transforms.core.dataset_info import parse_info
from transforms.core.decoders import RecordError
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import read_records
from transforms.validation_report import build_report

pytestmark = pytest.mark.xdist_group('converted_sample')

VARIANTS = {
    'hash_split': (*RAW_16, '--split', 'train=0.5,test=0.5'),
    'seed': ('--schema', 'seed', '--height', '10', '--width', '12'),
    'png_gzip_own_size': ('--encoding', 'png', '--compression', 'gzip', '--resize_mode', 'none'),
    'multi_label': (*RAW_16, '--multi_label'),
}
# Values of every other type, and of the right type out of range.
ODD = [None, [], {}, 'x', '16', -1, 0, 1.5, True, [['a', 'b']], {'a/b': 'x'}, [None], 10**20]
REMOVED = object()
# And the other values of the right shape, by the field's name.
OTHERS = {'schema': ['default', 'seed', 'detection', 'unknown'], 'encoding': ['raw', 'jpeg', 'png'],
          'compression': ['none', 'gzip'], 'channels': [1, 3], 'height': [1, 10, 16],
          'width': [1, 12, 16], 'resize_mode': ['stretch', 'none'], 'split_by': ['key', 'content'],
          'dtype': ['string', 'int64', 'float32'], 'shape': [[], [1], [None], [None, 2]],
          'split': [[['train', 1.0]], [['test', 0.5], ['train', 0.5]]], 'seed': [0, 7]}
# Fields no check or reader reads (only inspect's page shows some of them).
UNREAD = ('options', 'label_warnings', 'content_duplicates', 'engine', 'reuse')


def _places(value, where=()):
  """The path of every value below `value`."""
  if where:
    yield where
  items = (value.items() if isinstance(value, dict)
           else enumerate(value) if isinstance(value, list) else ())
  for name, item in items:
    if not (not where and name in UNREAD):
      yield from _places(item, (*where, name))


def _changed(info: dict, where: tuple, value) -> dict:
  info = copy.deepcopy(info)
  parent = info
  for name in where[:-1]:
    parent = parent[name]
  if value is REMOVED:
    del parent[where[-1]]
  else:
    parent[where[-1]] = value
  return info


def _validate_and_read(out, info: dict) -> None:
  """What validate does with `info` (its Beam steps' checks, one record after
  another here), read.examples of every split and inspect's summary."""
  files = filesystem.FileAccess()
  shards, problems = folder_checks.shard_listing(str(out), info, files)
  problems += folder_checks.file_problems(str(out), info, files)
  problems += dataset_checks.byte_count_problems(
      info, folder_checks.split_bytes(str(out), info, shards, files))
  expected = validation.Expected.from_info(info)
  expected.split_rule.describe()
  shard_counts, label_counts = {}, {}
  for split, shard in shards:
    with open_binary(str(out / shard)) as stream:
      records = [data for _, data in read_records(stream)]
    for label, key, found, sha256, *_ in validation.check_records(records, expected):
      assert not [detail for kind, detail in found if kind == 'unexpected_error'], found
      dataset_checks.split_problems(expected.split_rule, split, key, sha256)
      shard_counts[split, shard] = shard_counts.get((split, shard), 0) + 1
      for one in label if isinstance(label, tuple) else (label,):
        label_counts[split, one] = label_counts.get((split, one), 0) + 1
  report = build_report(info, shard_counts, label_counts, {}, [], problems, None, 100)
  validate.summary(report, 'report.json')
  for split in info['splits']:
    try:
      for _ in read.examples(str(out), split, info=info):
        pass
    except (RecordError, ShardError, OSError):  # of records and shards (a shard listed, gone)
      pass
  counts = {split: {label: n for (where, label), n in label_counts.items() if where == split}
            for split in info['splits']}
  look.summary_lines(str(out), info, counts)


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('variant', sorted(VARIANTS))
def test_every_field_of_another_shape_is_refused_or_taken(converted_sample, tmp_path, variant):
  out = copy_dataset(converted_sample(*VARIANTS[variant])[1], tmp_path)
  info = read_info(out)
  _validate_and_read(out, parse_info(json.dumps(info), 'dataset_info.json'))
  refused = 0
  for where in list(_places(info)):
    for value in [*ODD, *OTHERS.get(where[-1], ()), REMOVED]:
      text = json.dumps(_changed(info, where, value))
      try:
        changed = parse_info(text, 'dataset_info.json')
      except InfoError as error:
        refused += 1
        # It names the field (or, for a value inside a list, the list).
        assert any(str(name) in str(error) for name in where), (where, value, error)
        continue
      try:
        _validate_and_read(out, changed)
      except Exception as error:
        raise AssertionError(f'{".".join(map(str, where))} = {value!r}: '
                             f'{type(error).__name__}: {error}') from error
  assert refused > 100


# Values just out of their range, or a field left out, that no later check
# refuses: each passed parse_info with its shape loosened by one step.
JUST_OUT = [
    # config gone: the wrong_split check off, as with config: null
    (lambda info: info.pop('config'), 'dataset_info.json lacks config'),
    # no split at all: the wrong_split check off too
    (lambda info: info['config'].update(split=[]),
     'dataset_info.json: config.split [] is not a list of [split name, fraction] pairs or null'),
    (lambda info: info['config'].update(split=[['train', 0.5, 1], ['test', 0.5]]),
     "dataset_info.json: config.split[0] ['train', 0.5, 1] is not a [split name, fraction] pair"),
    (lambda info: info['image'].update(height=0),
     'dataset_info.json: image.height 0 is not a whole number above 0 or null'),
    (lambda info: info.update(error_rate=1.5),
     'dataset_info.json: error_rate 1.5 is not a number in 0..1'),
    (lambda info: info.update(num_manifest_rows=-1),
     'dataset_info.json: num_manifest_rows -1 is not a count'),
    (lambda info: info['image'].update(background=[0, 0]),
     'dataset_info.json: image.background [0, 0] is not an [R, G, B] colour'),
    # another record order would switch the wrong_record_order check off
    (lambda info: info['sink'].update(record_order='Shuffled'),
     "dataset_info.json: sink.record_order 'Shuffled' is not one of 'shuffled', 'manifest', "
     "'arrival'"),
    # export writes each shard and sidecar under its own name in --output_dir
    (lambda info: info['splits']['train']['shards'].append('../x.tfrecord'),
     "dataset_info.json: splits.train.shards[1] '../x.tfrecord' is not a shard name (a file "
     "name in the dataset's folder)"),
    (lambda info: info['splits']['train'].update(sources='/tmp/train.sources.jsonl.gz'),
     "dataset_info.json: splits.train.sources '/tmp/train.sources.jsonl.gz' is not a sidecar "
     "name (a file name in the dataset's folder)"),
]


@pytest.mark.parametrize('change, detail', JUST_OUT)
def test_values_just_out_of_their_shape_are_refused(converted_sample, change, detail):
  info = read_info(converted_sample(*VARIANTS['hash_split'])[1])
  parse_info(json.dumps(info), 'dataset_info.json')
  change(info)
  with pytest.raises(InfoError) as raised:
    parse_info(json.dumps(info), 'dataset_info.json')
  assert str(raised.value) == detail


def test_export_of_a_dataset_naming_a_shard_outside_its_folder_writes_nothing(
    converted_sample, tmp_path, capsys):
  """A downloaded dataset whose dataset_info.json lists '../victim/x.tfrecord':
  export linked it to --output_dir/../victim/x.tfrecord, outside its output
  folder, then failed (exit 1, a FileNotFoundError) and left the link there."""
  data = copy_dataset(converted_sample(*VARIANTS['hash_split'])[1], tmp_path / 'data')
  info = read_info(data)
  shard = info['splits']['train']['shards'][0]
  (tmp_path / 'victim').mkdir()
  (data / shard).rename(tmp_path / 'victim' / shard)
  info['splits']['train']['shards'][0] = f'../victim/{shard}'
  (data / 'dataset_info.json').write_text(json.dumps(info))
  (tmp_path / 'export' / 'victim').mkdir(parents=True)
  assert export.main(['--format', 'tfds', '--input_dir', str(data), '--output_dir',
                      str(tmp_path / 'export' / 'tfds')]) == EXIT_USAGE
  assert f"splits.train.shards[0] '../victim/{shard}' is not a shard name" in (
      capsys.readouterr().err)
  assert sorted(p.name for p in (tmp_path / 'export').rglob('*')) == ['victim']


def test_a_dataset_info_json_over_the_cap_is_refused_unread(converted_sample, tmp_path,
                                                            monkeypatch, capsys):
  """A 20 GB dataset_info.json (sparse: no disk) was read whole: validate and
  inspect were killed by the kernel at 23 GB, with no message. Each reader
  reads one byte past the cap (here 1 MiB, of a 1 GiB file) and refuses it."""
  from pipeline.reading import dataset
  from pipeline.runs import previous
  from transforms.core import dataset_info
  for module in (dataset_info, dataset, filesystem, previous):
    monkeypatch.setattr(module, 'MAX_INFO_BYTES', 1 << 20)
  sample, out = converted_sample(*VARIANTS['hash_split'])
  data = copy_dataset(out, tmp_path / 'data')
  with open(data / 'dataset_info.json', 'r+b') as handle:
    handle.truncate(1 << 30)
  detail = f"{data / 'dataset_info.json'} is over 1048576 bytes, more than any"
  with pytest.raises(InfoError, match='is over 1048576 bytes'):
    dataset.read_info(str(data))
  with pytest.raises(InfoError, match='is over 1048576 bytes'):
    filesystem.read_info(str(data))
  assert validate.main(['--input_dir', str(data)]) == 1
  assert detail in capsys.readouterr().out
  assert look.main(['--input_dir', str(data)]) == EXIT_USAGE
  assert detail in capsys.readouterr().err
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir',
                       str(tmp_path / 'next'), '--previous_dataset', str(data),
                       *VARIANTS['hash_split']]) == EXIT_USAGE
  assert f'--previous_dataset: {detail}' in capsys.readouterr().err


def test_validate_never_holds_a_huge_rejected_line_or_label_map_whole(
    converted_sample, tmp_path, monkeypatch, capsys):
  """A rejected.jsonl of one 2 GB line and a 2 GB label_map.txt (sparse: no
  disk) were read whole: validate's MemoryError, a traceback. The line is
  read a MiB at a time and is one unreadable line; the label map is read to
  one byte past the cap (here 1 MiB, of 8 MiB) and cannot be read."""
  monkeypatch.setattr(dataset_checks, 'MAX_INFO_BYTES', 1 << 20)
  data = copy_dataset(converted_sample(*VARIANTS['hash_split'])[1], tmp_path / 'data')
  for name in ('rejected.jsonl', 'label_map.txt'):
    with open(data / name, 'r+b') as handle:
      handle.truncate(8 << 20)
  assert validate.main(['--input_dir', str(data)]) == 1
  report = json.loads((data / 'validation_report.json').read_text())
  details = {p['detail'] for p in report['problems']}
  assert 'line 1 is not a JSON object with a stage and a code (a line of 8388608 bytes, ' \
         'over 1048576: not read)' in details
  assert 'cannot be read: ValueError: over 1048576 bytes: not read' in details
