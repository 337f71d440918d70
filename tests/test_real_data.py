"""Datasets as they come (#11): numeric class folders, split folders, other
people's manifests, multi-label rows, a format allow-list, clearer messages."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import struct
import zlib

from PIL import Image
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.runs import progress
from tests.conftest import check_record
from tests.conftest import feature
from tests.conftest import parse_line
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.conftest import write_image
from transforms.core import image_dir
from transforms.core import manifest
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import serialize_example
from transforms.core.image import open_image
from transforms.core.labels import LabelMap
from transforms.core.rejects import RowError
from transforms.core.tfrecord import read_records
from transforms.core.validation import Expected

SMALL = ('--height', '4', '--width', '4')


def run(*flags) -> int:
  return convert.main([*flags, *SMALL])


def accounted(out) -> dict:
  """dataset_info.json, after checking every row is an example or a rejected
  line with a stage and a code, and that the counts add up."""
  info = read_info(out)
  rejected = rejected_lines(out)
  assert info['num_manifest_rows'] == info['num_examples'] + info['num_rejected']
  rows = [r for r in rejected if r['stage'] != 'label_manifest']
  assert len(rows) == info['num_rejected']
  assert all(r['stage'] and r['code'] and r['reason'] for r in rejected)
  by_reason = {}
  for r in rows:
    by_reason[f'{r["stage"]}/{r["code"]}'] = by_reason.get(f'{r["stage"]}/{r["code"]}', 0) + 1
  assert by_reason == info['rejected_by_reason']
  return info


def labels_by_file(out) -> dict:
  """image/filename -> (label id(s), label text(s))."""
  def value(example, name):
    values = example[name][1]
    return values[0] if len(values) == 1 else values
  return {feature(e, 'image/filename').decode(): (
      value(e, 'image/class/label'), value(e, 'image/class/text'))
      for e in read_examples(out)}


# 1. Labels that are numbers


@pytest.fixture
def numbered_dir(tmp_path):
  """A traffic-sign layout: DIR/00000/00000.ppm, ..., classes zero-padded."""
  root = tmp_path / 'signs'
  for label in range(3):
    for i in range(2):
      write_image(root / f'{label:05d}' / f'{i:05d}.ppm', (80 * label, 0, 0), (6, 5))
  return root


def test_numeric_class_folders_keep_their_padded_names(numbered_dir, tmp_path):
  out = tmp_path / 'out'
  assert run('--image_dir', str(numbered_dir), '--output_dir', str(out)) == EXIT_OK
  info = accounted(out)
  assert info['num_examples'] == 6 and info['num_rejected'] == 0
  assert (out / 'label_map.txt').read_text() == '00000\n00001\n00002\n'
  found = labels_by_file(out)
  assert found['00001/00000.ppm'] == (1, b'00001')
  assert found['00002/00001.ppm'] == (2, b'00002')


def test_numeric_labels_mixed_padding_in_one_csv(tmp_path):
  for name in 'abcdef':
    write_image(tmp_path / f'{name}.png')
  rows = [('a.png', '002'), ('b.png', '1'), ('c.png', '00001'), ('d.png', '2'),
          ('e.png', '0'), ('f.png', '4')]
  manifest_path = tmp_path / 'm.csv'
  manifest_path.write_text('image,label\n' + ''.join(f'{i},{l}\n' for i, l in rows))
  out = tmp_path / 'out'
  assert run('--manifest', str(manifest_path), '--output_dir', str(out)) == EXIT_OK
  accounted(out)
  # text as first written by line order; a gap keeps its plain number
  assert (out / 'label_map.txt').read_text() == '0\n1\n002\n3\n4\n'
  found = labels_by_file(out)
  assert found['c.png'] == (1, b'1') and found['d.png'] == (2, b'002')
  assert found['e.png'] == (0, b'0')


def test_numeric_labels_with_a_label_map_and_a_label_manifest(tmp_path):
  for name in 'abc':
    write_image(tmp_path / f'{name}.png')
  (tmp_path / 'classes.txt').write_text('00000\n00001\n00002\n')
  images = tmp_path / 'images.csv'
  images.write_text('key,image\nka,a.png\nkb,b.png\nkc,c.png\n')
  labels = tmp_path / 'labels.csv'
  labels.write_text('key,label\nka,2\nkb,00000\nkc,01\nkz,1\n')
  out = tmp_path / 'out'
  assert run('--manifest', str(images), '--label_manifest', str(labels),
             '--label_map', str(tmp_path / 'classes.txt'),
             '--output_dir', str(out)) == EXIT_OK
  info = accounted(out)
  assert info['num_examples'] == 3
  assert info['label_manifest_rejected_by_reason'] == {'label_manifest/no_image': 1}
  assert (out / 'label_map.txt').read_text() == '00000\n00001\n00002\n'
  found = labels_by_file(out)
  assert found == {'a.png': (2, b'00002'), 'b.png': (0, b'00000'), 'c.png': (1, b'00001')}


def test_jsonl_labels_as_numbers_and_strings(tmp_path):
  for name in 'abcd':
    write_image(tmp_path / f'{name}.png')
  lines = [{'image': 'a.png', 'label': 3}, {'image': 'b.png', 'label': '03'},
           {'image': 'c.png', 'label': 1.0}, {'image': 'd.png', 'label': '001'}]
  path = tmp_path / 'm.jsonl'
  path.write_text(''.join(json.dumps(line) + '\n' for line in lines))
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--output_dir', str(out)) == EXIT_OK
  accounted(out)
  assert (out / 'label_map.txt').read_text() == '0\n1\n2\n3\n'
  found = labels_by_file(out)
  assert found['b.png'] == (3, b'3') and found['d.png'] == (1, b'1')


def test_label_map_of_numbers_matches_by_value_and_refuses_repeats():
  padded = LabelMap.from_labels(['00002', '00004'])
  assert padded.names == ('00000', '00001', '00002', '00003', '00004')
  assert padded.lookup('2') == (2, '00002') and padded.lookup('0004') == (4, '00004')
  fixed = LabelMap.from_text('00000\n00001\n')
  assert fixed.lookup('1') == (1, '00001')
  with pytest.raises(RowError) as error:
    fixed.lookup('2')
  assert error.value.code == 'unknown_label'
  with pytest.raises(ValueError, match='repeats'):
    LabelMap.from_text('1\n01\n')
  # names that are not all integers: matched as text only
  mixed = LabelMap.from_labels(['1', 'cat'])
  assert mixed.names == ('1', 'cat')
  with pytest.raises(RowError):
    mixed.lookup('01')


# 2. Split folders


def test_split_label_layout(tmp_path):
  root = tmp_path / 'data'
  write_image(root / 'train' / 'cat' / 'a.png')
  write_image(root / 'train' / 'dog' / 'deep' / 'b.png')
  write_image(root / 'validation' / 'cat' / 'c.png')
  write_image(root / 'train' / 'loose.png')  # no label folder
  write_image(root / 'top.png')  # no split folder
  out = tmp_path / 'out'
  assert run('--image_dir', str(root), '--image_dir_layout', 'split/label',
             '--output_dir', str(out), '--max_error_rate', '1') == EXIT_OK
  info = accounted(out)
  assert {s: v['num_examples'] for s, v in info['splits'].items()} == {
      'train': 2, 'validation': 1}
  assert info['label_map'] == ['cat', 'dog']
  assert info['rejected_by_reason'] == {'manifest/wrong_depth': 2}
  assert sorted(r['row']['image'] for r in rejected_lines(out)) == ['top.png',
                                                                    'train/loose.png']
  found = labels_by_file(out)
  assert found['train/dog/deep/b.png'] == (1, b'dog')


def test_split_folder_not_in_split_names_is_a_usage_error(tmp_path, capsys):
  write_image(tmp_path / 'data' / 'train' / 'cat' / 'a.png')
  write_image(tmp_path / 'data' / 'holdout' / 'cat' / 'b.png')
  out = tmp_path / 'out'
  assert run('--image_dir', str(tmp_path / 'data'), '--image_dir_layout', 'split/label',
             '--output_dir', str(out)) == EXIT_USAGE
  assert "'holdout'" in capsys.readouterr().err and not out.exists()
  assert run('--image_dir', str(tmp_path / 'data'), '--image_dir_layout', 'split/label',
             '--split_names', 'train,holdout', '--output_dir', str(out)) == EXIT_OK
  assert set(read_info(out)['splits']) == {'train', 'holdout'}


# 3. Other people's manifests and folders


def test_named_columns_map_a_kaggle_manifest(tmp_path, capsys):
  for name in 'ab':
    write_image(tmp_path / f'{name}.png')
  path = tmp_path / 'train.csv'
  path.write_text('id,filename,class,fold\nx1,a.png,cat,train\nx2,b.png,dog,test\n')
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--image_column', 'filename', '--label_column', 'class',
             '--key_column', 'id', '--split_column', 'fold', '--output_dir', str(out)) == 0
  info = accounted(out)
  assert {s: v['num_examples'] for s, v in info['splits'].items()} == {'train': 1, 'test': 1}
  keys = sorted(feature(e, 'image/key').decode() for e in read_examples(out))
  assert keys == ['x1', 'x2']
  assert info['config']['columns'] == {'image': 'filename', 'label': 'class', 'key': 'id',
                                       'split': 'fold'}
  capsys.readouterr()
  assert run('--manifest', str(path), '--image_column', 'filename', '--label_column', 'klass',
             '--output_dir', str(tmp_path / 'out2')) == EXIT_USAGE
  err = capsys.readouterr().err
  assert 'no column(s) klass' in err and 'id, filename, class, fold' in err


def test_named_columns_in_jsonl(tmp_path, capsys):
  write_image(tmp_path / 'a.png')
  path = tmp_path / 'm.jsonl'
  path.write_text(json.dumps({'file': 'a.png', 'y': 'cat'}) + '\n')
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--image_column', 'file', '--label_column', 'y',
             '--output_dir', str(out)) == EXIT_OK
  assert labels_by_file(out) == {'a.png': (0, b'cat')}
  assert run('--manifest', str(path), '--image_column', 'path', '--label_column', 'y',
             '--output_dir', str(tmp_path / 'out2')) == EXIT_USAGE
  assert 'no column(s) path (its columns: file, y)' in capsys.readouterr().err


@pytest.mark.parametrize('name', ['train.txt', 'train.txt.gz', 'train.list'])
def test_txt_list_manifest(tmp_path, name):
  write_image(tmp_path / 'img' / 'a b.png')
  write_image(tmp_path / 'img' / 'c.png')
  text = 'img/a b.png 1\n\nimg/c.png   0\nimg/lonely.png\n'
  path = tmp_path / name
  path.write_bytes(gzip.compress(text.encode()) if name.endswith('.gz') else text.encode())
  flags = ['--manifest_format', 'txt'] if name.endswith('.list') else []
  out = tmp_path / 'out'
  assert run('--manifest', str(path), *flags, '--output_dir', str(out),
             '--max_error_rate', '1') == EXIT_OK
  info = accounted(out)
  assert info['num_manifest_rows'] == 3 and info['num_examples'] == 2
  assert labels_by_file(out) == {'img/a b.png': (1, b'1'), 'img/c.png': (0, b'0')}
  [bad] = rejected_lines(out)
  assert (bad['stage'], bad['code'], bad['line']) == ('manifest', 'wrong_field_count', 4)


def test_non_images_in_class_folders_are_skipped_and_counted(tmp_path, capsys):
  root = tmp_path / 'photos'
  write_image(root / 'cat' / 'a.JPG', fmt='JPEG')
  write_image(root / 'dog' / 'b.png')
  for stray in ('cat/README.txt', 'cat/Thumbs.db', 'dog/index.theme', 'dog/logo.svg'):
    (root / stray).write_text('not an image')
  (root / 'dog' / '.hidden.png').write_text('x')
  out = tmp_path / 'out'
  assert run('--image_dir', str(root), '--output_dir', str(out)) == EXIT_OK
  info = accounted(out)
  assert (info['num_manifest_rows'], info['num_examples']) == (2, 2)
  assert info['num_skipped_files'] == 4
  assert info['skipped_files'] == ['cat/README.txt', 'cat/Thumbs.db', 'dog/index.theme',
                                   'dog/logo.svg']
  assert 'skipped 4 file(s)' in capsys.readouterr().out
  assert progress.count_image_files(str(root), image_dir.DEFAULT_IMAGE_EXTENSIONS) == 2
  # all: every file is a row again (the strays are rejected, not skipped)
  out_all = tmp_path / 'out_all'
  assert run('--image_dir', str(root), '--image_extensions', 'all', '--output_dir',
             str(out_all), '--max_error_rate', '1') == EXIT_OK
  info = accounted(out_all)
  assert (info['num_manifest_rows'], info['num_skipped_files']) == (6, 0)
  assert info['rejected_by_reason'] == {'decode/not_an_image': 4}
  assert progress.count_image_files(str(root), None) == 6


def test_manifest_rows_are_never_skipped(tmp_path):
  write_image(tmp_path / 'a.png')
  (tmp_path / 'notes.txt').write_text('hello')
  path = write_manifest_lines(tmp_path / 'm.csv', 'image,label', 'a.png,x', 'notes.txt,x')
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--output_dir', str(out), '--max_error_rate', '1') == 0
  info = accounted(out)
  assert info['rejected_by_reason'] == {'decode/not_an_image': 1}
  assert 'num_skipped_files' not in info


def write_manifest_lines(path, *lines):
  path.write_text(''.join(f'{line}\n' for line in lines))
  return path


# 4. Multi-label rows


@pytest.fixture
def multi_labelled(tmp_path):
  for name in 'abcd':
    write_image(tmp_path / f'{name}.png', (10, 20, 30))
  path = write_manifest_lines(tmp_path / 'm.csv', 'image,label', 'a.png,dog;cat',
                              'b.png,cat; dog ;cat', 'c.png,bird', 'd.png, ; ')
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--multi_label', '--output_dir', str(out),
             '--max_error_rate', '1') == EXIT_OK
  return out


def test_multi_label_lists_keep_order_without_duplicates(multi_labelled):
  out = multi_labelled
  info = accounted(out)
  assert info['label_map'] == ['bird', 'cat', 'dog']
  assert info['feature_spec']['image/class/label'] == {'dtype': 'int64', 'shape': [None]}
  assert info['feature_spec']['image/class/text'] == {'dtype': 'string', 'shape': [None]}
  assert info['rejected_by_reason'] == {'label/empty_label': 1}
  found = labels_by_file(out)
  assert found['a.png'] == ([2, 1], [b'dog', b'cat'])
  assert found['b.png'] == ([1, 2], [b'cat', b'dog'])
  # a one-label row is a list of one
  assert [e['image/class/label'][1] for e in read_examples(out)
          if feature(e, 'image/filename') == b'c.png'] == [[0]]
  code = validate.main(['--input_dir', str(out)])
  report = json.loads((out / 'validation_report.json').read_text())
  assert code == EXIT_OK and report['valid']
  assert report['label_histogram'] == {'bird': 1, 'cat': 2, 'dog': 2}


def test_multi_label_jsonl_lists_and_validate_finds_a_bad_list(tmp_path):
  for name in 'ab':
    write_image(tmp_path / f'{name}.png')
  path = tmp_path / 'm.jsonl'
  path.write_text(json.dumps({'image': 'a.png', 'label': ['x', 'y', 'z', 'x']}) + '\n' +
                  json.dumps({'image': 'b.png', 'label': []}) + '\n')
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--multi_label', '--output_dir', str(out),
             '--max_error_rate', '1') == EXIT_OK
  info = accounted(out)
  assert info['rejected_by_reason'] == {'label/empty_label': 1}
  assert labels_by_file(out) == {'a.png': ([0, 1, 2], [b'x', b'y', b'z'])}
  # validate's checks of a label list, on the record itself
  expected = Expected.from_info(info)
  [shard] = info['splits']['train']['shards']
  with open(out / shard, 'rb') as stream:
    [(_, data)] = list(read_records(stream))
  assert check_record(data, expected) == ((0, 1, 2), 'a.png', [])
  for labels, texts, kind in [([0, 5], [b'x', b'q'], 'label_out_of_range'),
                              ([], [], 'missing_label'),
                              ([1, 0], [b'x', b'x'], 'label_mismatch'),
                              ([0, 0], [b'x', b'x'], 'label_mismatch'),
                              ([0, 1], [b'x'], 'label_mismatch')]:
    features = parse_example(data)
    damaged = {name: (kind_field.split('_')[0], values)
               for name, (kind_field, values) in features.items()}
    damaged['image/class/label'] = ('int64', labels)
    damaged['image/class/text'] = ('bytes', texts)
    found = check_record(serialize_example(damaged), expected)[2]
    assert [problem[0] for problem in found][:1] == [kind], (labels, texts, found)


def test_multi_label_refuses_the_seed_schema(tmp_path, capsys):
  path = write_manifest_lines(tmp_path / 'm.csv', 'image,label', 'a.png,x')
  assert run('--manifest', str(path), '--multi_label', '--schema', 'seed',
             '--output_dir', str(tmp_path / 'out')) == EXIT_USAGE
  assert '--multi_label needs --schema default' in capsys.readouterr().err


def test_multi_label_parsing_units():
  config = manifest.ManifestConfig(path='m.csv', fmt='csv', header=('image', 'label'),
                                   multi_label=True, label_separator='|')
  row = parse_line(b'a.png,b|a|b', 2, config)
  assert row.label == ('b', 'a')
  # an empty label beside others stays, for the label stage to reject
  assert parse_line(b'a.png,b|a||b', 2, config).label == ('b', 'a', '')
  assert parse_line(b'a.png,| |', 2, config).label == ()
  # a run of a whitespace separator lines labels up, it loses none
  spaced = dataclasses.replace(config, label_separator=' ')
  assert parse_line(b'a.png,haze  primary   water', 2, spaced).label == ('haze', 'primary', 'water')
  # --label_separator ',' in a CSV: an unquoted cell is more fields, said so
  commas = dataclasses.replace(config, label_separator=',')
  assert parse_line(b'a.png,"cat,dog"', 2, commas).label == ('cat', 'dog')
  with pytest.raises(RowError) as raised:
    parse_line(b'a.png,cat,dog', 2, commas)
  assert raised.value.reason == ('line has 3 fields, the header has 2 (a label cell holding '
                                 '--label_separator \',\' is quoted: "cat,dog")')
  jsonl = manifest.ManifestConfig(path='m.jsonl', fmt='jsonl', multi_label=True)
  assert parse_line(b'{"image": "a", "label": [2, 1.0, "2"]}', 1,
                             jsonl).label == ('2', '1')
  with pytest.raises(RowError, match='string or a finite number'):
    parse_line(b'{"image": "a", "label": [true]}', 1, jsonl)


def test_multi_label_empty_parts_reject_the_row(tmp_path):
  """An empty label beside others was dropped without a word: 'a;;b' (a
  label left out between a and b?) became {a, b}, exit 0. Now the row is
  rejected (label/empty_label) saying so, in a cell, a JSON list, or a
  --label_manifest; a cell of separators only has no label, as before."""
  for name in 'abcdefgh':
    write_image(tmp_path / f'{name}.png')
  path = write_manifest_lines(
      tmp_path / 'm.csv', 'image,label', 'a.png,x;y', 'b.png,x;;y', 'c.png,x;y;', 'd.png,;x',
      'e.png,x; ;y', 'f.png,;;', 'g.png,x;x')
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--multi_label', '--output_dir', str(out),
             '--max_error_rate', '1') == EXIT_OK
  info = accounted(out)
  assert info['rejected_by_reason'] == {'label/empty_label': 5}
  assert labels_by_file(out) == {'a.png': ([0, 1], [b'x', b'y']), 'g.png': (0, b'x')}
  reasons = {r['row']['image']: r['reason'] for r in rejected_lines(out)}
  assert reasons['b.png'] == reasons['c.png'] == reasons['e.png'] == (
      "an empty label beside ['x', 'y']: two separators in a row, one at an end of the "
      'cell, or "" in a JSON list (a label left out?)')
  assert reasons['d.png'].startswith("an empty label beside ['x']")
  assert reasons['f.png'] == 'the row has no labels'
  # a row of thousands of labels names the first 20
  many = tuple(f'l{i}' for i in range(5000)) + ('',)
  with pytest.raises(RowError) as raised:
    LabelMap.from_labels(many).resolve(many)
  assert raised.value.reason.startswith("an empty label beside ['l0', 'l1', ")
  assert "'l19', ... (5000 labels)]: two separators" in raised.value.reason
  assert len(raised.value.reason) < 400
  # a JSON list, and a --label_manifest's cell
  path = write_manifest_lines(tmp_path / 'm.jsonl', json.dumps({'image': 'h.png', 'label': ['x', '']}))
  out = tmp_path / 'out_jsonl'
  assert run('--manifest', str(path), '--multi_label', '--output_dir', str(out),
             '--max_error_rate', '1', '--allow_empty') == EXIT_OK
  assert [r['code'] for r in rejected_lines(out)] == ['empty_label']
  images = write_manifest_lines(tmp_path / 'i.csv', 'key,image', 'ka,a.png', 'kb,b.png')
  labels = write_manifest_lines(tmp_path / 'l.csv', 'key,label', 'ka,x;y', 'kb,x;y;')
  out = tmp_path / 'out_join'
  assert run('--manifest', str(images), '--label_manifest', str(labels), '--multi_label',
             '--output_dir', str(out), '--max_error_rate', '1') == EXIT_OK
  assert [(r['row']['key'], r['code']) for r in rejected_lines(out)] == [('kb', 'empty_label')]
  assert validate.main(['--input_dir', str(out), '--recompute', '1']) == EXIT_OK


def test_multi_label_jsonl_list_items_are_labels_whole(tmp_path):
  """A JSON list says where each label ends: its items were split again at
  --label_separator, so ['salt;pepper', 'oil'] became the three classes salt,
  pepper and oil, exit 0. A JSON string is still a cell, split."""
  for name in 'abc':
    write_image(tmp_path / f'{name}.png')
  path = write_manifest_lines(
      tmp_path / 'm.jsonl', json.dumps({'image': 'a.png', 'label': ['salt;pepper', 'oil']}),
      json.dumps({'image': 'b.png', 'label': 'salt;pepper'}),
      json.dumps({'image': 'c.png', 'label': [' oil ', 'oil']}))
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--multi_label', '--output_dir', str(out)) == EXIT_OK
  info = accounted(out)
  assert info['label_map'] == ['oil', 'pepper', 'salt', 'salt;pepper']
  assert labels_by_file(out) == {'a.png': ([3, 0], [b'salt;pepper', b'oil']),
                                 'b.png': ([2, 1], [b'salt', b'pepper']),
                                 'c.png': (0, b'oil')}  # a list of one
  assert info['splits']['train']['examples_per_class'] == {
      'oil': 2, 'pepper': 1, 'salt': 1, 'salt;pepper': 1}
  assert validate.main(['--input_dir', str(out), '--recompute', '3']) == EXIT_OK


# 5. Only the formats you expect


@pytest.mark.slow
def test_formats_allow_list_by_content(tmp_path):
  write_image(tmp_path / 'pcx_named.png', fmt='PCX')  # a PCX file with a .png name
  write_image(tmp_path / 'real.png')
  path = write_manifest_lines(tmp_path / 'm.csv', 'image,label', 'pcx_named.png,x',
                              'real.png,x')
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--output_dir', str(out), '--max_error_rate', '1') == 0
  info = accounted(out)
  assert info['rejected_by_reason'] == {'decode/format_not_allowed': 1}
  [rejected] = rejected_lines(out)
  assert 'PCX' in rejected['reason'] and rejected['row']['image'] == 'pcx_named.png'
  assert 'formats' not in info['image']
  out_all = tmp_path / 'all'
  assert run('--manifest', str(path), '--output_dir', str(out_all), '--formats', 'all') == 0
  assert accounted(out_all)['num_examples'] == 2
  assert read_info(out_all)['image']['formats'] == 'all'
  only_jpeg = tmp_path / 'jpeg'
  # Both rows rejected: nothing is published but rejected.jsonl (exit 2).
  assert run('--manifest', str(path), '--output_dir', str(only_jpeg), '--formats', 'jpeg',
             '--max_error_rate', '1') == EXIT_USAGE
  assert [(r['stage'], r['code']) for r in rejected_lines(only_jpeg)] == [
      ('decode', 'format_not_allowed')] * 2


def test_unknown_format_name_is_a_usage_error(tmp_path, capsys):
  path = write_manifest_lines(tmp_path / 'm.csv', 'image,label', 'a.png,x')
  assert run('--manifest', str(path), '--output_dir', str(tmp_path / 'o'),
             '--formats', 'JPEG,JPG') == EXIT_USAGE
  assert 'no format JPG' in capsys.readouterr().err


# 6. Messages that mislead, rows that lost their fields


def test_decompression_bomb_quotes_max_pixels(monkeypatch):
  monkeypatch.setattr(Image, 'MAX_IMAGE_PIXELS', 10)
  buffer = io.BytesIO()
  Image.new('L', (10, 10)).save(buffer, 'PNG')
  with pytest.raises(RowError) as error:
    open_image(buffer.getvalue(), 50)
  assert error.value.code == 'too_many_pixels'
  assert 'exceeds --max_pixels 50' in error.value.reason and '100 pixels' in error.value.reason


def bmp_with_compression(compression: int) -> bytes:
  """A 2x2 24-bit BMP whose header declares `compression` (4 = embedded JPEG,
  valid in the BMP spec, which Pillow does not decode)."""
  pixels = b'\x00' * 16
  info = struct.pack('<IiiHHIIiiII', 40, 2, 2, 1, 24, compression, len(pixels), 0, 0, 0, 0)
  header = struct.pack('<2sIHHI', b'BM', 14 + len(info) + len(pixels), 0, 0, 14 + len(info))
  return header + info + pixels


def test_unsupported_bmp_variant_has_its_own_code():
  with pytest.raises(RowError) as error:
    open_image(bmp_with_compression(4), 1000)
  assert (error.value.stage, error.value.code) == ('decode', 'unsupported')
  assert 'corrupt' not in error.value.reason


def test_rejected_row_is_a_dict_whenever_the_line_parsed(tmp_path):
  write_image(tmp_path / 'a.png')
  path = write_manifest_lines(tmp_path / 'm.csv', 'image,label,weight', 'a.png,x,heavy',
                              'a.png,"x,1', ',x,1')
  out = tmp_path / 'out'
  assert run('--manifest', str(path), '--extra_features', 'weight:float',
             '--output_dir', str(out), '--max_error_rate', '1', '--allow_empty') == 0
  info = accounted(out)
  rows = {r['code']: r['row'] for r in rejected_lines(out)}
  assert rows['bad_feature'] == {'image': 'a.png', 'label': 'x', 'weight': 'heavy'}
  assert rows['empty_image'] == {'image': '', 'label': 'x', 'weight': '1'}
  assert rows['bad_quoting'] == 'a.png,"x,1'  # did not parse: the line as read
  assert info['num_examples'] == 0


def test_label_manifest_rejections_are_in_the_console_summary(tmp_path, capsys):
  write_image(tmp_path / 'a.png')
  images = write_manifest_lines(tmp_path / 'i.csv', 'key,image', 'k1,a.png')
  labels = write_manifest_lines(tmp_path / 'l.csv', 'key,label', 'k1,cat', 'k1,dog',
                                'k9,cow')
  assert run('--manifest', str(images), '--label_manifest', str(labels),
             '--output_dir', str(tmp_path / 'out')) == EXIT_OK
  printed = capsys.readouterr().out
  assert 'label manifest line rejected label_manifest/duplicate_key: 1' in printed
  assert 'label manifest line rejected label_manifest/no_image: 1' in printed


def test_validate_summary_locations_and_over_budget_caveat():
  base = {'valid': False, 'num_problems': 1, 'problems_by_kind': {'count_mismatch': 1},
          'problems': [{'kind': 'count_mismatch', 'file': '', 'record': -1,
                        'detail': '647 examples in total'}]}
  text = validate.summary(base, 'r.json')
  assert '  e.g. 647 examples in total' in text and 'e.g. :' not in text
  shard = {**base, 'problems': [{'kind': 'x', 'file': 's.tfrecord', 'record': 3,
                                 'detail': 'bad'}]}
  assert '  e.g. s.tfrecord record 3: bad' in validate.summary(shard, 'r.json')
  ok = {'valid': True, 'num_examples': 5, 'splits': {'train': {'num_examples': 5}},
        'over_budget': False}
  assert 'Note' not in validate.summary(ok, 'r.json')
  caveat = validate.summary({**ok, 'over_budget': True}, 'r.json')
  assert caveat.startswith('OK: 5 examples') and 'over_budget' in caveat


def gzip_prefix_records(blob: bytes) -> int:
  """How many whole records the readable part of a cut gzip stream holds."""
  data = zlib.decompressobj(wbits=31).decompress(blob)
  count, offset = 0, 0
  while offset + 12 <= len(data):
    length = struct.unpack('<Q', data[offset:offset + 8])[0]
    if offset + 16 + length > len(data):
      break
    count, offset = count + 1, offset + 16 + length
  return count


@pytest.mark.parametrize('keep', [30, 0.6])
def test_truncated_gzip_shard_names_the_first_bad_record(tmp_path, keep):
  for i in range(6):
    write_image(tmp_path / f'{i}.png', (i * 40, 0, 0))
  path = write_manifest_lines(tmp_path / 'm.csv', 'image,label',
                              *[f'{i}.png,c' for i in range(6)])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out),
                       '--compression', 'gzip', '--height', '40', '--width', '40',
                       '--encoding', 'png']) == 0
  shard = out / read_info(out)['splits']['train']['shards'][0]
  blob = shard.read_bytes()
  cut = blob[:keep if isinstance(keep, int) else int(len(blob) * keep)]
  shard.write_bytes(cut)
  expected = gzip_prefix_records(cut)
  assert expected < 6 and (expected == 0) == isinstance(keep, int)
  assert validate.main(['--input_dir', str(out)]) == 1
  report = json.loads((out / 'validation_report.json').read_text())
  [problem] = [p for p in report['problems'] if p['kind'] == 'truncated_shard']
  assert problem['record'] == expected and f'inside record {expected}' in problem['detail']

