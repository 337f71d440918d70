"""pipeline.look: the summary, the exported files checked for content, foreign
files, bad input (exit 2), damaged records (skipped), the page in a real browser."""

from __future__ import annotations

import csv
import gzip
import html.parser
import io
import json
import os
import pathlib
import random
import re
import shutil
import subprocess

import numpy as np
from PIL import Image
import pytest

from pipeline import cli
from pipeline import convert
from pipeline import look
from pipeline import read
from pipeline import validate
from pipeline.looking import look_sample
from pipeline.looking import report
from tests.conftest import read_info
from transforms.core.example_proto import serialize_example
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import read_records

# One worker builds the dataset and exported fixtures (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('inspect')

CLASSES = ('ant', 'bee', 'cat')
HEIGHT, WIDTH = 24, 32


def pattern(i: int) -> np.ndarray:
  y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
  planes = [x * 4 + y * 2 + 2 * i, y * 6 + 3 * i, x * 3 + 50 + i]  # smooth, all < 256
  return np.stack(planes, axis=-1).astype(np.uint8)


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
  """30 images (uneven classes: 15 ant, 10 bee, 5 cat), two splits, two rejected
  rows (a missing file, a file that is not an image), validated."""
  root = tmp_path_factory.mktemp('inspect')
  (root / 'images').mkdir()
  rows = ['image,label']
  for i in range(30):
    Image.fromarray(pattern(i)).save(root / 'images' / f'img_{i:02d}.png')
    label = CLASSES[0] if i < 15 else CLASSES[1] if i < 25 else CLASSES[2]
    rows.append(f'images/img_{i:02d}.png,{label}')
  (root / 'images' / 'text.png').write_text('not an image')
  rows += ['images/missing.png,ant', 'images/text.png,bee']
  (root / 'manifest.csv').write_text('\n'.join(rows) + '\n')
  out = root / 'out'
  assert convert.main(['--manifest', str(root / 'manifest.csv'), '--output_dir', str(out),
                       '--height', str(HEIGHT), '--width', str(WIDTH),
                       '--split', 'train=0.7,test=0.3', '--max_error_rate', '0.5']) == 0
  assert validate.main(['--input_dir', str(out)]) == 0
  return out


@pytest.fixture(scope='module')
def exported(dataset, tmp_path_factory):
  export_dir = tmp_path_factory.mktemp('export')
  code, printed = run_inspect(['--input_dir', str(dataset), '--export_dir', str(export_dir),
                               '--num', '6', '--seed', '3'])
  assert code == 0
  return export_dir, printed


def run_inspect(argv):
  stdout = io.StringIO()
  import contextlib
  with contextlib.redirect_stdout(stdout):
    code = look.main(argv)
  return code, stdout.getvalue()


def true_counts(out) -> dict:
  info = read_info(out)
  counts = {}
  for split in info['splits']:
    for example in read.examples(str(out), split, decode=False):
      counts.setdefault(split, {}).setdefault(example['label'], 0)
      counts[split][example['label']] += 1
  return counts


def record_at(out, shard: str, index: int) -> dict:
  info = read_info(out)
  split = next(s for s, d in info['splits'].items() if shard in d['shards'])
  one = {**info, 'splits': {split: {'shards': [shard]}}}
  return list(read.examples(str(out), split, info=one))[index]


def samples_csv(export_dir) -> list:
  with open(export_dir / 'samples.csv', newline='') as handle:
    return list(csv.DictReader(handle))


def test_exported_images_are_the_records_named_by_label(dataset, exported):
  export_dir, _ = exported
  rows = samples_csv(export_dir)
  info = read_info(dataset)
  assert len(rows) == 6 * len(info['splits'])
  assert [r['split'] for r in rows] == sorted((r['split'] for r in rows),
                                              key=list(info['splits']).index)
  jpgs = sorted(p.name for p in export_dir.glob('*.jpg'))
  assert jpgs == sorted(r['file'] for r in rows)
  for i, row in enumerate(rows):
    assert row['file'] == f'{i}_Label_{row["label"]}.jpg'
    record = record_at(dataset, row['shard'], int(row['record']))
    assert (row['key'], int(row['label']), row['class_text']) == (
        record['key'], record['label'], record['class_text'])
    assert row['class_text'] == CLASSES[int(row['label'])]
    exported_pixels = np.asarray(Image.open(export_dir / row['file']), np.int32)
    diff = np.abs(exported_pixels - record['image'])
    assert diff.mean() < 3 and exported_pixels.shape == (HEIGHT, WIDTH, 3), diff.mean()
    # and the record is the source image of its key
    np.testing.assert_array_equal(record['image'], pattern(int(row['key'][11:13])))


def test_samples_are_reproducible_and_change_with_the_seed(dataset, exported, tmp_path):
  export_dir, _ = exported
  assert run_inspect(['--input_dir', str(dataset), '--export_dir', str(tmp_path / 'a'),
                      '--num', '6', '--seed', '3'])[0] == 0
  assert (tmp_path / 'a' / 'samples.csv').read_text() == (export_dir / 'samples.csv').read_text()
  assert run_inspect(['--input_dir', str(dataset), '--export_dir', str(tmp_path / 'b'),
                      '--num', '6', '--seed', '4'])[0] == 0
  assert (tmp_path / 'b' / 'samples.csv').read_text() != (export_dir / 'samples.csv').read_text()


def test_per_class_takes_k_of_each_class_per_split(dataset, tmp_path):
  assert run_inspect(['--input_dir', str(dataset), '--export_dir', str(tmp_path),
                      '--per_class', '2', '--split', 'train'])[0] == 0
  rows = samples_csv(tmp_path)
  counts = true_counts(dataset)['train']
  per_label = {}
  for row in rows:
    per_label[int(row['label'])] = per_label.get(int(row['label']), 0) + 1
  assert per_label == {label: min(2, n) for label, n in counts.items()}
  assert {r['split'] for r in rows} == {'train'}


def test_reservoir_is_uniform_enough():
  seen = {}
  for seed in range(300):
    sample = look_sample.Reservoir(3, random.Random(seed))
    for item in range(10):
      sample.offer(None, item)
    for item in sample.items():
      seen[item] = seen.get(item, 0) + 1
  assert sorted(seen) == list(range(10))
  assert all(60 < n < 120 for n in seen.values()), seen  # 90 expected each


def test_summary_and_histogram_show_the_class_counts(dataset, exported):
  export_dir, printed = exported
  counts = true_counts(dataset)
  info = read_info(dataset)
  splits = list(info['splits'])
  for label, name in enumerate(CLASSES):
    per_split = [counts[s].get(label, 0) for s in splits]
    expected = [str(label), name] + [str(n) for n in per_split] + [str(sum(per_split))]
    assert any(line.split() == expected for line in printed.splitlines()), (expected, printed)
  figure = report.histogram_figure(counts, list(CLASSES))
  heights = [int(p.get_height()) for p in figure.axes[0].patches]
  assert heights == [counts[s].get(label, 0) for s in counts for label in range(3)]
  picture = Image.open(export_dir / 'label_histogram.png')
  assert picture.format == 'PNG' and picture.size[0] >= 600
  assert picture.info['Title'].startswith('Examples per class')
  # what the scan counted is what the records hold
  scanned = {s: look_sample.scan_split(str(dataset), info, s, 0, False, 0).counts for s in splits}
  assert scanned == counts


def test_contact_sheet_shows_every_sample(exported):
  export_dir, _ = exported
  rows = samples_csv(export_dir)
  sheet = np.asarray(Image.open(export_dir / 'contact_sheet.png').convert('RGB'), np.int32)
  cell_w = report.THUMBNAIL + 8
  cell_h = report.THUMBNAIL + 8 + report.CAPTION_LINES * report.LINE_HEIGHT
  columns = min(report.SHEET_COLUMNS, len(rows))
  assert sheet.shape[1] == columns * cell_w
  assert sheet.shape[0] == -(-len(rows) // columns) * cell_h
  for n, row in enumerate(rows):
    x, y = (n % columns) * cell_w + 4, (n // columns) * cell_h + 4
    # thumbnails keep the aspect ratio: 128 x 96, centred in the 128 x 128 box
    thumb = sheet[y + 16:y + 112, x:x + 128]
    source = np.asarray(Image.open(export_dir / row['file']).resize((128, 96)), np.int32)
    assert np.abs(thumb - source).mean() < 12, n
    caption = sheet[y + 128:y + cell_h - 8, x:x + 128]
    assert (caption < 128).any()  # the class text and the key are written


class _Page(html.parser.HTMLParser):
  """Table cells by table id, row and column; images."""

  def __init__(self):
    super().__init__()
    self.tables, self.images, self.body = {}, [], {}
    self._table = self._row = self._col = None

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    if tag == 'table':
      self._table = self.tables.setdefault(attrs.get('id'), {})
    elif tag == 'tr' and 'data-row' in attrs:
      self._row = self._table.setdefault(attrs['data-row'], {})
    elif tag == 'td':
      self._col = attrs.get('data-col')
      self._row[self._col] = ''
    elif tag == 'img':
      self.images.append(attrs)
    elif tag == 'body':
      self.body = attrs

  def handle_endtag(self, tag):
    if tag == 'td':
      self._col = None

  def handle_data(self, data):
    if self._col is not None:
      self._row[self._col] += data


def check_page(page: _Page, dataset, export_dir):
  info = read_info(dataset)
  for split, declared in info['splits'].items():
    assert page.tables['splits'][split] == {
        'split': split, 'examples': str(declared['num_examples']),
        'bytes': str(declared['num_bytes']), 'shards': str(len(declared['shards']))}
  counts = true_counts(dataset)
  for label, name in enumerate(info['label_map']):
    row = page.tables['classes'][str(label)]
    assert row['class'] == name
    for split in info['splits']:
      assert row[f'{split} examples'] == str(counts[split].get(label, 0))
  assert {k: json.loads(v['value']) for k, v in page.tables['image_spec'].items()} == (
      info['image'])
  assert {k: (v['dtype'], json.loads(v['shape'])) for k, v in
          page.tables['feature_spec'].items()} == {
      k: (v['dtype'], v['shape']) for k, v in info['feature_spec'].items()}
  assert {k: int(v['count']) for k, v in page.tables['rejected'].items()} == (
      info['rejected_by_reason'])
  assert list(page.tables['samples']) == [r['file'] for r in samples_csv(export_dir)]
  assert len(page.images) == 1 + len(info['splits'])
  assert all(i['src'].startswith('data:image/png;base64,') for i in page.images)


def test_report_page_tables_match_dataset_info(dataset, exported):
  export_dir, _ = exported
  text = (export_dir / 'report.html').read_text()
  page = _Page()
  page.feed(text)
  check_page(page, dataset, export_dir)
  assert 'valid: 30 examples read, 0 problems' in text
  # the verdict and the rejected rows first, before the tables
  first = text.index('<p id="verdict" class="good">Valid: 30 examples read, 0 problems; '
                     f'{sum(read_info(dataset)["rejected_by_reason"].values())} rejected '
                     'row(s) (details below).</p>')
  assert first < text.index('<h2>Splits</h2>')
  assert 'read/missing_file: first 1' in text and 'images/missing.png' in text
  assert 'http://' not in text and 'https://' not in text  # self-contained


@pytest.mark.slow
@pytest.mark.integration  # a real client (Chromium)
@pytest.mark.skipif(shutil.which('chromium') is None, reason='needs Debian chromium')
def test_report_page_renders_in_chromium(dataset, exported, tmp_path):
  export_dir, _ = exported
  url = (export_dir / 'report.html').as_uri()
  flags = ['chromium', '--headless', '--no-sandbox', '--disable-gpu',
           f'--user-data-dir={tmp_path / "profile"}', '--virtual-time-budget=5000']
  done = subprocess.run(flags + ['--dump-dom', url], capture_output=True, text=True,
                        timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  page = _Page()
  page.feed(done.stdout)
  assert page.body.get('data-images-broken') == '0', page.body
  assert page.body.get('data-images-loaded') == str(len(page.images)) == '3'
  check_page(page, dataset, export_dir)
  shot = tmp_path / 'page.png'
  subprocess.run(flags + ['--window-size=1200,2400', f'--screenshot={shot}', url],
                 capture_output=True, timeout=120, check=True)
  assert Image.open(shot).size == (1200, 2400)
  if os.environ.get('INSPECT_SCREENSHOT'):  # to look at it: INSPECT_SCREENSHOT=path
    shutil.copy(shot, os.environ['INSPECT_SCREENSHOT'])


def test_without_export_prints_the_summary_and_first_record(dataset, tmp_path):
  code, printed = run_inspect(['--input_dir', str(dataset)])
  assert code == 0
  info = read_info(dataset)
  for split, declared in info['splits'].items():
    assert any(line.split()[:2] == [split, f'{declared["num_examples"]:,d}']
               for line in printed.splitlines())
  assert f'Image: {HEIGHT}x{WIDTH}x3 raw' in printed
  assert 'image/class/label    int64    []' in printed
  assert f'<{HEIGHT * WIDTH * 3} bytes>' in printed
  assert not list(tmp_path.iterdir())


def test_console_script_runs_inspect(dataset, capsys):
  assert cli.main(['inspect', '--input_dir', str(dataset), '--split', 'test']) == 0
  printed = capsys.readouterr().out
  assert 'Classes (3)' in printed and 'test examples' in printed
  assert 'train examples' not in printed


@pytest.mark.parametrize('argv,message', [
    ([], 'give --input_dir'),
    (['--input_dir', '{missing}'], 'is not a folder'),
    (['--input_dir', '{empty}'], 'dataset_info.json is missing or unreadable'),
    (['--input_dir', '{dataset}', '--split', 'validation'], "no split 'validation'"),
    (['--input_dir', '{dataset}', '--num', '-1'], 'must not be negative'),
    (['--input_dir', '{dataset}', '--bogus'], "unrecognized argument '--bogus'"),
    (['--files', '{empty}/*.tfrecord'], 'matches no file'),
    (['--input_dir', '{dataset}', '--export_dir', '{file}'], 'exists and is not a folder'),
    (['--input_dir', '{dataset}', '--export_dir', '{file}/look'],
     'cannot be created: Not a directory'),
])
def test_bad_input_is_one_line_and_exit_2(dataset, tmp_path, capsys, argv, message):
  (tmp_path / 'empty').mkdir()
  (tmp_path / 'file').write_text('not a folder')
  values = {'missing': tmp_path / 'missing', 'empty': tmp_path / 'empty', 'dataset': dataset,
            'file': tmp_path / 'file'}
  assert look.main([a.format(**values) for a in argv]) == 2
  err = capsys.readouterr().err
  assert message in err and len(err.strip().splitlines()) == 1, err


def test_damaged_records_are_reported_and_skipped(dataset, tmp_path):
  copy = tmp_path / 'copy'
  shutil.copytree(dataset, copy)
  info = read_info(copy)
  shard = copy / info['splits']['train']['shards'][0]
  data = bytearray(shard.read_bytes())
  record = 16 + len(data) // info['splits']['train']['num_examples']  # inside the 2nd record
  data[record + 40] ^= 0xFF
  shard.write_bytes(bytes(data))
  code, printed = run_inspect(['--input_dir', str(copy), '--export_dir', str(tmp_path / 'e'),
                               '--num', '100', '--split', 'train'])
  assert code == 0
  assert f'Skipped train: {shard.name} record 1: data CRC mismatch at record 1' in printed
  rows = samples_csv(tmp_path / 'e')
  assert len(rows) == info['splits']['train']['num_examples'] - 1
  assert 1 not in {int(r['record']) for r in rows}
  assert 'data CRC mismatch at record 1' in (tmp_path / 'e' / 'report.html').read_text()


def test_a_shard_cut_at_a_record_end_is_reported(dataset, tmp_path):
  """Every record read is whole: inspect showed the split's count from
  dataset_info.json beside class counts of a third of it, and said nothing."""
  copy = tmp_path / 'copy'
  shutil.copytree(dataset, copy)
  info = read_info(copy)
  shard = copy / info['splits']['train']['shards'][0]
  with open(shard, 'rb') as stream:
    sizes = [len(data) + 16 for _, data in read_records(stream)]
  shard.write_bytes(shard.read_bytes()[:sum(sizes[:5])])
  declared = info['splits']['train']['num_examples']
  code, printed = run_inspect(['--input_dir', str(copy), '--export_dir', str(tmp_path / 'e'),
                               '--num', '100'])
  assert code == 0
  line = (f'{5} record(s) read, dataset_info.json says {declared}: a shard was cut short or '
          f'replaced (validate names it)')
  assert [s for s in printed.splitlines() if s.startswith('Skipped')] == [f'Skipped train: {line}']
  page = (tmp_path / 'e' / 'report.html').read_text()
  assert line in page
  # the first line no longer says Valid above counts short of dataset_info.json's
  assert re.search(r'<p id="verdict"[^>]*>.*?</p>', page).group(0) == (
      '<p id="verdict" class="bad">Damaged since validate found it valid; '
      f'{sum(info["rejected_by_reason"].values())} rejected row(s); 1 damaged shard(s), '
      'record(s) or file(s) skipped by inspect, so the counts below are of what it read '
      '(see the end of the page).</p>')
  assert len(samples_csv(tmp_path / 'e')) == 5 + info['splits']['test']['num_examples']
  # damage inspect names already is not reported twice
  shard.write_bytes(shard.read_bytes()[:-3])
  code, printed = run_inspect(['--input_dir', str(copy), '--num', '100'])
  assert [s for s in printed.splitlines() if s.startswith('Skipped')] == [
      f'Skipped train: {shard.name} record 4: file ends inside the data CRC of record 4 (its '
      f"{sizes[4] - 16} data bytes are all there, 1 of the CRC's 4)"]


def test_a_shard_ending_inside_a_record_header_is_reported_as_cut_not_damaged(dataset,
                                                                              tmp_path):
  """Bytes past a shard's last record, fewer than a header (a byte appended,
  or a file cut inside a header): validate says `file ends inside the header`,
  inspect said `damaged length; the rest of the file cannot be read` of a
  length that is not there."""
  copy = tmp_path / 'copy'
  shutil.copytree(dataset, copy)
  info = read_info(copy)
  shard = copy / info['splits']['train']['shards'][0]
  with open(shard, 'rb') as stream:
    count = sum(1 for _ in read_records(stream))
  shard.write_bytes(shard.read_bytes() + b'G')
  code, printed = run_inspect(['--input_dir', str(copy), '--num', '100'])
  assert code == 0
  assert [s for s in printed.splitlines() if s.startswith('Skipped')] == [
      f'Skipped train: {shard.name} record {count}: file ends inside the header of record '
      f'{count}']


def test_a_dataset_over_its_error_budget_says_so_at_the_top_of_the_page(dataset, tmp_path):
  copy = tmp_path / 'copy'
  shutil.copytree(dataset, copy)
  info = read_info(copy)
  info.update(over_budget=True, max_error_rate=0.01)  # convert exited 3
  (copy / 'dataset_info.json').write_text(json.dumps(info))
  code, _ = run_inspect(['--input_dir', str(copy), '--export_dir', str(tmp_path / 'e')])
  assert code == 0
  page = (tmp_path / 'e' / 'report.html').read_text()
  line = (f'<p>Error rate {info["error_rate"]:.2%} is above --max_error_rate 1.00%: exit code '
          '3.</p>')
  assert line in page and page.index(line) < page.index('<p id="verdict"')


def _write_foreign(path, examples, compress=False):
  data = b''.join(frame(serialize_example(e)) for e in examples)
  path.write_bytes(gzip.compress(data) if compress else data)
  return path


def test_foreign_files_with_raw_pixels_need_their_size(tmp_path):
  # the tutorial's own loop: img_raw (raw bytes) and label
  images = [pattern(i)[:10, :8] for i in range(5)]
  _write_foreign(tmp_path / 'tutorial.tfrecords', [
      {'img_raw': ('bytes', img.tobytes()), 'label': ('int64', i % 2)}
      for i, img in enumerate(images)])
  code, printed = run_inspect(['--files', str(tmp_path / '*.tfrecords')])
  assert code == 0
  assert 'img_raw                  bytes_list  1 value(s), first 240 bytes' in printed
  assert 'label                    int64_list  1 value(s)' in printed
  export = ['--files', str(tmp_path / '*.tfrecords'), '--export_dir', str(tmp_path / 'e')]
  assert look.main(export) == 2  # raw bytes: the size is needed
  assert look.main(export + ['--height', '10', '--width', '9']) == 2  # 270 != 240
  assert look.main(export + ['--height', '10', '--width', '8']) == 0
  rows = samples_csv(tmp_path / 'e')
  assert [r['file'] for r in rows] == [f'{i}_Label_{i % 2}.jpg' for i in range(5)]
  for i, row in enumerate(rows):
    pixels = np.asarray(Image.open(tmp_path / 'e' / row['file']), np.int32)
    assert np.abs(pixels - images[i]).mean() < 6
  assert (tmp_path / 'e' / 'contact_sheet.png').exists()


def test_foreign_raw_pixels_of_another_size_than_given_are_a_usage_error_in_the_listing(
    tmp_path, capsys):
  """--height/--width given: the listed records are checked against them,
  with or without --export_dir; the listing stays on stdout, the export
  folder is not made."""
  _write_foreign(tmp_path / 'tutorial.tfrecords', [
      {'img_raw': ('bytes', pattern(i)[:10, :8].tobytes()), 'label': ('int64', i)}
      for i in range(4)])
  files = ['--files', str(tmp_path / '*.tfrecords')]
  assert look.main(files + ['--height', '10', '--width', '8']) == 0
  listing = capsys.readouterr().out
  assert 'img_raw                  bytes_list  1 value(s), first 240 bytes' in listing
  for extra in ([], ['--export_dir', str(tmp_path / 'e')]):
    assert look.main(files + ['--height', '10', '--width', '10', *extra]) == 2
    out, err = capsys.readouterr()
    assert out == listing
    assert err == ("error: tutorial.tfrecords record 0: 'img_raw' has 240 bytes, --height 10 "
                   '--width 10 --channels 3 make 300\n')
  assert not (tmp_path / 'e').exists()
  assert look.main(files + ['--height', '10']) == 2
  assert capsys.readouterr().err == (
      "error: tutorial.tfrecords record 0: 'img_raw' holds 240 bytes that are neither JPEG nor "
      'PNG: give --height, --width and --channels of the raw pixels\n')


def test_foreign_gzip_files_with_encoded_images_are_recognised_by_content(tmp_path, capsys):
  examples = []
  for i in range(4):
    buffer = io.BytesIO()
    Image.fromarray(pattern(i)).save(buffer, 'PNG' if i % 2 else 'JPEG', quality=95)
    examples.append({'image': ('bytes', buffer.getvalue()), 'label': ('int64', i)})
  _write_foreign(tmp_path / 'mine.tfrecord.gz', examples, compress=True)
  assert look.main(['--files', str(tmp_path / 'mine.tfrecord.gz'),
                       '--export_dir', str(tmp_path / 'e'), '--num', '10']) == 0
  rows = samples_csv(tmp_path / 'e')
  assert [r['label'] for r in rows] == ['0', '1', '2', '3']
  for i, row in enumerate(rows):
    pixels = np.asarray(Image.open(tmp_path / 'e' / row['file']), np.int32)
    assert np.abs(pixels - pattern(i)).mean() < 4
  assert look.main(['--files', str(tmp_path / 'mine.tfrecord.gz'), '--export_dir',
                       str(tmp_path / 'f'), '--image_feature', 'nope']) == 2
  assert 'no image feature (tried nope)' in capsys.readouterr().err


def test_foreign_gzip_files_without_a_gz_name_are_recognised_by_content(tmp_path, capsys):
  """TensorFlow's TFRecordWriter with GZIP options adds no .gz: such files
  were read as plain TFRecords (`damaged length`, nothing listed)."""
  examples = [{'img_raw': ('bytes', pattern(i)[:10, :8].tobytes()), 'label': ('int64', i)}
              for i in range(4)]
  _write_foreign(tmp_path / 'zipped.tfrecord', examples, compress=True)
  # A plain file whose first record is 35,615 bytes starts with 1f 8b too.
  _write_foreign(tmp_path / 'plain.tfrecord', [{'img_raw': ('bytes', b'x' * 35586)}])
  assert (tmp_path / 'plain.tfrecord').read_bytes()[:2] == b'\x1f\x8b'
  for name, first in (('zipped', 'first 240 bytes'), ('plain', 'first 35586 bytes')):
    assert look.main(['--files', str(tmp_path / f'{name}.tfrecord')]) == 0
    out = capsys.readouterr().out
    assert f'img_raw                  bytes_list  1 value(s), {first}' in out, out
    assert 'Skipped' not in out
  assert look.main(['--files', str(tmp_path / 'zipped.tfrecord'), '--export_dir',
                    str(tmp_path / 'e'), '--height', '10', '--width', '8']) == 0
  assert [r['label'] for r in samples_csv(tmp_path / 'e')] == ['0', '1', '2', '3']


def test_inspect_module_runs_as_a_script(dataset):
  done = subprocess.run([os.sys.executable, '-m', 'pipeline.look', '--input_dir',
                         str(dataset), '--split', 'nope'], capture_output=True, text=True,
                        cwd=pathlib.Path(__file__).parent.parent)
  assert done.returncode == 2 and "no split 'nope'" in done.stderr


def test_multi_label_records_are_counted_per_label_and_named_by_their_ids(tmp_path):
  """--multi_label: a record counts once for each of its labels; its exported
  file is named by its ids joined with '+', its caption by its texts."""
  rows = ['image,label']
  for i, labels in enumerate(['ant;bee', 'bee', 'cat;ant;bee', 'cat']):
    Image.fromarray(pattern(i)).save(tmp_path / f'img_{i}.png')
    rows.append(f'img_{i}.png,{labels}')
  (tmp_path / 'm.csv').write_text('\n'.join(rows) + '\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--height', str(HEIGHT), '--width', str(WIDTH), '--multi_label']) == 0
  info = read_info(out)
  assert look_sample.scan_split(str(out), info, 'train', 0, False, 0).counts == {0: 2, 1: 3, 2: 2}
  code, _ = run_inspect(['--input_dir', str(out), '--export_dir', str(tmp_path / 'x'),
                         '--num', '4'])
  assert code == 0
  by_key = {row['key']: row for row in samples_csv(tmp_path / 'x')}
  assert {key: (row['label'], row['class_text']) for key, row in by_key.items()} == {
      'img_0.png': ('0+1', 'ant, bee'), 'img_1.png': ('1', 'bee'),
      'img_2.png': ('2+0+1', 'cat, ant, bee'), 'img_3.png': ('2', 'cat')}
  for i, row in enumerate(samples_csv(tmp_path / 'x')):
    assert row['file'] == f'{i}_Label_{row["label"]}.jpg'
    assert (tmp_path / 'x' / row['file']).exists()


def test_with_many_classes_the_terminal_lists_the_rarest_too():
  # before: the 20 most frequent alone; a class of 0 or 1 example never showed
  names = [f'c{i:02d}' for i in range(25)]
  counts = {'train': {i: 100 - i for i in range(24)}}  # c24: no example
  counts['train'][23] = 1
  info = {'schema': 'classification', 'num_examples': sum(counts['train'].values()),
          'splits': {'train': {'num_examples': 10, 'num_bytes': 1, 'shards': []}},
          'label_map': names, 'feature_spec': {},
          'image': {'height': 8, 'width': 8, 'channels': 3, 'encoding': 'raw',
                    'resize_mode': 'stretch', 'resize_filter': 'bilinear'}}
  lines = look.summary_lines('out', info, counts)
  start = lines.index('Classes (25; the 10 most and the 10 least frequent):')
  listed = [line.split()[:2] + line.split()[-1:] for line in lines[start + 2:start + 23]]
  assert listed[:10] == [[str(i), f'c{i:02d}', str(100 - i)] for i in range(10)]
  assert lines[start + 12].strip() == '... 5 more'
  assert listed[11:] == ([[str(i), f'c{i:02d}', str(100 - i)] for i in range(15, 22)]
                         + [['22', 'c22', '78'], ['23', 'c23', '1'], ['24', 'c24', '0']])
