"""validate's checks of a detection record's objects, and the readers'
decoders of them: plain functions the detection rows of the feature table
(feature_tables.py) name. Checks return [(problem kind, detail)]."""

from __future__ import annotations

import io
import math

from PIL import Image

from transforms.core import checks
from transforms.core import decoders

BOX_FEATURES = ('image/object/bbox/ymin', 'image/object/bbox/xmin',
                'image/object/bbox/ymax', 'image/object/bbox/xmax')
PER_OBJECT = BOX_FEATURES + ('image/object/class/label', 'image/object/class/text',
                             'image/object/is_crowd', 'image/object/area',
                             'image/object/difficult', 'image/object/truncated')
MASK = 'image/object/mask'


def dropped_boxes_problems(detection: dict, by_reason) -> list:
  """dataset_info.json's detection.dropped_boxes against what it follows
  from, as detection_info.finish_info writes it -> [what differs]: with
  --on_bad_box drop, each rejected annotation's code as often as
  rejected_annotations_by_reason counts it; with reject_row, none (its image's
  row is rejected instead). crop_visibility is recorded nowhere else."""
  dropped, mode = detection.get('dropped_boxes'), detection.get('on_bad_box')
  if dropped is None or by_reason is None or mode is None:
    return []
  expected = {reason.split('/', 1)[1]: n for reason, n in by_reason.items()
              if mode == 'drop'}
  found = {code: n for code, n in dropped.items() if code != 'crop_visibility'}
  return [f'detection.dropped_boxes.{code} is {found.get(code, 0)}, but its '
          f'rejected_annotations_by_reason (--on_bad_box {mode}) makes it '
          f'{expected.get(code, 0)}'
          for code in sorted(set(found) | set(expected))
          if found.get(code, 0) != expected.get(code, 0)]


def check_boxes(_, record, expected) -> list:
  """Every per-object list has one value per box; coordinates in [0, 1]
  with min <= max."""
  lengths = {name: len(record[name]) for name in PER_OBJECT
             if name in expected.feature_spec}
  if len(set(lengths.values())) > 1:
    shown = ', '.join(f'{name.rsplit("/", 2)[-2] + "/" + name.rsplit("/", 1)[-1]} '
                      f'{n}' for name, n in lengths.items())
    return [('object_count_mismatch', f'the object lists differ in length: {shown}')]
  ymin, xmin, ymax, xmax = (record[name] for name in BOX_FEATURES)
  for i, box in enumerate(zip(ymin, xmin, ymax, xmax)):
    if not all(0.0 <= v <= 1.0 for v in box):
      return [('box_out_of_range', f'box {i} (ymin, xmin, ymax, xmax) = '
               f'{_shown(box)} is not within [0, 1]')]
    if box[0] > box[2] or box[1] > box[3]:
      return [('box_inverted', f'box {i} (ymin, xmin, ymax, xmax) = {_shown(box)} has '
               f'a min above its max')]
  return []


def _shown(box) -> str:
  return '(' + ', '.join(f'{v:.4g}' for v in box) + ')'


def check_source_id(value: bytes, *_) -> list:
  """image/source_id names the image (the Model Garden's evaluators key on it)."""
  if not value.strip():
    return [('empty_source_id', 'image/source_id is empty')]
  return []


def check_areas(areas: list, *_) -> list:
  """Each object's area is a number >= 0 (pixels of the output image)."""
  for i, area in enumerate(areas):
    if not math.isfinite(area) or area < 0:
      return [('bad_area', f'object {i} has area {area}, not a number >= 0')]
  return []


def check_flags(name: str, values: list, *_) -> list:
  """Each object's flag (`name`: is_crowd, difficult, truncated) is 0 or 1,
  the only values convert writes (feature_tables.py binds `name` with a partial)."""
  for i, value in enumerate(values):
    if value not in (0, 1):
      return [('bad_object_flag', f'object {i} has {name} {value}, not 0 or 1')]
  return []


def check_object_labels(labels: list, _, expected) -> list:
  """Each object's label names a class of the label map (0 is the background)."""
  names = expected.label_map
  for label in labels:
    if not 0 < label < len(names) or not names[label]:
      return [('label_out_of_range', f'object label {label} is not in the label map')]
  return []


def check_object_texts(texts: list, record, expected) -> list:
  """Each object's class/text is its label's name. A label with no name (0,
  a gap between COCO ids, past the map) is check_object_labels'
  label_out_of_range alone: compared with the gap's '', every such object
  was a label_text_mismatch too."""
  names = expected.label_map
  for label, text in zip(record['image/object/class/label'], texts):
    name = names[label] if 0 < label < len(names) else None
    if name and text.decode('utf-8', 'replace') != name:
      return [('label_text_mismatch', f'object class/text {text.decode("utf-8", "replace")!r} '
               f'is not {name!r}, the label map name of {label}')]
  return []


def check_masks(masks: list, record, expected) -> list:
  """One PNG per box, each a grayscale PNG (mode L: a reader decoding one
  channel makes a colour mask's 0/1 into 0) at the record's size with values
  0/1. A PNG: the readers decode masks with tf.io.decode_png, which fails
  on a BMP, GIF or TIFF (Pillow opens any)."""
  # (the boxes counted by their labels: lists of unequal length are check_boxes')
  boxes = len(record['image/object/class/label'])
  if len(masks) != boxes:
    return [('mask_count_mismatch', f'{len(masks)} mask(s) for {boxes} box(es)')]
  size = (record['image/width'], record['image/height'])
  for i, data in enumerate(masks):
    try:
      with Image.open(io.BytesIO(data)) as mask:
        mask.load()
        kind = mask.format
        found, mode, extrema = mask.size, mask.mode, mask.convert('L').getextrema()
    except Exception as error:  # any decoder failure is a finding, not a crash
      return [('undecodable_mask', f'mask {i} does not decode: {error}')]
    if kind != 'PNG':
      return [('wrong_mask_format', f'mask {i} is a {kind}, not a PNG (the readers decode '
               'masks as PNG)')]
    # cut short or a chunk's CRC wrong: Pillow decodes it, tf.io.decode_png
    # (read.load, the Model Garden's decoder) fails the whole record
    damage = checks.png_damage(data)
    if damage:
      return [('undecodable_mask', f'mask {i}: {damage[0][1]}')]
    if mode != 'L':
      return [('wrong_mask_mode', f'mask {i} is a PNG of mode {mode}, not grayscale (L)')]
    if found != size:
      return [('wrong_mask_size', f'mask {i} is {found[0]}x{found[1]}, the image '
               f'{size[0]}x{size[1]}')]
    if extrema[1] > 1:
      return [('wrong_mask_values', f'mask {i} holds values up to {extrema[1]}, not 0/1')]
  return []


def int64s(values: list, *_):
  import numpy as np
  return np.array(values, np.int64)


def boxes(_, record, reading):
  """[N, 4] float32 (ymin, xmin, ymax, xmax), as TF orders them. Coordinate
  lists of unequal length (a record not written by convert) are a
  RecordError: numpy's ValueError ended inspect with a traceback."""
  import numpy as np
  coordinates = [record[name] for name in BOX_FEATURES]
  if len({len(values) for values in coordinates}) > 1:
    raise decoders.RecordError('box coordinate lists of unequal length: ' + ', '.join(
        f'{name.rsplit("/", 1)[1]} {len(values)}' for name, values in zip(BOX_FEATURES,
                                                                         coordinates)))
  return np.array(coordinates, np.float32).T.reshape(-1, 4)


def object_texts(values: list, *_) -> list:
  return [v.decode('utf-8', 'replace') for v in values]


def masks(values: list, record, reading):
  """[N, H, W] uint8 of 0/1 (N = 0: an empty [0, H, W]); the PNGs as stored
  when the reading does not decode."""
  import numpy as np
  if not reading.decode:
    return list(values)
  height, width = record['image/height'], record['image/width']
  if not values:
    return np.zeros((0, height, width), np.uint8)
  decoded = []
  for i, data in enumerate(values):
    try:  # one that does not decode was Pillow's traceback in inspect and read.examples
      decoded.append(np.asarray(Image.open(io.BytesIO(data)).convert('L'), np.uint8))
    except Exception as error:  # any decoder failure: the record is skipped, as check_masks'
      raise decoders.RecordError(f'mask {i} does not decode: {type(error).__name__}: {error}')
  if len({mask.shape for mask in decoded}) > 1:  # np.stack's ValueError otherwise
    raise decoders.RecordError(f'masks of unequal sizes: {sorted({m.shape for m in decoded})}')
  return np.stack(decoded)
