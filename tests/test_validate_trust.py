"""validate trusts nothing convert wrote: dataset_info.json's row accounting
against rejected.jsonl, label_map.txt, examples_per_class, features no one
declared and the split of each record under a hash --split. Each test
tampers with its own copy of a dataset converted once per session."""

from __future__ import annotations

import json

import pytest

from pipeline import convert
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from tests.conftest import copy_dataset
from tests.conftest import read_info
from tests.conftest import recount_imbalance
from tests.conftest import write_image
from tests.conftest import write_manifest
from tests.test_validate_cli import RAW_16
from tests.test_validate_cli import declare_records
from tests.test_validate_cli import records_of
from tests.test_validate_cli import rewrite_first_record
from tests.test_validate_cli import run_validate
from tests.test_validate_cli import write_info
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import serialize_example
from transforms.core.splits import hash_split
from transforms.core.tfrecord import frame

pytestmark = pytest.mark.xdist_group('converted_sample')

# Images 5..8 of the sample have more than 2000 pixels: 4 of 9 rows rejected
# as decode/too_many_pixels, 5 examples (red 2, green 2, blue 1).
REJECTING = (*RAW_16, '--max_pixels', '2000', '--max_error_rate', '0.5')
HASH_SPLIT = (*RAW_16, '--split', 'train=0.5,test=0.5')


@pytest.fixture
def rejecting(converted_sample, tmp_path):
  return copy_dataset(converted_sample(*REJECTING)[1], tmp_path)


@pytest.fixture
def hash_split_out(converted_sample, tmp_path):
  return copy_dataset(converted_sample(*HASH_SPLIT)[1], tmp_path)


def findings(out, *flags, code=EXIT_FAILED, section='problems') -> list:
  """validate's exit code is `code`; -> the (kind, file, record, detail) listed."""
  exit_code, report = run_validate(out, *flags)
  assert exit_code == code, report
  assert report['valid'] is (section == 'warnings')
  return [(p['kind'], p['file'], p['record'], p['detail']) for p in report[section]]


@pytest.mark.parametrize('flags', [REJECTING, HASH_SPLIT], ids=['rejected_rows', 'hash_split'])
def test_untampered_datasets_validate_clean(converted_sample, tmp_path, flags):
  out = copy_dataset(converted_sample(*flags)[1], tmp_path)
  code, report = run_validate(out, '--strict')
  assert code == EXIT_OK
  assert (report['num_problems'], report['num_warnings']) == (0, 0)
  info = read_info(out)
  if flags == REJECTING:
    assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (9, 5, 4)
  else:
    assert {name: split['num_examples'] for name, split in info['splits'].items()} == {
        'train': 3, 'test': 6}


def test_num_manifest_rows_edited(rejecting):
  info = read_info(rejecting)
  info['num_manifest_rows'] = 8
  write_info(rejecting, info)
  assert findings(rejecting) == [
      ('row_accounting', '', -1, "dataset_info.json's error_rate is 0.444444, but its "
       'num_rejected / num_manifest_rows is 4 / 8 = 0.5'),
      ('row_accounting', '', -1, "dataset_info.json's num_manifest_rows is 8, but its 5 "
       'examples and the 4 rejected row(s) in rejected.jsonl make 9')]


def test_numbers_that_follow_from_others_edited(rejecting):
  """num_classes, a split's num_bytes, error_rate and over_budget: each
  edited alone passed validate, exit 0."""
  info = read_info(rejecting)
  shard = rejecting / info['splits']['train']['shards'][0]
  assert (info['num_classes'], info['splits']['train']['num_bytes']) == (3, shard.stat().st_size)
  assert (info['error_rate'], info['over_budget']) == (4 / 9, False)
  info['num_classes'] = 4
  info['splits']['train']['num_bytes'] += 1000
  info.update(error_rate=0.5, over_budget=True)
  write_info(rejecting, info)
  assert findings(rejecting) == [
      ('count_mismatch', '', -1, "dataset_info.json's num_classes is 4, but its label_map has "
       '3 class(es)'),
      ('row_accounting', '', -1, "dataset_info.json's error_rate is 0.5, but its num_rejected "
       '/ num_manifest_rows is 4 / 9 = 0.444444'),
      ('row_accounting', '', -1, "dataset_info.json's over_budget is true, but its error rate "
       '0.444444 is within its max_error_rate 0.5'),
      ('count_mismatch', 'train', -1, f"split 'train' has {shard.stat().st_size} bytes in its "
       f"1 shard(s); dataset_info.json's num_bytes says {shard.stat().st_size + 1000}")]


def test_rejected_line_deleted(rejecting):
  path = rejecting / 'rejected.jsonl'
  lines = path.read_text().splitlines(keepends=True)
  assert len(lines) == 4
  path.write_text(''.join(lines[:1] + lines[2:]))
  assert findings(rejecting) == [
      ('row_accounting', '', -1, "dataset_info.json's num_manifest_rows is 9, but its 5 "
       'examples and the 3 rejected row(s) in rejected.jsonl make 8'),
      ('row_accounting', 'rejected.jsonl', -1, 'rejected.jsonl holds 3 row(s) rejected as '
       "decode/too_many_pixels; dataset_info.json's rejected_by_reason says 4")]


def test_rejected_line_overwritten_by_a_copy_of_another(rejecting):
  # The counts still add up: one row has two lines, another none.
  path = rejecting / 'rejected.jsonl'
  lines = path.read_text().splitlines(keepends=True)
  row = json.loads(lines[0])
  path.write_text(''.join(lines[:1] + lines[:1] + lines[2:]))
  assert findings(rejecting) == [
      ('row_accounting', 'rejected.jsonl', -1, f"lines 1 and 2 both name the row of source "
       f"{row['source']!r}, line {row['line']}; a row is one example or one line, so another "
       "row's line is missing (overwritten by a copy of one of these)")]


def test_rejected_file_deleted_or_garbled(rejecting):
  path = rejecting / 'rejected.jsonl'
  text = path.read_text()
  path.unlink()
  assert findings(rejecting)[0] == (
      'row_accounting', '', -1, "dataset_info.json's num_manifest_rows is 9, but its 5 "
      'examples and the 0 rejected row(s) in rejected.jsonl (rejected.jsonl is missing) '
      'make 5')
  path.write_text(text.replace('"stage"', '"stag"', 1))
  assert findings(rejecting) == [
      ('row_accounting', 'rejected.jsonl', -1, 'line 1 is not a JSON object with a stage '
       "and a code (KeyError: 'stage')"),
      ('row_accounting', 'rejected.jsonl', -1, 'rejected.jsonl holds 3 row(s) rejected as '
       "decode/too_many_pixels; dataset_info.json's rejected_by_reason says 4")]


def test_examples_per_class_edited(converted_sample, tmp_path):
  out = copy_dataset(converted_sample(*RAW_16)[1], tmp_path)
  info = read_info(out)
  per_class = info['splits']['train']['examples_per_class']
  assert per_class == {'blue': 3, 'green': 3, 'red': 3}
  per_class.update(red=4, blue=2)  # the split's total stays 9
  write_info(out, info)
  assert findings(out) == [
      ('class_count_mismatch', 'train', -1, "split 'train' has 3 record(s) of class 'blue'; "
       'its examples_per_class says 2'),
      ('class_count_mismatch', 'train', -1, "split 'train' has 3 record(s) of class 'red'; "
       'its examples_per_class says 4')]


def test_imbalance_ratio_edited(converted_sample, tmp_path):
  """examples_per_class held, so its imbalance_ratio was taken on trust."""
  out = copy_dataset(converted_sample(*REJECTING)[1], tmp_path)
  info = read_info(out)
  split = info['splits']['train']
  assert split['examples_per_class'] == {'blue': 1, 'green': 2, 'red': 2}
  assert split['imbalance_ratio'] == 2.0
  split['imbalance_ratio'] = 1.0
  write_info(out, info)
  assert findings(out) == [
      ('class_count_mismatch', 'train', -1, "split 'train' has imbalance_ratio 1.0; its "
       'classes give 2 / 1 = 2 (largest / smallest non-empty class)')]


def test_label_map_txt_edited(converted_sample, tmp_path):
  out = copy_dataset(converted_sample(*RAW_16)[1], tmp_path)
  path = out / 'label_map.txt'
  assert path.read_text() == 'blue\ngreen\nred\n'
  path.write_text('blue\nred\ngreen\n')  # a reader would now call green 'red'
  assert findings(out) == [
      ('label_map_mismatch', 'label_map.txt', -1,
       "line 2 is 'red', dataset_info.json's label_map has 'green'")]
  path.write_text('blue\ngreen\nred\npurple\n')
  assert findings(out) == [
      ('label_map_mismatch', 'label_map.txt', -1,
       "label_map.txt has 4 line(s), dataset_info.json's label_map 3 class(es)")]


def test_undeclared_feature_is_a_warning_and_an_error_with_strict(converted_sample, tmp_path):
  out = copy_dataset(converted_sample(*RAW_16)[1], tmp_path)

  def add(features):
    features['image/secret_label'] = ('int64', [2])
  shard = rewrite_first_record(out, add)
  expected = [('undeclared_feature', shard, 0, "feature 'image/secret_label' is in the record "
               "but not in dataset_info.json's feature_spec")]
  assert findings(out, code=EXIT_OK, section='warnings') == expected
  assert findings(out, '--strict', code=EXIT_FAILED, section='warnings') == expected


def _move_first_train_record_to_test(out):
  """Moves train's first record to the end of test's shard, every count made
  to match (the sidecars are left as they were) -> (train shard, test shard,
  the record moved, train's records kept, its position in test)."""
  info = read_info(out)
  train, test = (out / info['splits'][name]['shards'][0] for name in ('train', 'test'))
  moved, *kept = records_of(train)
  train.write_bytes(b''.join(frame(r) for r in kept))
  position = len(records_of(test))
  test.write_bytes(test.read_bytes() + frame(moved))
  declare_records(info, 'test', [moved], rows=False)
  text = parse_example(moved)['image/class/text'][1][0].decode()
  info['splits']['train']['num_examples'] -= 1
  info['splits']['train']['examples_per_class'][text] -= 1
  recount_imbalance(info['splits']['train'])
  info['splits']['train']['num_bytes'] -= len(frame(moved))
  info['num_examples'] -= 1
  write_info(out, info)
  return train, test, moved, kept, position


def test_record_moved_from_train_to_test(hash_split_out):
  """The record is moved and every count made to match: the split,
  recomputed from the key, shows it, and the sidecars that still name it in
  train."""
  out = hash_split_out
  train, test, moved, kept, position = _move_first_train_record_to_test(out)
  key = parse_example(moved)['image/key'][1][0].decode()
  assert hash_split(key, (('train', 0.5), ('test', 0.5)), 0) == 'train'
  found = findings(out)
  # appended past its place in the shard's write order (the salted hash of its key)
  assert found[0][:3] == ('wrong_record_order', test.name, position)
  assert found[1] == (
      'wrong_split', test.name, position, f"key {key!r} is in split 'test', but the key hashes to "
      "'train' (--split train=0.5,test=0.5 --seed 0)")
  # the sidecars still name the record in train: its lines no longer match
  assert [(kind, file, line) for kind, file, line, _ in found[2:]] == [
      ('sidecar_mismatch', 'test.sources.jsonl.gz', position + 1),
      ('sidecar_mismatch', 'train.sources.jsonl.gz', 1),
      ('sidecar_mismatch', 'train.sources.jsonl.gz', 2),
      ('sidecar_mismatch', 'train.sources.jsonl.gz', 3)]
  assert found[2][3] == f'record {position} of {test.name} has no line'
  assert found[3][3].startswith(f"line 1 (record 0 of {train.name}): key is {key!r}, the "
                                f"record's {parse_example(kept[0])['image/key'][1][0].decode()!r}")
  assert found[5][3] == f'line 3 (record 2 of {train.name}): no such record (2 read from that shard)'


def test_record_moved_between_splits_by_content(converted_sample, tmp_path):
  """--split_by content: the split recomputed from the record's
  image/key/sha256, not its key, shows a record moved (every count made to
  match; the sidecars are not rewritten: what matters is the wrong_split)."""
  out = copy_dataset(converted_sample(*HASH_SPLIT, '--split_by', 'content')[1], tmp_path)
  _, test, moved, _, position = _move_first_train_record_to_test(out)
  features = parse_example(moved)
  key, digest = (features[name][1][0].decode() for name in ('image/key', 'image/key/sha256'))
  assert hash_split(digest, (('train', 0.5), ('test', 0.5)), 0) == 'train'
  found = findings(out)
  assert found[0][:3] == ('wrong_record_order', test.name, position)  # appended out of order
  assert found[1] == (
      'wrong_split', test.name, position, f"key {key!r} is in split 'test', but its image's "
      "SHA-256 hashes to 'train' (--split train=0.5,test=0.5 --seed 0 --split_by content)")


def test_label_manifest_lines_are_not_rows(tmp_path):
  """Label-manifest lines in rejected.jsonl say counts_as_row false; those
  of datasets written before are told by their stage and source."""
  for i, name in enumerate(('a', 'b')):
    write_image(tmp_path / f'{name}.png', (40 * i, 0, 0))
  images = write_manifest(tmp_path / 'images.csv', [('k1', 'a.png'), ('k2', 'b.png'),
                                                    ('k3', 'gone.png')], header=('key', 'image'))
  labels = write_manifest(tmp_path / 'labels.csv', [('k1', 'cat'), ('k2', 'dog'),
                                                    ('k2', 'cow'), ('k9', 'yak'), ('k3', 'cat'),
                                                    ('bad,line,x', 'x')], header=('key', 'label'))
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(images), '--label_manifest', str(labels),
                       '--output_dir', str(out), '--max_error_rate', '0.5', *RAW_16,
                       '--progress', 'off']) == EXIT_OK
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (3, 2, 1)
  lines = [json.loads(line) for line in (out / 'rejected.jsonl').read_text().splitlines()]
  assert sorted((r['stage'], r['code'], r.get('counts_as_row', True)) for r in lines) == [
      ('label_manifest', 'duplicate_key', False), ('label_manifest', 'no_image', False),
      ('manifest', 'wrong_field_count', False), ('read', 'missing_file', True)]
  assert findings(out, code=EXIT_OK, section='warnings') == []
  for line in lines:  # as written before the field
    line.pop('counts_as_row', None)
  (out / 'rejected.jsonl').write_text(''.join(json.dumps(line) + '\n' for line in lines))
  assert findings(out, code=EXIT_OK, section='warnings') == []
  kept = [line for line in lines if line['code'] != 'no_image']
  (out / 'rejected.jsonl').write_text(''.join(json.dumps(line) + '\n' for line in kept))
  assert findings(out) == [
      ('row_accounting', 'rejected.jsonl', -1, 'rejected.jsonl holds 0 label-manifest line(s) '
       "rejected as label_manifest/no_image; dataset_info.json's "
       'label_manifest_rejected_by_reason says 1')]


@pytest.mark.parametrize('dedupe', ['content', 'key'])
@pytest.mark.parametrize('workers', [(), ('--direct_num_workers', '2', '--direct_running_mode',
                                          'multi_threading')], ids=['gathered', 'grouped'])
def test_a_record_copied_under_a_new_key_into_a_content_deduped_dataset(
        converted_sample, tmp_path, dedupe, workers):
  """--dedupe content leaves no two records of one source SHA-256 (convert
  rejects every repeat): a copy of a record under a new key, with every
  count edited, is a duplicate_content problem on the path that gathers the
  records' facts and on the one grouping them. With --dedupe key such
  copies are allowed (one image under two keys): no such problem."""
  out = copy_dataset(converted_sample(*RAW_16, '--dedupe', dedupe)[1], tmp_path)
  info = read_info(out)
  shard = out / info['splits']['train']['shards'][0]
  records = records_of(shard)
  features = {name: ({'bytes_list': 'bytes', 'int64_list': 'int64',
                      'float_list': 'float'}[kind], values)
              for name, (kind, values) in parse_example(records[2]).items()}
  features['image/key'] = ('bytes', [b'copy.png'])
  copy = serialize_example(features)
  shard.write_bytes(shard.read_bytes() + frame(copy))
  write_info(out, declare_records(info, 'train', [copy]))
  sha256 = features['image/key/sha256'][1][0].decode()
  code, report = run_validate(out, *workers)
  assert code == EXIT_FAILED
  duplicates = [(p['file'], p['record'], p['detail']) for p in report['problems']
                if p['kind'] == 'duplicate_content']
  if dedupe == 'key':
    assert duplicates == [] and 'duplicate_content' not in report['problems_by_kind']
    return
  assert report['problems_by_kind']['duplicate_content'] == 1
  assert duplicates == [(shard.name, 9, f'image/key/sha256 {sha256!r} appears 2 times; first '
                                        f'at {shard.name}#2')]
