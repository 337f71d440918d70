"""`make demo-detection`: a small COCO-format detection set converted,
validated and inspected.

Three real photos that scikit-image ships (astronaut, coffee, chelsea) with
hand-made boxes, polygon masks and one RLE mask, written as a COCO
instances JSON in demo_data_detection/; convert --schema detection with
--include_masks, validate, then inspect draws the boxes, class names and
masks on the contact sheet (demo_output_detection/inspect/).
"""

from __future__ import annotations

import json
import math
import os

from PIL import Image

from pipeline import errors

if __name__ == '__main__':
  errors.refuse_optimized_python()  # before Beam, which fails as it is imported under -OO

from pipeline import convert
from pipeline import look
from pipeline import validate
from pipeline.runs import exits

DATA_DIR = 'demo_data_detection'
OUTPUT_DIR = 'demo_output_detection'
EXPORT_DIR = os.path.join(OUTPUT_DIR, 'inspect')
# Category ids as a COCO file gives them: with gaps (4 and 10 unused).
CATEGORIES = {1: 'face', 2: 'helmet', 3: 'rocket', 5: 'cup', 6: 'saucer', 7: 'spoon',
              8: 'cat', 9: 'eye', 11: 'nose'}
# file -> [(category id, COCO bbox x, y, w, h, mask: 'ellipse' | 'rle' | None)]
OBJECTS = {
    'astronaut.jpg': [(1, 150, 15, 150, 165, 'ellipse'), (2, 275, 340, 237, 172, 'ellipse'),
                      (3, 355, 0, 120, 290, None)],
    'coffee.jpg': [(5, 173, 15, 235, 285, 'ellipse'), (6, 78, 65, 400, 325, 'ellipse'),
                   (7, 318, 65, 90, 262, None)],
    'chelsea.jpg': [(8, 0, 0, 451, 300, None), (9, 132, 85, 75, 65, 'ellipse'),
                    (9, 295, 105, 52, 60, 'ellipse'), (11, 232, 215, 60, 50, 'rle')],
}


def _ellipse(x: float, y: float, w: float, h: float, points: int = 24) -> list:
  cx, cy = x + w / 2, y + h / 2
  return [round(v, 2) for i in range(points) for v in (
      cx + w / 2 * math.cos(2 * math.pi * i / points),
      cy + h / 2 * math.sin(2 * math.pi * i / points))]


def _box_rle(x: int, y: int, w: int, h: int, width: int, height: int) -> dict:
  """An uncompressed COCO RLE of a filled box (runs down the columns)."""
  counts, run, value = [], 0, 0
  for column in range(width):
    for row in range(height):
      inside = int(x <= column < x + w and y <= row < y + h)
      if inside != value:
        counts.append(run)
        run, value = 0, inside
      run += 1
  counts.append(run)
  return {'size': [height, width], 'counts': counts}


def make_sample(directory: str = DATA_DIR) -> str:
  """Writes the images and instances.json (-> its path). Its photos come from
  scikit-image, a test requirement, not a runtime one: without it, a
  UsageError (exit 2, one line saying what to install), nothing written."""
  try:
    import skimage.data
  except ImportError as error:
    raise errors.UsageError(f'the detection demo takes its photos from scikit-image '
                            f'({error}): pip install scikit-image==0.26.0') from error
  os.makedirs(os.path.join(directory, 'images'), exist_ok=True)
  images, annotations = [], []
  for number, (name, objects) in enumerate(OBJECTS.items(), 1):
    pixels = getattr(skimage.data, name.split('.')[0])()
    Image.fromarray(pixels).save(os.path.join(directory, 'images', name), quality=95)
    height, width = pixels.shape[:2]
    images.append({'id': number, 'file_name': name, 'width': width, 'height': height})
    for category, x, y, w, h, mask in objects:
      segmentation = (_ellipse(x, y, w, h),) if mask == 'ellipse' else (
          _box_rle(x, y, w, h, width, height) if mask == 'rle' else [])
      annotations.append({
          'id': len(annotations) + 1, 'image_id': number, 'category_id': category,
          'bbox': [x, y, w, h], 'area': w * h, 'iscrowd': 1 if mask == 'rle' else 0,
          'segmentation': list(segmentation) if isinstance(segmentation, tuple)
          else segmentation})
  path = os.path.join(directory, 'instances.json')
  with open(path, 'w', encoding='utf-8') as handle:
    json.dump({'images': images, 'annotations': annotations,
               'categories': [{'id': i, 'name': n, 'supercategory': 'thing'}
                              for i, n in CATEGORIES.items()]}, handle)
  return path


def main(argv=None) -> int:
  errors.UsageParser(description=__doc__.strip().splitlines()[0]).parse_args(argv)
  annotations = make_sample(DATA_DIR)
  print(f'Sample: {annotations} ({len(OBJECTS)} images, '
        f'{sum(map(len, OBJECTS.values()))} objects)\n')
  code = convert.main(['--annotations', annotations, '--annotation_format', 'coco',
                       '--image_dir', os.path.join(DATA_DIR, 'images'), '--include_masks',
                       '--height', '320', '--width', '320', '--resize_mode', 'pad',
                       '--output_dir', OUTPUT_DIR, '--overwrite'])
  if code != 0:
    return code
  code = validate.main(['--input_dir', OUTPUT_DIR])
  if code != 0:
    return code
  return look.main(['--input_dir', OUTPUT_DIR, '--export_dir', EXPORT_DIR])


if __name__ == '__main__':
  exits.exit_with(lambda: exits.main_with_usage_errors(main))
