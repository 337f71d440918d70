"""Hostile annotation files (COCO, VOC, YOLO), as a user or an attacker
would hand them over: a file-level problem is one line naming the file and
exit 2 before anything is written; an annotation-level problem is a rejected
line naming the file and the annotation; paths outside --image_dir are never
read; memory stays bounded; validate finds what convert must never write."""

from __future__ import annotations

import io
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline import demo_detection
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import copy_dataset
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
from tests.test_training import shard_records
from tests.test_validate_cli import records_of
from tests.test_validate_cli import resync_sidecars
from tests.test_validate_cli import rewrite_first_record
from tests.test_validate_cli import run_validate
from tests.test_validate_cli import write_info
from transforms.core import annotations as objects
from transforms.core import coco
from transforms.core import masks
from transforms.core import paths
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import serialize_example
from transforms.core.splits import SplitConfig
from transforms.core.tfrecord import frame
from transforms.detection_files import FileSource
from transforms.detection_files import file_row

pytestmark = pytest.mark.xdist_group('detection')
SECRET = b'SECRET-BYTES-outside-the-image-dir-7f3a'


@pytest.fixture(scope='module')
def demo(tmp_path_factory) -> pathlib.Path:
  """The demo's three photos and their COCO file; a file outside images/."""
  root = tmp_path_factory.mktemp('hostile')
  demo_detection.make_sample(str(root))
  (root / 'secret.jpg').write_bytes(SECRET)
  return root


def _coco(root: pathlib.Path, document: dict, name: str = 'instances.json') -> pathlib.Path:
  path = root / name
  path.write_text(json.dumps(document))
  return path


def _convert_coco(annotations: pathlib.Path, image_dir: pathlib.Path, out: pathlib.Path,
                  *flags) -> int:
  return convert.main(['--annotations', str(annotations), '--annotation_format', 'coco',
                       '--image_dir', str(image_dir), '--output_dir', str(out),
                       '--progress', 'off', *flags])


def _one_line(capsys) -> str:
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1, err
  return err


def _nothing_of(out: pathlib.Path, data: bytes) -> None:
  """No file of the output holds `data` (nor its text as JSON escapes it)."""
  for path in out.rglob('*'):
    if path.is_file():
      assert data not in path.read_bytes(), path


# --- COCO: the file as a whole (exit 2, one line, nothing written) ---


def _nested(depth: int) -> str:
  return '[' * depth + ']' * depth


@pytest.mark.parametrize('where, depth, said', [
    ('top', 30_000, 'x.item.item'),  # a 60 KB file: the interpreter crashed
    ('iscrowd', 20_000, 'annotations.item.iscrowd'),  # RecursionError while pickling
    ('file_name', 40_000, 'images.item.file_name'),  # 80 KB: 3.9 GB on the launcher
])
def test_deep_nesting_exits_2_with_one_line(demo, tmp_path, capsys, where, depth, said):
  document = json.loads((demo / 'instances.json').read_text())
  marker = '"@@"'
  if where == 'top':
    document['x'] = '@@'
  elif where == 'iscrowd':
    document['annotations'][0]['iscrowd'] = '@@'
  else:
    document['images'][0]['file_name'] = '@@'
  path = tmp_path / 'deep.json'
  path.write_text(json.dumps(document).replace(marker, _nested(depth), 1))
  assert _convert_coco(path, demo / 'images', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == (f'error: {path}: nested deeper than {coco.MAX_DEPTH} levels '
                               f'(in {said})')
  assert not (tmp_path / 'out').exists()


def test_deep_nesting_is_refused_within_512_mib(tmp_path):
  """The launcher's check of an 80 KB file nested 40,000 deep, under an
  address-space limit of 512 MiB (before: 3.9 GB, ijson's prefixes)."""
  path = tmp_path / 'deep.json'
  path.write_text('{"images": [{"file_name": ' + _nested(40_000) + '}], '
                  '"annotations": [], "categories": []}')
  script = (
      'import resource, sys\n'
      'resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))\n'
      'from transforms.core import coco\n'
      'try:\n'
      '  coco.scan(open(sys.argv[1], "rb"), sys.argv[1])\n'
      'except coco.CocoFormatError as error:\n'
      '  print(error)\n')
  done = subprocess.run([sys.executable, '-c', script, str(path)], capture_output=True,
                        text=True, timeout=120, cwd=pathlib.Path(__file__).parent.parent)
  assert (done.returncode, done.stdout.strip()) == (
      0, f'{path}: nested deeper than 32 levels (in images.item.file_name)'), done.stderr


@pytest.mark.parametrize('element, said', [(5, 'a JSON number'), (None, 'a JSON null'),
                                           ([], 'a JSON array')])
def test_an_image_that_is_no_object_exits_2(demo, tmp_path, capsys, element, said):
  document = json.loads((demo / 'instances.json').read_text())
  document['images'].append(element)
  path = _coco(tmp_path, document)
  assert _convert_coco(path, demo / 'images', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == f'error: {path}: element 4 of "images" is {said}, not an object'
  assert not (tmp_path / 'out').exists()


def test_images_null_exits_2(demo, tmp_path, capsys):
  document = json.loads((demo / 'instances.json').read_text())
  document['images'] = None
  path = _coco(tmp_path, document)
  assert _convert_coco(path, demo / 'images', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == f'error: {path}: "images" must be an array, it is a JSON null'
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('name', ['cut \ud83d', '\ud83d\u00e9'])
def test_a_lone_high_surrogate_exits_2_and_a_pair_is_read(demo, tmp_path, capsys, name):
  """A \\ud83d without its low half (an emoji cut short) was read by ijson's
  yajl as '?' (the class 'cut ?'), or paired with the \\u escape after it
  ('\\ud83d\\u00e9', two characters to Python's json, read as one emoji),
  without a word. A pair, and an escaped backslash before "ud83d", are read
  as Python's json reads them."""
  document = json.loads((demo / 'instances.json').read_text())
  document['categories'][1]['name'] = name
  path = _coco(tmp_path, document)  # json.dumps escapes it: "cut \ud83d", "\ud83d\u00e9"
  text = path.read_text()
  at = text.index('\\ud83d')
  assert _convert_coco(path, demo / 'images', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == (
      f'error: {path}: at byte {at}, {text[at:at + 12]} escapes a high surrogate without the '
      'low one after it (half of a character, an emoji cut short): no character, fix the text')
  assert not (tmp_path / 'out').exists()
  document['categories'][1]['name'] = 'cut \U0001F600 \\ud83d'  # a pair, then text
  path = _coco(tmp_path, document)
  assert '\\ud83d\\ude00 \\\\ud83d' in path.read_text()
  assert _convert_coco(path, demo / 'images', tmp_path / 'out', '--allow_empty') == EXIT_OK
  assert (tmp_path / 'out' / 'label_map.txt').read_text(encoding='utf-8').splitlines()[1] == (
      '2\tcut \U0001F600 \\ud83d')


@pytest.mark.parametrize('old, new, said', [
    ('"file_name": "coffee.jpg"', '"file_name": "coffee.jpg", "file_name": "chelsea.jpg"',
     'element 2 of "images" names "file_name"'),
    ('"category_id": 1,', '"category_id": 1, "category_id": 3,',
     'element 1 of "annotations" names "category_id"'),
    ('{"images": [', '{"annotations": [], "images": [', 'the document names "annotations"'),
    ('{"images": [', '{"info": {"year": 2017, "year": 2024}, "images": [',
     '"info" names "year"')])
def test_a_member_named_twice_exits_2_with_one_line(demo, tmp_path, capsys, old, new, said):
  """json.load keeps the last value of a name given twice in an object; ijson
  kept the last inside an element (coffee.jpg's record read chelsea.jpg, no
  word) and both of a section named twice (the annotations of both arrays,
  where the Model Garden's script reads the last). Refused, as a JSONL
  manifest's line naming a member twice is (transforms/core/json_objects.py)."""
  text = (demo / 'instances.json').read_text()
  assert text.count(old) == 1
  path = tmp_path / 'instances.json'
  path.write_text(text.replace(old, new))
  assert _convert_coco(path, demo / 'images', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == f'error: {path}: {said} twice (which value is meant?)'
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('where, said', [
    (('images', 1, 'file_name'), 'element 2 of "images" (the value of "file_name")'),
    (('categories', 0, 'name'), 'element 1 of "categories" (the value of "name")')])
def test_a_lone_surrogate_escape_exits_2_with_one_line(demo, tmp_path, capsys, where, said):
  """A \\ude00 without the \\ud83d before it (the second half of an emoji
  whose string was cut at the front) is valid JSON syntax but no character:
  yajl's UTF-8 decoding of it raised UnicodeDecodeError out of the
  launcher's check, a traceback and exit 1, nothing to say where."""
  document = json.loads((demo / 'instances.json').read_text())
  section, position, key = where
  document[section][position][key] = 'cut \ude00 here'  # json.dumps escapes it: \ude00
  path = _coco(tmp_path, document)
  assert '\\ude00' in path.read_text()
  assert _convert_coco(path, demo / 'images', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == (
      f'error: {path}: a string in {said} holds a lone UTF-16 surrogate (an escape '
      '\\ud800..\\udfff without its pair, half of a character): no character, fix the text')
  assert not (tmp_path / 'out').exists()


# --- COCO: annotations and image records (rejected lines, the rest converted) ---

COCO_BAD = [  # (annotation, code, reason)
    ({'image_id': 1, 'category_id': 1, 'bbox': [150, 15, 150, 165], 'iscrowd': 1,
      'segmentation': {'size': [20000, 20000], 'counts': [0, 400_000_000]}},
     'bad_mask', 'RLE size 20000x20000 is 400000000 pixels, more than --max_pixels 89478485'),
    ({'image_id': 1, 'category_id': 1, 'bbox': [150, 15, 150, 165], 'iscrowd': 1,
      'segmentation': {'size': [10 ** 9, 10 ** 9], 'counts': 'abc'}},
     'bad_mask', 'RLE size 1000000000x1000000000 is 1000000000000000000 pixels, more than '
                 '--max_pixels 89478485'),
    ({'image_id': 1, 'category_id': 1, 'bbox': [150, 15, 150, 165], 'iscrowd': 1,
      'segmentation': {'size': [512, 512], 'counts': 'abc'}},
     'bad_mask', 'the RLE counts string is cut short'),  # was: IndexError, the whole image
    ({'image_id': 1, 'category_id': 1, 'bbox': [150, 15, 150, 165], 'iscrowd': 1,
      'segmentation': {'size': [512, 512], 'counts': [5, 7]}},
     'bad_mask', 'RLE runs add up to 12 pixels, the mask has 512x512'),
    ({'image_id': 2, 'category_id': 5, 'bbox': [1, 1, 5, 5], 'iscrowd': '0'},
     'bad_annotation', 'iscrowd "0" is not 0 or 1'),  # was: stored as 1
    ({'image_id': 2, 'category_id': 5, 'bbox': [1, 1, 5, 5], 'area': -3},
     'bad_annotation', 'area -3 is not a number >= 0'),
    ({'image_id': 2, 'category_id': 5, 'bbox': [1, 1, 5, '5']},
     'bad_annotation', 'bbox [1, 1, 5, "5"] is not [x, y, width, height]'),
    ({'image_id': 3, 'category_id': -1, 'bbox': [1, 1, 5, 5]},
     'unknown_category', 'category_id -1 is not one of the classes'),
    ({'image_id': 3, 'category_id': True, 'bbox': [1, 1, 5, 5]},  # was: category 1
     'unknown_category', 'category_id true is not one of the classes'),
]


@pytest.fixture(scope='module')
def hostile_coco(demo, tmp_path_factory):
  """The demo's set with COCO_BAD's annotations and three hostile image
  records, converted with masks (every rejection allowed)."""
  root = tmp_path_factory.mktemp('hostile_coco')
  document = json.loads((demo / 'instances.json').read_text())
  first = len(document['annotations']) + 1
  document['annotations'] += [{'id': 900 + i, **ann} for i, (ann, _, _) in enumerate(COCO_BAD)]
  document['images'] += [
      {'id': True, 'file_name': 'coffee.jpg', 'width': 600, 'height': 400},
      {'id': 20, 'file_name': '../secret.jpg', 'width': 8, 'height': 8},
      {'id': 21, 'file_name': str(demo / 'secret.jpg'), 'width': 8, 'height': 8},
      {'id': 22, 'file_name': 'nul\x00.jpg', 'width': 8, 'height': 8}]
  document['annotations'] += [{'id': 990 + i, 'image_id': i, 'category_id': 1,
                               'bbox': [1, 1, 2, 2]} for i in (20, 21, 22)]
  path = _coco(root, document)
  out = root / 'out'
  assert _convert_coco(path, demo / 'images', out, '--include_masks', '--max_error_rate',
                       '1', '--height', '64', '--width', '64') == EXIT_OK
  return path, out, first


def test_bad_annotations_reject_themselves_only(hostile_coco):
  path, out, first = hostile_coco
  lines = [line for line in rejected_lines(out) if line.get('counts_as_row') is False]
  assert [(line['source'], line['line'], line['code'], line['reason']) for line in lines] == [
      (str(path), first + i, code, reason) for i, (_, code, reason) in enumerate(COCO_BAD)]
  assert [line['row']['id'] for line in lines] == [900 + i for i in range(len(COCO_BAD))]
  info = read_info(out)
  # the three demo images are written with every demo object: none lost to a bad mask
  assert info['num_examples'] == 3
  assert info['detection']['num_objects'] == 10
  assert info['rejected_annotations_by_reason'] == {
      'annotation/bad_annotation': 3, 'annotation/bad_mask': 4,
      'annotation/unknown_category': 2}


def test_an_image_id_of_true_is_a_bad_record(hostile_coco):
  _, out, _ = hostile_coco
  rows = {line['row']['file_name']: line for line in rejected_lines(out)
          if line.get('counts_as_row', True)}
  assert rows['coffee.jpg']['code'] == 'bad_image_record'
  assert rows['coffee.jpg']['row']['id'] is True


def test_a_file_name_with_a_nul_byte_is_a_bad_record_not_a_failed_job(hostile_coco):
  """os.stat of such a name raised ValueError in the Fingerprint step: the
  whole job failed with a traceback."""
  _, out, _ = hostile_coco
  rows = {line['row']['file_name']: line for line in rejected_lines(out)
          if line.get('counts_as_row', True)}
  assert (rows['nul\x00.jpg']['code'], rows['nul\x00.jpg']['reason']) == (
      'bad_image_record', "file_name 'nul\\x00.jpg' holds a NUL byte: no file name can")


def test_paths_outside_the_image_dir_are_never_read(demo, hostile_coco):
  _, out, _ = hostile_coco
  rows = {line['row']['file_name']: line for line in rejected_lines(out)
          if line.get('counts_as_row', True)}
  absolute = str(demo / 'secret.jpg')
  assert {name: (rows[name]['stage'], rows[name]['code']) for name in
          ('../secret.jpg', absolute)} == {
      name: ('annotation', 'path_outside_image_dir') for name in ('../secret.jpg', absolute)}
  assert rows['../secret.jpg']['reason'] == (
      "file_name '../secret.jpg' is outside --image_dir (an absolute path, or .. climbing out)")
  assert read_info(out)['num_rejected'] == 4  # with coffee.jpg's and the NUL name's
  _nothing_of(out, SECRET)
  _nothing_of(out, SECRET[:8])


def test_stays_inside():
  assert [paths.stays_inside(p) for p in (
      'a.jpg', 'd/a.jpg', './a.jpg', 'd/../a.jpg', 'd/./e/../../a.jpg', '..a.jpg')] == [True] * 6
  assert [paths.stays_inside(p) for p in (
      '', '/etc/passwd', '../a.jpg', 'd/../../a.jpg', '..', 'gs://b/a.jpg', 'a/../..',
      'd//../../x')] == [False] * 8


@pytest.mark.slow
def test_an_rle_of_20000_by_20000_stays_under_512_mib(demo, tmp_path):
  """A 4 KB file whose RLE says 20000x20000 (1.3 GB and more when decoded,
  moved and encoded): convert with masks in its own process, its peak
  resident memory measured."""
  document = json.loads((demo / 'instances.json').read_text())
  document['annotations'][0].update(iscrowd=1, segmentation={
      'size': [20000, 20000], 'counts': [0, 400_000_000]})
  path = _coco(tmp_path, document)
  command = [sys.executable, '-m', 'pipeline.convert', '--annotations', str(path),
             '--annotation_format', 'coco', '--image_dir', str(demo / 'images'),
             '--output_dir', str(tmp_path / 'out'), '--include_masks', '--progress', 'off']
  script = ('import resource, subprocess, sys\n'
            'code = subprocess.run(sys.argv[1:], capture_output=True).returncode\n'
            'print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n')
  done = subprocess.run([sys.executable, '-c', script, *command], capture_output=True,
                        text=True, timeout=300, cwd=pathlib.Path(__file__).parent.parent)
  code, peak_kib = (int(v) for v in done.stdout.split())
  assert code == EXIT_OK
  assert peak_kib < 512 * 1024
  assert [line['code'] for line in rejected_lines(tmp_path / 'out')] == ['bad_mask']


def test_rle_is_checked_before_it_is_decoded():
  with pytest.raises(ValueError, match='more than --max_pixels 100'):
    masks.rle_runs({'size': [11, 10], 'counts': [110]}, max_pixels=100)
  for rle, message in (({'size': [2, 2], 'counts': '0~'}, "holds '~' at 1"),
                       ({'size': [2, 2], 'counts': 'o' * 100_000}, 'longer than 64 bits at 13'),
                       ({'size': [2, 2], 'counts': [1, True, 2]}, 'not a whole number'),
                       ({'size': [2, 2], 'counts': {'a': 1}}, 'are dict, not a list'),
                       ({'size': [2, -2], 'counts': [4]}, r'is not \[height, width\]'),
                       ({'size': [2, 2], 'counts': [5, -1]}, 'a negative run'),
                       ({'size': [2, 2], 'counts': [1, 2]}, 'add up to 3 pixels')):
    with pytest.raises(ValueError, match=message):
      masks.decode_rle(rle)
  assert masks.decode_rle({'size': [2, 2], 'counts': [1, 2, 1]}).tolist() == [[0, 1], [1, 0]]


def test_a_compressed_rle_with_a_character_that_is_not_ascii_is_a_bad_mask():
  """'1\u00e9' (mojibake in a counts string) was read as '1?', runs [1, 15]:
  a 4x4 mask of 15 ones written without a word (pycocotools refuses it:
  "Invalid RLE mask representation")."""
  assert masks.decode_rle({'size': [4, 4], 'counts': '1?'}).sum() == 15
  with pytest.raises(ValueError, match="holds '\u00e9' at 1"):
    masks.decode_rle({'size': [4, 4], 'counts': '1\u00e9'})
  source = coco.CocoSource('a.json', 'images', SplitConfig(names=('train',)), {1: 1},
                           include_masks=True)
  ann = {'bbox': [0, 0, 4, 4], 'category_id': 1,
         'segmentation': {'size': [4, 4], 'counts': '1\u00e9'}}
  row, rejected = coco.image_row(1, [(1, {'id': 1, 'file_name': 'a.jpg', 'width': 4,
                                          'height': 4})], [(1, ann)], source)
  assert [(r.code, r.reason) for r in rejected] == [
      ('bad_mask', "the RLE counts string holds '\u00e9' at 1")]
  assert not row.annotation.objects


def test_a_bad_rle_without_masks_is_not_decoded():
  """Without --include_masks the segmentation is not used, nor checked."""
  source = coco.CocoSource('a.json', 'images', SplitConfig(names=('train',)), {1: 1},
                           max_pixels=100)
  ann = {'bbox': [1, 1, 2, 2], 'category_id': 1,
         'segmentation': {'size': [10 ** 6, 10 ** 6], 'counts': 'x'}}
  row, rejected = coco.image_row(1, [(1, {'id': 1, 'file_name': 'a.jpg'})], [(1, ann)],
                                 source)
  assert (len(row.annotation.objects), rejected) == (1, [])
  row, rejected = coco.image_row(1, [(1, {'id': 1, 'file_name': 'a.jpg'})], [(1, ann)],
                                 coco.CocoSource(**{**source.__dict__, 'include_masks': True}))
  assert [r.code for r in rejected] == ['bad_mask'] and not row.annotation.objects


# --- VOC ---


def _xml(filename: str, width='512', height='512', name='face', difficult='0',
         declaration='') -> str:
  return (f'{declaration}<annotation><filename>{filename}</filename><size><width>{width}'
          f'</width><height>{height}</height></size><object><name>{name}</name><difficult>'
          f'{difficult}</difficult><bndbox><xmin>151</xmin><ymin>16</ymin><xmax>300</xmax>'
          f'<ymax>180</ymax></bndbox></object></annotation>')


@pytest.fixture(scope='module')
def hostile_voc(demo, tmp_path_factory):
  root = tmp_path_factory.mktemp('hostile_voc')
  folder = root / 'Annotations'
  folder.mkdir()
  (folder / 'a.xml').write_text(_xml('astronaut.jpg', difficult='yes'))
  (folder / 'b.xml').write_text(_xml('coffee.jpg', width='64px', height='400'))
  (folder / 'c.xml').write_text(_xml('chelsea.jpg', width='1e400', height='300'))
  # Latin-1 as declared: 'café' is one byte 0xe9, not UTF-8
  (folder / 'd.xml').write_bytes(_xml('coffee.jpg', '600', '400', name='caf\xe9', declaration=(
      '<?xml version="1.0" encoding="ISO-8859-1"?>')).encode('latin-1'))
  (folder / 'e.xml').write_text(_xml('../secret.jpg'))
  (folder / 'f.xml').write_text(_xml(str(demo / 'secret.jpg')))
  out = root / 'out'
  assert convert.main(['--annotations', str(folder), '--annotation_format', 'voc',
                       '--image_dir', str(demo / 'images'), '--output_dir', str(out),
                       '--progress', 'off', '--max_error_rate', '1']) == EXIT_OK
  return folder, out


def test_a_voc_xml_too_large_for_the_launcher_exits_2_read_no_further(demo, tmp_path,
                                                                      monkeypatch, capsys):
  """The launcher reads each XML for its class names: it was read whole."""
  from pipeline.configuration import detection_files as launcher_files
  monkeypatch.setattr(launcher_files, 'MAX_LABEL_MAP_BYTES', 200)
  folder = tmp_path / 'Annotations'
  folder.mkdir()
  (folder / 'a.xml').write_text(_xml('astronaut.jpg'))
  assert len((folder / 'a.xml').read_bytes()) > 200
  capsys.readouterr()
  assert convert.main(['--annotations', str(folder), '--annotation_format', 'voc',
                       '--image_dir', str(demo / 'images'), '--output_dir',
                       str(tmp_path / 'out'), '--progress', 'off']) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --annotations {folder}: {folder}/a.xml holds more than 200 bytes, more than '
      f'any annotation file needs\n')
  assert not (tmp_path / 'out').exists()


def test_voc_hostile_files(demo, hostile_voc):
  _, out = hostile_voc
  found = {(pathlib.Path(line['source']).name, line['code'], line['reason'],
            line.get('counts_as_row', True)) for line in rejected_lines(out)}
  assert found == {
      ('a.xml', 'bad_annotation', "<difficult> 'yes' is not 0 or 1", False),
      ('b.xml', 'bad_image_record', "<size>: <width> '64px' is not a whole number", True),
      ('c.xml', 'bad_image_record', "<size>: <width> '1e400' is not a whole number", True),
      ('e.xml', 'path_outside_image_dir', "<filename> '../secret.jpg' is outside "
       "--image_dir (an absolute path, or .. climbing out)", True),
      ('f.xml', 'path_outside_image_dir', f"<filename> '{demo / 'secret.jpg'}' is outside "
       "--image_dir (an absolute path, or .. climbing out)", True)}
  info = read_info(out)
  # d.xml, decoded as it declares: its class is café, its object kept
  assert (info['num_examples'], info['num_rejected']) == (2, 4)
  assert info['detection']['objects_per_class'] == {'caf\xe9': 1, 'face': 0}
  assert (out / 'label_map.txt').read_text(encoding='utf-8') == '1\tcaf\xe9\n2\tface\n'
  _nothing_of(out, SECRET)
  assert run_validate(out)[0] == EXIT_OK  # the rejected lines agree with the counts


def test_voc_xml_in_an_encoding_expat_cannot_read_exits_2(demo, tmp_path, capsys):
  folder = tmp_path / 'Annotations'
  folder.mkdir()
  (folder / 'a.xml').write_bytes(_xml('astronaut.jpg', name='\u732b', declaration=(
      '<?xml version="1.0" encoding="Shift_JIS"?>')).encode('shift_jis'))
  assert convert.main(['--annotations', str(folder), '--annotation_format', 'voc',
                       '--image_dir', str(demo / 'images'),
                       '--output_dir', str(tmp_path / 'out')]) == EXIT_USAGE
  assert _one_line(capsys) == (f'error: {folder}/a.xml is not valid XML: multi-byte '
                               f'encodings are not supported')
  assert not (tmp_path / 'out').exists()


# --- YOLO ---


def _yolo_tree(root: pathlib.Path, demo: pathlib.Path) -> pathlib.Path:
  shutil.copytree(demo / 'images', root / 'images')
  (root / 'labels').mkdir()
  return root


def _convert_yolo(annotations: pathlib.Path, out: pathlib.Path) -> int:
  return convert.main(['--annotations', str(annotations), '--annotation_format', 'yolo',
                       '--output_dir', str(out), '--progress', 'off', '--max_error_rate', '1'])


def test_yolo_label_files_and_classes(demo, tmp_path):
  root = _yolo_tree(tmp_path / 'set', demo)
  (root / 'classes.txt').write_bytes(b'\xef\xbb\xbfred\ngreen\n')  # a UTF-8 BOM
  (root / 'labels' / 'astronaut.txt').write_text('0 0.5 0.5 0.2 0.2\n7 0.5 0.5 0.1 0.1\n')
  (root / 'labels' / 'coffee.txt').write_bytes(b'0 0.5 0.5 0.2 0.2\n\xff\xfe\n')
  (root / 'labels' / 'chelsea.txt').write_bytes(b'\xef\xbb\xbf1 0.5 0.5 0.2 0.2\n')
  out = tmp_path / 'out'
  assert _convert_yolo(root / 'classes.txt', out) == EXIT_OK
  assert (out / 'label_map.txt').read_text() == '1\tred\n2\tgreen\n'  # not '\ufeffred'
  found = [(pathlib.Path(line['source']).name, line['stage'], line['code'], line['reason'])
           for line in rejected_lines(out)]
  assert found == [
      ('astronaut.txt', 'annotation', 'unknown_category',
       'class 7 is not one of the classes'),  # the file's 7, not the label id 8
      ('coffee.txt', 'read', 'unreadable_annotations',
       f'{root}/labels/coffee.txt is not UTF-8 text: byte 0xff at offset 18')]
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected']) == (2, 1)
  assert info['detection']['objects_per_class'] == {'red': 1, 'green': 1}
  assert run_validate(out)[0] == EXIT_OK


def test_an_annotation_file_or_class_list_too_large_is_read_no_further(demo, tmp_path,
                                                                      monkeypatch, capsys):
  """A per-image label file (or VOC XML) was read whole into memory, as was
  data.yaml on the launcher: now at most the cap, then a rejected row or exit 2."""
  from pipeline.configuration import detection_files as launcher_files
  from transforms import detection_files
  monkeypatch.setattr(detection_files, 'MAX_ANNOTATION_FILE_BYTES', 100)
  root = _yolo_tree(tmp_path / 'set', demo)
  (root / 'classes.txt').write_text('red\ngreen\n')
  (root / 'labels' / 'astronaut.txt').write_text('0 0.5 0.5 0.2 0.2\n')
  (root / 'labels' / 'coffee.txt').write_text('0 0.5 0.5 0.2 0.2\n' * 10)  # 180 bytes
  out = tmp_path / 'out'
  assert _convert_yolo(root / 'classes.txt', out) == EXIT_OK
  assert [(pathlib.Path(line['source']).name, line['code'], line['reason'])
          for line in rejected_lines(out)] == [
      ('coffee.txt', 'unreadable_annotations',
       f"cannot read {root}/labels/coffee.txt: it holds more than 100 bytes, more than any "
       f"image's annotations need: not read")]
  monkeypatch.setattr(launcher_files, 'MAX_LABEL_MAP_BYTES', 8)
  capsys.readouterr()
  assert _convert_yolo(root / 'classes.txt', tmp_path / 'out2') == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --annotations {root}/classes.txt: {root}/classes.txt holds more than 8 bytes, '
      f'more than any annotation file needs\n')


@pytest.mark.parametrize('text, message', [
    (b'names: [red, gr\xe9en]\n', ' is not UTF-8 text: byte 0xe9 at offset 15'),
    (b'names: [[red, green], {x: 1}, null, 3.5]\n',
     ": \"names\" entry 0 is a list (['red', 'green']), not a class name (quote a name YAML "
     'would read as something else)'),
    (b'names: [red, null]\n', ': "names" entry 1 is null (None), not a class name (quote a '
                              'name YAML would read as something else)'),
    (b'names: {0: red, 1: 3.5}\n', ': "names" entry 1 is a number (3.5), not a class name '
                                   '(quote a name YAML would read as something else)'),
    # the billion laughs: 352 bytes, 9 levels of 9 aliases (2.5 GB when expanded)
    (('a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n' + ''.join(
        f'{c}: &{c} [' + ', '.join([f'*{chr(ord(c) - 1)}'] * 9) + ']\n' for c in 'bcdefghi')
      + 'names: *i\n').encode(),
     ': line 1: YAML anchors and aliases (&name, *name) are not accepted; write the value out'),
    # half an emoji: no UTF-8 file can hold it (dataset_info.json failed the job, exit 1)
    (b'names:\n  - red\n  - "bird \\ud83d"\n',
     ': line 3: a string holds a lone UTF-16 surrogate (\\ud83d), half a character: escape '
     'the whole character (\\U0001F426, or a surrogate pair \\ud83d\\udc26) or write it as '
     'UTF-8'),
])
def test_yolo_data_yaml_that_is_refused(demo, tmp_path, capsys, text, message):
  root = _yolo_tree(tmp_path / 'set', demo)
  (root / 'data.yaml').write_bytes(text)
  assert _convert_yolo(root / 'data.yaml', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == f'error: {root}/data.yaml{message}'
  assert not (tmp_path / 'out').exists()


def test_a_data_yaml_written_by_json_dump_names_its_emoji_class(demo, tmp_path):
  """json.dump escapes a character outside the BMP as a surrogate pair, which
  YAML 1.2 reads as JSON does: the class is named by the character. PyYAML
  kept the two halves, and the run failed at its end writing
  dataset_info.json (UnicodeEncodeError: surrogates not allowed, exit 1)."""
  root = _yolo_tree(tmp_path / 'set', demo)
  (root / 'data.yaml').write_text(json.dumps({'names': ['red', 'bird \U0001F426']}))
  assert '\\ud83d\\udc26' in (root / 'data.yaml').read_text()
  (root / 'labels' / 'astronaut.txt').write_text('1 0.5 0.5 0.2 0.2\n')
  out = tmp_path / 'out'
  assert _convert_yolo(root / 'data.yaml', out) == EXIT_OK
  assert read_info(out)['label_map'] == ['', 'red', 'bird \U0001F426']
  assert (out / 'label_map.txt').read_text(encoding='utf-8') == '1\tred\n2\tbird \U0001F426\n'


def test_a_yolo_or_voc_image_path_outside_is_rejected_unread():
  """YOLO's paths come from listing images/; the check still holds for any
  listed path (file_row is shared with VOC)."""
  source = FileSource('yolo', '/data/images', SplitConfig(names=('train',)), (1,))
  row, rejected = file_row(('../../etc/passwd', '', 'train', 1, ()), b'', source)
  assert row is None
  assert [(r.stage, r.code, r.reason) for r in rejected] == [
      ('annotation', 'path_outside_image_dir', "image path '../../etc/passwd' is outside "
       '--image_dir (an absolute path, or .. climbing out)')]


# --- validate ---


def _rgb_mask(features):
  mask = masks.decode_mask(features['image/object/mask'][1][0])
  features['image/object/mask'] = ('bytes', [masks.encode_mask(
      Image.fromarray(mask).convert('RGB'))] + features['image/object/mask'][1][1:])


def _first_mask(change):
  """A change of the record's first mask PNG (its bytes -> other bytes)."""
  def changed(features):
    first, *others = features['image/object/mask'][1]
    features['image/object/mask'] = ('bytes', [change(first), *others])
  return changed


def _mask_crc_wrong(data: bytes) -> bytes:
  """The mask's IDAT chunk with its CRC off by one bit."""
  data = bytearray(data)
  start = data.index(b'IDAT')
  end = start + 4 + int.from_bytes(data[start - 4:start], 'big')
  data[end] ^= 1
  return bytes(data)


@pytest.mark.parametrize('change, kind', [
    (lambda f: f.update({'image/source_id': ('bytes', [b''])}), 'empty_source_id'),
    # Pillow decodes both; tf.io.decode_png (read.load, the Model Garden's
    # decoder) fails on them, and so the whole record
    (_first_mask(lambda data: data[:-12]), 'undecodable_mask'),  # no IEND: cut short
    (_first_mask(_mask_crc_wrong), 'undecodable_mask'),
    (lambda f: f.update({'image/object/area': (
        'float', [float('nan')] + f['image/object/area'][1][1:])}), 'bad_area'),
    (lambda f: f.update({'image/object/area': (
        'float', [-1.0] + f['image/object/area'][1][1:])}), 'bad_area'),
    (_rgb_mask, 'wrong_mask_mode'),
])
def test_validate_exits_1_on_a_damaged_detection_record(hostile_coco, tmp_path, change, kind):
  _, converted, _ = hostile_coco
  out = copy_dataset(converted, tmp_path)
  assert run_validate(out)[0] == EXIT_OK
  shard = rewrite_first_record(out, change)
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {kind: 1})
  assert [p['file'] for p in report['problems']] == [shard]


def test_unknown_category_names_the_file_value():
  obj = objects.ObjectAnnotation(-1, (1, 1, 2, 2), category='category_id "7"')
  annotation = objects.ImageAnnotation(1, (10, 10), (obj,))
  _, rejected = objects.checked_objects(annotation, {1}, False)
  assert [r.reason for r in rejected] == ['category_id "7" is not one of the classes']


def test_voc_mask_pngs_over_max_pixels_or_broken_reject_their_row(demo, tmp_path):
  (tmp_path / 'Annotations').mkdir()
  (tmp_path / 'SegmentationObject').mkdir()
  for stem in ('astronaut', 'coffee', 'chelsea'):
    (tmp_path / 'Annotations' / f'{stem}.xml').write_text(_xml(f'{stem}.jpg', width='',
                                                                height=''))
  Image.new('P', (600, 600)).save(tmp_path / 'SegmentationObject' / 'chelsea.png')
  (tmp_path / 'SegmentationObject' / 'coffee.png').write_bytes(b'\x89PNG\r\n\x1a\n broken')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'Annotations'), '--annotation_format',
                       'voc', '--image_dir', str(demo / 'images'), '--output_dir', str(out),
                       '--include_masks', '--max_pixels', '300000', '--progress', 'off',
                       '--max_error_rate', '1']) == EXIT_OK
  masks_dir = tmp_path / 'SegmentationObject'
  assert sorted((line['row']['image'], line['code'], line['reason'])
                for line in rejected_lines(out)) == [
      ('chelsea.jpg', 'bad_mask', f'{masks_dir}/chelsea.png: 600x600 is more than '
                                  f'--max_pixels 300000'),
      ('coffee.jpg', 'bad_mask', f'{masks_dir}/coffee.png: not an image Pillow can read')]
  assert read_info(out)['num_examples'] == 1
  assert run_validate(out)[0] == EXIT_OK



def _voc_with_coffee_mask(tmp_path, demo, coffee_mask) -> pathlib.Path:
  """A VOC set of astronaut.jpg (a 512x512 mask of 1s) and coffee.jpg (the
  mask `coffee_mask`), its XMLs giving no size, converted with
  --include_masks (exit 0 under --max_error_rate 1): -> the output folder."""
  (tmp_path / 'Annotations').mkdir()
  (tmp_path / 'SegmentationObject').mkdir()
  for stem in ('astronaut', 'coffee'):
    (tmp_path / 'Annotations' / f'{stem}.xml').write_text(_xml(f'{stem}.jpg', width='',
                                                                height=''))
  Image.new('P', (512, 512), 1).save(tmp_path / 'SegmentationObject' / 'astronaut.png')
  coffee_mask.save(tmp_path / 'SegmentationObject' / 'coffee.png')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'Annotations'), '--annotation_format',
                       'voc', '--image_dir', str(demo / 'images'), '--output_dir', str(out),
                       '--include_masks', '--progress', 'off', '--max_error_rate', '1']) == EXIT_OK
  return out


@pytest.mark.parametrize('mode', ['RGB', 'RGBA', 'LA'])
def test_a_voc_mask_png_in_colour_rejects_its_row(demo, tmp_path, mode):
  """A SegmentationObject PNG holds object indices (VOC writes palette
  PNGs); one saved in colour was a decode/unexpected_error row ("Too many
  dimensions: 3 > 2.")."""
  out = _voc_with_coffee_mask(tmp_path, demo, Image.new(mode, (600, 400)))
  masks_dir = tmp_path / 'SegmentationObject'
  assert [(line['row']['image'], line['stage'], line['code'], line['reason'])
          for line in rejected_lines(out)] == [
      ('coffee.jpg', 'annotation', 'bad_mask',
       f'coffee.jpg: {masks_dir}/coffee.png holds colours ({mode}), not object indices '
       '(a palette or grayscale PNG, as VOC writes)')]
  [[example]] = shard_records(out)
  [encoded] = example['image/object/mask'][1]
  mask = np.asarray(Image.open(io.BytesIO(encoded)))
  assert mask.shape == (300, 300) and mask.min() == 1  # its PNG's value 1: every pixel
  assert run_validate(out)[0] == EXIT_OK

@pytest.mark.parametrize('point', [1e7, 1e308, float('inf'), float('nan')])
def test_a_polygon_point_far_outside_its_box_is_refused_before_pycocotools(point):
  """pycocotools draws each edge at 5x: a point at 1e7 made it allocate
  without bound (a segmentation fault that killed the whole run)."""
  near = [10.0, 10.0, 40.0, 10.0, 40.4, 30.0]  # within the edge tolerance of its box
  far = [10.0, 10.0, 40.0, 10.0, point, 30.0]
  made = [objects.ObjectAnnotation(1, (10, 10, 40, 30), segmentation=('polygons', [p]),
                                   line=n) for n, p in enumerate([near, far], 1)]
  annotation = objects.ImageAnnotation(1, (64, 48), tuple(made))
  kept, rejected = objects.checked_objects(annotation, {1}, True)
  assert [o.line for o in kept] == [1]
  assert [(r.code, r.line) for r in rejected] == [(objects.BAD_ANNOTATION, 2)]
  assert f'polygon point ({point:g}, 30) is far outside its box (10, 10, 40, 30)' in (
      rejected[0].reason)
  # without masks the polygon is not drawn, and not checked
  assert len(objects.checked_objects(annotation, {1}, False)[0]) == 2


def test_an_rle_of_another_size_than_its_images_is_a_bad_mask():
  """An RLE of 400x600 on an image recorded as 512x512 was stretched to the
  image without a word (the reference writes it at the wrong size)."""
  blob = {'size': [48, 64], 'counts': [0, 48 * 64]}
  other = {'size': [40, 60], 'counts': [0, 40 * 60]}
  made = tuple(objects.ObjectAnnotation(1, (0, 0, 10, 10), segmentation=('rle', rle), line=n)
               for n, rle in enumerate([blob, other], 1))
  annotation = objects.ImageAnnotation(1, (64, 48), made)
  kept, rejected = objects.checked_objects(annotation, {1}, True)
  assert [o.line for o in kept] == [1]
  assert [(r.code, r.line, r.reason) for r in rejected] == [
      (objects.BAD_MASK, 2, "RLE size [40, 60] (height, width) is not the 64x48 image's")]


@pytest.mark.parametrize('field, value, said', [
    ('segmentation', 5, 'segmentation 5 is neither polygons nor an RLE'),
    ('segmentation', {'size': [4, 4]}, 'segmentation {"size": [4, 4]} is neither polygons'),
    ('segmentation', 'abc', 'segmentation "abc" is neither polygons nor an RLE'),
    ('area', 1e300, 'area 1e+300 is not a number >= 0'),  # inf as the float32 it is written as
    # a polygon point that is no number was coerced by float(): "1" and true were 1.0
    ('segmentation', [['1', 1, 4, 1, 4, 4]], 'polygon point "1" is not a number'),
    ('segmentation', [[1, 1, 4, 1, 4, 4], [True, 1, 4, 1, 4, 4]],
     'polygon point true is not a number'),
    # one flat polygon: TypeError: 'int' object is not iterable
    ('segmentation', [1, 1, 4, 1, 4, 4],
     'segmentation [1, 1, 4, 1, 4, 4] is neither polygons nor an RLE'),
])
def test_a_segmentation_or_area_that_cannot_be_written_is_a_bad_annotation(field, value, said):
  """A segmentation that is no segmentation got the box as its mask; an area
  past float32's range was written as inf (convert exited 0, validate failed)."""
  source = coco.CocoSource('a.json', 'images', SplitConfig(names=('train',)), {1: 1})
  ann = {'bbox': [1, 1, 2, 2], 'category_id': 1, 'area': 4, field: value}
  with pytest.raises(objects.AnnotationError) as raised:
    coco.coco_object(ann, source, 1)
  assert raised.value.code == objects.BAD_ANNOTATION and said in str(raised.value)
  for fine in ([], None):  # no segmentation: the box is its mask
    assert coco.coco_object({**ann, 'area': 4, 'segmentation': fine}, source,
                            1).segmentation is None


@pytest.mark.parametrize('crowd, stored', [(True, 1), (False, 0), (1, 1), (0, 0), (1.0, 1)])
def test_iscrowd_true_and_false_are_1_and_0_as_pycocotools_reads_them(crowd, stored):
  source = coco.CocoSource('a.json', 'images', SplitConfig(names=('train',)), {1: 1})
  ann = {'bbox': [1, 1, 2, 2], 'category_id': 1, 'iscrowd': crowd}
  assert coco.coco_object(ann, source, 1).is_crowd == stored


@pytest.mark.parametrize('categories, said', [
    # 2**62: a label map of 2**62 names (the run never ended); 10**7 took 86 s
    ([{'id': 1, 'name': 'person'}, {'id': 2 ** 62, 'name': 'huge'}],
     f'class id {2 ** 62} is over 100,000 (the label map holds a name for every id up to '
     f'the largest)'),
    # convert exited 0, then validate found its objects' label not in the label map
    ([{'id': 1, 'name': ' '}], 'class 1 has an empty name'),
    # label_map.txt and .pbtxt broke in two lines; validate said OK
    ([{'id': 1, 'name': 'per\nson'}],
     "class name 'per\\nson' holds a line break or tab (label_map.txt has one id<TAB>name "
     'line per class)'),
])
def test_a_class_the_label_map_cannot_hold_exits_2(demo, tmp_path, capsys, categories, said):
  document = json.loads((demo / 'instances.json').read_text())
  path = _coco(tmp_path, {**document, 'categories': categories})
  assert _convert_coco(path, demo / 'images', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == f'error: {path}: {said}'
  assert not (tmp_path / 'out').exists()


def test_a_yolo_class_the_label_map_cannot_hold_exits_2(demo, tmp_path, capsys):
  root = _yolo_tree(tmp_path / 'set', demo)
  (root / 'classes.txt').write_text('red\n\ngreen\n')  # a blank line: class 2 unnamed
  assert _convert_yolo(root / 'classes.txt', tmp_path / 'out') == EXIT_USAGE
  assert _one_line(capsys) == f'error: {root}/classes.txt: class 2 has an empty name'
  (root / 'data.yaml').write_text('names: {0: red, 200000: green}\n')
  assert _convert_yolo(root / 'data.yaml', tmp_path / 'out') == EXIT_USAGE
  assert 'class id 200001 is over 100,000' in _one_line(capsys)
  assert not (tmp_path / 'out').exists()


def test_an_rle_without_a_recorded_size_must_be_its_images(demo, tmp_path):
  """With no width and height recorded, an RLE is checked against the
  decoded image: one of another size was stretched onto it without a word."""
  def rle(height, width):
    return {'size': [height, width], 'counts': [0, height * width]}
  document = {
      'images': [{'id': 1, 'file_name': 'coffee.jpg'}],  # 600x400, no size recorded
      'categories': [{'id': 1, 'name': 'cup'}],
      'annotations': [
          {'id': 10, 'image_id': 1, 'category_id': 1, 'bbox': [0, 0, 600, 400],
           'iscrowd': 1, 'segmentation': rle(400, 600)},
          {'id': 11, 'image_id': 1, 'category_id': 1, 'bbox': [0, 0, 300, 200],
           'iscrowd': 1, 'segmentation': rle(200, 300)}]}
  out = tmp_path / 'out'
  assert _convert_coco(_coco(tmp_path, document), demo / 'images', out, '--include_masks',
                       '--height', '40', '--width', '60', '--max_error_rate', '1') == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['code'], line['row']['image']) == ('bad_mask', 'coffee.jpg')
  assert line['reason'].endswith("the mask of its RLE is 300x200, its annotation's image 600x400")
  [[example]] = shard_records(out)
  [encoded] = example['image/object/mask'][1]
  mask = np.asarray(Image.open(io.BytesIO(encoded)))
  assert mask.shape == (40, 60) and mask.min() == 1  # the whole image, at the output size
  assert run_validate(out)[0] == EXIT_OK


def test_a_voc_mask_png_of_another_size_rejects_its_row(demo, tmp_path):
  out = _voc_with_coffee_mask(tmp_path, demo, Image.new('P', (300, 200), 1))  # 600x400
  masks_dir = tmp_path / 'SegmentationObject'
  assert [(line['row']['image'], line['code'], line['reason'])
          for line in rejected_lines(out)] == [
      ('coffee.jpg', 'bad_mask', f'coffee.jpg: the mask of {masks_dir}/coffee.png is 300x200, '
                                 "its annotation's image 600x400")]
  assert read_info(out)['num_examples'] == 1
  assert run_validate(out)[0] == EXIT_OK


# --- annotation files that are not regular files: refused, never opened


@pytest.mark.parametrize('fmt', ['coco', 'voc', 'yolo'])
def test_an_annotation_file_that_is_a_fifo_exits_2_unread(demo, tmp_path, capsys, fmt):
  """A FIFO where the launcher reads an annotation file (COCO's JSON, a VOC
  XML, YOLO's classes.txt) waited for a writer forever: exit 2, one line."""
  if fmt == 'coco':
    given = fifo = tmp_path / 'instances.json'
    head = f'error: --annotations {fifo}'
  elif fmt == 'voc':
    given = tmp_path / 'Annotations'
    given.mkdir()
    fifo = given / 'a.xml'
    head = f'error: --annotations {given}: the file {fifo}'
  else:
    given = _yolo_tree(tmp_path / 'set', demo)
    fifo = given / 'classes.txt'
    head = f'error: --annotations {given}: the file {fifo}'
  with fifo_writer_that_unblocks_readers(fifo) as unblocked:
    code = convert.main(['--annotations', str(given), '--annotation_format', fmt,
                         '--image_dir', str(demo / 'images'),
                         '--output_dir', str(tmp_path / 'out')])
  assert code == EXIT_USAGE
  assert _one_line(capsys) == f'{head} does not exist or is not a file'
  assert not unblocked and not (tmp_path / 'out').exists()


def _source_ids(out, ids: list) -> str:
  """The first shard's records given these image/source_ids, in order; -> its name."""
  shard = out / read_info(out)['splits']['train']['shards'][0]
  records = records_of(shard)
  assert len(records) >= len(ids)
  for i, source_id in enumerate(ids):
    features = {name: ({'bytes_list': 'bytes', 'int64_list': 'int64',
                        'float_list': 'float'}[kind], values)
                for name, (kind, values) in parse_example(records[i]).items()}
    features['image/source_id'] = ('bytes', [source_id])
    records[i] = serialize_example(features)
  before = shard.stat().st_size
  shard.write_bytes(b''.join(frame(r) for r in records))
  resync_sidecars(out)  # as a careful tamperer would: only the source ids differ
  info = read_info(out)
  info['splits']['train']['num_bytes'] += shard.stat().st_size - before
  write_info(out, info)
  return shard.name


@pytest.mark.parametrize('workers', [(), ('--direct_num_workers', '2', '--direct_running_mode',
                                          'multi_threading')], ids=['gathered', 'grouped'])
def test_two_records_with_one_source_id_are_a_problem(hostile_coco, tmp_path, workers):
  """COCO evaluation takes them for one image: the repeat is named, on the
  path that gathers the records' facts and on the one grouping them by name."""
  _, converted, _ = hostile_coco
  out = copy_dataset(converted, tmp_path)
  shard = _source_ids(out, [b'7', b'7'])
  code, report = run_validate(out, *workers)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'duplicate_source_id': 1})
  assert [(p['file'], p['record'], p['detail']) for p in report['problems']] == [
      (shard, 1, f"image/source_id '7' appears 2 times; first at {shard}#0")]


def test_empty_source_ids_are_each_a_problem_and_no_repeat(hostile_coco, tmp_path):
  _, converted, _ = hostile_coco
  out = copy_dataset(converted, tmp_path)
  shard = _source_ids(out, [b'', b''])
  code, report = run_validate(out)
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'empty_source_id': 2})
  assert [(p['file'], p['record'], p['detail']) for p in report['problems']] == [
      (shard, 0, 'image/source_id is empty'), (shard, 1, 'image/source_id is empty')]


def test_a_voc_mask_opens_under_max_pixels_whatever_opens_the_images(monkeypatch):
  # The masks open in the launcher's detection step: images opening in image
  # processes (the image step then leaves the launcher's Pillow alone) must
  # not leave Pillow's own, lower bomb limit refusing a mask --max_pixels allows.
  import warnings

  from PIL import Image

  from transforms.core.detect import DetectionOptions
  from transforms.core.shuffle import DEFAULT_ORDERING
  from transforms.core.spec import ExampleSpec
  from transforms.core.spec import ImageSpec
  from transforms.detection import _DetectFn
  monkeypatch.setattr(Image, 'MAX_IMAGE_PIXELS', 89_478_485)  # Pillow's default, put back after
  with warnings.catch_warnings():
    _DetectFn(('cat',), ImageSpec(max_pixels=200_000_000), ExampleSpec(), DetectionOptions(),
              DEFAULT_ORDERING).setup()
    assert Image.MAX_IMAGE_PIXELS == 200_000_000
