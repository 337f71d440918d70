"""validate finds a row with two lines of rejected.jsonl (one line overwritten
by a copy of another: the counts still add up) by the rows' source and line,
and flags no output convert writes: every kind of source converted with
rejections of each kind, each validated as written and with one line
overwritten."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import random
import shutil

from PIL import Image
import pytest

from pipeline import convert
from pipeline import demo_detection
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from tests.conftest import rejected_lines
from tests.test_http import Server
from tests.test_parquet import png as parquet_png
from tests.test_parquet import write_hf
from tests.test_validate_cli import run_validate
from tests.test_webdataset import png as tar_png
from tests.test_webdataset import write_tar
from transforms.core import dataset_checks
from transforms.core import rejected_rows

pytestmark = pytest.mark.xdist_group('rejected_rows')

INFO = {'config': {'manifest': 'm.csv', 'label_manifest': 'l.csv'}}


def _line(source, line, stage='read', code='missing_file', **more) -> bytes:
  return json.dumps({'source': source, 'line': line, 'stage': stage, 'code': code,
                     **more}).encode() + b'\n'


def _details(lines, run_entries=rejected_rows.RUN_ENTRIES) -> list:
  counted = dataset_checks.count_rejected(lines, INFO, run_entries)
  info = {'rejected_by_reason': counted.rows,  # the counts agree: only rows are compared
          'label_manifest_rejected_by_reason': counted.label_rows}
  return [p.detail for p in dataset_checks.row_accounting_problems(info, counted)]


@pytest.mark.parametrize('run_entries', [1000, 2])  # in memory; in runs on temp files
def test_rows_are_told_apart_by_source_and_line_only_among_lines_that_are_rows(
    run_entries, tmp_path, monkeypatch):
  monkeypatch.setenv('TMPDIR', str(tmp_path))
  lines = [
      _line('a.csv', 3), _line('b.csv', 3), _line('a.csv', 4, 'decode', 'truncated'),
      # a label-manifest line, an annotation: not rows, their numbers are others'
      _line('a.csv', 3, 'manifest', 'bad_quoting', counts_as_row=False),
      _line('a.csv', 4, 'annotation', 'empty_box', counts_as_row=False),
      _line('l.csv', 5, 'label_manifest', 'no_image'), _line('l.csv', 5, 'label_manifest', 'x'),
      # without a source or a line: not compared
      json.dumps({'stage': 'read', 'code': 'missing_file'}).encode(),
      json.dumps({'stage': 'read', 'code': 'missing_file', 'line': 3}).encode(),
      _line(None, 3), _line('a.csv', '3'), _line('a.csv', 3.0), _line('a.csv', 1),
      _line('a.csv', True), b'\n']
  random.Random(3).shuffle(lines)
  assert _details(lines, run_entries) == []
  lines.append(_line('b.csv', 3, 'decode', 'corrupt'))
  assert _details(lines, run_entries) == [
      f"lines {sorted(i for i, line in enumerate(lines, 1) if b'b.csv' in line)[0]} and "
      f"{len(lines)} both name the row of source 'b.csv', line 3; a row is one example or "
      "one line, so another row's line is missing (overwritten by a copy of one of these)"]
  assert list(tmp_path.iterdir()) == []  # the runs on disk are gone


def test_rows_with_more_lines_are_named_up_to_a_cap():
  lines = [_line('m.csv', n % 15) for n in range(30)] + [_line('m.csv', 0)] * 3
  details = _details(lines, run_entries=7)
  assert len(details) == rejected_rows.SHOWN_ROWS + 1
  assert details[0].startswith("lines 1, 16, 31 and 2 more all name the row of source "
                               "'m.csv', line 0; ")
  assert details[1].startswith("lines 2 and 17 both name the row of source 'm.csv', line 1; ")
  assert details[-1] == '5 more row(s) of another source or line have more than one line each'


# --- real outputs of every kind of source --------------------------------------------

FLAGS = ('--height', '8', '--width', '8', '--progress', 'off', '--max_error_rate', '1')


def _image(path: pathlib.Path, seed: int, size=(9, 7)) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  Image.new('RGB', (size[0] + seed % 5, size[1]), (seed * 40 % 256, 80, 200)).save(path)
  return path


def _manifests(root: pathlib.Path) -> dict:
  """{kind: convert flags} of the line manifests, the label manifest and the folders."""
  imgs = root / 'imgs'
  for i in range(3):
    _image(imgs / f'ok{i}.png', i)
  shutil.copy(imgs / 'ok0.png', imgs / 'copy0.png')
  (imgs / 'bad.png').write_bytes(b'not an image' * 10)
  rows = [(f'{imgs}/ok0.png', 'a'), (f'{imgs}/gone1.png', 'a'), (f'{imgs}/bad.png', 'b'),
          (f'{imgs}/ok1.png', ''), (f'{imgs}/ok0.png', 'b'), (f'{imgs}/copy0.png', 'b'),
          (f'{imgs}/gone2.png', 'b'), ('ftp://host/x.png', 'a'), (f'{imgs}/ok2.png', 'a')]
  csv = ['image,label', *(f'{i},{label}' for i, label in rows), 'one_field', '',
         f'"{imgs}/ok1.png,b']
  for name in ('p0.csv', 'p1.csv'):  # rejected at the same line numbers, keys repeated
    (root / 'parts' / name).parent.mkdir(exist_ok=True)
    (root / 'parts' / name).write_text('\n'.join(csv) + '\n')
  (root / 'm.tsv.gz').write_bytes(gzip.compress(
      ''.join(line.replace(',', '\t') + '\n' for line in csv).encode()))
  (root / 'm.jsonl').write_text(''.join(
      json.dumps({'image': i, 'label': label or [1]}) + '\n' for i, label in rows)
      + '{not json\n[1, 2]\n')
  (root / 'm.txt').write_text(''.join(f'{i} {label}\n' for i, label in rows if label))
  (root / 'keys.csv').write_text('key,image\n' + ''.join(
      f'k{n},{i}\n' for n, (i, _) in enumerate(rows)) + 'broken\n')
  (root / 'labels.csv').write_text('key,label\nk0,a\nk1,b\nk1,c\nk77,a\nbad,line,x\nk3,b\n'
                                   'k5,a\nk6,b\n')
  # one file as both manifests: its bad line is rejected by both readers
  (root / 'both.csv').write_text('key,image,label\n' + ''.join(
      f'k{n % 5},{i},{label}\n' for n, (i, label) in enumerate(rows)) + 'broken\n')
  tree = root / 'tree'
  for i, label in enumerate(['a', 'b', 'a', 'b']):
    _image(tree / label / f'{i}.png', i)
  _image(tree / 'top.png', 7)
  _image(tree / 'top2.png', 8)
  (tree / 'a' / 'bad.png').write_bytes(b'junk' * 10)
  (tree / 'b' / 'bad.png').write_bytes(b'junk' * 10)
  os.symlink(tree / 'a' / 'nowhere.png', tree / 'b' / 'dangling.png')
  os.symlink(tree / 'a', tree / 'a' / 'loop')
  shutil.copy(tree / 'a' / '0.png', tree / 'b' / 'copy.png')
  split_tree = root / 'split_tree'
  for split in ('train', 'test'):
    for i, label in enumerate(['a', 'b']):
      _image(split_tree / split / label / f'{i}.png', i)
    (split_tree / split / 'b' / 'bad.png').write_bytes(b'junk' * 10)
    _image(split_tree / split / 'shallow.png', 3)
  return {
      'csv_pattern': ['--manifest', str(root / 'parts' / 'p*.csv'), '--dedupe', 'content'],
      'tsv_gz': ['--manifest', str(root / 'm.tsv.gz'), '--manifest_format', 'tsv'],
      'jsonl': ['--manifest', str(root / 'm.jsonl'), '--dedupe', 'content'],
      'txt': ['--manifest', str(root / 'm.txt')],
      'label_manifest': ['--manifest', str(root / 'keys.csv'), '--label_manifest',
                         str(root / 'labels.csv')],
      'same_file_both': ['--manifest', str(root / 'both.csv'), '--label_manifest',
                         str(root / 'both.csv')],
      'image_dir': ['--image_dir', str(tree), '--dedupe', 'content'],
      'image_dir_split': ['--image_dir', str(split_tree), '--image_dir_layout', 'split/label',
                          '--split_names', 'train,test']}


def _containers(root: pathlib.Path) -> dict:
  """{kind: flags} of Parquet files and WebDataset tars, broken alike."""
  for k in range(2):
    images = [{'bytes': parquet_png(1), 'path': 'ok.png'}, {'bytes': parquet_png(2), 'path': 'x'},
              {'bytes': b'\xff\xd8\xff\xe0 cut', 'path': 'cut.jpg'},
              {'bytes': None, 'path': None}, {'bytes': parquet_png(4), 'path': 'big.png'},
              {'bytes': parquet_png(1), 'path': 'again.png'}]
    write_hf(root / 'pq' / f'train-{k}.parquet', images, [0, -1, 1, 0, 7, 1])
  tars = root / 'tars'
  for name in ('a.tar', 'b.tar'):
    write_tar(tars / name, [
        ('0.png', tar_png(0)), ('0.cls', b'1'), ('1.cls', b'0'), ('2.png', tar_png(2)),
        ('2.jpg', tar_png(2)), ('2.cls', b'0'), ('3.png', tar_png(3)), ('3.cls', b'x'),
        ('0.json', b'{}'), ('5.png', b'junk'), ('5.cls', b'2')])
  write_tar(tars / 'c.tar', [('0.png', tar_png(6)), ('0.cls', b'0'),
                             ('1.png', tar_png(7) * 20), ('1.cls', b'0')])
  whole = (tars / 'c.tar').read_bytes()
  (tars / 'c.tar').write_bytes(whole[:whole.index(tar_png(7) * 20) + 100])
  (tars / 'd.tar').write_bytes(b'no tar at all' * 100)
  return {'parquet': ['--manifest', str(root / 'pq' / '*.parquet'), '--dedupe', 'content'],
          'webdataset': ['--manifest', str(tars / '*.tar'), '--dedupe', 'content']}


def _detection(root: pathlib.Path) -> dict:
  """{kind: flags} of COCO, VOC and YOLO sets, with images and annotations
  rejected, an image row at the number of a rejected annotation in each."""
  coco = pathlib.Path(demo_detection.make_sample(str(root / 'coco')))
  document = json.loads(coco.read_text())
  images = document['images']
  images[1]['file_name'] = 'gone.jpg'  # image 2 gone; annotation 2 of no category
  document['annotations'][1]['category_id'] = 99
  (root / 'coco' / 'images' / 'bad.jpg').write_bytes(b'junk' * 10)
  images += [dict(images[0]), {'id': 'x', 'file_name': 'x.jpg'},
             {'id': 20, 'file_name': 'gone2.jpg', 'width': 9, 'height': 9},
             {'id': 21, 'file_name': 'bad.jpg', 'width': 9, 'height': 9}]
  coco.write_text(json.dumps(document))
  voc = root / 'VOC'
  for folder in ('Annotations', 'JPEGImages', 'ImageSets/Main'):
    (voc / folder).mkdir(parents=True)
  for name in ('v1', 'v2'):
    Image.new('RGB', (64, 48), (90, 120, 60)).save(voc / 'JPEGImages' / f'{name}.jpg')
  (voc / 'JPEGImages' / 'v3.jpg').write_bytes(b'junk' * 10)
  for name, image in (('v1', 'v1'), ('v2', 'v2'), ('v3', 'v3'), ('v4', 'v1'), ('v5', 'v5')):
    (voc / 'Annotations' / f'{name}.xml').write_text(
        f'<annotation><filename>{image}.jpg</filename><size><width>64</width><height>48'
        '</height></size><object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9'
        '</xmax><ymax>9</ymax></bndbox></object></annotation>')
  (voc / 'ImageSets' / 'Main' / 'train.txt').write_text('v1\nv2\nv3\nv4\nv5\nv8\nv9\n')
  yolo = root / 'yolo'
  (yolo / 'images').mkdir(parents=True)
  for name in ('a', 'b'):  # b: a copy of a's bytes
    Image.new('RGB', (64, 48), (90, 120, 60)).save(yolo / 'images' / f'{name}.jpg')
  shutil.copy(yolo / 'images' / 'a.jpg', yolo / 'images' / 'acopy.jpg')
  (yolo / 'images' / 'bad.jpg').write_bytes(b'junk' * 10)  # ordinal 4
  (yolo / 'labels').mkdir()
  (yolo / 'classes.txt').write_text('cat\ndog\n')
  (yolo / 'labels' / 'bad.txt').write_text('0 0.5 0.5 0.2 0.2\n' * 3 + '9 0.5 0.5 0.2 0.2\n')
  for name in ('orphan1', 'orphan2'):
    (yolo / 'labels' / f'{name}.txt').write_text('0 0.5 0.5 0.1 0.1\n')
  detection = ('--resize_mode', 'none', '--encoding', 'jpeg', '--dedupe', 'content')
  return {'coco': ['--annotations', str(coco), '--annotation_format', 'coco', '--image_dir',
                   str(root / 'coco' / 'images'), '--height', '32', '--width', '32'],
          'voc': ['--annotations', str(voc), '--annotation_format', 'voc', '--image_dir',
                  str(voc / 'JPEGImages'), *detection],
          'yolo': ['--annotations', str(yolo), '--annotation_format', 'yolo', *detection]}


KINDS = ['csv_pattern', 'tsv_gz', 'jsonl', 'txt', 'label_manifest', 'same_file_both',
         'image_dir', 'image_dir_split', 'parquet', 'webdataset', 'http', 'coco', 'voc', 'yolo']
# Kinds whose rows share a source and line with a line that is no row.
SHARED = {'same_file_both', 'coco', 'yolo'}


@pytest.fixture(scope='module')
def outputs(tmp_path_factory) -> dict:
  """{kind: output folder} of one convert per kind of source."""
  root = tmp_path_factory.mktemp('sources')
  runs = {**_manifests(root), **_containers(root), **_detection(root)}
  with Server() as server:
    server.failing = False
    paths = ['/ok/a1.png', '/missing/k1.png', '/forbidden/l.png', '/text/i.jpg',
             '/missing/k2.png', '/ok/a1.png', '/ok/b1.png', '/robots/j.png']
    (root / 'urls.csv').write_text('image,label\n' + ''.join(
        f'{server.base}{path},a\n' for path in paths))
    runs['http'] = ['--manifest', str(root / 'urls.csv'), '--http_retries', '0',
                    '--dedupe', 'content']
    for kind in KINDS:
      out = root / 'out' / kind
      size = FLAGS if 'none' not in runs[kind] else FLAGS[4:]  # VOC, YOLO: their own sizes
      assert convert.main([*runs[kind], '--output_dir', str(out), *size]) == EXIT_OK
  return {kind: root / 'out' / kind for kind in KINDS}


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('kind', KINDS)
def test_every_kind_of_source_validates_and_a_copied_line_is_found(outputs, tmp_path, kind):
  out = shutil.copytree(outputs[kind], tmp_path / kind)
  code, report = run_validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0), report['problems']
  lines = rejected_lines(out)
  rows = [(n, line) for n, line in enumerate(lines, 1) if line.get('counts_as_row', True)]
  places = [(line['source'], line['line']) for _, line in rows]
  assert len(set(places)) == len(places) >= 3  # rows of several places were rejected
  everywhere = [(line['source'], line['line']) for line in lines]
  assert (len(set(everywhere)) < len(everywhere)) == (kind in SHARED)
  # a row line overwritten by a copy of another of its reason: the counts add up
  (first, copied), (second, _) = next(
      (a, b) for a in rows for b in rows
      if a[0] < b[0] and (a[1]['stage'], a[1]['code']) == (b[1]['stage'], b[1]['code']))
  text = (out / 'rejected.jsonl').read_text().splitlines(keepends=True)
  text[second - 1] = text[first - 1]
  (out / 'rejected.jsonl').write_text(''.join(text))
  code, report = run_validate(out)
  assert code == EXIT_FAILED
  assert [(p['kind'], p['file'], p['detail']) for p in report['problems']] == [
      ('row_accounting', 'rejected.jsonl',
       f"lines {first} and {second} both name the row of source {copied['source']!r}, line "
       f"{copied['line']}; a row is one example or one line, so another row's line is "
       'missing (overwritten by a copy of one of these)')]
