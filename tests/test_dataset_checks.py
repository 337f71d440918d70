"""validate's dataset-level checks as plain functions (no Beam)."""

from __future__ import annotations

from transforms.core import class_counts
from transforms.core import dataset_checks
from transforms.core.dataset_checks import RejectedLines
from transforms.core.splits import HashSplit
from transforms.core.splits import hash_split

INFO = {'label_map': ['cat', 'dog'], 'num_examples': 3, 'num_manifest_rows': 5,
        'num_rejected': 2, 'rejected_by_reason': {'read/missing_file': 2},
        'splits': {'train': {'num_examples': 3,
                             'examples_per_class': {'cat': 2, 'dog': 1}}},
        'config': {'manifest': 'm.csv', 'label_manifest': 'l.csv'}}


def details(problems) -> list:
  return [(p.kind, p.file, p.detail) for p in problems]


def test_rejected_lines_are_counted_by_reason_and_role():
  lines = [b'{"stage": "read", "code": "missing_file", "source": "m.csv"}\n', b'\n',
           b'{"stage": "read", "code": "missing_file", "source": "m.csv"}\n',
           b'{"stage": "manifest", "code": "bad_quoting", "source": "l.csv"}\n',  # before the field
           b'{"stage": "manifest", "code": "x", "counts_as_row": false}\n',
           b'{"stage": "label_manifest", "code": "no_image"}\n', b'\xff not json\n']
  counted = dataset_checks.count_rejected(lines, INFO)
  assert counted.rows == {'read/missing_file': 2}
  assert counted.label_rows == {'manifest/bad_quoting': 1, 'manifest/x': 1,
                                'label_manifest/no_image': 1}
  assert [number for number, _ in counted.unreadable] == [7]
  # an unreadable line counts as a row: 3 + 2 + 1 = 6, not 5
  assert details(dataset_checks.row_accounting_problems(INFO, counted))[1] == (
      'row_accounting', '', "dataset_info.json's num_manifest_rows is 5, but its 3 examples "
      'and the 3 rejected row(s) in rejected.jsonl make 6')


def test_the_same_file_as_both_manifests_is_told_by_the_field_only():
  info = dict(INFO, config={'manifest': 'm.csv', 'label_manifest': 'm.csv'})
  counted = dataset_checks.count_rejected(
      [b'{"stage": "manifest", "code": "bad_quoting", "source": "m.csv"}'], info)
  assert counted.rows == {'manifest/bad_quoting': 1}


def test_num_rejected_against_its_reasons():
  info = dict(INFO, num_rejected=3)
  problems = dataset_checks.row_accounting_problems(
      info, RejectedLines(rows={'read/missing_file': 2}))
  assert details(problems) == [
      ('row_accounting', '', "dataset_info.json's num_rejected 3 is not the sum of its "
       'rejected_by_reason (2)')]


def test_label_manifest_lines_dataset_info_does_not_declare():
  # rejected.jsonl holds a rejected label-manifest line; dataset_info.json
  # declares none (its field missing, or empty): the line is unaccounted for
  counted = RejectedLines(rows={'read/missing_file': 2},
                          label_rows={'label_manifest/no_image': 1})
  for info in (INFO, dict(INFO, label_manifest_rejected_by_reason={})):
    assert details(dataset_checks.row_accounting_problems(info, counted)) == [
        ('row_accounting', 'rejected.jsonl', 'rejected.jsonl holds 1 label-manifest line(s) '
         "rejected as label_manifest/no_image; dataset_info.json's "
         'label_manifest_rejected_by_reason says 0')]
  declared = dict(INFO, label_manifest_rejected_by_reason={'label_manifest/no_image': 1})
  assert dataset_checks.row_accounting_problems(declared, counted) == []


def test_totals_above_their_reasons_and_rates_slightly_off():
  check = dataset_checks.declared_number_problems
  info = dict(INFO, schema='default', num_classes=2, error_rate=0.4, max_error_rate=0.5,
              over_budget=False, num_label_manifest_rows_rejected=1,
              label_manifest_rejected_by_reason={'label_manifest/no_image': 1})
  # a total above the sum of its reasons is as wrong as one below it
  assert details(check(dict(info, num_label_manifest_rows_rejected=2))) == [
      ('row_accounting', '', "dataset_info.json's num_label_manifest_rows_rejected is 2, but "
       'its label_manifest_rejected_by_reason adds up to 1')]
  detection = {'schema': 'detection', 'label_map': ['', 'cat'], 'num_classes': 1,
               'rejected_annotations_by_reason': {'annotation/empty_box': 2},
               'detection': {'num_rejected_annotations': 3}}
  assert details(check(detection)) == [
      ('row_accounting', '', "dataset_info.json's detection.num_rejected_annotations is 3, but "
       'its rejected_annotations_by_reason adds up to 2')]
  # 2 / 5 is 0.4: 0.41 is another rate, float noise is not
  assert details(check(dict(info, error_rate=0.41))) == [
      ('row_accounting', '', "dataset_info.json's error_rate is 0.41, but its num_rejected / "
       'num_manifest_rows is 2 / 5 = 0.4')]
  assert check(dict(info, error_rate=2 / 5 + 1e-15)) == []


def test_counts_above_what_the_records_hold():
  # a record added to a split (or the total raised) is as wrong as one taken out
  info = dict(INFO, num_examples=4, splits={'train': {'num_examples': 3},
                                            'test': {'num_examples': 1}})
  assert dataset_checks.count_problems(info, {'train': 3, 'test': 1}, 4) == []
  assert details(dataset_checks.count_problems(info, {'train': 4, 'test': 1}, None)) == [
      ('count_mismatch', 'train', "split 'train' has 4 examples, dataset_info.json says 3")]
  assert details(dataset_checks.count_problems(dict(info, num_examples=5),
                                               {'train': 3, 'test': 1}, None)) == [
      ('count_mismatch', '', 'dataset_info.json num_examples 5 is not the sum of its splits '
       '(4)')]


def test_numbers_that_follow_from_the_others():
  check = dataset_checks.declared_number_problems
  info = dict(INFO, schema='default', num_classes=2, error_rate=0.4, max_error_rate=0.5,
              over_budget=False, num_label_manifest_rows_rejected=1,
              label_manifest_rejected_by_reason={'label_manifest/no_image': 1})
  assert check(info) == []
  assert check({'schema': 'default', 'label_map': []}) == []  # a file without them
  assert details(check(dict(info, num_classes=3, error_rate=0.0, max_error_rate=0.3,
                            num_label_manifest_rows_rejected=0))) == [
      ('count_mismatch', '', "dataset_info.json's num_classes is 3, but its label_map has "
       '2 class(es)'),
      ('row_accounting', '', "dataset_info.json's error_rate is 0, but its num_rejected / "
       'num_manifest_rows is 2 / 5 = 0.4'),
      ('row_accounting', '', "dataset_info.json's over_budget is false, but its error rate "
       '0.4 is above its max_error_rate 0.3'),
      ('row_accounting', '', "dataset_info.json's num_label_manifest_rows_rejected is 0, but "
       'its label_manifest_rejected_by_reason adds up to 1')]
  # no rows: a rate of 0
  assert check(dict(info, num_manifest_rows=0, num_rejected=0, error_rate=0.0)) == []
  detection = {'schema': 'detection', 'label_map': ['', 'cat', '', 'dog'], 'num_classes': 3,
               'rejected_annotations_by_reason': {'annotation/empty_box': 2},
               'detection': {'num_rejected_annotations': 2}}
  assert check(detection) == []
  detection.update(num_classes=2, detection={'num_rejected_annotations': 1})
  assert details(check(detection)) == [
      ('count_mismatch', '', "dataset_info.json's num_classes is 2, but the largest class id "
       'of its label_map is 3'),
      ('row_accounting', '', "dataset_info.json's detection.num_rejected_annotations is 1, but "
       'its rejected_annotations_by_reason adds up to 2')]
  # ids past the last class, '' in the label map and counted in num_classes
  # (convert never writes them): num_classes is still the largest class id
  padded = dict(detection, label_map=['', 'cat', '', 'dog', '', ''], num_classes=5,
                detection={'num_rejected_annotations': 2})
  assert details(check(padded)) == [
      ('count_mismatch', '', "dataset_info.json's num_classes is 5, but the largest class id "
       'of its label_map is 3')]


def test_num_bytes_of_the_splits_read_whole():
  info = {'splits': {'train': {'num_bytes': 10}, 'test': {'num_bytes': 5}, 'old': {}}}
  assert dataset_checks.byte_count_problems(info, {'train': (2, 10), 'old': (1, 3)}) == []
  assert details(dataset_checks.byte_count_problems(info, {'train': (2, 11), 'test': (1, 5)})) == [
      ('count_mismatch', 'train', "split 'train' has 11 bytes in its 2 shard(s); "
       "dataset_info.json's num_bytes says 10")]


def test_label_map_text_missing_unended_or_edited():
  check = dataset_checks.label_map_problems
  assert check(INFO, 'cat\ndog\n') == []
  assert details(check(INFO, None)) == [
      ('label_map_mismatch', 'label_map.txt',
       "label_map.txt is missing; dataset_info.json's label_map has 2 classes")]
  assert details(check(INFO, 'cat\ndog')) == [
      ('label_map_mismatch', 'label_map.txt', 'the last line has no line break')]
  assert details(check(INFO, 'cat\r\ndog\r\n'))[0][2] == (
      "line 1 is 'cat\\r', dataset_info.json's label_map has 'cat'")
  assert details(check(INFO, 'cat\n')) == [
      ('label_map_mismatch', 'label_map.txt',
       "label_map.txt has 1 line(s), dataset_info.json's label_map 2 class(es)")]


def test_class_counts_are_compared_only_where_every_label_was_read():
  check = class_counts.class_count_problems
  good = {('train', 0): 2, ('train', 1): 1}
  assert check(INFO, {'train': 3}, good) == []
  swapped = {('train', 0): 1, ('train', 1): 2}
  assert [p.detail for p in check(INFO, {'train': 3}, swapped)] == [
      "split 'train' has 1 record(s) of class 'cat'; its examples_per_class says 2",
      "split 'train' has 2 record(s) of class 'dog'; its examples_per_class says 1"]
  # the split's count is off, or a label is unread or out of range: those are
  # problems already
  assert check(INFO, {'train': 2}, swapped) == []
  assert check(INFO, {'train': 3}, {('train', 0): 1, ('train', None): 1,
                                    ('train', 1): 1}) == []
  assert check(INFO, {'train': 3}, {('train', 0): 1, ('train', 5): 1, ('train', 1): 1}) == []
  renamed = dict(INFO, splits={'train': {'num_examples': 3,
                                         'examples_per_class': {'cat': 2, 'wolf': 1}}})
  assert [p.detail for p in check(renamed, {'train': 3}, good)] == [
      "split 'train' has 1 record(s) of class 'dog'; its examples_per_class has no entry "
      'for it',
      "examples_per_class of split 'train' names 'wolf', which is not in the label map"]


def test_imbalance_ratio_is_compared_with_the_class_counts():
  check = class_counts.class_count_problems
  good = {('train', 0): 2, ('train', 1): 1}

  def info(**split):
    return dict(INFO, splits={'train': dict(INFO['splits']['train'], **split)})

  assert check(info(imbalance_ratio=2.0), {'train': 3}, good) == []
  assert check(info(imbalance_ratio=2), {'train': 3}, good) == []
  assert [p.detail for p in check(info(imbalance_ratio=1.0), {'train': 3}, good)] == [
      "split 'train' has imbalance_ratio 1.0; its classes give 2 / 1 = 2 (largest / "
      'smallest non-empty class)']
  assert [p.kind for p in check(info(imbalance_ratio='2'), {'train': 3}, good)] == [
      'class_count_mismatch']
  assert [p.kind for p in check(info(imbalance_ratio=None), {'train': 3}, good)] == [
      'class_count_mismatch']
  # an empty class does not count; a split of no class record has null
  three = dict(INFO, label_map=['cat', 'dog', 'eel'], splits={'train': {
      'num_examples': 3, 'examples_per_class': {'cat': 2, 'dog': 1, 'eel': 0},
      'imbalance_ratio': 2.0}})
  assert check(three, {'train': 3}, good) == []
  empty = info(num_examples=0, examples_per_class={'cat': 0, 'dog': 0}, imbalance_ratio=None)
  assert check(empty, {'train': 0}, {}) == []
  assert [p.detail for p in check(dict(empty, splits={'train': dict(
      empty['splits']['train'], imbalance_ratio=1.0)}), {'train': 0}, {})] == [
      "split 'train' has imbalance_ratio 1.0; its classes give null (no class has a record)"]
  # not compared where examples_per_class is already wrong, nor where absent
  swapped = {('train', 0): 1, ('train', 1): 2}
  assert len(check(info(imbalance_ratio=1.0), {'train': 3}, swapped)) == 2
  assert check(INFO, {'train': 3}, good) == []


DETECTION = {'schema': 'detection', 'label_map': ['', 'person', '', 'train'],
             'splits': {'train': {'num_examples': 2, 'num_objects': 3,
                                  'objects_per_class': {'person': 2, 'train': 1}},
                        'val': {'num_examples': 1, 'num_objects': 1,
                                'objects_per_class': {'person': 0, 'train': 1}}},
             'detection': {'num_objects': 4, 'objects_per_class': {'person': 2, 'train': 2}}}
OBJECTS = {('train', 1): 2, ('train', 3): 1, ('val', 3): 1}


def test_object_counts_of_the_splits_and_the_detection_section():
  check = class_counts.object_count_problems
  counts = {'train': 2, 'val': 1}
  assert check(DETECTION, counts, OBJECTS) == []
  wrong = {**DETECTION, 'detection': {'num_objects': 99,
                                      'objects_per_class': {'person': 50, 'train': 2}}}
  assert details(check(wrong, counts, OBJECTS)) == [
      ('class_count_mismatch', '', "the dataset has 2 object(s) of class 'person'; "
       "dataset_info.json's detection.objects_per_class says 50"),
      ('num_objects_mismatch', '', "the dataset has 4 object(s); dataset_info.json's "
       'detection.num_objects says 99')]
  # a class the section leaves out counts 0
  assert details(check({**DETECTION, 'detection': {'num_objects': 4, 'objects_per_class': {
      'person': 2}}}, counts, OBJECTS)) == [
      ('class_count_mismatch', '', "the dataset has 2 object(s) of class 'train'; "
       "dataset_info.json's detection.objects_per_class says 0")]
  split = {**DETECTION, 'splits': {**DETECTION['splits'], 'val': {
      **DETECTION['splits']['val'], 'num_objects': 7}}}
  assert details(check(split, counts, OBJECTS)) == [
      ('num_objects_mismatch', 'val', "split 'val' has 1 object(s); its num_objects says 7")]
  # a split not all read (its count_mismatch is the problem): the dataset's
  # totals are not compared either
  assert check(wrong, {'train': 2, 'val': 0}, OBJECTS) == []


def test_object_counts_are_compared_only_where_every_label_was_read():
  # a record whose objects could not be read (a feature missing: label None)
  # or whose label names no class (0, a gap, past the map) is a problem of
  # its own: its split, and so the dataset's totals, are not compared
  check = class_counts.object_count_problems
  counts = {'train': 2, 'val': 1}
  for label in (None, 0, 2, 4, -1):
    unread = {('train', 1): 1, ('train', label): 1, ('val', 3): 1}
    assert check(DETECTION, counts, unread) == [], label
  # the other split is still compared
  unread = {('train', None): 1, ('val', 3): 2}
  assert details(check(DETECTION, counts, unread)) == [
      ('class_count_mismatch', 'val', "split 'val' has 2 object(s) of class 'train'; its "
       'objects_per_class says 1'),
      ('num_objects_mismatch', 'val', "split 'val' has 2 object(s); its num_objects says 1")]


def test_label_map_pbtxt_against_the_label_map():
  check = dataset_checks.label_map_pbtxt_problems
  text = ('item {\n  id: 1\n  name: "person"\n}\n'
          'item {\n  id: 3\n  name: "train"\n}\n')
  assert check(DETECTION, text) == []
  assert check(INFO, None) == []  # only --schema detection writes one
  # label_map.txt missing says the same count: the classes, not the ids
  assert details(dataset_checks.label_map_problems(DETECTION, None)) == [
      ('label_map_mismatch', 'label_map.txt',
       "label_map.txt is missing; dataset_info.json's label_map has 2 classes")]
  assert details(check(DETECTION, None)) == [
      ('label_map_mismatch', 'label_map.pbtxt',
       "label_map.pbtxt is missing; dataset_info.json's label_map has 2 classes")]
  assert details(check(DETECTION, text.replace('"train"', '"bus"'))) == [
      ('label_map_mismatch', 'label_map.pbtxt',
       'line 7 is \'  name: "bus"\', not \'  name: "train"\' as dataset_info.json\'s '
       'label_map has it (the item of id 3)')]
  assert details(check(DETECTION, text.replace('id: 3', 'id: 2')))[0][2] == (
      "line 6 is '  id: 2', not '  id: 3' as dataset_info.json's label_map has it "
      '(the item of id 3)')
  assert details(check(DETECTION, text + 'item {\n  id: 4\n  name: "x"\n}\n')) == [
      ('label_map_mismatch', 'label_map.pbtxt',
       "label_map.pbtxt has 12 line(s), not the 8 of an item per class of "
       "dataset_info.json's label_map")]
  assert details(check(DETECTION, text.replace('\n', '\r\n'))) == [
      ('label_map_mismatch', 'label_map.pbtxt',
       'the line breaks are not one \\n after each line')]


def test_split_recomputed_from_the_key_or_the_content():
  fractions = (('train', 0.5), ('test', 0.5))
  rule = HashSplit.from_config({'split': [['train', 0.5], ['test', 0.5]], 'seed': 3})
  assert rule == HashSplit(fractions, 3, 'key')
  wanted = hash_split('k1', fractions, 3)
  other = 'test' if wanted == 'train' else 'train'
  assert dataset_checks.split_problems(rule, wanted, 'k1', None) == []
  assert dataset_checks.split_problems(rule, other, 'k1', None) == [
      ('wrong_split', f"key 'k1' is in split {other!r}, but the key hashes to {wanted!r} "
       '(--split train=0.5,test=0.5 --seed 3)')]
  assert dataset_checks.split_problems(HashSplit(), 'x', 'k1', None) == []  # no hash split
  content = HashSplit(fractions, 3, 'content')
  # a digest whose split is not the key's: hashing the key instead is caught
  digest = next(d * 32 for d in ('ab', 'cd', 'ef', '01')
                if hash_split(d * 32, fractions, 3) != wanted)
  by_content = hash_split(digest, fractions, 3)
  assert by_content == other
  assert dataset_checks.split_problems(content, by_content, 'k1', digest) == []
  assert dataset_checks.split_problems(content, by_content, 'k1', None) == []  # no digest
  assert 'SHA-256' in dataset_checks.split_problems(
      content, 'test' if by_content == 'train' else 'train', 'k1', digest)[0][1]


def test_dropped_boxes_none_recorded_against_reasons():
  # --on_bad_box drop: each rejected annotation's code is a dropped box; a
  # detection section recording none ({}) is as wrong as one recording fewer
  check = dataset_checks.declared_number_problems
  info = {'schema': 'detection', 'label_map': ['', 'cat'], 'num_classes': 1,
          'rejected_annotations_by_reason': {'annotation/empty_box': 2},
          'detection': {'num_rejected_annotations': 2, 'on_bad_box': 'drop',
                        'dropped_boxes': {'empty_box': 2}}}
  assert check(info) == []
  info['detection']['dropped_boxes'] = {}
  assert details(check(info)) == [
      ('row_accounting', '', "dataset_info.json's detection.dropped_boxes.empty_box is 0, but "
       'its rejected_annotations_by_reason (--on_bad_box drop) makes it 2')]
