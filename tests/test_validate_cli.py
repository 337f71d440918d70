"""validate: a good dataset passes; every kind of damage is found and named.

Each dataset is converted once per session (tests.conftest.converted_sample);
a test validates and damages its own copy, damaging records directly with the
framing and Example functions instead of converting again.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import struct

import numpy as np
from PIL import Image
import pytest

from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import copy_dataset
from tests.conftest import noise_png
from tests.conftest import read_info
from tests.conftest import recount_imbalance
from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import serialize_example
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import masked_crc
from transforms.core.tfrecord import read_framed
from transforms.core.tfrecord import read_records

# One worker converts each shared dataset (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('converted_sample')

RAW_16 = ('--height', '16', '--width', '16')
JPEG_16 = ('--encoding', 'jpeg', '--height', '16', '--width', '16')


@pytest.fixture
def converted(converted_sample, tmp_path):
  """This test's own copy of the nine images converted raw at 16x16."""
  return copy_dataset(converted_sample(*RAW_16)[1], tmp_path)


def run_validate(out, *flags, **seams):
  (out / 'validation_report.json').unlink(missing_ok=True)  # none left by an earlier run
  code = validate.main(['--input_dir', str(out), *flags], **seams)
  report = json.loads((out / 'validation_report.json').read_text())
  return code, report


def first_shard(out):
  return out / read_info(out)['splits']['train']['shards'][0]


def rewrite_first_record(out, change):
  """Replaces the first record of the first shard by change(features), and
  the split's num_bytes by the shard's new size (only the record shows)."""
  shard = first_shard(out)
  with open(shard, 'rb') as stream:
    records = [data for _, data in read_records(stream)]
  features = {name: ({'bytes_list': 'bytes', 'int64_list': 'int64',
                      'float_list': 'float'}[kind], values)
              for name, (kind, values) in parse_example(records[0]).items()}
  change(features)
  records[0] = serialize_example(features)
  before = shard.stat().st_size
  shard.write_bytes(b''.join(frame(r) for r in records))
  resync_sidecars(out)
  info = read_info(out)
  info['splits']['train']['num_bytes'] += shard.stat().st_size - before
  write_info(out, info)
  return shard.name


def resync_sidecars(out) -> None:
  """Makes the offset, length and data_crc of every sidecar line those of the
  record it names, as a careful tamperer would after rewriting records: a
  test of a record's own checks then sees only them."""
  info = read_info(out)
  for entry in info['splits'].values():
    if 'sources' not in entry:
      continue
    places = {}
    for number, name in enumerate(entry['shards']):
      with open(out / name, 'rb') as stream:
        places[number] = [place for _, _, place in read_framed(stream)]
    path = out / entry['sources']
    lines = [json.loads(line) for line in gzip.open(path)]
    for line in lines:
      if line['ordinal'] < len(places[line['shard']]):
        line['offset'], line['length'], line['data_crc'] = (
            places[line['shard']][line['ordinal']])
    with gzip.open(path, 'wb') as stream:
      stream.write(b''.join(json.dumps(line).encode() + b'\n' for line in lines))


def records_of(shard) -> list:
  with open(shard, 'rb') as stream:
    return [data for _, data in read_records(stream)]


def declare_records(info: dict, split: str, records: list, rows: bool = True) -> dict:
  """info with `records` (serialized) counted in `split`, as a careful
  tamperer would: examples, examples_per_class, the bytes of their frames
  appended to its shards and (rows) manifest rows."""
  entry = info['splits'][split]
  for data in records:
    text = parse_example(data)['image/class/text'][1][0].decode()
    entry['examples_per_class'][text] += 1
  recount_imbalance(entry)
  entry['num_examples'] += len(records)
  entry['num_bytes'] += sum(len(frame(data)) for data in records)
  info['num_examples'] += len(records)
  info['num_manifest_rows'] += len(records) if rows else 0
  return info


def write_info(out, info: dict) -> None:
  (out / 'dataset_info.json').write_text(json.dumps(info, indent=2, ensure_ascii=False))


def test_a_good_dataset_is_valid_with_counts_and_histogram(converted):
  code, report = run_validate(converted, '--expected_count', '9')
  assert code == EXIT_OK
  assert report['valid'] is True and report['num_problems'] == 0
  assert report['num_examples'] == 9
  assert report['splits']['train']['num_examples'] == 9
  assert sum(report['splits']['train']['shards'].values()) == 9
  assert report['label_histogram'] == {'blue': 3, 'green': 3, 'red': 3}


def test_custom_report_path(converted, tmp_path):
  path = tmp_path / 'r.json'
  assert validate.main(['--input_dir', str(converted), '--report', str(path)]) == 0
  assert json.loads(path.read_text())['num_examples'] == 9


def assert_finding(out, kind, file=None, *flags):
  code, report = run_validate(out, *flags)
  assert code == EXIT_FAILED
  assert report['valid'] is False
  assert kind in report['problems_by_kind'], report['problems_by_kind']
  if file is not None:
    assert any(p['kind'] == kind and p['file'] == file for p in report['problems'])
  return report


def test_flipped_byte_is_a_crc_finding(converted):
  shard = first_shard(converted)
  data = bytearray(shard.read_bytes())
  data[200] ^= 0xFF
  shard.write_bytes(bytes(data))
  report = assert_finding(converted, 'corrupt_shard', shard.name)
  assert any(p['record'] == 0 for p in report['problems'])


def test_truncated_shard(converted):
  shard = first_shard(converted)
  shard.write_bytes(shard.read_bytes()[:-10])
  report = assert_finding(converted, 'truncated_shard', shard.name)
  assert 'count_mismatch' in report['problems_by_kind']


def test_a_huge_declared_length_is_a_truncated_shard_finding(converted):
  """A record header declaring 2^40 bytes (its length CRC valid), 64 behind
  it: was a MemoryError traceback from ReadShardFn, exit 1 without a report."""
  shard = first_shard(converted)
  header = struct.pack('<Q', 1 << 40)
  shard.write_bytes(shard.read_bytes() + header + struct.pack('<I', masked_crc(header))
                    + b'\0' * 64)
  report = assert_finding(converted, 'truncated_shard', shard.name)
  assert [(p['record'], p['detail']) for p in report['problems']
          if p['kind'] == 'truncated_shard'] == [
      (9, f'file ends inside record 9 (64 of its {1 << 40} data bytes)')]


@pytest.mark.parametrize('kind', ['fifo', 'device'])
def test_a_shard_that_is_no_regular_file_is_reported_unread(converted, kind):
  """A FIFO named as a shard hung validate (waiting for a writer); a symlink
  to a device (/dev/null here) was read as bytes: each is a missing_shard
  finding, the file never opened."""
  shard = first_shard(converted)
  shard.unlink()
  if kind == 'device':
    shard.symlink_to('/dev/null')
  with fifo_writer_that_unblocks_readers(shard if kind == 'fifo'
                                         else converted.parent / 'unused.fifo') as unblocked:
    report = assert_finding(converted, 'missing_shard', shard.name)
  named = 'FIFO (named pipe)' if kind == 'fifo' else 'character device'
  assert [p['detail'] for p in report['problems'] if p['kind'] == 'missing_shard'] == [
      f'listed in dataset_info.json, but on disk a {named}, not a regular file: not read']
  assert not unblocked


def test_deleted_shard(converted):
  shard = first_shard(converted)
  shard.unlink()
  assert_finding(converted, 'missing_shard', shard.name)


# 6 digits from 100,000 shards on: such a shard was no extra_shard (validate OK)
@pytest.mark.parametrize('name', ['train-00007-of-00009.tfrecord',
                                  'train-00007-of-100000.tfrecord',
                                  'train-100007-of-100009.tfrecord'])
def test_extra_shard_not_listed(converted, name):
  shutil.copy(first_shard(converted), converted / name)
  assert_finding(converted, 'extra_shard', name)


# Not numbered as convert numbers shards, but what docs/reading.md's glob
# train-*.tfrecord reads with the split: a second download, an old shard, a
# 4-digit number. validate said OK (exit 0) while tf.data read 9 records more.
@pytest.mark.parametrize('name', ['train-00000-of-00001 (1).tfrecord', 'train-old.tfrecord',
                                  'train-0000-of-00001.tfrecord'])
def test_an_unlisted_file_the_split_glob_matches_is_an_extra_shard(converted, name):
  shutil.copy(first_shard(converted), converted / name)
  (converted / 'notes-train.tfrecord').write_bytes(b'')  # no split's glob matches it
  code, report = run_validate(converted)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'extra_shard': 1})
  assert [(p['file'], p['detail']) for p in report['problems']] == [
      (name, "not a shard name convert writes, but the glob 'train-*.tfrecord' "
       "(docs/reading.md) matches it, and dataset_info.json does not list it: a reader "
       "globbing the split's shards reads it too")]


def test_a_split_renamed_in_dataset_info_is_a_wrong_split_finding(converted):
  """The train split renamed 'holdout' in dataset_info.json, its shards,
  sidecar and counts kept: every record, count and sidecar line still held,
  and validate said OK (exit 0), while a reader asking for 'holdout' got
  train's shards. Each file listed under a split its name does not say is a
  wrong_split problem; the records are still read and counted."""
  info = read_info(converted)
  shards = info['splits']['train']['shards']
  info['splits'] = {('holdout' if split == 'train' else split): declared
                    for split, declared in info['splits'].items()}
  (converted / 'dataset_info.json').write_text(json.dumps(info))
  code, report = run_validate(converted)
  assert code == EXIT_FAILED
  assert report['problems_by_kind'] == {'wrong_split': len(shards) + 1}
  assert [(p['file'], p['detail']) for p in report['problems']] == [
      (shard, "listed under split 'holdout' in dataset_info.json, but its name says split "
       "'train' (convert names each shard holdout-NNNNN-of-NNNNN.tfrecord)")
      for shard in shards] + [
      ('train.sources.jsonl.gz', "the sidecar of split 'holdout' in dataset_info.json, "
       'but convert names it holdout.sources.jsonl.gz')]
  assert report['splits']['holdout']['num_examples'] == info['splits']['holdout'][
      'num_examples'] > 0


def test_missing_dataset_info(converted):
  (converted / 'dataset_info.json').unlink()
  assert_finding(converted, 'missing_dataset_info')


@pytest.mark.parametrize('left', [
    ['train-00000-of-00002.tfrecord'],  # a killed run: its shards, no dataset_info.json
    ['.convert.lock.000001'],  # its lock alone
    ['label_map.txt', 'photo.jpg'],
    ['beam-temp-train-shards'],
    ['rejected.jsonl'],  # every row rejected: nothing published
])
def test_a_folder_a_run_left_without_dataset_info_is_a_finding_exit_1(tmp_path, capsys, left):
  for name in left:
    (tmp_path / name).write_bytes(b'')
  code, report = run_validate(tmp_path)
  assert code == EXIT_FAILED
  assert report['problems_by_kind'] == {'missing_dataset_info': 1}


@pytest.mark.parametrize('files', [[], ['photo.jpg', 'cat.png'], ['validation_report.json']])
def test_a_folder_holding_nothing_convert_writes_is_a_usage_error(tmp_path, capsys, files):
  """An images folder given by mistake: exit 2, one line, no report written
  into it (inspect's usage error, the same mistake)."""
  for name in files:
    (tmp_path / name).write_bytes(b'x')
  assert validate.main(['--input_dir', str(tmp_path)]) == EXIT_USAGE
  out, err = capsys.readouterr()
  assert (out, err) == ('', f'error: {tmp_path}/dataset_info.json is missing or unreadable '
                        '(FileNotFoundError): the dataset is incomplete or was never written '
                        '(and nothing else convert writes is there: not a folder written by '
                        'convert)\n')
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)
  assert all((tmp_path / name).read_bytes() == b'x' for name in files)


def test_unreadable_dataset_info(converted):
  (converted / 'dataset_info.json').write_text('{not json')
  assert_finding(converted, 'missing_dataset_info')


@pytest.mark.parametrize('content, detail', [
    # a RecursionError traceback, exit 1 and no report, before
    (b'[' * 100_000 + b']' * 100_000, 'is not valid JSON: nested too deeply'),
    (b'\xff{}', "is not UTF-8 text: 'utf-8' codec can't decode byte 0xff in position 0: "
                "invalid start byte"),
], ids=['nested', 'not_utf8'])
def test_a_dataset_info_that_is_no_json_text_is_one_problem(converted, capsys, content, detail):
  (converted / 'dataset_info.json').write_bytes(content)
  report = assert_finding(converted, 'missing_dataset_info')
  assert report['problems'][0]['detail'] == f'{converted / "dataset_info.json"} {detail}'
  assert 'Traceback' not in ''.join(capsys.readouterr())


@pytest.mark.parametrize('change, detail', [
    (lambda info: info['splits']['train'].pop('shards'), 'splits.train has no list of shards'),
    (lambda info: info.update(label_map=None), 'label_map None is not a list of class names'),
    (lambda info: info.update(num_examples='20'), "num_examples '20' is not a count"),
    (lambda info: info.update(feature_spec={}), 'feature_spec {} names no feature'),
    (lambda info: info.update(splits=[]), 'splits [] is not an object of splits'),
    # each of these ended in a traceback (exit 1, no report), or in none at all
    (lambda info: info['splits']['train'].pop('num_examples'),
     'splits.train has no num_examples'),
    (lambda info: info['config'].update(split='train=0.3,validation=0.7'),
     "config.split 'train=0.3,validation=0.7' is not a list of [split name, fraction] pairs "
     'or null'),
    (lambda info: info['config'].update(split=[['train', 'x'], ['test', 'y']]),
     "config.split[0][1] 'x' is not a fraction in (0, 1]"),
    (lambda info: info.update(image=None), 'image None is not an object of the image spec'),
    (lambda info: info.update(rejected_by_reason='x'),
     "rejected_by_reason 'x' is not an object of counts by reason"),
    (lambda info: info.update(rejected_by_reason={'x': 0}),
     "rejected_by_reason names 'x', not a reason stage/code"),
    # the wrong_split check was switched off, exit 0
    (lambda info: info.update(config=None), 'config None is not an object of the options used'),
    (lambda info: info.update(config=[]), 'config [] is not an object of the options used'),
    # each record was "32x32, expected 32x32"
    (lambda info: info['image'].update(height='16'),
     "image.height '16' is not a whole number above 0 or null"),
    (lambda info: info['image'].update(channels=True), 'image.channels True is not one of 1, 3'),
    (lambda info: info['feature_spec'].pop('image/format'),
     "feature_spec has no image/format, a feature of the schema 'default'"),
    (lambda info: info['feature_spec']['image/height'].update(shape=[None]),
     "feature_spec.image/height {'dtype': 'int64', 'shape': [None]} is not as the schema "
     "'default' declares it: {'dtype': 'int64', 'shape': []}"),
])
def test_a_malformed_dataset_info_is_one_problem_never_a_traceback(converted, capsys, change,
                                                                   detail):
  info = read_info(converted)
  change(info)
  (converted / 'dataset_info.json').write_text(json.dumps(info))
  report = assert_finding(converted, 'missing_dataset_info')
  assert report['num_problems'] == 1
  assert report['problems'][0]['detail'] == f'{converted / "dataset_info.json"}: {detail}'
  out, err = capsys.readouterr()
  assert 'Traceback' not in out + err and f'dataset_info.json: {detail}' in out


def test_unparseable_record(converted):
  shard = first_shard(converted)
  with open(shard, 'rb') as stream:
    records = [data for _, data in read_records(stream)]
  records[1] = b'\xff\xff\xff garbage'
  shard.write_bytes(b''.join(frame(r) for r in records))
  report = assert_finding(converted, 'unparseable_record', shard.name)
  assert any(p['record'] == 1 for p in report['problems'])


def test_wrong_image_size(converted):
  def shrink(features):
    features['image/encoded'] = ('bytes', [features['image/encoded'][1][0][:-3]])
  name = rewrite_first_record(converted, shrink)
  assert_finding(converted, 'wrong_image_size', name)


def test_label_out_of_range(converted):
  def relabel(features):
    features['image/class/label'] = ('int64', [42])
  name = rewrite_first_record(converted, relabel)
  assert_finding(converted, 'label_out_of_range', name)


def test_label_text_mismatch(converted):
  def relabel(features):
    features['image/class/text'] = ('bytes', [b'purple'])
  assert_finding(converted, 'label_mismatch', rewrite_first_record(converted, relabel))


def test_missing_feature_and_wrong_type(converted):
  def damage(features):
    del features['image/key/sha256']
    features['image/height'] = ('float', [16.0])
  report = assert_finding(converted, 'missing_feature', rewrite_first_record(converted, damage))
  assert 'wrong_type' in report['problems_by_kind']


@pytest.mark.parametrize('name,value,kind,detail', [
    ('image/key', b'', 'empty_key', 'image/key is empty'),
    ('image/key/sha256', b'xyz', 'bad_sha256',
     "image/key/sha256 is b'xyz', not 64 lowercase hex digits"),
])
def test_an_empty_key_or_a_malformed_digest_is_a_problem_of_its_record(converted, name, value,
                                                                       kind, detail):
  def change(features):
    features[name] = ('bytes', [value])
  shard = rewrite_first_record(converted, change)
  code, report = run_validate(converted)
  # the sidecar line still says the record's old key and digest
  assert code == EXIT_FAILED and report['problems_by_kind'] == {kind: 1, 'sidecar_mismatch': 1}
  assert [(p['kind'], p['file'], p['record'], p['detail']) for p in report['problems']
          if p['kind'] == kind] == [(kind, shard, 0, detail)]


def test_duplicate_keys(converted):
  shard = first_shard(converted)
  records = records_of(shard)
  shard.write_bytes(b''.join(frame(r) for r in records + records[:1]))
  write_info(converted, declare_records(read_info(converted), 'train', records[:1]))
  report = assert_finding(converted, 'duplicate_key', shard.name)
  # the sidecar has no line for the record added, appended out of write order
  assert report['problems_by_kind'] == {'duplicate_key': 1, 'sidecar_mismatch': 1,
                                        'wrong_record_order': 1}


@pytest.mark.slow  # Beam worker processes
@pytest.mark.integration  # Beam's multi-process DirectRunner (~9 s)
def test_one_local_worker_reports_as_distributed_grouping_does(converted):
  """A single local worker gathers the records' facts in the reader
  (RecordFacts); with --direct_num_workers 2 they are grouped by key and by
  source digest: the same report, byte for byte."""
  shard = first_shard(converted)
  with open(shard, 'rb') as stream:
    records = [data for _, data in read_records(stream)]
  shard.write_bytes(b''.join(frame(r) for r in records + records[:2]))
  test_shard = converted / 'test-00000-of-00001.tfrecord'
  test_shard.write_bytes(b''.join(frame(r) for r in records[2:4]))

  def damage(features):  # problems of one record, two of them of one kind; a warning
    features.update({'image/height': ('float', [16.0]), 'image/extra': ('int64', [7])})
    del features['image/width'], features['image/channels']  # read width first

  rewrite_first_record(converted, damage)
  info = read_info(converted)
  info['splits']['train']['num_examples'] += 2
  info['splits']['test'] = dict(info['splits']['train'], num_examples=2,
                                shards=[test_shard.name])
  info['num_examples'] += 4
  (converted / 'dataset_info.json').write_text(json.dumps(info))
  code, gathered = run_validate(converted)
  assert code == EXIT_FAILED
  # records 0 and 1 repeated in train, 2 and 3 in test; record 0 is damaged,
  # so its key is not counted: 3 repeats. The test split's examples_per_class
  # are train's (3 per class): 3 classes off; the 4 added rows are not
  # manifest rows. Train's classes are not compared (record 0's label is unread).
  # The sidecars: train's has no line for the 2 records added (1 problem); the
  # test split took train's entry, sidecar included, whose lines 1 and 2 name
  # records 0 and 1 of the test shard (records 2 and 3: 2) and line 3 one it
  # lacks (1). Each split's num_bytes is train's before (2: count_mismatch).
  # The test split lists train.sources.jsonl.gz as its sidecar (1: wrong_split).
  # Train's record 1 repeated after its last is out of write order (1; record
  # 0's key is unread); the test shard's records 2 and 3 keep theirs.
  assert gathered['problems_by_kind'] == {'duplicate_key': 3, 'wrong_type': 1,
                                          'missing_feature': 2, 'class_count_mismatch': 3,
                                          'row_accounting': 1, 'sidecar_mismatch': 4,
                                          'count_mismatch': 2, 'wrong_split': 1,
                                          'wrong_record_order': 1}
  assert [(p['record'], p['kind'], p['detail']) for p in gathered['problems']
          if p['file'] == shard.name][:3] == [
      (0, 'missing_feature', "feature 'image/channels' is missing"),
      (0, 'missing_feature', "feature 'image/width' is missing"),
      (0, 'wrong_type', "feature 'image/height' is float_list, expected int64_list")]
  assert [p['file'] for p in gathered['problems'] if p['kind'] == 'class_count_mismatch'] == [
      'test'] * 3
  assert gathered['warnings_by_kind'] == {'cross_split_duplicate': 2, 'undeclared_feature': 1}
  assert gathered['num_examples'] == 13
  text = (converted / 'validation_report.json').read_bytes()
  code, grouped = run_validate(converted, '--direct_num_workers', '2')
  assert code == EXIT_FAILED and grouped == gathered
  assert (converted / 'validation_report.json').read_bytes() == text


def test_count_mismatch_with_info_and_expected_count(converted):
  info = read_info(converted)
  info['splits']['train']['num_examples'] = 10
  (converted / 'dataset_info.json').write_text(json.dumps(info))
  report = assert_finding(converted, 'count_mismatch', None, '--expected_count', '5')
  assert report['problems_by_kind']['count_mismatch'] == 3


def test_problems_are_capped_but_counted(converted):
  shard = first_shard(converted)
  with open(shard, 'rb') as stream:
    count = sum(1 for _ in read_records(stream))
  shard.write_bytes(b''.join(frame(b'\xff junk') for _ in range(count)))
  report = assert_finding(converted, 'unparseable_record', shard.name, '--max_problems', '2')
  assert len(report['problems']) == 2
  assert report['problems_truncated'] is True
  assert report['problems_by_kind']['unparseable_record'] == count


def test_gzip_dataset_validates(converted_sample, tmp_path):
  out = copy_dataset(converted_sample('--compression', 'gzip', '--encoding', 'jpeg')[1],
                     tmp_path)
  code, report = run_validate(out)
  assert code == EXIT_OK and report['num_examples'] == 9
  shard = first_shard(out)
  shard.write_bytes(shard.read_bytes()[:-20])
  assert_finding(out, 'truncated_shard', shard.name)


@pytest.fixture
def bad_jpeg(converted_sample, tmp_path):
  """-> (a copy of the nine images as 16x16 JPEGs, the shard whose first
  record no longer decodes)."""
  out = copy_dataset(converted_sample(*JPEG_16)[1], tmp_path)
  def garble(features):
    features['image/encoded'] = ('bytes', [b'\xff\xd8 not really a jpeg'])
  return out, rewrite_first_record(out, garble)


def test_undecodable_jpeg_is_found(bad_jpeg):
  out, shard = bad_jpeg
  assert_finding(out, 'undecodable_image', shard)


PNG_16 = ('--encoding', 'png', '--height', '16', '--width', '16')


def _png_chunks(data: bytes) -> list:
  """(type, offset of its length field, data length) of each PNG chunk."""
  chunks, at = [], 8
  while at < len(data):
    length = struct.unpack('>I', data[at:at + 4])[0]
    chunks.append((data[at + 4:at + 8], at, length))
    at += 12 + length
  return chunks


def cut_png(data: bytes) -> bytes:
  """The new user's damage: the IEND chunk and the end of the last IDAT cut off."""
  return data[:-20]


def bad_idat_crc(data: bytes) -> bytes:
  (at, length), = [(at, n) for kind, at, n in _png_chunks(data) if kind == b'IDAT']
  damaged = bytearray(data)
  damaged[at + 8 + length] ^= 0xFF  # the chunk's CRC's first byte
  return bytes(damaged)


def damage_first_image(out, damage) -> str:
  """The first record's image/encoded replaced by damage(its bytes); the
  record framed again (its TFRecord CRCs valid)."""
  def change(features):
    features['image/encoded'] = ('bytes', [damage(features['image/encoded'][1][0])])
  return rewrite_first_record(out, change)


def test_bytes_after_a_pngs_iend_are_no_problem(converted_sample, tmp_path):
  """libpng (tf.io.decode_png) ignores them: a dataset another tool wrote may hold some."""
  out = copy_dataset(converted_sample(*PNG_16)[1], tmp_path)
  damage_first_image(out, lambda data: data + b'junk')
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_OK, {})


@pytest.mark.parametrize('damage,detail', [
    # Pillow decodes both; TensorFlow's decode_png refuses them.
    (cut_png, 'png image has no IEND chunk: cut short'),
    (bad_idat_crc, "png image does not decode: broken PNG file (bad header checksum in "
                   "b'IDAT')"),
], ids=['cut', 'bad_idat_crc'])
def test_a_damaged_png_is_undecodable(converted_sample, tmp_path, damage, detail):
  out = copy_dataset(converted_sample(*PNG_16)[1], tmp_path)
  shard = damage_first_image(out, damage)
  code, report = run_validate(out)
  assert code == EXIT_FAILED
  assert report['problems_by_kind'] == {'undecodable_image': 1}
  assert [(p['file'], p['record'], p['detail']) for p in report['problems']] == [
      (shard, 0, detail)]


def test_a_jpeg_cut_short_is_undecodable(converted_sample, tmp_path):
  """Its EOI marker and the end of its scan cut off: Pillow refuses it, as
  TensorFlow does (test_validate_and_tensorflow_agree_on_damaged_images)."""
  out = copy_dataset(converted_sample(*JPEG_16)[1], tmp_path)
  shard = damage_first_image(out, lambda data: data[:-20])
  code, report = run_validate(out)
  assert code == EXIT_FAILED and report['problems_by_kind'] == {'undecodable_image': 1}
  assert [(p['file'], p['record'], p['detail']) for p in report['problems']] == [
      (shard, 0, 'jpeg image does not decode: Truncated File Read')]


def _damaged(data: bytes, png: bool) -> dict:
  """Every cut (1 byte off the end to all but the first 8) and, for a PNG,
  a bad IDAT CRC: {what was done: the bytes}."""
  damaged = {f'cut {n}': data[:-n] for n in range(1, len(data) - 8)}
  if png:
    damaged['bad IDAT CRC'] = bad_idat_crc(data)
  return damaged


@pytest.mark.slow  # TensorFlow's import
def test_validate_and_tensorflow_agree_on_damaged_images(converted_sample):
  """What validate's image check passes, TensorFlow's decoders decode; what
  it refuses, they refuse, for the PNGs and JPEGs convert writes cut at every
  length (and a PNG with a bad IDAT CRC). TensorFlow only here: validate
  never imports it."""
  import tensorflow as tf

  from transforms.core import checks
  images = [('png', noise_png(3, (40, 30)), 30, 40)]
  for flags, encoding in ((PNG_16, 'png'), (JPEG_16, 'jpeg')):
    shard = first_shard(converted_sample(*flags)[1])
    images.append((encoding, parse_example(records_of(shard)[0])['image/encoded'][1][0],
                   16, 16))
  pixels = np.random.default_rng(4).integers(0, 256, (30, 40, 3), dtype=np.uint8)
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, format='JPEG', quality=95)
  images.append(('jpeg', buffer.getvalue(), 30, 40))
  decode = {'png': tf.io.decode_png, 'jpeg': tf.io.decode_jpeg}
  disagree, tried = [], 0
  for encoding, data, height, width in images:
    assert checks.check_image(data, encoding, height, width, 3) == []
    for what, damaged in _damaged(data, encoding == 'png').items():
      refused = bool(checks.check_image(damaged, encoding, height, width, 3))
      try:
        decode[encoding](damaged, channels=3)
        tf_refused = False
      except tf.errors.InvalidArgumentError:
        tf_refused = True
      tried += 1
      if refused != tf_refused:
        disagree.append((encoding, len(data), what, refused, tf_refused))
  assert disagree == [] and tried > 1000


def test_seed_schema_validates_and_catches_short_pixels(converted_sample, tmp_path):
  out = copy_dataset(converted_sample('--schema', 'seed', '--height', '10', '--width', '12')[1],
                     tmp_path)
  code, report = run_validate(out)
  assert code == EXIT_OK and report['num_examples'] == 9
  def shrink(features):
    features['img_raw'] = ('bytes', [features['img_raw'][1][0][:100]])
  assert_finding(out, 'wrong_image_size', rewrite_first_record(out, shrink))


@pytest.mark.parametrize('encoding,requested,expected', [
    ('raw', 0, 1), ('jpeg', 0, None), ('png', 0, None), ('raw', 4, 4), ('jpeg', 2, 2)])
def test_check_threads_default_per_encoding(encoding, requested, expected):
  import os
  import types

  from pipeline.configuration import command_line
  from pipeline.configuration.flags import ValidateOptions
  from pipeline.engines import runners
  from transforms.workers.pooled_step import pool_size
  options = command_line.parse([], ValidateOptions, '').pipeline_options
  records = types.SimpleNamespace(image=types.SimpleNamespace(encoding=encoding))
  threads = pool_size(requested, 0, records.image.encoding, runners.single_local_worker(options),
                      os.cpu_count(), inline_raw=True).threads
  assert threads == (expected or os.cpu_count() + 1)


@pytest.mark.slow
def test_check_processes_and_threads_give_the_same_report(bad_jpeg):
  out, shard = bad_jpeg
  reports = {}
  for mode, flags in (('threads', ['--check_threads', '3']),
                      ('processes', ['--check_processes', '2'])):
    code, report = run_validate(out, *flags)
    assert code == EXIT_FAILED
    reports[mode] = report
  assert reports['threads'] == reports['processes']
  assert reports['processes']['problems_by_kind'] == {'undecodable_image': 1}
  assert reports['processes']['problems'][0]['file'] == shard
  assert reports['processes']['problems'][0]['record'] == 0
  assert 'starts with' in reports['processes']['problems'][0]['detail']
  assert sum(reports['processes']['label_histogram'].values()) == 9


def test_a_crashing_check_worker_blames_only_its_record(bad_jpeg):
  from tests.process_helpers import crash_on_marked_record
  out, _ = bad_jpeg
  code, report = run_validate(out, '--check_processes', '2',
                              check_records=crash_on_marked_record)
  assert code == EXIT_FAILED
  assert report['problems_by_kind'] == {'unexpected_error': 1}
  (problem,) = report['problems']
  assert problem['record'] == 0 and 'WorkerDied' in problem['detail']
  assert report['num_examples'] == 9


def test_check_workers_that_cannot_start_fail_the_run(bad_jpeg, monkeypatch, capsys):
  out, _ = bad_jpeg
  # Child interpreters die on start-up (an unknown stdio encoding), as in a
  # broken worker environment; this process started long before.
  monkeypatch.setenv('PYTHONIOENCODING', 'no-such-codec')
  assert validate.main(['--input_dir', str(out), '--check_processes', '2']) == EXIT_FAILED
  assert 'worker process failed to start' in capsys.readouterr().err
  assert not (out / 'validation_report.json').exists()
