"""inspect on hostile data: labels and keys holding HTML, bidi and zero-width
characters, 300-character and Cyrillic names; a detection image of 150
objects and 1-pixel boxes; an export folder that cannot be written; a split
of no shard."""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline import look
from pipeline.looking import look_detection
from pipeline.looking import report
from tests.test_hostile_sources import fifo_writer_that_unblocks_readers

LABELS = ('<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', 'a &amp; b',
          'abc\u202eevil.exe', 'zero\u200bwidth', 'L' * 300, *[f'c{i}' for i in range(6)])
# Marks <body data-wrapped="N">: how many cells of numbers take more than one line.
COUNT_WRAPPED = """<script>window.addEventListener('load', function () {
  var cells = document.querySelectorAll('td[data-col="id"], td[data-col$="examples"]');
  var range = document.createRange();
  document.body.dataset.wrapped = Array.prototype.filter.call(cells, function (cell) {
    range.selectNodeContents(cell);
    return range.getClientRects().length > 1;
  }).length;
});</script>"""


def run_inspect(argv) -> tuple:
  stdout = io.StringIO()
  with contextlib.redirect_stdout(stdout):
    code = look.main(argv)
  return code, stdout.getvalue()


@pytest.fixture(scope='module')
def hostile(tmp_path_factory):
  """12 images, one per class, whose labels and keys hold HTML, U+202E, U+200B, 300
  characters."""
  root = tmp_path_factory.mktemp('hostile')
  lines = []
  for i in range(12):
    pixels = np.full((12, 16, 3), (20 * i, 100, 200), np.uint8)
    Image.fromarray(pixels).save(root / f'{i}.png')
    lines.append(json.dumps({'image': f'{i}.png', 'label': LABELS[i % len(LABELS)],
                             'key': f'<b>k{i}</b>\u202e'}))
  (root / 'm.jsonl').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  out = root / 'out'
  assert convert.main(['--manifest', str(root / 'm.jsonl'), '--output_dir', str(out),
                       '--height', '12', '--width', '16', '--progress', 'off']) == 0
  code, printed = run_inspect(['--input_dir', str(out), '--export_dir', str(root / 'look')])
  assert code == 0
  return out, root / 'look', printed


def test_data_on_the_page_is_escaped_and_invisible_characters_are_written_out(hostile):
  _, look_dir, printed = hostile
  page = (look_dir / 'report.html').read_text(encoding='utf-8')
  assert page.count('<script') == 1  # the page's own
  assert len(re.findall('<img', page)) == 2  # the histogram and train's sheet, nothing else
  assert '&lt;script&gt;alert(1)&lt;/script&gt;' in page
  assert '&quot;&gt;&lt;img src=x onerror=alert(1)&gt;' in page
  assert 'a &amp;amp; b' in page
  # U+202E showed 'abc<U+202E>evil.exe' as 'abcexe.live'; U+200B was not seen
  assert '\u202e' not in page and '\u200b' not in page
  assert 'abc&lt;U+202E&gt;evil.exe' in page and 'zero&lt;U+200B&gt;width' in page
  assert '&lt;b&gt;k0&lt;/b&gt;&lt;U+202E&gt;' in page
  assert 'http://' not in page and 'https://' not in page
  # the terminal: a U+202E turned the counts after it around
  assert '\u202e' not in printed and '\u200b' not in printed
  row = next(line for line in printed.splitlines() if 'evil.exe' in line)
  assert row.split()[1:] == ['abc<U+202E>evil.exe', '1', '1']
  # samples.csv keeps the data as it is
  with open(look_dir / 'samples.csv', newline='', encoding='utf-8') as handle:
    texts = {row['class_text'] for row in csv.DictReader(handle)}
  assert set(LABELS) <= texts


@pytest.mark.slow
@pytest.mark.integration  # a real client (Chromium)
@pytest.mark.skipif(shutil.which('chromium') is None, reason='needs Debian chromium')
def test_a_300_character_label_does_not_widen_the_page(hostile, tmp_path):
  """It pushed the count columns out of a 1200-pixel window (2,700 pixels wide);
  the numbers stay on one line (ids 10 and 11 among them)."""
  _, look_dir, _ = hostile
  page = tmp_path / 'report.html'
  page.write_text((look_dir / 'report.html').read_text(encoding='utf-8').replace(
      '</body>', COUNT_WRAPPED + '</body>'), encoding='utf-8')
  done = subprocess.run(
      ['chromium', '--headless', '--no-sandbox', '--disable-gpu',
       f'--user-data-dir={tmp_path / "profile"}', '--virtual-time-budget=5000',
       '--window-size=1200,2000', '--dump-dom', page.as_uri()],
      capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  body = re.search(r'<body([^>]*)>', done.stdout).group(1)
  assert 'data-images-broken="0"' in body
  width = int(re.search(r'data-page-width="(\d+)"', body).group(1))
  assert 0 < width <= 1200
  assert 'data-wrapped="0"' in body


def test_inspect_with_a_home_it_cannot_write_prints_no_matplotlib_warnings(hostile, tmp_path):
  """HOME read-only or not a folder (a CI runner, a container user): matplotlib
  warned 'mkdir -p failed for path .../.config/matplotlib' and 'Matplotlib
  created a temporary cache directory ...' on stderr of a run that went well,
  then removed that folder at exit."""
  out, _, _ = hostile
  home = tmp_path / 'home'
  home.write_bytes(b'')  # a file: no folder can be made in it, even by root
  env = {k: v for k, v in os.environ.items()
         if k not in ('MPLCONFIGDIR', 'XDG_CONFIG_HOME', 'XDG_CACHE_HOME')}
  env.update(HOME=str(home), PYTHONPATH=str(pathlib.Path(__file__).resolve().parent.parent))
  done = subprocess.run([sys.executable, '-m', 'pipeline.look', '--input_dir', str(out),
                         '--export_dir', str(tmp_path / 'look')],
                        capture_output=True, text=True, env=env, timeout=300)
  assert (done.returncode, done.stderr) == (0, '')
  assert (tmp_path / 'look' / 'label_histogram.png').is_file()


def test_histogram_names_are_shortened_and_inside_the_picture():
  """A 300-character name pushed every bar out of the figure."""
  figure = report.histogram_figure({'train': {0: 3, 1: 1}}, ['L' * 300, 'cat\u202e'])
  figure.canvas.draw()
  ticks = figure.axes[0].get_xticklabels()
  assert [t.get_text() for t in ticks] == ['L' * 19 + '…', 'cat<U+202E>']
  box = figure.bbox
  for tick in ticks:
    extent = tick.get_window_extent()
    assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0, tick


def test_an_emoji_in_a_class_name_raises_no_warning():
  """matplotlib's font has no emoji: 4 lines of UserWarning on inspect's stderr."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    png = report.figure_png(report.histogram_figure({'train': {0: 2}}, ['🐱 cat 🐶']))
  assert png.startswith(b'\x89PNG') and [str(w.message) for w in caught] == []


def test_captions_in_cyrillic_are_drawn_letter_by_letter():
  """Pillow's own font drew every Cyrillic letter as the same empty box: 'кот'
  and 'пёс' were one caption."""
  image = np.full((32, 32, 3), 128, np.uint8)
  sheet = np.asarray(report.contact_sheet([
      report.Sample('train', 's', n, 'k', None, text, image) for n, text in
      enumerate(['кот', 'пёс'])]), np.int32)
  cell_w = report.THUMBNAIL + 8
  caption = slice(4 + report.THUMBNAIL + 2, 4 + report.THUMBNAIL + 2 + report.LINE_HEIGHT)
  first, second = sheet[caption, 4:4 + 60], sheet[caption, cell_w + 4:cell_w + 4 + 60]
  assert (first < 128).any() and (second < 128).any()
  assert (first != second).any()


def _label_pixels(picture: Image.Image, rows: slice, columns: slice, label: int) -> int:
  pixels = np.asarray(picture)[rows, columns]
  return int((pixels == look_detection.colour(label)).all(axis=-1).sum())


def test_box_names_stay_inside_the_picture_and_are_shortened():
  black = Image.new('RGB', (300, 100))
  # a box at the right edge: its name was cut off by the edge, now it is moved left
  drawn = look_detection.draw_objects(
      black, (np.array([[0.5, 0.9, 1.0, 1.0]]), [3], ['person'], None))
  assert _label_pixels(drawn, slice(30, 50), slice(0, 269), 3) > 20  # the box starts at 270
  # a 300-character name ran across the whole picture
  drawn = look_detection.draw_objects(
      black, (np.array([[0.5, 0.0, 1.0, 0.1]]), [2], ['C' * 300], None))
  assert _label_pixels(drawn, slice(30, 50), slice(0, 100), 2) > 200
  assert _label_pixels(drawn, slice(30, 50), slice(200, 300), 2) == 0


def test_a_box_under_a_pixel_wide_is_drawn():
  """A 1-pixel COCO box on a thumbnail: Pillow raised 'x1 must be greater than or equal to x0'."""
  drawn = look_detection.draw_objects(
      Image.new('RGB', (64, 64)), (np.array([[0.5, 0.5, 0.505, 0.505]]), [1], ['dot'], None))
  assert tuple(np.asarray(drawn)[32, 32]) == look_detection.colour(1)


def test_an_image_of_150_objects_is_exported_under_a_file_name_that_fits(tmp_path):
  """'3_Label_1+2+3+4+...' of 150 ids: OSError 'File name too long' ended the export."""
  (tmp_path / 'images').mkdir()
  Image.new('RGB', (300, 300), (90, 120, 90)).save(tmp_path / 'images' / 'many.png')
  Image.new('RGB', (200, 100), (40, 40, 40)).save(tmp_path / 'images' / 'dot.png')
  annotations = [{'id': k + 1, 'image_id': 1, 'category_id': 1 + k % 4, 'area': 300,
                  'bbox': [(k % 15) * 20, (k // 15) * 30, 15, 20], 'iscrowd': 0}
                 for k in range(150)]
  annotations.append({'id': 200, 'image_id': 2, 'category_id': 4, 'bbox': [100, 50, 1, 1],
                      'area': 1, 'iscrowd': 0})
  (tmp_path / 'instances.json').write_text(json.dumps({
      'images': [{'id': 1, 'file_name': 'many.png', 'width': 300, 'height': 300},
                 {'id': 2, 'file_name': 'dot.png', 'width': 200, 'height': 100}],
      'annotations': annotations,
      'categories': [{'id': i, 'name': f'c{i}'} for i in range(1, 5)]}))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'instances.json'),
                       '--annotation_format', 'coco', '--image_dir', str(tmp_path / 'images'),
                       '--output_dir', str(out), '--progress', 'off']) == 0
  code, _ = run_inspect(['--input_dir', str(out), '--export_dir', str(tmp_path / 'look')])
  assert code == 0
  with open(tmp_path / 'look' / 'samples.csv', newline='') as handle:
    rows = {row['key']: row for row in csv.DictReader(handle)}
  ids = '+'.join(str(1 + k % 4) for k in range(150))
  assert rows['many.png']['label'] == ids
  name = rows['many.png']['file']
  assert len(name) <= 255 and name.endswith('+more.jpg') and (tmp_path / 'look' / name).exists()
  kept = name.split('_Label_', 1)[1][:-len('+more.jpg')]
  assert ids.startswith(kept + '+') and len(kept) > 200
  assert rows['dot.png']['file'].endswith('_Label_4.jpg')


def test_an_export_file_that_cannot_be_written_is_one_line_and_exit_2(hostile, tmp_path, capsys):
  out, _, _ = hostile
  (tmp_path / 'look' / 'samples.csv').mkdir(parents=True)  # a folder in the file's place
  assert look.main(['--input_dir', str(out), '--export_dir', str(tmp_path / 'look')]) == 2
  err = capsys.readouterr().err
  assert err == (f'error: --export_dir {tmp_path / "look"}: cannot write samples.csv: '
                 'Is a directory\n')


def test_the_first_record_comes_from_the_first_split_holding_one(hostile, tmp_path):
  """A split of no shard listed first: no first record was printed."""
  out, _, _ = hostile
  copy = tmp_path / 'copy'
  shutil.copytree(out, copy)
  info = json.loads((copy / 'dataset_info.json').read_text())
  info['splits'] = {'test': {'num_examples': 0, 'num_bytes': 0, 'shards': []},
                    **info['splits']}
  (copy / 'dataset_info.json').write_text(json.dumps(info))
  code, printed = run_inspect(['--input_dir', str(copy)])
  assert code == 0
  assert f'First record of {info["splits"]["train"]["shards"][0]}:' in printed
  assert 'image/class/label    int64_list' in printed
  assert os.listdir(copy) == os.listdir(out)


def test_the_rejected_lines_shown_skip_lines_not_utf8_not_objects_or_too_long(tmp_path):
  """inspect --export_dir read rejected.jsonl as text, whole lines: a byte
  that is not UTF-8 was a UnicodeDecodeError, a line `5` an AttributeError,
  and a 2 GB line (sparse) a MemoryError, each a traceback. Now such lines are
  skipped (a longer one read a MiB at a time), as a cut-off last line was."""
  good = [json.dumps({'stage': 'read', 'code': 'missing_file', 'line': n}) for n in (1, 5)]
  (tmp_path / 'rejected.jsonl').write_bytes(b'\n'.join([
      good[0].encode(), b'\xff\xfe{"stage": "read"}', b'5', b'"x' + b'x' * (3 << 20) + b'"',
      good[1].encode(), b'{"stage": "read", "co']))
  counts, first = look.rejected_summary(str(tmp_path), {
      'rejected_by_reason': {'read/missing_file': 2}}, [])
  assert counts == [('read', 'missing_file', 2)]
  assert first == {('read', 'missing_file'): good}


def _page_of(out, tmp_path, report_bytes: bytes) -> tuple:
  """inspect --export_dir of a copy of `out` whose validation_report.json holds report_bytes."""
  copy = tmp_path / 'copy'
  shutil.copytree(out, copy)
  (copy / 'validation_report.json').write_bytes(report_bytes)
  code, printed = run_inspect(['--input_dir', str(copy), '--export_dir', str(tmp_path / 'look')])
  return code, printed, (tmp_path / 'look' / 'report.html').read_text(encoding='utf-8')


def test_a_validation_report_holding_html_is_escaped_on_the_page(hostile, tmp_path):
  """Its num_examples and num_problems went onto the page unescaped: a
  validation_report.json shipped with a dataset ran its <script> when the
  page was opened (headless Chromium hung on the alert)."""
  out, _, _ = hostile
  code, _, page = _page_of(out, tmp_path, json.dumps({
      'valid': False, 'num_examples': '<script>alert(1)</script>',
      'num_problems': '<img src=x onerror=alert(2)>',
      'problems_by_kind': {'<b>kind</b>': 1}, 'problems': [{'detail': '</pre><i>'}]}).encode())
  assert code == 0
  assert page.count('<script') == 1  # the page's own
  assert len(re.findall('<img', page)) == 2  # the histogram and train's sheet
  assert '<b>' not in page and '<i>' not in page
  verdict = re.search(r'<p id="verdict"[^>]*>(.*?)</p>', page).group(1)
  assert verdict == ('PROBLEMS FOUND: &lt;script&gt;alert(1)&lt;/script&gt; examples read, '
                     '&lt;img src=x onerror=alert(2)&gt; problems; 0 rejected row(s) '
                     '(details below).')
  assert '<td data-col="kind">&lt;b&gt;kind&lt;/b&gt;</td><td data-col="count">1</td>' in page


@pytest.mark.parametrize('content, why', [
    (b'{"valid": tr', 'cannot be read: Expecting value: line 1 column 11 (char 10)'),
    (b'\xff{"valid": true}', "cannot be read: 'utf-8' codec can't decode byte 0xff in "
                             'position 0: invalid start byte'),
    (b'[1, 2]', 'holds no JSON object'),
])
def test_an_unreadable_validation_report_is_said_on_the_page_not_a_traceback(
    hostile, tmp_path, content, why):
  """A validation_report.json cut short (or not UTF-8, or no object) ended
  inspect --export_dir in a traceback, exit 1, with no report.html."""
  out, _, _ = hostile
  code, printed, page = _page_of(out, tmp_path, content)
  assert code == 0
  assert f'Not shown: validation_report.json {why} (run img2tfrecord validate again)' in (
      printed.splitlines())
  assert re.search(r'<p id="verdict"[^>]*>(.*?)</p>', page).group(1) == (
      f'validation_report.json {html.escape(why)}; 0 rejected row(s).')
  assert f'<p id="validation" class="bad">validation_report.json {html.escape(why)}.</p>' in page
  assert len(list((tmp_path / 'look').glob('*_Label_*.jpg'))) == 12


def test_a_folder_or_fifo_in_a_shards_place_is_skipped_not_a_traceback(hostile, tmp_path):
  """dataset.open_binary refuses them with a ShardError, which inspect did not
  catch: a traceback and exit 1 (a missing shard was already a Skipped line)."""
  out, _, _ = hostile
  copy = tmp_path / 'copy'
  shutil.copytree(out, copy)
  shard = json.loads((copy / 'dataset_info.json').read_text())['splits']['train']['shards'][0]
  (copy / shard).unlink()
  (copy / shard).mkdir()
  code, printed = run_inspect(['--input_dir', str(copy), '--export_dir', str(tmp_path / 'look')])
  assert code == 0
  assert (f'Skipped train: {shard}: {copy / shard} is a folder, not a regular file: not read'
          in printed.splitlines())
  assert '  (no readable record)' in printed.splitlines()
  with open(tmp_path / 'look' / 'samples.csv', newline='') as handle:
    assert list(csv.DictReader(handle)) == []
  assert 'is a folder, not a regular file' in (tmp_path / 'look' / 'report.html').read_text()
  # --files matching a FIFO beside a readable file: the FIFO said, the file listed
  foreign = tmp_path / 'foreign'
  foreign.mkdir()
  os.mkfifo(foreign / 'b.tfrecord')
  shutil.copy(next(p for p in out.glob('*.tfrecord')), foreign / 'a.tfrecord')
  code, printed = run_inspect(['--files', str(foreign / '*.tfrecord')])
  assert code == 0
  lines = printed.splitlines()
  assert lines[0] == f'{foreign / "a.tfrecord"}:' and lines[1] == '  record 0:'
  assert f'{foreign / "b.tfrecord"}:' in lines
  assert lines[-1] == (f'Skipped b.tfrecord: {foreign / "b.tfrecord"} is a FIFO (named pipe), '
                       'not a regular file: not read')


@pytest.mark.parametrize('name', ['rejected.jsonl', 'validation_report.json'])
def test_a_side_file_that_is_a_fifo_or_folder_is_said_unopened(hostile, tmp_path, name):
  """inspect --export_dir opened rejected.jsonl and validation_report.json
  as they were: a FIFO waited for a writer for ever, a folder was a
  traceback (rejected.jsonl). Both are now refused unopened and said."""
  out, _, _ = hostile
  for kind in ('FIFO (named pipe)', 'folder'):
    copy = tmp_path / kind[:4] / 'copy'
    shutil.copytree(out, copy)
    info = json.loads((copy / 'dataset_info.json').read_text())
    info['rejected_by_reason'] = {'read/missing_file': 2}  # rejected.jsonl is read then
    (copy / 'dataset_info.json').write_text(json.dumps(info))
    (copy / name).unlink(missing_ok=True)
    look_dir = tmp_path / kind[:4] / 'look'
    with (fifo_writer_that_unblocks_readers(copy / name) if kind == 'FIFO (named pipe)'
          else contextlib.nullcontext([])) as unblocked:
      if kind == 'folder':
        (copy / name).mkdir()
      code, printed = run_inspect(['--input_dir', str(copy), '--export_dir', str(look_dir)])
    assert not unblocked  # never opened
    assert code == 0
    said = f'{copy / name} is a {kind}, not a regular file: not read'
    line = (f'Skipped rejected.jsonl: {said}' if name == 'rejected.jsonl' else
            f'Not shown: validation_report.json cannot be read: {said} '
            '(run img2tfrecord validate again)')
    assert line in printed.splitlines()
    page = (look_dir / 'report.html').read_text(encoding='utf-8')
    assert html.escape(said) in page
    assert '<td data-col="code">missing_file</td><td data-col="count">2</td>' in page


def test_control_characters_of_coco_class_names_are_written_out(tmp_path):
  """convert keeps a COCO category name holding ESC, BEL or a backspace (it
  refuses line breaks and tabs); inspect printed them raw: 'b<BEL>x<BS>y'
  showed as 'by' and an ESC sequence coloured the rest of the table."""
  (tmp_path / 'images').mkdir()
  Image.new('RGB', (40, 30), (90, 120, 90)).save(tmp_path / 'images' / 'a.png')
  (tmp_path / 'instances.json').write_text(json.dumps({
      'images': [{'id': 1, 'file_name': 'a.png', 'width': 40, 'height': 30}],
      'annotations': [{'id': n, 'image_id': 1, 'category_id': n, 'bbox': [0, 0, 10, 10],
                       'area': 100, 'iscrowd': 0} for n in (1, 2)],
      'categories': [{'id': 1, 'name': 'b\x07x\x08y'}, {'id': 2, 'name': 'r\x1b[31mR'}]}))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'instances.json'),
                       '--annotation_format', 'coco', '--image_dir', str(tmp_path / 'images'),
                       '--output_dir', str(out), '--progress', 'off']) == 0
  assert json.loads((out / 'dataset_info.json').read_text())['label_map'][1:] == [
      'b\x07x\x08y', 'r\x1b[31mR']
  code, printed = run_inspect(['--input_dir', str(out), '--export_dir', str(tmp_path / 'look')])
  assert code == 0
  assert not re.search('[\x00-\x09\x0b-\x1f\x7f]', printed)
  rows = [line.split() for line in printed.splitlines() if line.startswith('     ')]
  assert rows[:2] == [['1', 'b<U+0007>x<U+0008>y', '1', '1'],
                      ['2', 'r<U+001B>[31mR', '1', '1']]
  page = (tmp_path / 'look' / 'report.html').read_text(encoding='utf-8')
  assert not re.search('[\x00-\x08\x0b-\x1f\x7f]', page)
  assert '<td data-col="class">b&lt;U+0007&gt;x&lt;U+0008&gt;y</td>' in page
  assert ('<td data-col="class_text">b&lt;U+0007&gt;x&lt;U+0008&gt;y, '
          'r&lt;U+001B&gt;[31mR</td>') in page
  with open(tmp_path / 'look' / 'samples.csv', newline='', encoding='utf-8') as handle:
    assert [row['class_text'] for row in csv.DictReader(handle)] == [
        'b\x07x\x08y, r\x1b[31mR']  # kept as it is, as every label is there


def test_the_skipped_lines_on_the_page_keep_their_line_breaks():
  page = report.report_html(
      title='t', splits=[], class_rows=[], class_headers=['id'], image_spec={},
      feature_spec={}, histogram_png=b'', sheets={}, samples_rows=[], rejected=[],
      rejected_lines={}, validation=None, skipped=['a: one', 'b: <two>'], notes=[])
  assert '<pre id="skipped">a: one\nb: &lt;two&gt;</pre>' in page


def test_a_gzip_shard_of_damaged_deflate_data_is_skipped_not_a_traceback(hostile, tmp_path):
  """gzip raises zlib.error (no OSError) on deflate data that does not
  decode: inspect ended in that traceback, exit 1, as --files did."""
  out, _, _ = hostile
  gz = tmp_path / 'gz'
  assert convert.main(['--manifest', str(out.parent / 'm.jsonl'), '--output_dir', str(gz),
                       '--height', '12', '--width', '16', '--compression', 'gzip',
                       '--progress', 'off']) == 0
  shard = json.loads((gz / 'dataset_info.json').read_text())['splits']['train']['shards'][0]
  data = bytearray((gz / shard).read_bytes())
  data[10] = 0xff  # the first deflate block's type: 3, which does not exist
  (gz / shard).write_bytes(bytes(data))
  why = 'damaged gzip data: Error -3 while decompressing data: invalid block type'
  code, printed = run_inspect(['--input_dir', str(gz), '--export_dir', str(tmp_path / 'look')])
  assert code == 0
  assert f'Skipped train: {shard}: {why}' in printed.splitlines()
  assert f'{shard}: {why}' in (tmp_path / 'look' / 'report.html').read_text(encoding='utf-8')
  (tmp_path / 'foreign.tfrecord').write_bytes(bytes(data))  # no .gz: told by content
  code, printed = run_inspect(['--files', str(tmp_path / 'foreign.tfrecord')])
  assert code == 0
  assert printed.splitlines() == [f'{tmp_path / "foreign.tfrecord"}:',
                                  f'Skipped foreign.tfrecord: {why}']


def test_foreign_16_bit_and_transparent_pngs_are_exported_as_convert_sees_them(tmp_path):
  """--files decoded PNGs with Pillow's plain convert: a 16-bit grey PNG was
  clipped at 255 (a gradient up to 65535 came out almost all white; with
  --channels 1 its values wrapped around), transparent pixels showed the
  colour under them. Now: scaled to 8 bits, composited over white, as convert."""
  from transforms.core.example_proto import serialize_example
  from transforms.core.tfrecord import frame

  def png(picture):
    buffer = io.BytesIO()
    picture.save(buffer, 'PNG')
    return buffer.getvalue()

  levels = np.tile(np.arange(0, 256, 16, dtype=np.uint16) * 257, (4, 1))  # 0..65535
  deep = Image.fromarray(levels)
  assert deep.mode == 'I;16'
  clear = np.zeros((4, 16, 4), np.uint8)
  clear[:, :8] = (10, 200, 30, 255)  # the right half transparent black
  with open(tmp_path / 'f.tfrecord', 'wb') as handle:
    for label, data in enumerate([png(deep), png(Image.fromarray(clear, 'RGBA'))]):
      handle.write(frame(serialize_example({'image/encoded': ('bytes', [data]),
                                            'image/class/label': ('int64', [label])})))
  for channels in ('3', '1'):
    look_dir = tmp_path / f'look{channels}'
    code, _ = run_inspect(['--files', str(tmp_path / 'f.tfrecord'), '--channels', channels,
                           '--export_dir', str(look_dir)])
    assert code == 0
    grey = np.asarray(Image.open(look_dir / '0_Label_0.jpg').convert('L'), int)
    assert np.abs(grey[2] - np.arange(0, 256, 16)).max() <= 3  # was 0, 255, 255, ...
    rgb = np.asarray(Image.open(look_dir / '1_Label_1.jpg').convert('RGB'), int)
    assert (rgb[:, 12:] >= 250).all()  # white, not black
    if channels == '3':
      assert np.abs(rgb[:, :6] - (10, 200, 30)).max() <= 6
