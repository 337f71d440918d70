"""inspect on hostile records: --files' features that hold no value or
feature names holding terminal escape sequences; a detection record of
masks or boxes convert did not write; captions and histogram names of wide
or long class names."""

from __future__ import annotations

import contextlib
import csv
import io

import numpy as np
from PIL import Image
import pytest

from pipeline import look
from transforms.core.example_proto import serialize_example
from transforms.core.tfrecord import frame


def _png(colour) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(np.full((6, 9, 3), colour, np.uint8)).save(buffer, 'PNG')
  return buffer.getvalue()


def _write(path, examples):
  path.write_bytes(b''.join(frame(serialize_example(e)) for e in examples))
  return path


def _rows(folder) -> list:
  with open(folder / 'samples.csv', newline='', encoding='utf-8') as handle:
    return list(csv.DictReader(handle))


def test_a_record_whose_image_feature_holds_no_value_is_skipped_not_a_traceback(
    tmp_path, capsys):
  """An empty BytesList under image/encoded was `IndexError: list index out
  of range`, exit 1, nothing exported."""
  files = _write(tmp_path / 'mine.tfrecord', [
      {'image/encoded': ('bytes', _png((200, 0, 0))), 'label': ('int64', 4)},
      {'image/encoded': ('bytes', []), 'label': ('int64', 5)},
      {'image/encoded': ('bytes', _png((0, 0, 200))), 'label': ('int64', 6)}])
  code = look.main(['--files', str(files), '--export_dir', str(tmp_path / 'e')])
  out, err = capsys.readouterr()
  assert (code, err) == (0, '')
  assert "Skipped mine.tfrecord record 1: 'image/encoded' holds no value" in out
  assert [(r['file'], r['record']) for r in _rows(tmp_path / 'e')] == [
      ('0_Label_4.jpg', '0'), ('1_Label_6.jpg', '2')]
  pixels = np.asarray(Image.open(tmp_path / 'e' / '1_Label_6.jpg'), np.int32)
  assert np.abs(pixels - (0, 0, 200)).max() < 8


def test_a_record_whose_label_holds_no_value_is_exported_without_one(tmp_path, capsys):
  """An empty Int64List under label was `IndexError: list index out of
  range`, exit 1: the record has no label, as one without the feature."""
  files = _write(tmp_path / 'mine.tfrecord', [
      {'image/encoded': ('bytes', _png((0, 150, 0))), 'label': ('int64', [])},
      {'image/encoded': ('bytes', _png((0, 150, 0))), 'label': ('int64', [3, 1])}])
  code = look.main(['--files', str(files), '--export_dir', str(tmp_path / 'e')])
  assert (code, capsys.readouterr().err) == (0, '')
  assert [(r['file'], r['label']) for r in _rows(tmp_path / 'e')] == [
      ('0_Label_none.jpg', ''), ('1_Label_3.jpg', '3')]


def test_escape_sequences_in_feature_and_file_names_are_written_out(tmp_path, capsys):
  """A feature name holding ESC [2J (clear the screen) or ESC ]0;...BEL (set
  the window's title) reached the terminal raw in the listing."""
  folder = tmp_path / 'in\x1b[31mred'
  folder.mkdir()
  _write(folder / 'mine.tfrecord', [
      {'image/encoded': ('bytes', _png((9, 9, 9))), 'x\x1b[2J\x1b]0;PWN\x07y': ('int64', 1)}])
  (folder / 'cut\x1b[2J.tfrecord').write_bytes(b'\x01' * 20)  # damaged: a Skipped line
  assert look.main(['--files', str(folder / '*.tfrecord')]) == 0
  out = capsys.readouterr().out
  assert '\x1b' not in out and '\x07' not in out
  assert 'Skipped cut<U+001B>[2J.tfrecord record 0: ' in out
  assert f'{tmp_path}/in<U+001B>[31mred/mine.tfrecord:' in out
  assert '    x<U+001B>[2J<U+001B>]0;PWN<U+0007>y int64_list  1 value(s)' in out


def test_contact_sheet_captions_of_wide_letters_stay_in_their_cell():
  """20 characters of 'W', or a detection image's ids '1+2+3+...', took 150
  to 200 pixels: the caption ran into the next thumbnail's."""
  from pipeline.looking import report
  image = np.full((8, 8, 3), 128, np.uint8)
  wide = report.Sample('train', 's', 0, 'M' * 40, '+'.join(['1', '2', '3'] * 10), 'W' * 40,
                       image)
  blank = report.Sample('train', 's', 1, '', None, '', image)
  sheet = np.asarray(report.contact_sheet([wide, blank]).convert('L'))
  cell_w = report.THUMBNAIL + 8
  captions = sheet[report.THUMBNAIL + 4:]
  assert (captions[:, :cell_w] < 128).any()  # the wide caption is drawn
  assert (captions[:, cell_w:] == 255).all()  # and ends before the next cell


def test_histogram_names_that_would_run_together_are_turned_and_counts_are_whole():
  """5 names of 20 letters were drawn level and ran into each other (only more
  than 8 classes were turned); the count axis read '0.5', '1.5' examples."""
  from pipeline.looking import report
  long_names = ['<script>alert(1)</script>', '"><img src=x onerror=alert(5)>', 'person',
                'abc\u202eright', 'x' * 300]
  figure = report.histogram_figure({'train': {i: 3 for i in range(5)}, 'test': {0: 1}},
                                   long_names)
  figure.canvas.draw()
  ticks = figure.axes[0].get_xticklabels()
  assert [t.get_rotation() for t in ticks] == [45.0] * 5
  extents = [t.get_window_extent() for t in ticks]  # turned, still inside the picture
  assert all(figure.bbox.x0 <= e.x0 and figure.bbox.y0 <= e.y0 for e in extents)
  counts = [t.get_text() for t in figure.axes[0].get_yticklabels()]
  assert counts and all(c.isdigit() for c in counts), counts
  empty = report.histogram_figure({'train': {}}, ['only'])  # every record skipped
  empty.canvas.draw()
  assert [t.get_text() for t in empty.axes[0].get_yticklabels()][:2] == ['0', '1']
  level = report.histogram_figure({'train': {0: 2, 1: 1, 2: 3}}, ['cat', 'dog', 'owl'])
  assert [t.get_rotation() for t in level.axes[0].get_xticklabels()] == [0.0] * 3


def _tampered_detection_set(tmp_path, change: dict):
  """A one-image COCO set converted with masks, its record rewritten with
  `change` ({feature: (kind, values)}): a record convert did not write."""
  import json

  from pipeline import convert
  from transforms.core.example_proto import parse_example
  from transforms.core.tfrecord import read_records
  Image.new('RGB', (40, 30), (90, 90, 90)).save(tmp_path / 'a.png')
  (tmp_path / 'instances.json').write_text(json.dumps({
      'images': [{'id': 1, 'file_name': 'a.png', 'width': 40, 'height': 30}],
      'annotations': [{'id': 1, 'image_id': 1, 'category_id': 1, 'bbox': [0, 0, 20, 10],
                       'area': 200, 'iscrowd': 0,
                       'segmentation': [[0, 0, 20, 0, 20, 10, 0, 10]]}],
      'categories': [{'id': 1, 'name': 'box'}]}))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'instances.json'),
                       '--annotation_format', 'coco', '--image_dir', str(tmp_path),
                       '--include_masks', '--resize_mode', 'none', '--encoding', 'png',
                       '--output_dir', str(out), '--progress', 'off']) == 0
  info = json.loads((out / 'dataset_info.json').read_text())
  shard = out / info['splits']['train']['shards'][0]
  with open(shard, 'rb') as handle:
    features = parse_example(next(iter(read_records(handle)))[1])
  kinds = {'bytes_list': 'bytes', 'int64_list': 'int64', 'float_list': 'float'}
  record = {name: (kinds[kind], values) for name, (kind, values) in features.items()}
  record.update(change)
  data = frame(serialize_example(record))
  shard.write_bytes(data)
  info['splits']['train']['num_bytes'] = len(data)
  (out / 'dataset_info.json').write_text(json.dumps(info))
  return out


@pytest.mark.parametrize('change, skipped', [
    ({'image/object/mask': ('bytes', [b'not a png'])},
     'record 0: mask 0 does not decode: UnidentifiedImageError'),
    ({'image/object/bbox/xmin': ('float', [0.0, 0.5])},
     'record 0: box coordinate lists of unequal length: ymin 1, xmin 2, ymax 1, xmax 1'),
], ids=['undecodable_mask', 'unequal_box_lists'])
def test_a_detection_record_of_bad_masks_or_boxes_is_skipped_not_a_traceback(
    tmp_path, capsys, change, skipped):
  """A mask that is no image (Pillow's UnidentifiedImageError) or box lists of
  unequal length (numpy's ValueError) ended inspect with a traceback, exit
  1, and read.examples with the same: a RecordError now, as any record that
  does not fit dataset_info.json."""
  from pipeline import read
  from transforms.core import decoders
  out = _tampered_detection_set(tmp_path, change)
  capsys.readouterr()
  code = look.main(['--input_dir', str(out), '--export_dir', str(tmp_path / 'e')])
  printed, err = capsys.readouterr()
  assert (code, err) == (0, '')
  assert f'Skipped train: train-00000-of-00001.tfrecord {skipped}' in printed
  assert 'Exported 0 images' in printed
  with pytest.raises(decoders.RecordError, match=skipped.split(': ', 1)[1]):
    list(read.examples(str(out), 'train'))


def test_per_class_samples_a_class_that_never_comes_first_in_a_multi_label_record(tmp_path):
  """--per_class drew each --multi_label record under its first label alone:
  'bee', never first, had no sample of its 3 records (nor had a YOLO image's
  second object's class). Each class now has min(K, its records), each
  record exported once."""
  from pipeline import convert
  lines = ['image,label']
  for i, labels in enumerate(['ant;bee', 'ant;bee', 'ant', 'ant;bee', 'cat']):
    Image.new('RGB', (6, 6), (40 * i, 0, 0)).save(tmp_path / f'{i}.png')
    lines.append(f'{i}.png,{labels}')
  (tmp_path / 'm.csv').write_text('\n'.join(lines) + '\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--height', '6', '--width', '6', '--multi_label',
                       '--progress', 'off']) == 0
  for k in (1, 2):
    code = look.main(['--input_dir', str(out), '--export_dir', str(tmp_path / f'k{k}'),
                      '--per_class', str(k)])
    assert code == 0
    rows = _rows(tmp_path / f'k{k}')
    assert len({r['key'] for r in rows}) == len(rows)  # none twice
    having = {name: sum(name in r['class_text'].split(', ') for r in rows)
              for name in ('ant', 'bee', 'cat')}
    assert all(having[name] >= min(k, n) for name, n in
               {'ant': 4, 'bee': 3, 'cat': 1}.items()), (k, having)


def test_class_names_fill_20_terminal_columns_whatever_their_letters():
  """Names were padded to 20 characters: a Chinese name (2 columns a
  character) or emoji pushed its counts right, combining accents pulled
  them left, and the count columns no longer lined up."""
  from pipeline.looking import lettering
  assert lettering.in_columns('猫猫猫') == '猫猫猫' + ' ' * 14
  assert lettering.in_columns('e\u0301e\u0301') == 'e\u0301e\u0301' + ' ' * 18
  assert lettering.in_columns('猫' * 15) == '猫' * 9 + '… '  # 9 x 2 + 1 columns, padded
  assert lettering.in_columns('L' * 30) == 'L' * 19 + '…'
  assert lettering.in_columns('a\u202eb') == 'a<U+202E>b' + ' ' * 10


def test_the_terminal_class_table_lines_up_with_wide_names(tmp_path):
  from pipeline import convert
  lines = ['image,label']
  for i, label in enumerate(['猫猫猫', 'cat', '🐍🐍']):
    Image.new('RGB', (6, 6), (60 * i, 0, 0)).save(tmp_path / f'{i}.png')
    lines.append(f'{i}.png,{label}')
  (tmp_path / 'm.csv').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--height', '6', '--width', '6', '--progress', 'off']) == 0
  stdout = io.StringIO()
  with contextlib.redirect_stdout(stdout):
    assert look.main(['--input_dir', str(out)]) == 0
  counts = '  ' + ' ' * 13 + '1' + '  ' + ' ' * 13 + '1'  # train, total
  printed = stdout.getvalue()
  for n, name in enumerate(['cat', '猫猫猫', '🐍🐍']):  # the label map is sorted
    columns = 20 - len(name) * (1 if name == 'cat' else 2)
    assert f'     {n}  {name}{" " * columns}{counts}\n' in printed, printed


def test_an_escape_sequence_in_a_dataset_record_s_feature_name_is_written_out(tmp_path):
  """The first record's feature names went to the terminal raw: a dataset
  passed on with a feature named 'x ESC [2J' cleared the screen."""
  out = _tampered_detection_set(tmp_path, {'x\x1b[2J': ('int64', [1])})
  stdout = io.StringIO()
  with contextlib.redirect_stdout(stdout):
    assert look.main(['--input_dir', str(out)]) == 0
  printed = stdout.getvalue()
  assert '\x1b' not in printed
  assert '  x<U+001B>[2J         int64_list  1\n' in printed


def test_a_shard_whose_every_record_is_skipped_lists_ten_and_counts_the_rest(tmp_path):
  """A feature every record lacks (dataset_info.json of another dataset, or
  a shard of one) printed a Skipped line per record: one line per record on
  the terminal and the page. The feature's name went raw to the terminal."""
  import json
  import re

  from pipeline import convert
  lines = ['image,label']
  for i in range(25):
    Image.new('RGB', (6, 6), (i, 0, 0)).save(tmp_path / f'{i}.png')
    lines.append(f'{i}.png,{"ab"[i % 2]}')
  (tmp_path / 'm.csv').write_text('\n'.join(lines) + '\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--height', '6', '--width', '6', '--progress', 'off']) == 0
  info = json.loads((out / 'dataset_info.json').read_text())
  info['feature_spec']['w\x1b[2J'] = {'dtype': 'float32', 'shape': []}
  (out / 'dataset_info.json').write_text(json.dumps(info))
  stdout = io.StringIO()
  with contextlib.redirect_stdout(stdout):
    assert look.main(['--input_dir', str(out), '--export_dir', str(tmp_path / 'e')]) == 0
  printed = stdout.getvalue()
  assert '\x1b' not in printed
  assert '  w<U+001B>[2J         float32  []\n' in printed
  skipped = [line for line in printed.splitlines() if line.startswith('Skipped')]
  assert skipped == [f'Skipped train: {info["splits"]["train"]["shards"][0]} record {i}: '
                     f'w<U+001B>[2J has 0 values, its shape is []' for i in range(10)] + [
                         'Skipped train: ... and 15 more skipped']
  page = (tmp_path / 'e' / 'report.html').read_text(encoding='utf-8')
  assert '25 damaged shard(s), record(s) or file(s) skipped by inspect' in page
  assert len(re.search(r'<pre id="skipped">(.*?)</pre>', page, re.S).group(1).splitlines()) == 11


def test_a_foreign_file_of_many_records_that_are_no_examples_lists_ten(tmp_path, capsys):
  """Each record that is no tf.train.Example was its own Skipped line."""
  files = tmp_path / 'junk.tfrecord'
  files.write_bytes(b''.join(frame(b'\xff' * 5) for _ in range(14)))
  assert look.main(['--files', str(files), '--export_dir', str(tmp_path / 'e')]) == 0
  skipped = [line for line in capsys.readouterr().out.splitlines() if line.startswith('Skip')]
  assert [line.split(': ')[0] for line in skipped] == [
      f'Skipped junk.tfrecord record {i}' for i in range(10)] + ['Skipped ... and 4 more skipped']
