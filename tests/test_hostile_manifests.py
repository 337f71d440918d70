"""Manifest cells no row can hold: each is that row's rejected line, with its
own code, and the other rows convert. Fields and lines past the caps
(line_caps.MAX_FIELD_CHARS, MAX_LINE_BYTES) in every text format and in
Parquet, never held whole."""

from __future__ import annotations

import io
import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.conftest import write_image
from tests.test_line_ranges import Tracker
from tests.test_line_ranges import serial
from transforms.core import line_caps
from transforms.core import manifest
from transforms.core.line_caps import MAX_FIELD_CHARS
from transforms.core.line_caps import MAX_LINE_BYTES
from transforms.core.line_caps import MAX_SHOWN_LINE
from transforms.core.line_caps import LongLine
from transforms.core.line_ranges import RangeRead
from transforms.core.rejects import RowError

FLAGS = ('--height', '4', '--width', '4', '--progress', 'off', '--max_error_rate', '1')
LONG = 'x' * (MAX_FIELD_CHARS + 1)  # a field one character over the cap
HUGE = 'y' * (MAX_LINE_BYTES + 10)  # a line over the line cap


def _images(root: pathlib.Path) -> None:
  write_image(root / 'a.png', (255, 0, 0))
  write_image(root / 'b.png', (0, 0, 255))


def _convert(manifest_path: pathlib.Path, out: pathlib.Path, *flags: str) -> tuple:
  """Exit code, {line: (stage, code, reason, row)}, {key: label} of the examples."""
  code = convert.main(['--manifest', str(manifest_path), '--output_dir', str(out), *FLAGS,
                       *flags])
  rejected = {r['line']: (r['stage'], r['code'], r['reason'], r['row'])
              for r in rejected_lines(out)}
  labels = {e['image/key'][1][0].decode(): e['image/class/text'][1][0].decode()
            for e in read_examples(out)}
  return code, rejected, labels


def test_read_line_holds_at_most_the_limit():
  stream = io.BytesIO(b'ab\n' + b'z' * 50 + b'\r\n' + b' ' * 30 + b'\nlast')
  assert line_caps.read_line(stream, 10) == b'ab\n'
  assert line_caps.read_line(stream, 10) == LongLine(b'z' * 10, 50, 52, False)
  assert line_caps.read_line(stream, 10) == LongLine(b' ' * 10, 30, 31, True)
  assert line_caps.read_line(stream, 10) == b'last'
  assert line_caps.read_line(stream, 10) == b''
  assert line_caps.read_line(io.BytesIO(b'c' * 10), 10) == b'c' * 10  # at the limit


def test_a_long_line_is_one_line_however_the_ranges_cut_it():
  data = (b'image,label\na.png,cat\n' + HUGE.encode() + b'\r\n' + b' ' * (MAX_LINE_BYTES + 1)
          + b'\nb.png,dog\n')
  whole = serial(data)
  assert [line for line, _ in whole] == [2, 3, 5]
  assert whole[1][1] == LongLine(HUGE[:MAX_LINE_BYTES].encode(), len(HUGE), len(HUGE) + 2,
                                 False)
  for cut in (5, 30, 40, len(HUGE) // 2, len(HUGE) + 23, len(HUGE) + 30, len(data) - 3):
    got = []
    for start, stop in ((0, cut), (cut, len(data))):
      read, tracker = RangeRead(), Tracker(start, stop)
      lines = read.lines_of(io.BytesIO(data), start, tracker.claim, True, len(data))
      got += [(raw, read.lines) for _, raw in lines]
    assert [raw for raw, _ in got] == [raw for _, raw in whole], cut


@pytest.mark.parametrize('fmt, header, text', [
    ('jsonl', (), json.dumps({'image': LONG, 'label': 'cat'})),
    ('jsonl', (), json.dumps({'image': 'a.png', 'label': 'cat', 'meta': {'note': [LONG]}})),
    ('tsv', ('image', 'label'), f'a.png\t{LONG}'),
    ('txt', (), f'{LONG} cat'),
    ('csv', ('image', 'label'), f'{LONG},cat'),
])
def test_a_field_over_the_cap_is_field_too_long_in_every_format(fmt, header, text):
  config = manifest.ManifestConfig(path='m.' + fmt, fmt=fmt, header=header)
  with pytest.raises(RowError) as error:
    manifest.line_fields(text.encode(), 2, config)
  assert (error.value.stage, error.value.code) == ('manifest', 'field_too_long')
  assert f'over {MAX_FIELD_CHARS} characters' in error.value.reason
  at_cap = text.replace(LONG, LONG[1:])
  assert manifest.line_fields(at_cap.encode(), 2, config)


def test_a_line_over_the_cap_is_line_too_long_and_shown_cut():
  config = manifest.ManifestConfig(path='m.jsonl', fmt='jsonl')
  [(_, raw)] = manifest.iter_lines(io.BytesIO(HUGE.encode()), 'jsonl')
  with pytest.raises(RowError) as error:
    manifest.line_fields(raw, 1, config)
  assert (error.value.stage, error.value.code) == ('manifest', 'line_too_long')
  assert error.value.reason.startswith(f'line is {len(HUGE)} bytes, over {MAX_LINE_BYTES}')
  assert line_caps.shown_line(raw) == 'y' * MAX_SHOWN_LINE + f'... ({len(HUGE)} bytes)'


@pytest.mark.parametrize('fmt', ['jsonl', 'tsv', 'txt', 'csv'])
def test_long_fields_and_lines_are_rejected_and_the_rest_converts(tmp_path, fmt):
  _images(tmp_path)
  rows = [('a.png', 'cat'), (LONG, 'cat'), ('b.png', LONG), (HUGE, 'dog'), ('b.png', 'dog')]
  if fmt == 'jsonl':
    lines = [json.dumps({'image': image, 'label': label}) for image, label in rows]
  else:
    separator = {'tsv': '\t', 'txt': ' ', 'csv': ','}[fmt]
    lines = (['image\tlabel' if fmt == 'tsv' else 'image,label'] if fmt != 'txt' else []) + [
        f'{image}{separator}{label}' for image, label in rows]
  path = tmp_path / f'm.{fmt}'
  path.write_text('\n'.join(lines) + '\n')
  code, rejected, labels = _convert(path, tmp_path / 'out')
  assert code == EXIT_OK
  first = 2 if fmt in ('tsv', 'csv') else 1  # the line of the first row
  assert {line - first: (stage, code) for line, (stage, code, _, _) in rejected.items()} == {
      1: ('manifest', 'field_too_long'), 2: ('manifest', 'field_too_long'),
      3: ('manifest', 'line_too_long')}
  for _, _, _, row in rejected.values():  # each line as read, cut to MAX_SHOWN_LINE
    assert isinstance(row, str) and len(row) < MAX_SHOWN_LINE + 40
  assert labels == {'a.png': 'cat', 'b.png': 'dog'}
  info = read_info(tmp_path / 'out')
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (5, 2, 3)


def test_a_long_first_jsonl_line_does_not_stop_the_launcher(tmp_path):
  _images(tmp_path)
  path = tmp_path / 'm.jsonl'
  path.write_text(json.dumps({'image': HUGE, 'label': 'cat'}) + '\n'
                  + json.dumps({'image': 'a.png', 'label': 'cat'}) + '\n')
  code, rejected, labels = _convert(path, tmp_path / 'out')
  assert code == EXIT_OK
  assert {line: (stage, code) for line, (stage, code, _, _) in rejected.items()} == {
      1: ('manifest', 'line_too_long')}
  assert labels == {'a.png': 'cat'}


def test_a_parquet_string_cell_over_the_cap_is_field_too_long(tmp_path):
  _images(tmp_path)
  path = tmp_path / 'm.parquet'
  pq.write_table(pa.table({'image': ['a.png', LONG, 'b.png'], 'label': ['cat', 'cat', 'dog']}),
                 path)
  code, rejected, labels = _convert(path, tmp_path / 'out')
  assert code == EXIT_OK
  [(line, (stage, code, _, row))] = rejected.items()
  assert (line, stage, code) == (1, 'manifest', 'field_too_long')
  assert row == {'image': 'x' * MAX_SHOWN_LINE + f'... ({len(LONG)} characters)',
                 'label': 'cat'}
  assert labels == {'a.png': 'cat', 'b.png': 'dog'}


@pytest.mark.parametrize('fmt, line', [
    ('csv', b'a.png\x00,cat'),
    ('tsv', b'a\x00.png\tcat'),
    ('txt', b'a.png\x00x cat'),
    ('jsonl', b'{"image": "a.png\\u0000x", "label": "cat"}'),
])
def test_a_nul_in_an_image_path_is_bad_value_at_parse_time(fmt, line):
  config = manifest.ManifestConfig(path='m.' + fmt, fmt=fmt, header=('image', 'label'))
  with pytest.raises(RowError) as error:
    manifest.row_from_fields(manifest.line_fields(line, 2, config), config, 2)
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'manifest', 'bad_value', "column 'image' holds a NUL byte: no file name can")


def test_a_carriage_return_in_an_unquoted_csv_field_says_to_quote_it():
  """csv's own message asked 'do you need to open the file in
  universal-newline mode?', which a manifest's author cannot act on; quoted,
  the same name is read."""
  config = manifest.ManifestConfig(path='m.csv', fmt='csv', header=('image', 'label'))
  with pytest.raises(RowError) as error:
    manifest.line_fields(b'dog/cr\rx.jpg,dog', 2, config)
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'manifest', 'bad_quoting', 'CSV line does not parse: a carriage return (\\r) in a '
      'field that is not quoted: quote the field ("...") or remove the \\r')
  assert manifest.line_fields(b'"dog/cr\rx.jpg",dog', 2, config) == {
      'image': 'dog/cr\rx.jpg', 'label': 'dog'}


@pytest.mark.parametrize('fmt', ['csv', 'jsonl', 'parquet'])
def test_a_nul_in_an_image_path_rejects_its_row_not_the_job(tmp_path, fmt):
  _images(tmp_path)
  rows = [('a.png', 'cat'), ('a.png\x00', 'cat'), ('b.png\x00x', 'dog'), ('b.png', 'dog')]
  path = tmp_path / f'm.{fmt}'
  if fmt == 'parquet':
    pq.write_table(pa.table({'image': [i for i, _ in rows], 'label': [lb for _, lb in rows]}),
                   path)
  elif fmt == 'jsonl':
    path.write_text(''.join(json.dumps({'image': i, 'label': lb}) + '\n' for i, lb in rows))
  else:
    path.write_text('image,label\n' + ''.join(f'{i},{lb}\n' for i, lb in rows))
  code, rejected, labels = _convert(path, tmp_path / 'out')
  assert code == EXIT_OK
  first = {'csv': 2, 'jsonl': 1, 'parquet': 0}[fmt]
  assert {line - first: (stage, code, reason) for line, (stage, code, reason, _)
          in rejected.items()} == {
      n: ('manifest', 'bad_value', "column 'image' holds a NUL byte: no file name can")
      for n in (1, 2)}
  assert labels == {'a.png': 'cat', 'b.png': 'dog'}
  info = read_info(tmp_path / 'out')
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (4, 2, 2)


UNSUPPORTED = '(supported: local paths, file:///, gs://, s3://, http(s)://)'
NO_PORT = 'its port is no number from 0 to 65535'


@pytest.mark.parametrize('image, path', [
    ('a.png', 'data/a.png'),
    ('gs://b/a.png', 'gs://b/a.png'),
    ('s3://b/a.png', 's3://b/a.png'),
    ('HTTPS://h/a.png', 'HTTPS://h/a.png'),
    ('file:///data/my%20photos/a.png', '/data/my photos/a.png'),
    ('file://localhost/a.png', '/a.png'),
    ('FILE:///a.png', '/a.png'),
])
def test_supported_image_paths_and_file_urls(image, path):
  assert manifest.image_path(image, 'data') == path


@pytest.mark.parametrize('image, reason', [
    ('ftp://h/a.png', f"column 'image' has an unsupported URL scheme 'ftp' {UNSUPPORTED}"),
    ('hdfs://h/a.png', f"column 'image' has an unsupported URL scheme 'hdfs' {UNSUPPORTED}"),
    ('memory://a.png', f"column 'image' has an unsupported URL scheme 'memory' {UNSUPPORTED}"),
    ('file://nas/a.png', "column 'image' is a file:// URL of the host 'nas': only this "
                         "machine's files are read (file:///absolute/path)"),
    ('file:///a%00.png', "column 'image' holds a NUL byte: no file name can"),
    ('http://[::1/a.png', "column 'image' is no URL that parses (Invalid IPv6 URL)"),
    ('HTTPS://[v6/a.png', "column 'image' is no URL that parses (Invalid IPv6 URL)"),
    ('http://host:99999/x.jpg', f"column 'image' is no URL that parses ({NO_PORT})"),
    ('http://h:secret/x.jpg', f"column 'image' is no URL that parses ({NO_PORT})"),
    ('http://[::1]:70000/x.jpg', f"column 'image' is no URL that parses ({NO_PORT})"),
    ('http:///x.jpg', "column 'image' is no URL that parses (no host)"),
    ('http://:80/x.jpg', "column 'image' is no URL that parses (no host)"),
    ('https://user:pw@/x.jpg', "column 'image' is no URL that parses (no host)"),
    ('http://ho st/x.jpg', "column 'image' is no URL that parses (a space or control "
                           "character in its host)"),
    # urlsplit drops a tab, CR or LF (a host 'host'), urllib3 refuses it
    ('http://ho\tst/x.jpg', "column 'image' is no URL that parses (a space or control "
                            "character in its host)"),
    ('https://u:p@host\r:80/x.jpg', "column 'image' is no URL that parses (a space or "
                                    "control character in its host)"),
])
def test_unsupported_image_urls_are_bad_value_with_the_supported_list(image, reason):
  with pytest.raises(RowError) as error:
    manifest.image_path(image, 'data')
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'manifest', 'bad_value', reason)


def test_unsupported_schemes_reject_their_rows_and_file_urls_convert(tmp_path):
  _images(tmp_path)
  (tmp_path / 'my photos').mkdir()
  write_image(tmp_path / 'my photos' / 'c.png', (0, 255, 0))
  folder = tmp_path.as_posix()
  rows = [('a.png', 'cat'), ('ftp://127.0.0.1/x.png', 'cat'), ('hdfs://x/y.png', 'cat'),
          ('memory://x.png', 'cat'), ('file://nas/x.png', 'cat'),
          (f'file://{folder}/b.png', 'dog'),
          (f'file://localhost{folder.replace(" ", "%20")}/my%20photos/c.png', 'bird')]
  path = tmp_path / 'm.jsonl'
  path.write_text(''.join(json.dumps({'image': i, 'label': lb}) + '\n' for i, lb in rows))
  code, rejected, labels = _convert(path, tmp_path / 'out')
  assert code == EXIT_OK
  assert {line: (stage, code, reason) for line, (stage, code, reason, _)
          in rejected.items()} == {
      2: ('manifest', 'bad_value', f"column 'image' has an unsupported URL scheme 'ftp' {UNSUPPORTED}"),
      3: ('manifest', 'bad_value', f"column 'image' has an unsupported URL scheme 'hdfs' {UNSUPPORTED}"),
      4: ('manifest', 'bad_value',
          f"column 'image' has an unsupported URL scheme 'memory' {UNSUPPORTED}"),
      5: ('manifest', 'bad_value', "column 'image' is a file:// URL of the host 'nas': only "
                                   "this machine's files are read (file:///absolute/path)")}
  assert labels == {'a.png': 'cat', rows[5][0]: 'dog', rows[6][0]: 'bird'}  # keys as written


@pytest.mark.parametrize('image', ['http://h:/a.png', 'HTTP://[::1]:65535/a.png',
                                   'https://u:p@h:0/a.png', 'http://h/a%09b.png?q=\t#x y'])
def test_parseable_http_urls_are_no_bad_value(image):
  assert manifest.image_path(image, 'data') == image


def test_http_urls_with_a_bad_port_or_no_host_reject_their_rows_before_any_fetch(tmp_path):
  _images(tmp_path)
  rows = [('a.png', 'cat'), ('http://host:99999/x.jpg', 'cat'), ('http:///x.jpg', 'cat'),
          ('https://u:pw@/x.jpg', 'cat'), ('b.png', 'dog')]
  path = tmp_path / 'm.csv'
  path.write_text('image,label\n' + ''.join(f'{i},{lb}\n' for i, lb in rows))
  code, rejected, labels = _convert(path, tmp_path / 'out', '--http_retries', '0')
  assert code == EXIT_OK
  assert {line: (stage, code, reason) for line, (stage, code, reason, _)
          in rejected.items()} == {
      3: ('manifest', 'bad_value', f"column 'image' is no URL that parses ({NO_PORT})"),
      4: ('manifest', 'bad_value', "column 'image' is no URL that parses (no host)"),
      5: ('manifest', 'bad_value', "column 'image' is no URL that parses (no host)")}
  assert 'pw' not in (tmp_path / 'out' / 'rejected.jsonl').read_text()
  assert labels == {'a.png': 'cat', 'b.png': 'dog'}
  info = read_info(tmp_path / 'out')
  assert (info['num_examples'], info['num_rejected']) == (2, 3)


def test_a_jsonl_image_that_is_no_string_is_a_bad_value_not_a_missing_file(tmp_path):
  _images(tmp_path)
  write_image(tmp_path / '12', (0, 255, 0), fmt='PNG')  # a file the number's text names
  cells = [12, 1.5, ['a.png'], {'path': 'a.png'}, True]
  lines = [json.dumps({'image': 'a.png', 'label': 'cat'})]
  lines += [json.dumps({'image': cell, 'label': 'cat'}) for cell in cells]
  lines += [json.dumps({'image': None, 'label': 'cat'}), json.dumps({'image': 'b.png',
                                                                     'label': 'dog'})]
  path = tmp_path / 'm.jsonl'
  path.write_text('\n'.join(lines) + '\n')
  code, rejected, labels = _convert(path, tmp_path / 'out')
  assert code == EXIT_OK
  shown = ['12', '1.5', "['a.png']", "{'path': 'a.png'}", 'True']
  assert {line: (stage, code, reason) for line, (stage, code, reason, _) in rejected.items()} == {
      **{line: ('manifest', 'bad_value',
                f"column 'image' must be a string (a path or URL), not {text}")
         for line, text in enumerate(shown, start=2)},
      7: ('manifest', 'empty_image', "column 'image' is empty")}  # null: an empty cell
  assert rejected[2][3] == {'image': 12, 'label': 'cat'}
  assert labels == {'a.png': 'cat', 'b.png': 'dog'}
  info = read_info(tmp_path / 'out')
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (8, 2, 6)
  assert info['rejected_by_reason'] == {'manifest/bad_value': 5, 'manifest/empty_image': 1}
  # A CSV cell is text: `12` names the file 12, as before.
  (tmp_path / 'm.csv').write_text('image,label\n12,cat\nb.png,dog\n')
  code, rejected, labels = _convert(tmp_path / 'm.csv', tmp_path / 'csv')
  assert (code, rejected, labels) == (EXIT_OK, {}, {'12': 'cat', 'b.png': 'dog'})


def test_a_jsonl_row_naming_a_member_twice_is_bad_json_not_its_last_value(tmp_path):
  """json.loads keeps the last of two members of one name: the row with two
  labels became a dog, the one with two images the second image, without a
  word (a CSV header naming a column twice is refused). Each is rejected
  alone; rows whose only other colons are in a URL or a nested value still
  convert."""
  _images(tmp_path)
  lines = ['{"image": "a.png", "label": "cat"}',
           '{"image": "a.png", "label": "cat", "key": "k2", "label": "dog"}',
           '{"image": "a.png", "image": "b.png", "label": "cat", "key": "k3"}',
           '{"image": "a.png", "label": "cat", "key": "k4", "w": {"x": 1, "x": 2}}',
           '{"image": "b.png", "label": "dog", "note": "a:b:c", "w": {"x": 1}}']
  path = tmp_path / 'm.jsonl'
  path.write_text('\n'.join(lines) + '\n')
  code, rejected, labels = _convert(path, tmp_path / 'out')
  assert code == EXIT_OK
  twice = 'line is not usable JSON: member {!r} is given twice (which value is meant?)'
  assert {line: (stage, code, reason) for line, (stage, code, reason, _) in rejected.items()} == {
      2: ('manifest', 'bad_json', twice.format('label')),
      3: ('manifest', 'bad_json', twice.format('image')),
      4: ('manifest', 'bad_json', twice.format('x'))}
  assert rejected[2][3] == lines[1]  # the raw line: no value of its own wins
  assert labels == {'a.png': 'cat', 'b.png': 'dog'}
  info = read_info(tmp_path / 'out')
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (5, 2, 3)


def test_a_jsonl_image_manifest_of_a_join_refuses_a_number_too():
  config = manifest.ManifestConfig(path='i.jsonl', fmt='jsonl', role=manifest.ROLE_IMAGES)
  with pytest.raises(RowError) as error:
    manifest.row_from_fields({'key': 7, 'image': 7}, config, 1)
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'manifest', 'bad_value', "column 'image' must be a string (a path or URL), not 7")
  assert manifest.row_from_fields({'key': 7, 'image': 'a.png'}, config, 1).key == '7'


def test_a_header_without_the_columns_is_quoted_cut_short(tmp_path, capsys):
  """A one-column file whose first line is 100,000 characters (a binary file,
  a manifest of one long field) was quoted whole: a 100 KB error line.
  Its columns are named up to 20 of them, each up to 60 characters."""
  wide = tmp_path / 'wide.csv'
  wide.write_text('D' * 100_000 + '\n0.png,a\n')
  many = tmp_path / 'many.csv'
  many.write_text(','.join(f'c{i}' for i in range(25)) + '\n' + ','.join('x' * 25) + '\n')
  for path in (wide, many):
    assert convert.main(['--manifest', str(path), '--output_dir', str(tmp_path / 'out'),
                         *FLAGS]) == 2
  assert capsys.readouterr().err.splitlines() == [
      f'error: manifest {wide} has no column(s) image, label (its columns: {"D" * 60}... '
      '(100000 characters))',
      f'error: manifest {many} has no column(s) image, label (its columns: '
      f'{", ".join(f"c{i}" for i in range(20))}, ... (25 in all))']
  assert not (tmp_path / 'out').exists()
