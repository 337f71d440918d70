"""inspect --files on hostile TFRecords convert did not write: features that
hold no value, feature names holding terminal escape sequences."""

from __future__ import annotations

import csv
import io

import numpy as np
from PIL import Image

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
  assert look.main(['--files', str(folder / '*.tfrecord')]) == 0
  out = capsys.readouterr().out
  assert '\x1b' not in out and '\x07' not in out
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
  assert counts and all(c.lstrip('\N{MINUS SIGN}-').isdigit() for c in counts), counts
  level = report.histogram_figure({'train': {0: 2, 1: 1, 2: 3}}, ['cat', 'dog', 'owl'])
  assert [t.get_rotation() for t in level.axes[0].get_xticklabels()] == [0.0] * 3
