"""COCO ids written as whole-number floats (6.0: pandas writes an integer
column holding a NaN so) are the integers pycocotools and the Model Garden
match them as (their dicts hold 6.0 and 6 as one key). Refused, every such
annotation was rejected (missing_image, unknown_category: not rows) and the
run exited 0 with images of no object."""

import json

from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
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


def test_an_image_id_given_as_a_string_is_said_to_be_one(tmp_path):
  """`"image_id": "6"` for the image of id 6 matches no image (pycocotools and
  the Model Garden drop the object too): its rejected line says the id is a
  string, where it said only that '6' is not in "images"."""
  (tmp_path / 'images').mkdir()
  Image.new('RGB', (40, 20), (10, 200, 30)).save(tmp_path / 'images' / 'a.png')
  (tmp_path / 'a.json').write_text(json.dumps(_document(6, '6', 3, 3)))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'a.json'), '--annotation_format',
                       'coco', '--image_dir', str(tmp_path / 'images'), '--resize_mode', 'none',
                       '--progress', 'off', '--output_dir', str(out)]) == EXIT_OK
  (line,) = [json.loads(text) for text in (out / 'rejected.jsonl').read_text().splitlines()]
  assert (line['code'], line['reason']) == (
      'missing_image', 'image_id \'6\' is not in "images" (a string: COCO image ids are '
      "integers, as an image record's id must be)")
  (example,) = read_examples(out, 'train')
  assert list(example['image/object/bbox/xmin'][1]) == []  # the image, with no object
