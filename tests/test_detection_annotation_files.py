"""Annotation files as real tools and people leave them (VOC XML, YOLO
label files): what happens when one changes between the launcher's look
and the worker's read, and other per-file mishaps."""

import json
import pathlib

from PIL import Image
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.configuration import detection_files as launcher_files
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import feature
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from transforms.core import yolo

pytestmark = pytest.mark.xdist_group('detection')


def _voc_xml(name: str, box=(11, 21, 50, 60)) -> str:
  xmin, ymin, xmax, ymax = box
  return (f'<annotation><filename>{name}.jpg</filename><size><width>100</width>'
          f'<height>80</height></size><object><name>dog</name><difficult>0</difficult>'
          f'<bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin><xmax>{xmax}</xmax>'
          f'<ymax>{ymax}</ymax></bndbox></object></annotation>')


def _voc(root: pathlib.Path) -> pathlib.Path:
  (root / 'Annotations').mkdir(parents=True)
  (root / 'JPEGImages').mkdir()
  for name in ('a', 'b'):
    Image.new('RGB', (100, 80), (90, 120, 60)).save(root / 'JPEGImages' / f'{name}.jpg')
    (root / 'Annotations' / f'{name}.xml').write_text(_voc_xml(name))
  return root


def test_a_voc_xml_cut_short_after_the_launcher_read_it_is_a_rejected_row(
    tmp_path, monkeypatch, capsys):
  """An annotator's tool saving b.xml while the run starts: the launcher
  parsed it whole, the worker reads it cut short. It failed the job with a
  traceback (VocFormatError out of the DoFn, exit 1, nothing written); it is
  now b's row, rejected as read/unreadable_annotations naming the file, as a
  VOC or YOLO file gone since it was listed is."""
  root = _voc(tmp_path / 'VOC')
  xml = root / 'Annotations' / 'b.xml'
  listed = launcher_files.file_config

  def then_cut_short(args, options):
    config = listed(args, options)
    xml.write_text(_voc_xml('b')[:-20])  # the editor's save, half done
    return config

  monkeypatch.setattr(launcher_files, 'file_config', then_cut_short)
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'voc',
                       '--image_dir', str(root / 'JPEGImages'), '--height', '80',
                       '--width', '100', '--resize_mode', 'stretch', '--max_error_rate', '0.5',
                       '--output_dir', str(out), '--progress', 'off']) == EXIT_OK
  assert '  rejected read/unreadable_annotations: 1\n' in capsys.readouterr().out
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (2, 1, 1)
  (line,) = rejected_lines(out)
  assert (line['stage'], line['code'], line['row']) == (
      'read', 'unreadable_annotations', {'image': 'b.jpg', 'annotations': str(xml)})
  assert line['reason'].startswith(f'{xml} is not valid XML: ')
  (example,) = read_examples(out)  # a's record, as it was
  assert feature(example, 'image/filename') == b'a.jpg'
  assert feature(example, 'image/object/class/text') == b'dog'
  assert [feature(example, f'image/object/bbox/{k}') for k in ('xmin', 'ymin', 'xmax', 'ymax')
          ] == pytest.approx([0.1, 0.25, 0.5, 0.75])
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK


@pytest.mark.parametrize('shape, keypoints', [
    ('[3, 2]', '0.45 0.45 0.5 0.5 0.55 0.55'),  # x, y: 10 numbers, as a 5-point polygon
    ('[2, 3]', '0.45 0.45 2 0.55 0.55 1'),  # x, y, visibility: 10 numbers too
])
def test_a_yolo_pose_dataset_gives_the_boxes_its_rows_start_with(tmp_path, shape, keypoints):
  """Ultralytics' pose rows are `class cx cy w h` and kpt_shape's keypoint
  values (tiger-pose: kpt_shape [12, 2]). With an even count of numbers a
  row was read as a polygon: its box was the bounds of (cx, cy), (w, h) and
  the keypoints, (0.2, 0.25)-(0.55, 0.55) here for (0.4, 0.375)-(0.6,
  0.625), written with exit 0 and passed by validate. A row of another
  length than kpt_shape gives is a bad_annotation line."""
  root = tmp_path / 'pose'
  (root / 'images' / 'train').mkdir(parents=True)
  (root / 'labels' / 'train').mkdir(parents=True)
  (root / 'data.yaml').write_text(f'path: ../datasets/pose\ntrain: images/train\n'
                                  f'kpt_shape: {shape}\nnames:\n  0: tiger\n')
  Image.new('RGB', (100, 80), (90, 120, 60)).save(root / 'images' / 'train' / 'a.jpg')
  (root / 'labels' / 'train' / 'a.txt').write_text(
      f'0 0.5 0.5 0.2 0.25 {keypoints}\n0 0.5 0.5 0.2 0.25 0.45 0.45\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'yolo',
                       '--height', '80', '--width', '100', '--resize_mode', 'stretch',
                       '--output_dir', str(out), '--progress', 'off']) == EXIT_OK
  (example,) = read_examples(out)
  assert feature(example, 'image/object/class/label') == 1
  assert [feature(example, f'image/object/bbox/{k}') for k in ('xmin', 'ymin', 'xmax', 'ymax')
          ] == pytest.approx([0.4, 0.375, 0.6, 0.625])
  assert feature(example, 'image/object/area') == pytest.approx(400)
  (line,) = rejected_lines(out)
  assert (line['code'], line['line'], line['counts_as_row']) == ('bad_annotation', 2, False)
  assert line['reason'] == ('line is not "class cx cy w h" and the 6 keypoint values '
                            'kpt_shape gives (7 fields)')
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_OK


@pytest.mark.parametrize('shape', ['[3]', '[3, 4]', '[0, 2]', 'three', '[true, 2]'])
def test_a_kpt_shape_that_is_no_pair_exits_2(tmp_path, capsys, shape):
  root = tmp_path / 'pose'
  (root / 'images').mkdir(parents=True)
  (root / 'data.yaml').write_text(f'kpt_shape: {shape}\nnames: [tiger]\n')
  Image.new('RGB', (100, 80)).save(root / 'images' / 'a.jpg')
  assert convert.main(['--annotations', str(root), '--annotation_format', 'yolo',
                       '--output_dir', str(tmp_path / 'out'), '--progress', 'off']) == EXIT_USAGE
  (said,) = capsys.readouterr().err.splitlines()
  assert said.endswith('"kpt_shape" must be [number of keypoints, 2 or 3], not '
                       f'{shape.replace("true", "True")}')
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('before, after', [('kpt_shape: [3, 2]\n', ''),
                                           ('', 'kpt_shape: [3, 2]\n')])
def test_recompute_reads_the_rows_as_the_run_did_whatever_data_yaml_says_now(
    tmp_path, before, after):
  """validate --recompute listed the YOLO files again with data.yaml's
  kpt_shape as it is now: one added or removed since the run read each row
  another way (a pose row's box against a polygon's bounds), and every
  record was a recompute_mismatch, 'differ from its unchanged image ...
  and annotations', INVALID, exit 1, for records that were right. The run
  records its keypoint values, as it records its label map."""
  root = tmp_path / 'pose'
  (root / 'images').mkdir(parents=True)
  (root / 'labels').mkdir()
  (root / 'data.yaml').write_text(f'{before}names:\n  0: tiger\n')
  Image.new('RGB', (100, 80), (90, 120, 60)).save(root / 'images' / 'a.jpg')
  (root / 'labels' / 'a.txt').write_text('0 0.5 0.5 0.2 0.25 0.45 0.45 0.5 0.5 0.55 0.55\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'yolo',
                       '--height', '80', '--width', '100', '--output_dir', str(out),
                       '--progress', 'off']) == EXIT_OK
  (example,) = read_examples(out)
  box = [feature(example, f'image/object/bbox/{k}') for k in ('xmin', 'ymin', 'xmax', 'ymax')]
  # a pose row's box is its first four numbers; a polygon's, the bounds of all
  assert box == pytest.approx([0.4, 0.375, 0.6, 0.625] if before else [0.2, 0.25, 0.55, 0.55])
  assert read_info(out)['detection']['keypoint_values'] == (6 if before else 0)
  (root / 'data.yaml').write_text(f'{after}names:\n  0: tiger\n')
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_OK
  report = json.loads((out / 'validation_report.json').read_text())
  assert (report['valid'], report['num_problems'], report['num_recomputed']) == (True, 0, 1)


def test_a_repeated_yolo_row_is_kept_once_as_ultralytics_keeps_it():
  annotation, rejected = yolo.parse_labels(
      '0 0.5 0.5 0.2 0.4\n1 0.5 0.5 0.2 0.4\n0 0.50 0.5 0.2 0.40\n'
      '0 0.1 0.1 0.3 0.1 0.2 0.3\n0 0.1 0.1 0.3 0.1 0.2 0.3\n', 3, 'a.txt')
  # the same box of another class is another object; "0.50" is 0.5
  assert [(o.label, o.line) for o in annotation.objects] == [(1, 1), (2, 2), (1, 4)]
  assert [(r.code, r.line, r.reason) for r in rejected] == [
      ('duplicate_annotation', 3, 'line 3 repeats line 1 (the same class and coordinates): '
                                  'only line 1 is read'),
      ('duplicate_annotation', 5, 'line 5 repeats line 4 (the same class and coordinates): '
                                  'only line 4 is read')]


def test_a_malformed_yolo_row_given_twice_is_malformed_twice_not_kept_once():
  """A repeat was told from the numbers alone, before the row's shape was
  checked: a row of 3 coordinates given twice was bad_annotation, then
  duplicate_annotation 'the object is kept once', of an object never kept."""
  annotation, rejected = yolo.parse_labels(
      '0 0.5 0.5 0.2\n0 0.5 0.5 0.2\n1 0.3 0.3\n1 0.3 0.3\n2 0.5 0.5 0.2 0.4\n'
      '2 0.5 0.5 0.2 0.4\n', 3, 'a.txt')
  assert [(o.label, o.line) for o in annotation.objects] == [(3, 5)]
  assert [(r.code, r.line) for r in rejected] == [
      ('bad_annotation', 1), ('bad_annotation', 2), ('short_polygon', 3), ('short_polygon', 4),
      ('duplicate_annotation', 6)]
  pose, rejected = yolo.parse_labels('0 0.5 0.5 0.2 0.4 0.1\n0 0.5 0.5 0.2 0.4 0.1\n', 3,
                                     'a.txt', keypoints=3)
  assert (pose.objects, [(r.code, r.line) for r in rejected]) == (
      (), [('bad_annotation', 1), ('bad_annotation', 2)])


def test_a_repeat_of_a_yolo_box_dropped_as_bad_says_no_object_was_kept(tmp_path):
  """Its line said 'the object is kept once' beside line 1's empty_box: no
  object was kept."""
  root = tmp_path / 'yolo'
  (root / 'images').mkdir(parents=True)
  (root / 'labels').mkdir()
  Image.new('RGB', (100, 80), (90, 120, 60)).save(root / 'images' / 'a.jpg')
  (root / 'classes.txt').write_text('cat\ndog\n')
  (root / 'labels' / 'a.txt').write_text('0 0.5 0.5 0 0.2\n0 0.5 0.5 0 0.2\n1 0.3 0.3 0.1 0.1\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'yolo',
                       '--resize_mode', 'none', '--encoding', 'png', '--progress', 'off',
                       '--output_dir', str(out)]) == EXIT_OK
  (example,) = read_examples(out)
  assert feature(example, 'image/object/class/text') == b'dog'  # one object
  assert [(line['code'], line['line'], line['reason']) for line in rejected_lines(out)] == [
      ('empty_box', 1, 'box (0.5, 0.4, 0.5, 0.6) has no area (width or height <= 0)'),
      ('duplicate_annotation', 2,
       'line 2 repeats line 1 (the same class and coordinates): only line 1 is read')]


@pytest.mark.parametrize('on_bad_box', ['drop', 'reject_row'])
def test_a_yolo_file_giving_a_box_twice_writes_it_once(tmp_path, capsys, on_bad_box):
  """Ultralytics drops a label file's repeated rows (verify_image_label);
  they were two objects in the record, without a word. The repeat is now an
  annotation line of its own, and no bad box: reject_row keeps the image."""
  root = tmp_path / 'yolo'
  (root / 'images').mkdir(parents=True)
  (root / 'labels').mkdir()
  Image.new('RGB', (100, 80), (90, 120, 60)).save(root / 'images' / 'a.jpg')
  (root / 'classes.txt').write_text('cat\ndog\n')
  (root / 'labels' / 'a.txt').write_text('1 0.5 0.5 0.2 0.4\n1 0.5 0.5 0.2 0.4\n'
                                         '0 0.25 0.25 0.1 0.1\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'yolo',
                       '--resize_mode', 'none', '--encoding', 'png', '--progress', 'off',
                       '--on_bad_box', on_bad_box, '--output_dir', str(out)]) == EXIT_OK
  assert ('  annotation rejected annotation/duplicate_annotation: 1 (not an image row)\n'
          in capsys.readouterr().out)
  (example,) = read_examples(out)
  assert feature(example, 'image/object/class/text') == [b'dog', b'cat']
  assert feature(example, 'image/object/bbox/xmin') == pytest.approx([0.4, 0.2])
  assert feature(example, 'image/object/bbox/ymax') == pytest.approx([0.7, 0.3])
  label = f'{root}/labels/a.txt'
  (line,) = rejected_lines(out)
  assert (line['stage'], line['code'], line['source'], line['line'], line['reason']) == (
      'annotation', 'duplicate_annotation', label, 2,
      'line 2 repeats line 1 (the same class and coordinates): only line 1 is read')
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected'], info['over_budget']) == (1, 0, False)
  assert info['rejected_annotations_by_reason'] == {'annotation/duplicate_annotation': 1}
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_OK
