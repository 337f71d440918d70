"""--schema detection from COCO: a real-photo set (scikit-image's astronaut,
coffee, chelsea with hand-made boxes, pipeline/demo_detection.py) converted
with bad annotations mixed in; the annotations' own checks, RLE and polygons
against pycocotools, validate's object checks, read.examples."""

import io
import json
import pathlib
import shutil

import numpy as np
import pytest

from pipeline import convert
from pipeline import demo_detection
from pipeline import read
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import check_record
from tests.conftest import noise_png
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from transforms.core import annotations
from transforms.core import coco
from transforms.core import detection_checks
from transforms.core import masks
from transforms.core import validation
from transforms.core.detect import DetectedImage
from transforms.core.detect import DetectionOptions
from transforms.core.detect import detect
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedImage
from transforms.core.example import example_features
from transforms.core.example_proto import serialize_example
from transforms.core.image import EncodedImage
from transforms.core.manifest import ManifestRow
from transforms.core.rejects import RowError
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec

pytestmark = pytest.mark.xdist_group('detection')

BAD = [  # (annotation, the code it is rejected with)
    ({'id': 100, 'image_id': 1, 'category_id': 99, 'bbox': [1, 1, 5, 5]}, 'unknown_category'),
    ({'id': 101, 'image_id': 2, 'category_id': 5, 'bbox': [1, 1, 0, 5]}, 'empty_box'),
    ({'id': 102, 'image_id': 3, 'category_id': 8, 'bbox': [600, 10, 20, 20]},
     'box_outside_image'),
    ({'id': 103, 'image_id': 77, 'category_id': 8, 'bbox': [1, 1, 5, 5]}, 'missing_image'),
    ({'id': 104, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 5, 5],
      'segmentation': [[1, 2, 3, 4]]}, 'short_polygon'),
]
FLAGS = ('--include_masks', '--height', '200', '--width', '200', '--resize_mode', 'pad',
         '--progress', 'off')


def _sample(root: pathlib.Path) -> pathlib.Path:
  """The demo's set, the BAD annotations, and an image without objects."""
  path = pathlib.Path(demo_detection.make_sample(str(root)))
  document = json.loads(path.read_text())
  document['annotations'] += [ann for ann, _ in BAD]
  shutil.copyfile(root / 'images' / 'chelsea.jpg', root / 'images' / 'empty.jpg')
  document['images'].append({'id': 4, 'file_name': 'empty.jpg', 'width': 451, 'height': 300})
  path.write_text(json.dumps(document))
  return path


def _convert(annotations: pathlib.Path, out: pathlib.Path, *flags) -> int:
  return convert.main(['--annotations', str(annotations), '--annotation_format', 'coco',
                       '--image_dir', str(annotations.parent / 'images'),
                       '--output_dir', str(out), *FLAGS, *flags])


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
  root = tmp_path_factory.mktemp('coco')
  annotations = _sample(root)
  assert _convert(annotations, root / 'out') == EXIT_OK
  return annotations, root / 'out'


def test_objects_rejections_and_label_maps(converted):
  _, out = converted
  info = read_info(out)
  assert (info['schema'], info['num_examples'], info['num_manifest_rows'],
          info['num_rejected'], info['num_classes']) == ('detection', 4, 4, 0, 11)
  assert info['rejected_annotations_by_reason'] == {
      f'annotation/{code}': 1 for _, code in BAD}
  lines = rejected_lines(out)
  assert sorted(line['code'] for line in lines) == sorted(code for _, code in BAD)
  assert all(line['counts_as_row'] is False and line['stage'] == 'annotation'
             for line in lines)
  assert info['splits']['train']['objects_per_class'] == {
      'face': 1, 'helmet': 1, 'rocket': 1, 'cup': 1, 'saucer': 1, 'spoon': 1, 'cat': 1,
      'eye': 2, 'nose': 1}
  assert info['detection']['category_shift'] == 0
  assert info['image']['encoding'] == 'jpeg'
  assert (out / 'label_map.txt').read_text() == (
      '1\tface\n2\thelmet\n3\trocket\n5\tcup\n6\tsaucer\n7\tspoon\n8\tcat\n9\teye\n11\tnose\n')
  assert (out / 'label_map.pbtxt').read_text().startswith(
      'item {\n  id: 1\n  name: "face"\n}\nitem {\n  id: 2\n')


def test_boxes_masks_and_empty_images_read_back(converted):
  _, out = converted
  found = {e['key']: e for e in read.examples(str(out))}
  astronaut = found['astronaut.jpg']
  # the face, 150..300 x 15..180 of 512x512, padded into 200x200: scale 200/512
  assert np.allclose(astronaut['boxes'][0], np.array([15, 150, 180, 300]) / 512, atol=1e-6)
  assert list(astronaut['classes']) == [1, 2, 3] and astronaut['num_objects'] == 3
  assert astronaut['class_text'] == ['face', 'helmet', 'rocket']
  assert astronaut['masks'].shape == (3, 200, 200) and astronaut['masks'].max() == 1
  empty = found['empty.jpg']
  assert empty['boxes'].shape == (0, 4) and empty['masks'].shape == (0, 200, 200)
  assert empty['num_objects'] == 0  # as read.load names the count
  # the nose's RLE mask is its box: 60x50 source pixels, 200/451 of that each way
  nose = found['chelsea.jpg']['masks'][3]
  assert abs(int(nose.sum()) - 60 * 50 * (200 / 451) ** 2) < 60


def test_validate_accepts_it_and_finds_a_wrong_count(converted, tmp_path):
  _, out = converted
  copy = pathlib.Path(shutil.copytree(out, tmp_path / 'out'))
  assert validate.main(['--input_dir', str(copy)]) == EXIT_OK
  info = read_info(copy)
  info['splits']['train']['objects_per_class']['eye'] = 3
  (copy / 'dataset_info.json').write_text(json.dumps(info))
  assert validate.main(['--input_dir', str(copy)]) == 1
  report = json.loads((copy / 'validation_report.json').read_text())
  assert report['problems_by_kind'] == {'class_count_mismatch': 1}
  assert report['problems'][0]['detail'] == (
      "split 'train' has 2 object(s) of class 'eye'; its objects_per_class says 3")


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_an_image_in_two_splits_is_a_warning_on_one_worker_and_spread(tmp_path):
  """A detection dataset whose copy.png holds a0.png's bytes, the two keys
  hashed to train and validation: a cross_split_duplicate warning naming
  both, exit 0 (1 with --strict), whether one worker gathers the records or
  the shards are spread over workers and grouped by digest, with the same
  report byte for byte (was: dropping detection records from the spread
  path's grouping passed every test)."""
  (tmp_path / 'images').mkdir()
  names = ['a0.png', 'a1.png', 'a2.png', 'copy.png']
  for seed, name in enumerate(names):
    (tmp_path / 'images' / name).write_bytes(noise_png(0 if name == 'copy.png' else seed))
  (tmp_path / 'coco.json').write_text(json.dumps({
      'images': [{'id': i, 'file_name': name, 'width': 10, 'height': 10}
                 for i, name in enumerate(names, 1)],
      'annotations': [{'id': i, 'image_id': i, 'category_id': 1, 'bbox': [1, 1, 5, 5]}
                      for i in range(1, len(names) + 1)],
      'categories': [{'id': 1, 'name': 'dot'}]}))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'coco.json'), '--annotation_format',
                       'coco', '--image_dir', str(tmp_path / 'images'), '--output_dir',
                       str(out), '--height', '8', '--width', '8', '--encoding', 'png',
                       '--split', 'train=0.5,validation=0.5', '--progress', 'off']) == EXIT_OK
  info = read_info(out)
  assert (info['schema'], info['splits']['train']['num_examples'],
          info['splits']['validation']['num_examples']) == ('detection', 2, 2)
  texts = []
  for flags in ((), ('--direct_num_workers', '2')):
    assert validate.main(['--input_dir', str(out), *flags]) == EXIT_OK
    report = json.loads((out / 'validation_report.json').read_text())
    assert (report['num_problems'], report['warnings_by_kind']) == (
        0, {'cross_split_duplicate': 1})
    warning = report['warnings'][0]
    assert (warning['file'], warning['record']) == ('validation-00000-of-00001.tfrecord', 0)
    assert warning['detail'].startswith("key 'copy.png' (validation) has the same bytes ")
    assert warning['detail'].endswith(
        "as 1 other record(s) (copies in train, validation); first: key 'a0.png' (train) at "
        'train-00000-of-00001.tfrecord#0')
    texts.append((out / 'validation_report.json').read_bytes())
    assert validate.main(['--input_dir', str(out), '--strict', *flags]) == 1
  assert texts[0] == texts[1]


def test_validate_checks_the_detection_section_and_label_map_pbtxt(converted, tmp_path):
  """dataset_info.json's detection.num_objects and objects_per_class, each
  split's num_objects, and label_map.pbtxt are not taken on trust."""
  _, out = converted
  copy = pathlib.Path(shutil.copytree(out, tmp_path / 'out'))
  info = read_info(copy)
  info['detection']['num_objects'] = 99
  info['detection']['objects_per_class']['cat'] = 50
  info['splits']['train']['num_objects'] += 1
  (copy / 'dataset_info.json').write_text(json.dumps(info))
  pbtxt = copy / 'label_map.pbtxt'
  pbtxt.write_text(pbtxt.read_text().replace('"spoon"', '"fork"'))
  assert validate.main(['--input_dir', str(copy)]) == 1
  report = json.loads((copy / 'validation_report.json').read_text())
  assert report['problems_by_kind'] == {'class_count_mismatch': 1, 'label_map_mismatch': 1,
                                        'num_objects_mismatch': 2}
  assert sorted(p['detail'] for p in report['problems']) == [
      "line 23 is '  name: \"fork\"', not '  name: \"spoon\"' as dataset_info.json's "
      'label_map has it (the item of id 7)',
      "split 'train' has 10 object(s); its num_objects says 11",
      "the dataset has 1 object(s) of class 'cat'; dataset_info.json's "
      'detection.objects_per_class says 50',
      "the dataset has 10 object(s); dataset_info.json's detection.num_objects says 99"]


def test_validate_checks_dropped_boxes_against_the_rejected_annotations(converted, tmp_path):
  """detection.dropped_boxes follows from rejected_annotations_by_reason and
  --on_bad_box (found in a new-user trial: an edited count passed)."""
  _, out = converted
  copy = pathlib.Path(shutil.copytree(out, tmp_path / 'out'))
  info = read_info(copy)
  assert info['detection']['dropped_boxes'] == {
      'crop_visibility': 0, **{code: 1 for _, code in BAD}}
  info['detection']['dropped_boxes']['empty_box'] = 4
  info['detection']['dropped_boxes']['bad_annotation'] = 2
  info['detection']['dropped_boxes']['crop_visibility'] = 7  # recorded nowhere else
  (copy / 'dataset_info.json').write_text(json.dumps(info))
  assert validate.main(['--input_dir', str(copy)]) == 1
  report = json.loads((copy / 'validation_report.json').read_text())
  assert report['problems_by_kind'] == {'row_accounting': 2}
  assert sorted(p['detail'] for p in report['problems']) == [
      "dataset_info.json's detection.dropped_boxes.bad_annotation is 2, but its "
      'rejected_annotations_by_reason (--on_bad_box drop) makes it 0',
      "dataset_info.json's detection.dropped_boxes.empty_box is 4, but its "
      'rejected_annotations_by_reason (--on_bad_box drop) makes it 1']


def test_with_reject_row_no_box_is_dropped_for_an_annotation():
  by_reason = {'annotation/missing_image': 1}
  check = detection_checks.dropped_boxes_problems
  assert check({'on_bad_box': 'reject_row', 'dropped_boxes': {'crop_visibility': 3}},
               by_reason) == []
  assert check({'on_bad_box': 'reject_row', 'dropped_boxes': {
      'crop_visibility': 0, 'missing_image': 1}}, by_reason) == [
      'detection.dropped_boxes.missing_image is 1, but its rejected_annotations_by_reason '
      '(--on_bad_box reject_row) makes it 0']
  assert check({'on_bad_box': 'drop', 'dropped_boxes': {'crop_visibility': 0}}, by_reason) == [
      'detection.dropped_boxes.missing_image is 0, but its rejected_annotations_by_reason '
      '(--on_bad_box drop) makes it 1']
  assert check({'dropped_boxes': {'x': 1}}, by_reason) == []  # a file without on_bad_box


def test_reject_row_and_skip_empty(converted, tmp_path):
  annotations, _ = converted
  out = tmp_path / 'out'
  assert _convert(annotations, out, '--on_bad_box', 'reject_row', '--skip_empty',
                  '--max_error_rate', '1', '--allow_empty') == EXIT_OK
  info = read_info(out)
  # images 1, 2 and 3 each have a bad annotation: rejected whole; image 4 skipped
  assert (info['num_examples'], info['num_manifest_rows'], info['num_rejected']) == (0, 3, 3)
  assert info['rejected_by_reason'] == {'annotation/bad_box': 3}
  assert info['rejected_annotations_by_reason'] == {'annotation/missing_image': 1}
  assert info['detection']['num_skipped_empty'] == 1


def test_nothing_published_leaves_only_rejected_jsonl(converted, tmp_path):
  annotations, _ = converted
  out = tmp_path / 'out'
  # every row rejected whole, no --allow_empty: exit 2, the label maps taken back too
  assert _convert(annotations, out, '--on_bad_box', 'reject_row', '--skip_empty') == EXIT_USAGE
  assert sorted(p.name for p in out.iterdir()) == ['rejected.jsonl']


@pytest.mark.parametrize('text, message', [
    ('{"images": [', 'is not valid JSON'),
    ('[]', ': the document is a JSON array, not an object with images, annotations, '
           'categories'),
    ('{"images": [], "annotations": []}', ': "categories" must be an array, it is missing'),
    ('{"images": {}, "annotations": [], "categories": []}',
     ': "images" must be an array, it is a JSON map'),
])
def test_malformed_coco_exits_2_with_one_line(tmp_path, capsys, text, message):
  path = tmp_path / 'instances.json'
  path.write_text(text)
  (tmp_path / 'images').mkdir()
  assert _convert(path, tmp_path / 'out') == EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert message in err and len(err.splitlines()) == 1
  assert not (tmp_path / 'out').exists()


def test_a_coco_file_with_a_byte_order_mark_is_read(tmp_path):
  """instances.json as PowerShell's Out-File saves it (a UTF-8 byte-order
  mark first) exited 2: 'is not valid JSON: lexical error: invalid char in
  json text.', the culprit invisible. The launcher's check and the
  pipeline's reader both drop it."""
  from PIL import Image
  (tmp_path / 'images').mkdir()
  Image.new('RGB', (40, 30), (90, 120, 60)).save(tmp_path / 'images' / 'a.jpg')
  document = {'images': [{'id': 4, 'file_name': 'a.jpg', 'width': 40, 'height': 30}],
              'annotations': [{'id': 1, 'image_id': 4, 'category_id': 2,
                               'bbox': [4, 3, 20, 15]}],
              'categories': [{'id': 2, 'name': 'caf\u00e9'}]}
  path = tmp_path / 'instances.json'
  path.write_bytes(b'\xef\xbb\xbf' + json.dumps(document, ensure_ascii=False).encode())
  assert _convert(path, tmp_path / 'out') == EXIT_OK
  (example,) = read.examples(str(tmp_path / 'out'))
  assert (example['key'], example['class_text'], example['classes'].tolist()) == (
      'a.jpg', ['caf\u00e9'], [2])
  # padded into 200x200: scale 5, 25 px above; y 3..18 -> (25 + 15..90) / 200
  assert np.allclose(example['boxes'], [[0.2, 0.1, 0.575, 0.6]])
  # a mark that is not a whole BOM is still not JSON, in one readable line
  path.write_bytes(b'\xef\xbb' + json.dumps(document).encode())
  with pytest.raises(coco.CocoFormatError, match=r'is not valid JSON: lexical error'):
    with open(path, 'rb') as stream:
      coco.scan(stream, str(path))


@pytest.mark.parametrize('encoding', ['utf-16', 'utf-16-be'])
def test_a_utf16_coco_file_exits_2_saying_so(tmp_path, capsys, encoding):
  """Windows PowerShell 5.1's Out-File and `>` save UTF-16 with its
  byte-order mark: it exited 2 'lexical error: invalid char in json text.
  \ufffd\ufffd{', the cause unsaid."""
  path = tmp_path / 'instances.json'
  mark = b'' if encoding == 'utf-16' else b'\xfe\xff'  # Python's utf-16 writes its own
  path.write_bytes(mark + '{"images": [], "annotations": [], "categories": []}'.encode(encoding))
  (tmp_path / 'images').mkdir()
  assert _convert(path, tmp_path / 'out') == EXIT_USAGE
  assert capsys.readouterr().err.strip() == (
      f'error: {path} is UTF-16 text (it starts with its byte-order mark), not UTF-8 as '
      'JSON is: save it as UTF-8')
  assert not (tmp_path / 'out').exists()


def test_coco_streams_read_the_same_however_they_are_read():
  """_Unmarked: reads of any size give the file's bytes, less a leading BOM."""
  import io
  for data in (b'\xef\xbb\xbf{"a": 1}', b'{"a": 1}', b'{}', b'', b'\xef\xbb'):
    for size in (0, 1, 2, 5, -1):
      stream, got = coco._Unmarked(io.BytesIO(data)), b''
      while True:
        chunk = stream.read(size)
        got += chunk
        if size <= 0 or not chunk:
          break
      want = data[3:] if data.startswith(b'\xef\xbb\xbf') else data
      assert got == (b'' if size == 0 else want), (data, size)


@pytest.mark.parametrize('flags, message', [
    (('--encoding', 'raw'), '--schema detection stores JPEG or PNG (the Model Garden decoder '
                            'cannot read --encoding raw): give --encoding jpeg or png'),
    (('--schema', 'default'), '--annotations writes --schema detection, not --schema default'),
    (('--write_index', '--compression', 'gzip'), '--write_index needs uncompressed shards: '
     'offsets in a gzip stream cannot be used for random access (drop --compression gzip)'),
    (('--previous_dataset', 'yesterday'), '--previous_dataset yesterday does not go with '
                                          '--annotations yet: convert a detection dataset whole'),
    (('--resize_mode', 'none'), '--height 200 and --width 200 need --resize_mode stretch, '
     'pad or crop: with --resize_mode none each image keeps its own size'),
])
def test_flags_that_do_not_fit_exit_2(converted, tmp_path, capsys, flags, message):
  annotations, _ = converted
  assert _convert(annotations, tmp_path / 'out', *flags) == EXIT_USAGE
  assert capsys.readouterr().err.strip().endswith(message)


def test_schema_detection_needs_annotations(tmp_path, capsys):
  assert convert.main(['--schema', 'detection', '--output_dir', str(tmp_path / 'o')]) == 2
  assert capsys.readouterr().err.strip().endswith(
      '--schema detection needs --annotations PATH and --annotation_format coco|voc|yolo')


# --- plain functions ---


@pytest.mark.filterwarnings('ignore:__array__ implementation:DeprecationWarning')  # its decode
def test_rle_and_polygons_agree_with_pycocotools():
  mask_api = pytest.importorskip('pycocotools.mask')
  rng = np.random.default_rng(3)
  for _ in range(20):
    height, width = (int(n) for n in rng.integers(1, 40, 2))
    pixels = (rng.random((height, width)) > rng.random()).astype(np.uint8)
    rle = mask_api.encode(np.asfortranarray(pixels))
    rle['counts'] = rle['counts'].decode()
    assert (masks.decode_rle(rle) == pixels).all()
  # polygons: pycocotools' own masks (frPyObjects + decode, their union, as
  # create_coco_tf_record makes them), pixel for pixel, in one or two parts,
  # reaching past the image, and as fractions (YOLO) times the image's size
  for _ in range(50):
    height, width = (int(n) for n in rng.integers(5, 60, 2))
    parts = [list(rng.uniform(-5, 65, 2 * int(rng.integers(3, 9)))) for _ in
             range(int(rng.integers(1, 3)))]
    theirs = mask_api.decode(mask_api.frPyObjects(parts, height, width)).max(axis=2)
    assert (np.asarray(masks.polygons_mask(parts, (width, height))) == theirs).all()
    fractions = [[v / (width if i % 2 == 0 else height) for i, v in enumerate(p)]
                 for p in parts]
    scaled = masks.polygons_mask(fractions, (width, height), (width, height))
    assert (np.asarray(scaled) != theirs).sum() <= 2  # float rounding at the edges


def test_category_zero_shifts_every_id():
  labels, shift = coco.label_ids({0: 'background thing', 3: 'cat'})
  assert (labels, shift) == ({0: 1, 3: 4}, 1)
  assert annotations.label_names({1: 'background thing', 4: 'cat'}, 'a.json') == (
      '', 'background thing', '', '', 'cat')



def test_categories_sharing_a_name_are_counted_together(tmp_path):
  """Two COCO category ids with one name (the second only after its
  trailing space is stripped): objects_per_class adds them up, num_objects
  counts every object, and validate agrees with both (it failed the dataset
  convert wrote: num_objects_mismatch, 2 objects found against 3)."""
  from PIL import Image
  (tmp_path / 'images').mkdir()
  for name in ('a', 'b'):
    Image.fromarray(np.full((30, 40, 3), 90, np.uint8)).save(tmp_path / 'images' / f'{name}.jpg')
  document = {
      'images': [{'id': 1, 'file_name': 'a.jpg', 'width': 40, 'height': 30},
                 {'id': 2, 'file_name': 'b.jpg', 'width': 40, 'height': 30}],
      'categories': [{'id': 1, 'name': 'dog'}, {'id': 2, 'name': 'dog '},
                     {'id': 3, 'name': 'cat'}],
      'annotations': [{'id': n, 'image_id': image, 'category_id': category,
                       'bbox': [1, 1, 5, 5]}
                      for n, (image, category) in enumerate([(1, 1), (1, 2), (2, 2), (2, 3)])]}
  path = tmp_path / 'instances.json'
  path.write_text(json.dumps(document))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(path), '--annotation_format', 'coco',
                       '--image_dir', str(tmp_path / 'images'), '--output_dir', str(out),
                       '--progress', 'off']) == EXIT_OK
  info = read_info(out)
  assert info['splits']['train']['objects_per_class'] == {'dog': 3, 'cat': 1}
  assert info['detection']['objects_per_class'] == {'dog': 3, 'cat': 1}
  assert info['splits']['train']['num_objects'] == info['detection']['num_objects'] == 4
  assert (out / 'label_map.txt').read_text() == '1\tdog\n2\tdog\n3\tcat\n'
  found = {e['key']: e for e in read.examples(str(out))}
  assert list(found['a.jpg']['classes']) == [1, 2] and found['a.jpg']['class_text'] == [
      'dog', 'dog']
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK
  info['splits']['train']['objects_per_class']['dog'] = 2  # still checked, by name
  (out / 'dataset_info.json').write_text(json.dumps(info))
  assert validate.main(['--input_dir', str(out)]) == 1
  report = json.loads((out / 'validation_report.json').read_text())
  assert report['problems_by_kind'] == {'class_count_mismatch': 1}

def _loaded(objects, size=(100, 50), box_orientation=1) -> LoadedImage:
  annotation = annotations.ImageAnnotation(7, size, tuple(objects))
  row = ManifestRow({}, 'a.json', 1, image='x.jpg', path='x.jpg', key='x.jpg',
                    annotation=annotation)
  image = EncodedImage(b'', 50, 50, 3, 'jpeg', size, box_orientation)
  return LoadedImage(LabelledRow(row, 0, ''), image, 'f' * 64, 0)


def test_crop_drops_boxes_that_keep_too_little():
  spec = ImageSpec(height=50, width=50, resize_mode='crop')  # keeps columns 25..75
  kept = annotations.ObjectAnnotation(1, (30, 0, 70, 50))
  cut = annotations.ObjectAnnotation(2, (0, 0, 30, 50))  # 5 of 30 columns stay
  found = detect(_loaded([kept, cut]), ('', 'a', 'b'), spec, DetectionOptions())
  assert (found.labels, found.dropped) == ((1,), 1)
  assert np.allclose((found.xmin[0], found.xmax[0]), (5 / 50, 45 / 50))
  assert found.area == (40 * 50,)


@pytest.mark.parametrize('size, out, box, visibility, xmin, area', [
    # a 44x22 image cropped to 50x50 keeps columns 11..33: this box is the
    # whole window (its object filled the output) yet kept 0.9999999999999997
    # of its area, and --min_box_visibility 1 dropped it
    ((44, 22), 50, (11, 0, 33, 22), 1.0, 0.0, 50 * 50),
    # a 19x5 image cropped to 8x8 keeps columns 7..12: 3 of this box's 10
    # columns stay, exactly 0.3 of it, yet it kept 0.29999999999999993
    ((19, 5), 8, (9, 0, 19, 5), 0.3, 0.4, 4.8 * 8),
])
def test_crop_keeps_a_box_keeping_exactly_the_min_visibility(size, out, box, visibility,
                                                            xmin, area):
  import dataclasses
  spec = ImageSpec(height=out, width=out, resize_mode='crop')
  loaded = _loaded([annotations.ObjectAnnotation(1, box)], size=size)
  loaded = dataclasses.replace(loaded, image=dataclasses.replace(loaded.image, height=out,
                                                                 width=out))
  found = detect(loaded, ('', 'a'), spec, DetectionOptions(min_box_visibility=visibility))
  assert (found.labels, found.dropped) == ((1,), 0)
  assert np.allclose((found.xmin[0], found.ymin[0], found.xmax[0], found.ymax[0]),
                     (xmin, 0, 1, 1))
  assert np.isclose(found.area[0], area)


def _record(**changes) -> DetectedImage:
  import io

  from PIL import Image
  buffer = io.BytesIO()
  Image.new('RGB', (4, 2)).save(buffer, 'JPEG')
  mask = masks.encode_mask(Image.new('L', (4, 2), 1))
  row = ManifestRow({}, 'a.json', 1, image='x.jpg', key='x.jpg')
  values = dict(labelled=LabelledRow(row, 0, ''),
                image=EncodedImage(buffer.getvalue(), 2, 4, 3, 'jpeg'), sha256='f' * 64,
                source_id=b'7', xmin=(0.1,), ymin=(0.2,), xmax=(0.5,), ymax=(0.9,),
                labels=(2,), texts=('dog',), is_crowd=(0,), area=(4.0,), difficult=(0,),
                truncated=(0,), masks=(mask,))
  return DetectedImage(**{**values, **changes})


def _mask(width: int = 4, height: int = 2, value: int = 1) -> bytes:
  from PIL import Image
  return masks.encode_mask(Image.new('L', (width, height), value))


def _mask_as(kind: str, value: int = 1) -> bytes:
  """A 4x2 grayscale mask of `value` saved as `kind` (BMP, TIFF, JPEG): 0/1
  at the right size, which Pillow opens but tf.io.decode_png refuses."""
  from PIL import Image
  buffer = io.BytesIO()
  Image.new('L', (4, 2), value).save(buffer, kind)
  return buffer.getvalue()


@pytest.mark.parametrize('changes, kind', [
    ({}, None),
    ({'xmin': (0.1, 0.2)}, 'object_count_mismatch'),
    # just past the edge, and one coordinate of the two inverted
    ({'xmax': (1.01,)}, 'box_out_of_range'),
    ({'ymin': (-0.01,)}, 'box_out_of_range'),
    ({'ymin': (0.95,)}, 'box_inverted'),
    ({'source_id': b' '}, 'empty_source_id'),
    ({'masks': (_mask(), _mask())}, 'mask_count_mismatch'),  # one more than the boxes
    ({'masks': (_mask(value=2),)}, 'wrong_mask_values'),
    ({'masks': (_mask(height=3),)}, 'wrong_mask_size'),  # the width right
    ({'xmax': (1.5,)}, 'box_out_of_range'),
    ({'xmin': (0.6,)}, 'box_inverted'),
    ({'labels': (3,)}, 'label_out_of_range'),
    ({'texts': ('cat',)}, 'label_text_mismatch'),
    ({'masks': ()}, 'mask_count_mismatch'),
    ({'masks': (masks.encode_mask(__import__('PIL.Image').Image.new('L', (3, 3))),)},
     'wrong_mask_size'),
    ({'source_id': b''}, 'empty_source_id'),
    ({'area': (float('nan'),)}, 'bad_area'),
    ({'area': (-4.0,)}, 'bad_area'),
    ({'is_crowd': (7,)}, 'bad_object_flag'),
    ({'difficult': (2,)}, 'bad_object_flag'),
    ({'truncated': (-1,)}, 'bad_object_flag'),
    # a colour mask: a reader decoding one channel makes its 0/1 into 0
    ({'masks': (masks.encode_mask(__import__('PIL.Image').Image.new('RGB', (4, 2),
                                                                    (1, 1, 1))),)},
     'wrong_mask_mode'),
    # not a PNG: the Model Garden's decoder and read.load fail on it (InvalidArgumentError)
    ({'masks': (_mask_as('BMP'),)}, 'wrong_mask_format'),
    ({'masks': (_mask_as('TIFF'),)}, 'wrong_mask_format'),
    ({'masks': (_mask_as('JPEG', value=0),)}, 'wrong_mask_format'),
])
def test_validate_finds_each_kind_of_damaged_object(changes, kind):
  spec = ExampleSpec('detection', masks=True)
  image = ImageSpec(height=2, width=4, encoding='jpeg')
  data = serialize_example(example_features(_record(**changes), spec))
  expected = validation.Expected('detection', spec.feature_spec(image), image,
                                 ('', 'cat', 'dog'))
  _label, key, problems = check_record(data, expected)
  assert [k for k, _ in problems] == ([] if kind is None else [kind])
  assert key == 'x.jpg'


def test_a_label_in_a_gap_of_the_label_map_is_one_problem():
  # COCO ids have gaps ('' in the label map): such a label is out of range,
  # and its text is not also compared with the gap's ''
  spec = ExampleSpec('detection', masks=True)
  image = ImageSpec(height=2, width=4, encoding='jpeg')
  expected = validation.Expected('detection', spec.feature_spec(image), image,
                                 ('', 'cat', '', 'dog'))
  data = serialize_example(example_features(_record(labels=(2,), texts=('dog',)), spec))
  assert check_record(data, expected)[2] == [
      ('label_out_of_range', 'object label 2 is not in the label map')]


def test_an_object_flag_other_than_0_or_1_is_named():
  spec = ExampleSpec('detection', masks=True)
  image = ImageSpec(height=2, width=4, encoding='jpeg')
  expected = validation.Expected('detection', spec.feature_spec(image), image,
                                 ('', 'cat', 'dog'))
  data = serialize_example(example_features(
      _record(xmin=(0.1, 0.1), ymin=(0.2, 0.2), xmax=(0.5, 0.5), ymax=(0.9, 0.9),
              labels=(2, 1), texts=('dog', 'cat'), is_crowd=(1, 7), area=(4.0, 4.0),
              difficult=(0, 0), truncated=(0, 0), masks=_record().masks * 2), spec))
  assert check_record(data, expected)[2] == [
      ('bad_object_flag', 'object 1 has is_crowd 7, not 0 or 1')]


@pytest.mark.parametrize('recorded, expected', [
    ((40, 30), (10 / 30, 0 / 40, 30 / 30, 10 / 40)),  # the stored size: turned with the pixels
    ((30, 40), (0 / 30, 0 / 40, 10 / 30, 20 / 40)),  # the rotated size: already upright
])
def test_exif_orientation_follows_the_recorded_size(recorded, expected):
  # stored 40x30, EXIF 6 (a quarter turn clockwise): upright it is 30x40
  annotation = annotations.ImageAnnotation(1, recorded, (annotations.ObjectAnnotation(
      1, (0, 0, 10, 20)),))
  row = ManifestRow({}, 'a.json', 1, image='x.jpg', key='x.jpg', annotation=annotation)
  image = EncodedImage(b'', 40, 30, 3, 'jpeg', (40, 30), 6)
  found = detect(LoadedImage(LabelledRow(row, 0, ''), image, 'f' * 64, 0), ('', 'a'),
                 ImageSpec(resize_mode='none'), DetectionOptions())
  assert (found.xmin[0], found.ymin[0], found.xmax[0], found.ymax[0]) == pytest.approx(expected)


def test_the_summary_names_objects_and_annotations(converted):
  _, out = converted
  text = convert.summary(read_info(out), 1.0)
  assert '  annotation rejected annotation/empty_box: 1 (not an image row)' in text
  assert '  objects: 10; boxes dropped by the crop: 0; images without objects skipped: 0' in text
  assert '  classes: 9 (ids up to 11); output: ' in text


@pytest.mark.slow  # convert, validate and inspect: three pipelines' worth
def test_make_demo_detection_draws_the_boxes_on_the_objects(tmp_path, monkeypatch):
  import csv

  from PIL import Image

  from pipeline.looking.look_detection import colour
  monkeypatch.chdir(tmp_path)
  assert demo_detection.main([]) == EXIT_OK
  look = tmp_path / demo_detection.EXPORT_DIR
  assert (look / 'contact_sheet.png').exists() and (look / 'report.html').exists()
  with open(look / 'samples.csv', encoding='utf-8') as handle:
    name = next(row[0] for row in csv.reader(handle) if row[4] == 'astronaut.jpg')
  pixels = np.asarray(Image.open(look / name).convert('RGB'), np.int16)
  # the face: columns 150..300, rows 15..180 of 512x512, drawn at 320x320 (x 0.625)
  edge = pixels[60:90, 94]  # its left edge, below the name tag
  assert np.abs(edge - colour(1)).max(axis=1).mean() < 60, edge[:3]
  inside = pixels[60:90, 110]  # the face itself is not box-coloured
  assert np.abs(inside - colour(1)).max(axis=1).mean() > 60


def test_a_repeated_image_id_is_a_rejected_row():
  from transforms.core.splits import SplitConfig
  source = coco.CocoSource('a.json', 'images', SplitConfig(names=('train',)), {1: 1})
  images = [(1, {'id': 5, 'file_name': 'a.jpg', 'width': 10, 'height': 10}),
            (3, {'id': 5, 'file_name': 'b.jpg', 'width': 10, 'height': 10})]
  row, rejected = coco.image_row(
      5, images, [(1, {'image_id': 5, 'category_id': 1, 'bbox': [1, 1, 2, 2]})], source)
  assert (row.image, row.path, row.split) == ('a.jpg', 'images/a.jpg', 'train')
  assert [o.box for o in row.annotation.objects] == [(1.0, 1.0, 3.0, 3.0)]
  assert [(r.code, r.line, r.counts_as_row, r.reason) for r in rejected] == [
      ('duplicate_image_id', 3, True, 'image id 5 is given again: kept the one at position 1')]


@pytest.mark.parametrize('include_masks', [False, True])
def test_kept_objects_carry_only_what_the_example_needs(include_masks):
  obj = annotations.ObjectAnnotation(1, (-0.5, 2, 12, 8), segmentation=('polygons', [[1] * 6]),
                                     shown={'a big': 'annotation'})
  kept, rejected = annotations.checked_objects(
      annotations.ImageAnnotation(1, (11, 10), (obj,)), {1}, include_masks)
  assert rejected == [] and kept[0].box == (0.0, 2, 11, 8)  # clipped to the image
  assert kept[0].shown is None
  assert kept[0].segmentation == (('polygons', [[1] * 6]) if include_masks else None)


def _found(objects, recorded, stored=(64, 48), spec=None, **options):
  """detect() on a 64x48 source written at its own size (or spec's)."""
  spec = spec or ImageSpec(resize_mode='none')
  annotation = annotations.ImageAnnotation(7, recorded, tuple(objects))
  row = ManifestRow({}, 'a.json', 1, image='x.jpg', path='x.jpg', key='x.jpg',
                    annotation=annotation)
  out = (spec.width, spec.height) if spec.fixed_size else stored
  image = EncodedImage(b'', out[1], out[0], 3, 'jpeg', stored, 1)
  return detect(LoadedImage(LabelledRow(row, 0, ''), image, 'f' * 64, 0), ('', 'a'), spec,
                DetectionOptions(**options))


def test_a_recorded_size_that_is_not_the_files_rejects_the_row():
  obj = annotations.ObjectAnnotation(1, (20, 10, 60, 50), area=1000.0)
  with pytest.raises(RowError) as error:
    _found([obj], (128, 96))
  assert (error.value.stage, error.value.code, error.value.reason) == (
      'annotation', 'size_mismatch', 'x.jpg is 64x48, its annotation records 128x96 '
      '(--on_size_mismatch scale scales its coordinates)')
  # --on_size_mismatch scale: coordinates times actual/recorded, the area too
  found = _found([obj], (128, 96), on_size_mismatch='scale')
  assert (found.xmin, found.ymin, found.xmax, found.ymax) == (
      (10 / 64,), (5 / 48,), (30 / 64,), (25 / 48,))
  assert found.area == (250.0,)
  # a polygon mask is scaled with its box
  polygon = annotations.ObjectAnnotation(1, (20, 10, 60, 50), segmentation=(
      'polygons', [[20, 10, 60, 10, 60, 50, 20, 50]]))
  found = _found([polygon], (128, 96), on_size_mismatch='scale', include_masks=True)
  mask = masks.decode_mask(found.masks[0])
  assert mask.shape == (48, 64) and mask[5:25, 10:30].all() and mask.sum() <= 21 * 21


@pytest.mark.parametrize('orientation_size', [(64, 48), (48, 64)])
def test_the_recorded_size_may_be_either_way_round_under_exif(orientation_size):
  annotation = annotations.ImageAnnotation(7, orientation_size, (
      annotations.ObjectAnnotation(1, (0, 0, 10, 10)),))
  row = ManifestRow({}, 'a.json', 1, image='x.jpg', key='x.jpg', annotation=annotation)
  image = EncodedImage(b'', 64, 48, 3, 'jpeg', (64, 48), 6)  # written upright: 48x64
  found = detect(LoadedImage(LabelledRow(row, 0, ''), image, 'f' * 64, 0), ('', 'a'),
                 ImageSpec(resize_mode='none'), DetectionOptions())
  assert found.labels == (1,) and found.rejected == ()


def test_without_a_recorded_size_boxes_are_checked_against_the_image():
  given = [{'id': 40, 'category_id': 1, 'bbox': [-50, -10, 150, 40]},
           {'id': 50, 'category_id': 1, 'bbox': [70, 10, 20, 10]}]
  far = annotations.ObjectAnnotation(1, (-50, -10, 100, 30), source='a.json', line=4,
                                     shown=given[0])
  beyond = annotations.ObjectAnnotation(1, (70, 10, 90, 20), source='a.json', line=5,
                                        shown=given[1])
  edge = annotations.ObjectAnnotation(1, (-0.5, 0, 64.5, 48), area=100.0)  # within 1 px
  # as the reader leaves them: no size to check by, so what a rejection shows is kept
  kept, bad = annotations.checked_objects(annotations.ImageAnnotation(7, None, (
      far, beyond, edge)), {1}, False, 'x.jpg')
  assert bad == [] and [o.shown for o in kept] == [*given, None]
  for spec in (ImageSpec(resize_mode='none'),
               ImageSpec(height=32, width=32, resize_mode='stretch')):
    found = _found(kept, None, spec=spec)
    assert found.dropped == 0 and found.labels == (1,)
    assert (found.xmin, found.xmax) == ((0.0,), (1.0,))
    scale = (32 / 64 * 32 / 48) if spec.fixed_size else 1.0
    assert found.area[0] == pytest.approx(100 * 64 / 65 * scale)
    assert [(r.code, r.counts_as_row, r.source, r.line, r.reason, r.row)
            for r in found.rejected] == [
        ('box_outside_image', False, 'a.json', 4,
         'box (-50, -10, 100, 30) of annotation 4 in a.json is outside the 64x48 image x.jpg',
         given[0]),
        ('box_outside_image', False, 'a.json', 5,
         'box (70, 10, 90, 20) of annotation 5 in a.json is outside the 64x48 image x.jpg',
         given[1])]
  with pytest.raises(RowError) as error:  # --on_bad_box reject_row: the row goes
    _found([far, edge], None, on_bad_box='reject_row')
  assert (error.value.code, error.value.reason) == (
      'bad_box', '1 bad annotation(s) (--on_bad_box reject_row); the first: '
      'box_outside_image: box (-50, -10, 100, 30) of annotation 4 in a.json is outside the '
      '64x48 image x.jpg')


def _found_yolo(text: str, stored: tuple, **options):
  """detect() of a YOLO label file's rows on a `stored` image written at its
  own size, after the reader's checks (checked_objects)."""
  import dataclasses

  from transforms.core import yolo
  annotation, rejected = yolo.parse_labels(text, 7, 'labels/a.txt')
  kept, bad = annotations.checked_objects(annotation, {1, 2}, False)
  assert rejected == [] and bad == []  # fractions are not checked against a 1x1 image
  row = ManifestRow({}, 'labels/a.txt', 1, image='a.jpg', path='a.jpg', key='a.jpg',
                    annotation=dataclasses.replace(annotation, objects=kept))
  image = EncodedImage(b'', stored[1], stored[0], 3, 'jpeg', stored, 1)
  return detect(LoadedImage(LabelledRow(row, 0, ''), image, 'f' * 64, 0), ('', 'a', 'b'),
                ImageSpec(resize_mode='none'), DetectionOptions(**options))


def test_yolo_boxes_have_the_same_one_pixel_tolerance_as_coco_and_voc():
  # 64x48: 0.32 px past the left edge, 0.64 px past the right one: clipped
  # (the tolerance was a thousandth of the image, 0.064 px here); 1.92 px: rejected
  found = _found_yolo('1 0.005 0.5 0.02 0.1\n0 0.99 0.5 0.04 0.1\n0 0.02 0.5 0.1 0.1\n',
                      (64, 48))
  assert found.labels == (2, 1)
  assert found.xmin == (0.0, pytest.approx(62.08 / 64, abs=1e-12))
  assert found.xmax == (pytest.approx(0.96 / 64, abs=1e-12), 1.0)
  assert found.ymin == pytest.approx((0.45, 0.45)) and found.ymax == pytest.approx((0.55, 0.55))
  assert found.area == pytest.approx((0.96 * 4.8, 1.92 * 4.8))  # what stays inside
  assert [(r.code, r.counts_as_row, r.stage, r.source, r.line, r.reason)
          for r in found.rejected] == [
      ('box_outside_image', False, 'annotation', 'labels/a.txt', 3,
       'box (-1.92, 21.6, 4.48, 26.4) of annotation 3 in labels/a.txt is outside the 64x48 '
       'image a.jpg')]
  # 4000 px wide: 2.4 px past the edge is rejected (a thousandth was 4 px), 0.8 px clipped
  found = _found_yolo('0 0.0004 0.5 0.002 0.1\n0 0.9998 0.5 0.0008 0.1\n', (4000, 3000))
  assert found.xmax == (1.0,)
  assert [(r.code, r.reason) for r in found.rejected] == [
      ('box_outside_image', 'box (-2.4, 1350, 5.6, 1650) of annotation 1 in labels/a.txt is '
       'outside the 4000x3000 image a.jpg')]
  with pytest.raises(RowError) as error:  # --on_bad_box reject_row: the row goes
    _found_yolo('0 0.02 0.5 0.1 0.1\n', (64, 48), on_bad_box='reject_row')
  assert error.value.code == 'bad_box'


def test_a_yolo_box_exactly_one_pixel_past_the_edge_is_clipped_as_in_coco():
  # COCO bbox [8, 22, 23, 37] on a 30x59 image ends at x 31, 1 px past the
  # right edge: clipped and kept. The same box as YOLO fractions comes back
  # as 31.000000000000004 px, and was box_outside_image (found converting one
  # dataset as COCO and as YOLO: with --on_bad_box reject_row, the image's row)
  row = '0 0.65 0.6864406779661016 0.7666666666666667 0.6271186440677966\n'
  found = _found_yolo(row, (30, 59), on_bad_box='reject_row')
  assert found.rejected == ()
  assert found.xmin == (pytest.approx(8 / 30, abs=1e-12),) and found.xmax == (1.0,)
  assert found.ymax == (1.0,) and found.area == (pytest.approx(22 * 37),)


def test_area_is_the_recorded_area_moved_with_the_box():
  # recorded 64x48; clipped by the reader to the image, it keeps 3/4 of its area
  kept, _ = annotations.checked_objects(annotations.ImageAnnotation(7, (64, 48), (
      annotations.ObjectAnnotation(1, (-0.5, 0, 1.5, 10), area=12.0),
      annotations.ObjectAnnotation(1, (10, 10, 20, 20)))), {1}, False)
  assert [o.area for o in kept] == [9.0, None]
  found = _found(kept, (64, 48), spec=ImageSpec(height=24, width=32, resize_mode='stretch'))
  # the recorded area times sx * sy; without one (VOC, YOLO) the box's, output pixels
  assert found.area == (9.0 / 4, 25.0)
  found = _found(kept, (64, 48), spec=ImageSpec(height=24, width=32, resize_mode='stretch'),
                 include_masks=True)
  assert found.area == (9.0 / 4, 25.0)  # with masks too (it was the mask's pixels)


def test_sizes_and_boxes_are_checked_against_the_image_files(tmp_path):
  from PIL import Image
  for shade, name in enumerate(('small.jpg', 'plain.jpg', 'unsized.jpg')):
    Image.new('RGB', (64, 48), (90, 120, 60 * shade)).save(tmp_path / name)
  document = {
      'images': [{'id': 1, 'file_name': 'small.jpg', 'width': 128, 'height': 96},
                 {'id': 2, 'file_name': 'plain.jpg', 'width': 64, 'height': 48},
                 {'id': 3, 'file_name': 'unsized.jpg'}],  # no recorded size
      'annotations': [
          {'id': 10, 'image_id': 1, 'category_id': 1, 'bbox': [20, 10, 40, 40], 'area': 1600},
          {'id': 11, 'image_id': 2, 'category_id': 1, 'bbox': [8, 8, 16, 16], 'area': 256},
          {'id': 15, 'image_id': 2, 'category_id': 1, 'bbox': [40, 10, 30, 10]},
          {'id': 12, 'image_id': 3, 'category_id': 1, 'bbox': [-50, -10, 150, 40]},
          {'id': 13, 'image_id': 3, 'category_id': 1, 'bbox': [70, 10, 20, 10]},
          {'id': 14, 'image_id': 3, 'category_id': 1, 'bbox': [4, 4, 60, 44]}],
      'categories': [{'id': 1, 'name': 'thing'}]}
  path = tmp_path / 'instances.json'
  path.write_text(json.dumps(document))
  flags = ['--annotations', str(path), '--annotation_format', 'coco', '--image_dir',
           str(tmp_path), '--resize_mode', 'stretch', '--height', '24', '--width', '32',
           '--progress', 'off', '--max_error_rate', '0.5']
  out = tmp_path / 'out'
  assert convert.main([*flags, '--output_dir', str(out)]) == EXIT_OK
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected']) == (2, 1)
  assert info['rejected_by_reason'] == {'annotation/size_mismatch': 1}
  assert info['rejected_annotations_by_reason'] == {'annotation/box_outside_image': 3}
  assert info['detection']['dropped_boxes']['crop_visibility'] == 0  # nothing was cropped
  lines = {(line['code'], line['line']): line for line in rejected_lines(out)}
  assert lines['size_mismatch', 1]['reason'] == (
      'small.jpg is 64x48, its annotation records 128x96 (--on_size_mismatch scale scales '
      'its coordinates)')
  # named by the file and their position in it, and the image, whether its
  # size was recorded (the third annotation) or decoded (the fourth and
  # fifth); the annotation as given in `row`
  given = {ann['id']: ann for ann in document['annotations']}
  assert [(lines['box_outside_image', n]['reason'], lines['box_outside_image', n]['row'])
          for n in (3, 4, 5)] == [
      (f'box (40, 10, 70, 20) of annotation 3 in {path} is outside the 64x48 image plain.jpg',
       given[15]),
      (f'box (-50, -10, 100, 30) of annotation 4 in {path} is outside the 64x48 image '
       'unsized.jpg', given[12]),
      (f'box (70, 10, 90, 20) of annotation 5 in {path} is outside the 64x48 image '
       'unsized.jpg', given[13])]
  assert lines['box_outside_image', 3]['counts_as_row'] is False
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK
  found = {e['key']: e for e in read.examples(str(out))}
  assert np.allclose(found['unsized.jpg']['boxes'], [[4 / 48, 4 / 64, 1, 1]])
  # --on_size_mismatch scale: the 128x96 annotation is halved onto the 64x48 file
  scaled = tmp_path / 'scaled'
  assert convert.main([*flags, '--output_dir', str(scaled), '--on_size_mismatch',
                       'scale']) == EXIT_OK
  assert read_info(scaled)['num_examples'] == 3
  small = next(e for e in read.examples(str(scaled)) if e['key'] == 'small.jpg')
  assert np.allclose(small['boxes'], [[5 / 48, 10 / 64, 25 / 48, 30 / 64]])
  assert read_info(scaled)['detection']['on_size_mismatch'] == 'scale'


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('workers', ['1', '2'])  # 2: grouped per content
def test_dedupe_content_keeps_the_copy_whose_recorded_size_fits(tmp_path, workers):
  # Three records of one file (the same bytes): the first by position records
  # another size. --dedupe content kept that first copy, which the image step
  # then rejected (size_mismatch): the other two were rejected as its
  # duplicates ("kept that line"), and the image was in no record at all.
  images = tmp_path / 'images'
  images.mkdir()
  data = noise_png(7, (40, 30))
  for name in ('a.png', 'b.png', 'c.png'):
    (images / name).write_bytes(data)
  document = {
      'images': [{'id': 1, 'file_name': 'a.png', 'width': 80, 'height': 60},
                 {'id': 2, 'file_name': 'b.png', 'width': 40, 'height': 30},
                 {'id': 3, 'file_name': 'c.png', 'width': 40, 'height': 30}],
      'annotations': [{'id': n, 'image_id': n, 'category_id': 1, 'bbox': [4, 3, 8, 6],
                       'area': 48} for n in (1, 2, 3)],
      'categories': [{'id': 1, 'name': 'thing'}]}
  annotations = tmp_path / 'instances.json'
  annotations.write_text(json.dumps(document))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(annotations), '--annotation_format', 'coco',
                       '--image_dir', str(images), '--output_dir', str(out),
                       '--dedupe', 'content', '--resize_mode', 'none', '--encoding', 'png',
                       '--max_error_rate', '1', '--progress', 'off',
                       '--direct_num_workers', workers]) == EXIT_OK
  (example,) = read_examples(out)
  assert example['image/filename'][1] == [b'b.png']
  assert example['image/source_id'][1] == [b'2']
  assert example['image/object/bbox/xmin'][1] == [pytest.approx(0.1)]
  assert example['image/object/bbox/xmax'][1] == [pytest.approx(0.3)]
  lines = rejected_lines(out)
  assert sorted((line['code'], line['row']['file_name']) for line in lines) == [
      ('duplicate_content', 'a.png'), ('duplicate_content', 'c.png')]
  assert all("key 'b.png': kept that line" in line['reason'] for line in lines)
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK


def test_dedupe_content_keeps_the_copy_whose_boxes_fit_with_reject_row(tmp_path):
  # Two YOLO images of the same bytes: the first's label file holds a box
  # outside the image. With --on_bad_box reject_row --dedupe content that
  # first copy was kept, then rejected whole (bad_box), and the second had
  # been rejected as its duplicate: nothing was published (exit 2).
  (tmp_path / 'images').mkdir()
  (tmp_path / 'labels').mkdir()
  data = noise_png(3, (80, 40))
  for name in ('a', 'b'):
    (tmp_path / 'images' / f'{name}.png').write_bytes(data)
  (tmp_path / 'labels' / 'a.txt').write_text('0 0.5 0.5 0.25 0.5\n0 1.5 0.5 0.2 0.2\n')
  (tmp_path / 'labels' / 'b.txt').write_text('0 0.5 0.5 0.25 0.5\n')
  (tmp_path / 'classes.txt').write_text('thing\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path), '--annotation_format', 'yolo',
                       '--output_dir', str(out), '--dedupe', 'content', '--on_bad_box',
                       'reject_row', '--resize_mode', 'none', '--encoding', 'png',
                       '--max_error_rate', '1', '--progress', 'off']) == EXIT_OK
  (example,) = read_examples(out)
  assert example['image/filename'][1] == [b'b.png']
  assert [example['image/object/bbox/' + k][1][0] for k in ('xmin', 'ymin', 'xmax', 'ymax')
          ] == [pytest.approx(v) for v in (0.375, 0.25, 0.625, 0.75)]
  (line,) = rejected_lines(out)
  assert line['code'] == 'duplicate_content' and line['row']['image'] == 'a.png'
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK
