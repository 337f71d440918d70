"""--annotation_format voc and yolo on the demo's real photos (scikit-image's
astronaut, coffee, chelsea with hand-made boxes, pipeline/demo_detection.py):
splits from their files, ids, masks, and malformed XML or YAML exits 2."""

import pathlib
import shutil

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline import demo_detection
from pipeline import look
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_OVER_BUDGET
from pipeline.errors import EXIT_USAGE
from pipeline.reading import dataset
from tests.conftest import feature
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from transforms.core import masks as masks_codec
from transforms.core import yolo

pytestmark = pytest.mark.xdist_group('detection')
NAMES = demo_detection.CATEGORIES
SIZES = {'astronaut.jpg': (512, 512), 'coffee.jpg': (600, 400), 'chelsea.jpg': (451, 300)}


@pytest.fixture(scope='module')
def photos(tmp_path_factory) -> pathlib.Path:
  root = tmp_path_factory.mktemp('photos')
  demo_detection.make_sample(str(root))
  return root / 'images'


def _voc(root: pathlib.Path, photos: pathlib.Path) -> pathlib.Path:
  (root / 'Annotations').mkdir(parents=True)
  (root / 'ImageSets' / 'Main').mkdir(parents=True)
  shutil.copytree(photos, root / 'JPEGImages')
  for name, objects in demo_detection.OBJECTS.items():
    width, height = SIZES[name]
    parts = ''.join(
        f'<object><name>{NAMES[c]}</name><difficult>{int(c == 7)}</difficult>'
        f'<truncated>0</truncated><bndbox><xmin>{x + 1}</xmin><ymin>{y + 1}</ymin>'
        f'<xmax>{x + w}</xmax><ymax>{y + h}</ymax></bndbox></object>'
        for c, x, y, w, h, _ in objects)
    (root / 'Annotations' / f'{name[:-4]}.xml').write_text(
        f'<annotation><filename>{name}</filename><size><width>{width}</width>'
        f'<height>{height}</height><depth>3</depth></size>{parts}</annotation>')
  main = root / 'ImageSets' / 'Main'
  (main / 'train.txt').write_text('astronaut\ncoffee\n')
  (main / 'val.txt').write_text('chelsea\n')
  (main / 'trainval.txt').write_text('astronaut\ncoffee\nchelsea\n')  # not a split
  (main / 'cat_train.txt').write_text('chelsea  1\n')  # per class: not a split
  # chelsea's instances: 1 the cat, 2 and 3 the eyes, 4 the nose; 255 the outlines
  pixels = np.zeros((300, 451), np.uint8)
  for index, (_, x, y, w, h, _) in enumerate(demo_detection.OBJECTS['chelsea.jpg'], 1):
    pixels[y:y + h, x:x + w] = index
  pixels[0, :] = 255
  (root / 'SegmentationObject').mkdir()
  png = Image.fromarray(pixels, 'P')
  # a full palette, as VOC's PNGs have: Pillow keeps the indices as they are
  png.putpalette([v for i in range(256) for v in (i, i * 7 % 256, i * 13 % 256)])
  png.save(root / 'SegmentationObject' / 'chelsea.png')
  return root


def test_voc_splits_ids_and_instance_masks(photos, tmp_path):
  root = _voc(tmp_path / 'VOC', photos)
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'voc',
                       '--image_dir', str(root / 'JPEGImages'), '--include_masks',
                       '--height', '100', '--width', '100', '--output_dir', str(out),
                       '--progress', 'off']) == EXIT_OK
  info = read_info(out)
  assert {s: d['num_examples'] for s, d in info['splits'].items()} == {'train': 2, 'val': 1}
  # 1-based in sorted-name order
  assert info['label_map'] == ['', 'cat', 'cup', 'eye', 'face', 'helmet', 'nose', 'rocket',
                               'saucer', 'spoon']
  coffee = next(e for e in dataset.examples(str(out), 'train') if e['key'] == 'coffee.jpg')
  assert coffee['class_text'] == ['cup', 'saucer', 'spoon']
  # the cup: VOC corners 174..408 of 600 columns -> 173..408 continuous
  assert np.allclose(coffee['boxes'][0], [15 / 400, 173 / 600, 300 / 400, 408 / 600],
                     atol=1e-6)
  chelsea = next(dataset.examples(str(out), 'val'))
  nose = chelsea['masks'][3]  # instance 4 of the PNG: 60x50 of 451x300
  assert abs(int(nose.sum()) - 60 * 50 * (100 / 451) * (100 / 300)) < 15


def test_malformed_voc_xml_exits_2(photos, tmp_path, capsys):
  root = _voc(tmp_path / 'VOC', photos)
  (root / 'Annotations' / 'coffee.xml').write_text('<annotation><object>')
  assert convert.main(['--annotations', str(root), '--annotation_format', 'voc',
                       '--image_dir', str(root / 'JPEGImages'),
                       '--output_dir', str(tmp_path / 'out')]) == EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert f'{root}/Annotations/coffee.xml is not valid XML: no element found' in err
  assert len(err.splitlines()) == 1 and not (tmp_path / 'out').exists()


def _yolo(root: pathlib.Path, photos: pathlib.Path) -> pathlib.Path:
  ids = {c: i for i, c in enumerate(NAMES)}  # class index: the categories in order
  (root).mkdir(parents=True)
  (root / 'data.yaml').write_text('path: .\ntrain: images/train\nval: images/val\nnames:\n'
                                  + ''.join(f'  - {n}\n' for n in NAMES.values()))
  for name, objects in demo_detection.OBJECTS.items():
    split = 'val' if name == 'chelsea.jpg' else 'train'
    for folder in ('images', 'labels'):
      (root / folder / split).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(photos / name, root / 'images' / split / name)
    width, height = SIZES[name]
    rows = []
    for c, x, y, w, h, mask in objects:
      if mask == 'ellipse':  # Ultralytics' segmentation row: the box's corners as a polygon
        corners = [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]
        rows.append(f'{ids[c]} ' + ' '.join(f'{px / width:.6f} {py / height:.6f}'
                                            for px, py in corners))
      else:
        rows.append(f'{ids[c]} {(x + w / 2) / width:.6f} {(y + h / 2) / height:.6f} '
                    f'{w / width:.6f} {h / height:.6f}')
    (root / 'labels' / split / f'{name[:-4]}.txt').write_text('\n'.join(rows) + '\n')
  return root


def test_yolo_ultralytics_layout(photos, tmp_path):
  root = _yolo(tmp_path / 'yolo', photos)
  (root / 'labels' / 'train' / 'coffee.txt').write_text(
      (root / 'labels' / 'train' / 'coffee.txt').read_text() + '3 0.5\n')  # a bad row
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root / 'data.yaml'), '--annotation_format',
                       'yolo', '--include_masks', '--height', '128', '--width', '128',
                       '--output_dir', str(out), '--progress', 'off']) == EXIT_OK
  info = read_info(out)
  assert {s: d['num_examples'] for s, d in info['splits'].items()} == {'train': 2, 'val': 1}
  assert info['label_map'][1:4] == ['face', 'helmet', 'rocket']  # index + 1
  assert [line['code'] for line in rejected_lines(out)] == ['bad_annotation']
  astronaut = next(e for e in dataset.examples(str(out), 'train')
                   if e['key'] == 'train/astronaut.jpg')
  assert np.allclose(astronaut['boxes'][2], [0, 355 / 512, 290 / 512, 475 / 512], atol=1e-5)
  face = astronaut['masks'][0]  # a polygon row: its box, 150x165 of 512x512 at 128/512
  assert abs(int(face.sum()) - 150 * 165 / 16) < 40


def test_malformed_yolo_yaml_exits_2(tmp_path, capsys):
  (tmp_path / 'data.yaml').write_text('names: [a, b\n')
  assert convert.main(['--annotations', str(tmp_path / 'data.yaml'), '--annotation_format',
                       'yolo', '--output_dir', str(tmp_path / 'out')]) == EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert err == (f"error: {tmp_path}/data.yaml does not parse: line 2: expected ',' or "
                 f"']', but got '<stream end>' (while parsing a flow sequence started at "
                 f'line 1)')


def test_yolo_rows():
  annotation, rejected = yolo.parse_labels(
      '0 0.5 0.5 0.2 0.4\n1 0.1 0.1\n\n2 x y z w\n0.0 0.5 0.5 0.2 0.2\n', 3, 'a.txt')
  assert [o.box for o in annotation.objects] == [pytest.approx((0.4, 0.3, 0.6, 0.7))]
  assert annotation.objects[0].label == 1 and annotation.normalized
  assert [(r.code, r.line, r.reason) for r in rejected] == [
      ('short_polygon', 2, 'line is not "class cx cy w h" or "class x1 y1 x2 y2 x3 y3 ..." '
                           '(3 fields)'),
      ('bad_annotation', 4, "coordinate 'x' is not a number"),
      ('bad_annotation', 5, "class '0.0' is not a whole number")]


def _none_flags(fmt: str, photos: pathlib.Path, root: pathlib.Path) -> list:
  """The flags converting the demo's photos from `fmt` at their own size."""
  if fmt == 'coco':
    return ['--annotations', str(photos.parent / 'instances.json'), '--image_dir', str(photos)]
  if fmt == 'voc':
    voc = _voc(root / 'VOC', photos)
    return ['--annotations', str(voc), '--image_dir', str(voc / 'JPEGImages')]
  return ['--annotations', str(_yolo(root / 'yolo', photos) / 'data.yaml')]


@pytest.mark.parametrize('masks', [False, True])
@pytest.mark.parametrize('fmt', ['coco', 'voc', 'yolo'])
def test_resize_mode_none_keeps_every_box_where_it_is(photos, tmp_path, capsys, fmt, masks):
  # --resize_mode none with JPEG output passes the JPEG bytes through: the
  # boxes' frame is the file's own size (it was read after a 1/8 draft decode,
  # and 9 of these 10 boxes were lost as "dropped by the crop")
  out = tmp_path / 'out'
  assert convert.main([*_none_flags(fmt, photos, tmp_path), '--annotation_format', fmt,
                       '--resize_mode', 'none', '--encoding', 'jpeg', '--output_dir', str(out),
                       '--progress', 'off', *(['--include_masks'] if masks else [])]) == EXIT_OK
  info = read_info(out)
  assert info['detection']['num_objects'] == 10
  # the summary counts classes, not the largest id (COCO's have gaps)
  assert ('  classes: 9 (ids up to 11); output: ' if fmt == 'coco' else
          '  classes: 9; output: ') in capsys.readouterr().out
  if not masks:  # inspect says what the records hold
    assert look.main(['--input_dir', str(out)]) == EXIT_OK
    assert 'Image: original size, 3 channel(s) jpeg, resize none (bilinear)\n' in (
        capsys.readouterr().out)
  assert info['detection']['dropped_boxes']['crop_visibility'] == 0
  assert info['num_rejected'] == 0 and info.get('rejected_annotations_by_reason', {}) == {}
  examples = read_examples(out)
  assert len(examples) == 3
  for example in examples:
    name = feature(example, 'image/filename').decode().rsplit('/', 1)[-1]
    width, height = SIZES[name]
    assert (feature(example, 'image/width'), feature(example, 'image/height')) == (
        width, height)
    assert feature(example, 'image/encoded') == (photos / name).read_bytes()  # passed through
    objects = demo_detection.OBJECTS[name]
    expected = np.array([[y / height, x / width, (y + h) / height, (x + w) / width]
                         for _, x, y, w, h, _ in objects], np.float32)
    found = np.stack([np.array(example[f'image/object/bbox/{k}'][1], np.float32)
                      for k in ('ymin', 'xmin', 'ymax', 'xmax')], axis=1)
    if fmt == 'yolo':  # 6 decimals of a fraction in the label file
      assert np.allclose(found, expected, atol=2e-6), name
    else:
      assert (found == expected).all(), (name, found, expected)
    areas = np.array(example['image/object/area'][1], np.float32)
    # COCO: the recorded area (w x h here); VOC and YOLO: the box's, in output pixels
    assert np.allclose(areas, [w * h for _, x, y, w, h, _ in objects], rtol=1e-4), name
    if masks:
      decoded = [masks_codec.decode_mask(m) for m in example['image/object/mask'][1]]
      assert [m.shape for m in decoded] == [(height, width)] * len(objects)
      instances = np.asarray(Image.open(tmp_path / 'VOC' / 'SegmentationObject' /
                                        'chelsea.png')) if fmt == 'voc' else None
      for index, ((_, x, y, w, h, shape), mask) in enumerate(zip(objects, decoded), 1):
        inside = mask[y:y + h, x:x + w]
        if fmt == 'voc' and name == 'chelsea.jpg':  # the PNG's instance, pixel for pixel
          assert (mask == (instances == index)).all(), index
        elif fmt == 'coco' and shape == 'ellipse':  # inside its box, nothing outside
          assert 0.7 < inside.mean() < 0.85 and mask.sum() == inside.sum(), name
        else:  # a box as its mask, an RLE or a YOLO polygon of the box's corners
          assert inside.all() and mask.sum() == inside.sum(), (name, index)


def _yolo_flat(root: pathlib.Path) -> pathlib.Path:
  """images/a.jpg (64x48) with two boxes less than a pixel past its left and
  right edges, and labels/orphan.txt, whose image is not there."""
  (root / 'images').mkdir(parents=True)
  (root / 'labels').mkdir()
  Image.new('RGB', (64, 48), (90, 120, 60)).save(root / 'images' / 'a.jpg')
  (root / 'classes.txt').write_text('cat\ndog\n')
  (root / 'labels' / 'a.txt').write_text('1 0.005 0.5 0.02 0.1\n0 0.99 0.5 0.04 0.1\n')
  (root / 'labels' / 'orphan.txt').write_text('0 0.5 0.5 0.1 0.1\n')
  (root / 'labels' / 'classes.txt').write_text('cat\ndog\n')  # LabelImg's: no label file
  return root


def test_a_yolo_label_file_without_its_image_is_a_rejected_row(tmp_path, capsys):
  root = _yolo_flat(tmp_path / 'yolo')
  flags = ['--annotations', str(root), '--annotation_format', 'yolo', '--resize_mode', 'none',
           '--encoding', 'jpeg', '--progress', 'off']
  out = tmp_path / 'out'
  # a row like any other: over the default --max_error_rate 0
  assert convert.main([*flags, '--output_dir', str(out)]) == EXIT_OVER_BUDGET
  assert '  rejected annotation/missing_image: 1\n' in capsys.readouterr().out
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected'],
          info['error_rate']) == (2, 1, 1, 0.5)
  assert info['rejected_by_reason'] == {'annotation/missing_image': 1}
  assert info['rejected_annotations_by_reason'] == {}  # the boxes within 1 px are clipped
  label = f'{root}/labels/orphan.txt'
  assert rejected_lines(out) == [{
      'row': {'image': '', 'annotations': label, 'split': ''}, 'stage': 'annotation',
      'code': 'missing_image', 'source': label, 'line': 2,
      'reason': f'label file {label} has no image: no orphan.* image in {root}/images'}]
  (example,) = read_examples(out)
  # 0.32 px past the left edge and 0.64 px past the right one, clipped (D4)
  assert feature(example, 'image/object/bbox/xmin') == [0.0, np.float32(62.08 / 64)]
  assert feature(example, 'image/object/bbox/xmax') == [np.float32(0.96 / 64), 1.0]
  assert convert.main([*flags, '--output_dir', str(tmp_path / 'lenient'),
                       '--max_error_rate', '0.5']) == EXIT_OK


def test_a_voc_id_listed_without_its_xml_is_a_rejected_row(tmp_path, capsys):
  root = tmp_path / 'VOC'
  for folder in ('Annotations', 'JPEGImages', 'ImageSets/Main'):
    (root / folder).mkdir(parents=True)
  for name in ('v1', 'v7'):  # both images are there; v7 has no XML
    Image.new('RGB', (64, 48), (90, 120, 60)).save(root / 'JPEGImages' / f'{name}.jpg')
  (root / 'Annotations' / 'v1.xml').write_text(
      '<annotation><filename>v1.jpg</filename><size><width>64</width><height>48</height>'
      '</size><object><name>cat</name><bndbox><xmin>11</xmin><ymin>11</ymin><xmax>20</xmax>'
      '<ymax>20</ymax></bndbox></object></annotation>')
  (root / 'ImageSets' / 'Main' / 'train.txt').write_text('v1\n')
  (root / 'ImageSets' / 'Main' / 'val.txt').write_text('v7\n')
  flags = ['--annotations', str(root), '--annotation_format', 'voc', '--image_dir',
           str(root / 'JPEGImages'), '--resize_mode', 'none', '--encoding', 'jpeg',
           '--progress', 'off']
  out = tmp_path / 'out'
  assert convert.main([*flags, '--output_dir', str(out)]) == EXIT_OVER_BUDGET
  assert '  rejected annotation/missing_annotation: 1\n' in capsys.readouterr().out
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (2, 1, 1)
  assert info['rejected_by_reason'] == {'annotation/missing_annotation': 1}
  xml = f'{root}/Annotations/v7.xml'
  assert rejected_lines(out) == [{
      'row': {'image': 'v7.jpg', 'annotations': xml, 'split': 'val'}, 'stage': 'annotation',
      'code': 'missing_annotation', 'source': xml, 'line': 2,
      'reason': f'v7 is listed in {root}/ImageSets/Main/val.txt but has no annotation: '
                f'{xml} does not exist'}]
  (example,) = read_examples(out)
  assert feature(example, 'image/source_id') == b'1'  # the others' ordinals stay
  assert convert.main([*flags, '--output_dir', str(tmp_path / 'lenient'),
                       '--max_error_rate', '0.5']) == EXIT_OK



def test_a_voc_split_file_with_a_byte_order_mark_lists_its_first_id(tmp_path):
  """ImageSets/Main/train.txt as Windows' Notepad saves it (a UTF-8
  byte-order mark, CRLF): its first id was '\\ufeffv1', so v1.xml was left
  out as unlisted and '\\ufeffv1' was a missing_annotation row."""
  root = tmp_path / 'VOC'
  for folder in ('Annotations', 'JPEGImages', 'ImageSets/Main'):
    (root / folder).mkdir(parents=True)
  for name in ('v1', 'v2'):
    Image.new('RGB', (64, 48), (90, 120, 60)).save(root / 'JPEGImages' / f'{name}.jpg')
    (root / 'Annotations' / f'{name}.xml').write_text(
        f'<annotation><filename>{name}.jpg</filename><object><name>cat</name><bndbox>'
        '<xmin>11</xmin><ymin>11</ymin><xmax>20</xmax><ymax>20</ymax></bndbox></object>'
        '</annotation>')
  (root / 'ImageSets' / 'Main' / 'train.txt').write_bytes(b'\xef\xbb\xbfv1\r\nv2\r\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'voc',
                       '--image_dir', str(root / 'JPEGImages'), '--output_dir', str(out),
                       '--progress', 'off']) == EXIT_OK
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (2, 2, 0)
  assert info['detection']['num_skipped_unlisted'] == 0
  assert sorted(feature(e, 'image/filename') for e in read_examples(out)) == [
      b'v1.jpg', b'v2.jpg']

def test_voc_xmls_no_split_file_lists_are_counted_where_the_run_reports_skips(tmp_path, capsys):
  root = tmp_path / 'VOC'
  for folder in ('Annotations', 'JPEGImages', 'ImageSets/Main'):
    (root / folder).mkdir(parents=True)
  names = [f'v{i:02}' for i in range(13)]
  for name in names:
    Image.new('RGB', (64, 48), (90, 120, 60)).save(root / 'JPEGImages' / f'{name}.jpg')
    (root / 'Annotations' / f'{name}.xml').write_text(
        f'<annotation><filename>{name}.jpg</filename><size><width>64</width><height>48'
        '</height></size><object><name>cat</name><bndbox><xmin>11</xmin><ymin>11</ymin>'
        '<xmax>20</xmax><ymax>20</ymax></bndbox></object></annotation>')
  (root / 'ImageSets' / 'Main' / 'train.txt').write_text('v03\nv07\n')
  (root / 'ImageSets' / 'Main' / 'val.txt').write_text('v11\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'voc',
                       '--image_dir', str(root / 'JPEGImages'), '--output_dir', str(out),
                       '--progress', 'off']) == EXIT_OK
  unlisted = [f'{name}.xml' for name in names if name not in ('v03', 'v07', 'v11')]
  assert ('  skipped 10 annotation file(s) that no ImageSets/Main split file lists: '
          f'{", ".join(unlisted[:10])}\n') in capsys.readouterr().out
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (3, 3, 0)
  assert {name: split['num_examples'] for name, split in info['splits'].items()} == {
      'train': 2, 'val': 1}
  assert (info['detection']['num_skipped_unlisted'],
          info['detection']['skipped_unlisted']) == (10, unlisted)
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK
  # one more: 11 left out, the first 10 named
  (root / 'Annotations' / 'v99.xml').write_text(
      (root / 'Annotations' / 'v00.xml').read_text().replace('v00', 'v99'))
  shutil.copy(root / 'JPEGImages' / 'v00.jpg', root / 'JPEGImages' / 'v99.jpg')
  assert convert.main(['--annotations', str(root), '--annotation_format', 'voc',
                       '--image_dir', str(root / 'JPEGImages'), '--output_dir', str(out),
                       '--progress', 'off', '--overwrite']) == EXIT_OK
  assert (f'lists: {", ".join(unlisted[:10])}, ...\n') in capsys.readouterr().out
  found = read_info(out)['detection']
  assert (found['num_skipped_unlisted'], found['skipped_unlisted']) == (11, unlisted)
  # without split files every XML is a row: none is left out
  shutil.rmtree(root / 'ImageSets')
  assert convert.main(['--annotations', str(root), '--annotation_format', 'voc',
                       '--image_dir', str(root / 'JPEGImages'), '--output_dir', str(out),
                       '--progress', 'off', '--overwrite']) == EXIT_OK
  assert 'annotation file(s)' not in capsys.readouterr().out
  info = read_info(out)
  assert (info['num_examples'], info['detection']['num_skipped_unlisted'],
          info['detection']['skipped_unlisted']) == (14, 0, [])

def test_an_input_without_its_pair_is_a_row_rejected_unread():
  from transforms.core import voc
  from transforms.core.splits import SplitConfig
  from transforms.detection_files import FileSource
  from transforms.detection_files import file_row
  # each id once, in the files' order, in the split split_of gives it (the last)
  lists = {'train': ['a', 'b', 'c'], 'val': ['c', 'd', 'a']}
  found = voc.missing_annotations(lists, {'train': 'T.txt', 'val': 'V.txt'}, ['a'], 'X')
  assert found == [
      ('b', 'train', ('missing_annotation',
                      'b is listed in T.txt but has no annotation: X/b.xml does not exist')),
      ('c', 'val', ('missing_annotation',
                    'c is listed in V.txt but has no annotation: X/c.xml does not exist')),
      ('d', 'val', ('missing_annotation',
                    'd is listed in V.txt but has no annotation: X/d.xml does not exist'))]
  # a split --split_names does not name is no unknown_split: the row is not assigned one
  source = FileSource('yolo', 'images', SplitConfig(names=('train',)), (1,))
  problem = yolo.missing_image('labels/test/o.txt', 'images/test')
  row, rejected = file_row(('', 'labels/test/o.txt', 'test', 9, problem), b'', source)
  assert row is None
  assert [(r.stage, r.code, r.reason, r.source, r.line, r.counts_as_row) for r in rejected] == [
      ('annotation', 'missing_image', 'label file labels/test/o.txt has no image: no o.* '
       'image in images/test', 'labels/test/o.txt', 9, True)]
