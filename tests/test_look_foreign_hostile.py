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
