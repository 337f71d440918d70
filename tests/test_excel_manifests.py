"""Manifests as Windows, Excel, macOS and pandas write them: what convert
makes of their line ends, encodings, headers and labels."""

from __future__ import annotations

import io
import json
import shlex

from PIL import Image
import pytest

from pipeline import api
from pipeline import convert
from pipeline.errors import EXIT_USAGE
from tests.test_command_line import one_error_line
from transforms.core import manifest_hints

LONE_CR = ("its lines end with a lone \\r (classic Mac OS line breaks): only \\n or \\r\\n end "
           "a line; convert them (tr '\\r' '\\n')")


@pytest.mark.parametrize('name, text', [
    # A .txt list: one row whose path was 'a.png cat\rb.png', labelled 'dog'.
    ('m.txt', b'a.png cat\rb.png dog\r'),
    # JSONL: one bad_json line ("Extra data") holding every row, as one row.
    ('m.jsonl', b'{"image": "a.png", "label": "cat"}\r{"image": "b.png", "label": "dog"}\r'),
    ('m.jsonl', b'\xef\xbb\xbf{"image": "a.png", "label": "cat"}\r{"image": "b.png"}\r'),
])
def test_txt_and_jsonl_rows_ending_with_a_lone_cr_exit_2_as_csv_does(tmp_path, capsys, name,
                                                                     text):
  path = tmp_path / name
  path.write_bytes(text)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out)]) == EXIT_USAGE
  assert one_error_line(capsys) == f'error: manifest {path} cannot be read: {LONE_CR}'
  assert not out.exists()


def test_a_jsonl_line_holding_a_cr_between_its_tokens_is_no_lone_cr_line():
  assert manifest_hints.first_row_cr_problem(b'{"image":\r"a.png", "label": "cat"}', 'jsonl') is None
  assert manifest_hints.first_row_cr_problem(b'{"image": "a.png", "label": "cat"}\r', 'jsonl') is None
  assert manifest_hints.first_row_cr_problem(b'{"image": "a.png"}\r \r', 'jsonl') is None
  assert manifest_hints.first_row_cr_problem(b'a.png cat\r\n', 'txt') is None
  assert manifest_hints.first_row_cr_problem(b'a.png cat\rb.png dog', 'txt') == LONE_CR


@pytest.mark.parametrize('data, reason', [
    # One name 'cat\rdog': every row was rejected as label/unknown_label
    # ("label 'cat' is not in the label map (1 classes)").
    (b'cat\rdog\r', f': {LONE_CR}'),
    # It said "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte".
    ('cat\r\ndog\r\n'.encode('utf-16'), ' is not UTF-8 text: it is UTF-16 text (it starts '
     'with the byte order mark FF FE): save it as UTF-8'),
])
def test_a_label_map_of_mac_line_ends_or_utf16_exits_2_saying_so(tmp_path, capsys, data,
                                                                  reason):
  manifest = tmp_path / 'm.csv'
  manifest.write_text('image,label\na.png,cat\nb.png,dog\n')
  label_map = tmp_path / 'labels.txt'
  label_map.write_bytes(data)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--label_map', str(label_map),
                       '--output_dir', str(out)]) == EXIT_USAGE
  assert one_error_line(capsys) == f'error: --label_map {label_map}{reason}'
  assert not out.exists()


def test_a_label_map_of_windows_line_ends_and_a_bom_reads_as_its_names():
  from transforms.core.labels import LabelMap
  assert LabelMap.from_text('\ufeffcat\r\ndog\r\n').names == ('cat', 'dog')


def test_integer_labels_pandas_wrote_as_floats_are_warned(tmp_path, capsys):
  """pandas writes an integer column holding a gap (NaN) as floats: labels
  0.0..10.0 made ids by sorted text, '10.0' id 2 and '2.0' id 3, silently."""
  import pandas as pd

  from pipeline.errors import EXIT_OK
  from pipeline.read import examples
  from pipeline.reading.dataset import read_info
  from tests.conftest import write_image
  for i in range(11):
    write_image(tmp_path / f'{i}.png', (20 * i, 0, 0), size=(3, 2))
  frame = pd.DataFrame({'image': [f'{i}.png' for i in range(11)] + ['gap.png'],
                        'label': [float(i) for i in range(11)] + [None]})
  frame.iloc[:11].to_csv(tmp_path / 'm.csv', index=False)  # the gap's row dropped: floats stay
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--height', '2', '--width', '2', '--progress', 'off']) == EXIT_OK
  info = read_info(str(out))
  assert info['label_map'][:4] == ['0.0', '1.0', '10.0', '2.0']
  assert {e['key']: e['label'] for e in examples(str(out), 'train')}['10.png'] == 2
  assert info['label_warnings']['num_labels_not_integers'] == 11
  assert info['label_warnings']['labels_not_integers'][:3] == ['0.0', '1.0', '10.0']
  assert ("Warning: 11 label(s) are not non-negative integers, so the class ids follow the "
          "labels sorted as text, not the integers' values") in capsys.readouterr().out


@pytest.mark.parametrize('name, text, hint', [
    # European Excel's CSV: one column 'image;label'. It said only "(its columns: image;label)".
    ('m.csv', 'image;label\r\na.png;cat\r\n', ": its fields are separated by ';' (Excel's CSV in "
     "a European locale), which a CSV does not split at: save it with commas between its "
     "fields (a .csv) or tabs (a .tsv)"),
    ('m.csv', 'image\tlabel\na.png\tcat\n', ': its fields are separated by tabs, which a CSV '
     'does not split at: name it .tsv or give --manifest_format tsv'),
    ('m.tsv', 'image,label\na.png,cat\n', ': its fields are separated by commas, which a TSV '
     'does not split at: name it .csv or give --manifest_format csv'),
    # Excel's separator line before the header. It said "(its columns: sep=;)".
    ('m.csv', 'sep=;\r\nimage;label\r\na.png;cat\r\n', ": its first line 'sep=;' is Excel's "
     "separator line, no header: delete it (and if its fields are separated by ';', separate "
     "them with ',')"),
    ('m.csv', 'sep=,\r\nimage,label\r\na.png,cat\r\n', ": its first line 'sep=,' is Excel's "
     "separator line, no header: delete it"),
    ('m.tsv', 'sep=\t\r\nimage\tlabel\r\na.png\tcat\r\n', ": its first line 'sep=\\t' is "
     "Excel's separator line, no header: delete it"),
    # Windows PowerShell 5.1's Export-Csv, without -NoTypeInformation
    ('m.csv', '#TYPE System.Management.Automation.PSCustomObject\r\n"image","label"\r\n'
     '"a.png","cat"\r\n', ": its first line is the '#TYPE' line of Windows PowerShell's "
     "Export-Csv, no header: delete it (Export-Csv -NoTypeInformation leaves it out)"),
    # pandas' to_csv(sep='\t', quoting=csv.QUOTE_ALL)
    ('m.tsv', '"image"\t"label"\n"a.png"\t"cat"\n', ': its header cells are in quotes, and '
     'TSV cells are taken literally, quotes and all: write it without quotes, or as a CSV'),
])
def test_a_header_of_excels_separators_says_how_to_fix_it(tmp_path, capsys, name, text, hint):
  path = tmp_path / name
  path.write_bytes(text.encode())
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out)]) == EXIT_USAGE
  error = one_error_line(capsys)
  assert error.startswith(f'error: manifest {path} has no column(s) image, label (its columns: ')
  assert error.endswith(hint)
  assert not out.exists()


def test_a_header_of_trailing_empty_columns_says_to_delete_them(tmp_path, capsys):
  path = tmp_path / 'm.csv'
  path.write_bytes(b'image,label,,\r\na.png,cat,,\r\n,,,\r\n')
  assert convert.main(['--manifest', str(path), '--output_dir', str(tmp_path / 'o')]) == 2
  assert one_error_line(capsys) == (
      f"error: manifest {path} has an unusable header line: header repeats column(s) ['']: 2 "
      f"columns have no name (empty cells at the end of the header, as Excel writes for "
      f"columns that were formatted once): delete them")


def test_a_header_hint_is_only_for_csv_and_tsv_headers_of_one_column():
  assert manifest_hints.header_hint(('image;label', 'x'), 'csv') == ''
  assert manifest_hints.header_hint(('image;label',), 'jsonl') == ''
  assert manifest_hints.header_hint(('image',), 'csv') == ''
  assert manifest_hints.header_hint((), 'csv') == ''


def _rejected(out) -> list:
  import json
  return [json.loads(line) for line in (out / 'rejected.jsonl').read_text().splitlines()]


def test_a_missing_file_whose_look_alike_exists_says_what_differs(tmp_path):
  """A manifest written on macOS (NFD names) against NFC files, and Windows
  paths: 'file not found: .../café.jpg' named a file the folder seemed to
  hold; '...img\\cat\\1.jpg' did not say that '\\' is no separator here."""
  import unicodedata

  from pipeline.errors import EXIT_OK
  from pipeline.read import examples
  from tests.conftest import write_image
  nfc = unicodedata.normalize('NFC', 'café.png')
  write_image(tmp_path / 'img' / nfc, (200, 0, 0), size=(3, 2))
  write_image(tmp_path / 'img' / 'cat' / '1.png', (0, 200, 0), size=(3, 2))
  nfd = unicodedata.normalize('NFD', nfc)
  manifest = tmp_path / 'm.csv'
  manifest.write_bytes(f'image,label\r\nimg/{nfc},a\r\nimg/{nfd},a\r\nimg\\cat\\1.png,b\r\n'
                       f'img/none.png,b\r\n'.encode())
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), '--height', '2',
                       '--width', '2', '--progress', 'off', '--max_error_rate', '1']) == EXIT_OK
  assert [e['key'] for e in examples(str(out), 'train')] == [f'img/{nfc}']
  reasons = {r['line']: (r['code'], r['reason']) for r in _rejected(out)}
  base = str(tmp_path)
  assert reasons == {
      3: ('missing_file', f'file not found: {base}/img/{nfd} (a file of this name written in '
          f'Unicode NFC exists, {f"{base}/img/{nfc}"!a}; the manifest writes it '
          f'{f"{base}/img/{nfd}"!a}: names must match byte for byte)'),
      4: ('missing_file', f"file not found: {base}/img\\cat\\1.png (with '/' for each '\\' it "
          f"names the file {base}/img/cat/1.png: write the manifest's paths with '/')"),
      5: ('missing_file', f'file not found: {base}/img/none.png'),
  }


def test_a_windows_1252_line_is_rejected_saying_what_its_byte_is_and_to_save_as_utf8(tmp_path):
  """Excel's plain 'CSV' writes Windows-1252: 'café' is 0xE9. The line is
  rejected on its own, as any line not UTF-8; its reason said only "'utf-8'
  codec can't decode byte 0xe9 in position 10: unexpected end of data"."""
  from pipeline.errors import EXIT_OK
  from pipeline.read import examples
  from tests.conftest import write_image
  write_image(tmp_path / 'a.png', (200, 0, 0), size=(3, 2))
  write_image(tmp_path / 'b.png', (0, 200, 0), size=(3, 2))
  manifest = tmp_path / 'm.csv'
  manifest.write_bytes('image,label\r\na.png,café\r\nb.png,dog\r\n'.encode('cp1252')
                       + b'c.png,\x81\r\n')  # 0x81: no Windows-1252 character
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), '--height', '2',
                       '--width', '2', '--progress', 'off', '--max_error_rate', '1']) == EXIT_OK
  assert [(e['key'], e['class_text']) for e in examples(str(out), 'train')] == [('b.png', 'dog')]
  assert [(r['line'], r['code'], r['reason']) for r in _rejected(out)] == [
      (2, 'bad_encoding', "line is not UTF-8: 'utf-8' codec can't decode byte 0xe9 in position "
       "9: unexpected end of data (0xE9 is 'é' in Windows-1252): save the manifest as UTF-8"),
      (4, 'bad_encoding', "line is not UTF-8: 'utf-8' codec can't decode byte 0x81 in position "
       "6: invalid start byte: save the manifest as UTF-8")]


@pytest.mark.parametrize('name, flags', [('DATA.CSV.GZ', ()), ('data.csv.GZ', ()),
                                         ('DATA.GZ', ('--manifest_format', 'csv'))])
def test_a_gzipped_manifest_named_in_capitals_is_read_decompressed(tmp_path, name, flags):
  """`.CSV` was read as CSV but `.CSV.GZ` exited 2 ("cannot tell the format");
  with the --manifest_format it advised, its gzip bytes were read as text
  ("it is not UTF-8 text ... byte 0x8b")."""
  import gzip

  from pipeline.errors import EXIT_OK
  from pipeline.read import examples
  from tests.conftest import write_image
  write_image(tmp_path / 'a.png', (200, 0, 0), size=(3, 2))
  write_image(tmp_path / 'b.png', (0, 200, 0), size=(3, 2))
  (tmp_path / name).write_bytes(gzip.compress(b'image,label\r\na.png,cat\r\nb.png,dog\r\n'))
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / name), '--output_dir', str(out),
                       '--height', '2', '--width', '2', '--progress', 'off', *flags]) == EXIT_OK
  found = sorted((e['key'], e['class_text'], tuple(e['image'][0, 0])) for e in
                 examples(str(out), 'train'))
  assert found == [('a.png', 'cat', (200, 0, 0)), ('b.png', 'dog', (0, 200, 0))]


@pytest.mark.parametrize('name,text,column,twin', [
    ('m.csv', 'image,label,Split\na.png,cat,test\n', 'split', 'Split'),
    ('m.tsv', 'image\tlabel\tSplit\na.png\tcat\ttest\n', 'split', 'Split'),
    ('m.csv', 'image,label,KEY\na.png,cat,k1\n', 'key', 'KEY'),
    ('m.jsonl', '{"image": "a.png", "label": "cat", "SPLIT": "test"}\n', 'split', 'SPLIT'),
])
def test_an_optional_column_named_in_other_case_is_refused_not_ignored(tmp_path, capsys, name,
                                                                       text, column, twin):
  # unread, every row went to train (test rows trained on) with exit 0
  path = tmp_path / name
  path.write_text(text)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out)]) == EXIT_USAGE
  error = one_error_line(capsys)
  assert error.startswith(f'error: manifest {path} has a column {twin!r}, not {column!r}, so it '
                          f'would not be read (')
  assert error.endswith(f'rename it {column}, or pass --{column}_column {shlex.quote(twin)}')
  assert not out.exists()


def test_an_optional_column_in_other_case_is_read_when_named_by_its_flag(tmp_path):
  (tmp_path / 'a.png').write_bytes(_png())
  path = tmp_path / 'm.csv'
  path.write_text('image,label,Split\na.png,cat,test\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--split_column',
                       'Split', '--progress', 'off']) == 0
  info = json.loads((out / 'dataset_info.json').read_text())
  assert {split: entry['num_examples'] for split, entry in info['splits'].items()} == {'test': 1}


def test_api_rows_with_a_split_column_in_other_case_are_refused(tmp_path):
  with pytest.raises(api.UsageError, match=r"rows= has a column 'Split', not 'split'"):
    api.convert(rows=[{'image': str(tmp_path / 'a.png'), 'label': 'cat', 'Split': 'test'}],
                output_dir=str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


def _png() -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (8, 8), (200, 10, 10)).save(buffer, format='PNG')
  return buffer.getvalue()
