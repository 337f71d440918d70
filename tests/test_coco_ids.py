"""COCO ids written as whole-number floats (6.0: pandas writes an integer
column holding a NaN so) are the integers pycocotools and the Model Garden
match them as (their dicts hold 6.0 and 6 as one key). Refused, every such
annotation was rejected (missing_image, unknown_category: not rows) and the
run exited 0 with images of no object."""

import json

from PIL import Image
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_OVER_BUDGET
from tests.conftest import feature
from tests.conftest import read_examples
from tests.conftest import read_info
from transforms.core import coco

pytestmark = pytest.mark.xdist_group('detection')


def _document(image_id, ann_image_id, category_id, ann_category_id) -> dict:
  return {'images': [{'id': image_id, 'file_name': 'a.png', 'width': 40, 'height': 20}],
          'annotations': [{'id': 1, 'image_id': ann_image_id, 'category_id': ann_category_id,
                           'bbox': [4, 2, 10, 8], 'area': 80, 'iscrowd': 0}],
          'categories': [{'id': 1, 'name': 'cat'}, {'id': category_id, 'name': 'dog'}]}


@pytest.mark.parametrize('ids', [(6, 6.0, 3, 3.0), (6.0, 6, 3.0, 3), (6.0, 6.0, 3.0, 3.0)])
def test_whole_number_float_ids_are_their_integers(tmp_path, ids):
  (tmp_path / 'images').mkdir()
  Image.new('RGB', (40, 20), (10, 200, 30)).save(tmp_path / 'images' / 'a.png')
  (tmp_path / 'a.json').write_text(json.dumps(_document(*ids)))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'a.json'), '--annotation_format',
                       'coco', '--image_dir', str(tmp_path / 'images'), '--resize_mode', 'none',
                       '--progress', 'off', '--output_dir', str(out)]) == EXIT_OK
  assert read_info(out)['num_rejected'] == 0
  (example,) = read_examples(out, 'train')
  assert feature(example, 'image/source_id') == b'6'
  assert feature(example, 'image/object/class/text') == b'dog'
  assert feature(example, 'image/object/class/label') == 3
  assert feature(example, 'image/object/bbox/xmin') == pytest.approx(0.1)
  assert feature(example, 'image/object/bbox/ymax') == pytest.approx(0.5)


@pytest.mark.parametrize('value, read', [(6.0, 6), (-2.0, -2), (6, 6), (6.5, 6.5), (True, True),
                                         ('6', '6'), (1e300, 1e300), (float('nan'), None)])
def test_whole_id(value, read):
  found = coco.whole_id(value)
  assert type(found) is type(value if read is None else read)
  assert found == read or read is None


def test_an_image_id_given_as_a_string_is_said_to_be_one(tmp_path, capsys):
  """`"image_id": "6"` for the image of id 6 matches no image (pycocotools and
  the Model Garden drop the object too): its rejected line says the id is a
  string, where it said only that '6' is not in "images". Its only
  annotation rejected, the run is over its budget (exit 3): it exited 0 with
  an image of no object, and validate said OK."""
  (tmp_path / 'images').mkdir()
  Image.new('RGB', (40, 20), (10, 200, 30)).save(tmp_path / 'images' / 'a.png')
  (tmp_path / 'a.json').write_text(json.dumps(_document(6, '6', 3, 3)))
  out = tmp_path / 'out'
  flags = ['--annotations', str(tmp_path / 'a.json'), '--annotation_format', 'coco',
           '--image_dir', str(tmp_path / 'images'), '--resize_mode', 'none', '--progress',
           'off', '--output_dir', str(out)]
  assert convert.main(flags) == EXIT_OVER_BUDGET
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      'Every one of the 1 annotation(s) was rejected (rejected.jsonl), so no image has an '
      'object (--max_error_rate 1 accepts that): exit code 3.')
  (line,) = [json.loads(text) for text in (out / 'rejected.jsonl').read_text().splitlines()]
  assert (line['code'], line['reason']) == (
      'missing_image', 'image_id \'6\' is not in "images" (a string: COCO image ids are '
      "integers, as an image record's id must be)")
  (example,) = read_examples(out, 'train')
  assert list(example['image/object/bbox/xmin'][1]) == []  # the image, with no object
  info = read_info(out)
  assert (info['over_budget'], info['error_rate'], info['detection']['num_objects']) == (
      True, 0.0, 0)
  assert validate.main(['--input_dir', str(out), '--runner', 'DirectRunner']) == EXIT_OK
  assert 'or every annotation (over_budget' in capsys.readouterr().out
  # --max_error_rate 1 takes such a set as it is
  assert convert.main([*flags, '--overwrite', '--max_error_rate', '1']) == EXIT_OK
  assert read_info(out)['over_budget'] is False


def test_a_dataset_that_kept_no_annotation_and_says_it_is_within_budget_is_invalid(tmp_path):
  """A detection dataset written before the rule (over_budget false, every
  annotation rejected) does not validate: its over_budget is not what its
  counts give."""
  (tmp_path / 'images').mkdir()
  Image.new('RGB', (40, 20), (10, 200, 30)).save(tmp_path / 'images' / 'a.png')
  (tmp_path / 'a.json').write_text(json.dumps(_document(6, '6', 3, 3)))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'a.json'), '--annotation_format',
                       'coco', '--image_dir', str(tmp_path / 'images'), '--progress', 'off',
                       '--output_dir', str(out)]) == EXIT_OVER_BUDGET
  info = read_info(out)
  info['over_budget'] = False
  (out / 'dataset_info.json').write_text(json.dumps(info))
  assert validate.main(['--input_dir', str(out), '--runner', 'DirectRunner']) == EXIT_FAILED
  report = json.loads((out / 'validation_report.json').read_text())
  assert [p['detail'] for p in report['problems']] == [
      "dataset_info.json's over_budget is false, but every one of its 1 annotation(s) was "
      'rejected (no image has an object) and its max_error_rate is 0']


def test_the_api_raises_the_budget_error_of_a_set_whose_every_annotation_was_rejected(
    tmp_path):
  """api.convert raises ErrorBudgetExceeded saying why, as the command line exits 3."""
  from pipeline import api
  (tmp_path / 'images').mkdir()
  Image.new('RGB', (40, 20), (10, 200, 30)).save(tmp_path / 'images' / 'a.png')
  (tmp_path / 'a.json').write_text(json.dumps(_document(6, '6', 3, 3)))
  with pytest.raises(api.ErrorBudgetExceeded) as caught:
    api.convert(annotations=str(tmp_path / 'a.json'), annotation_format='coco',
                image_dir=str(tmp_path / 'images'), output_dir=str(tmp_path / 'out'),
                progress='off', runner='DirectRunner')
  assert str(caught.value) == (
      'Every one of the 1 annotation(s) was rejected (rejected.jsonl), so no image has an '
      'object (--max_error_rate 1 accepts that): see .result.rejected')
  assert caught.value.result.info['detection']['num_objects'] == 0
