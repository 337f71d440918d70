"""YOLO: one .txt per image, `class cx cy w h` normalised (or Ultralytics'
segmentation rows `class x1 y1 x2 y2 ...`), class names from data.yaml or
classes.txt: plain functions. Label ids are the class index + 1 (0 is the
Object Detection API's background)."""

from __future__ import annotations

from transforms.core import annotations as objects
from transforms.core.image_dir import DEFAULT_IMAGE_EXTENSIONS


class YoloFormatError(ValueError):
  """data.yaml or classes.txt unusable (a usage error on the launcher)."""


def names_from_yaml(text: str, path: str) -> dict:
  """data.yaml's `names` (a list, or a map index -> name) -> label id -> name.
  Read as --config files are (transforms.core.plain_yaml: no anchors or
  aliases, bounded nesting); every name must be a string."""
  from transforms.core import plain_yaml
  try:
    data = plain_yaml.load(text, path)
  except plain_yaml.PlainYamlError as error:
    raise YoloFormatError(str(error)) from None
  names = data.get('names') if isinstance(data, dict) else None
  names = dict(enumerate(names)) if isinstance(names, list) else names
  if not isinstance(names, dict) or not names or not all(
      isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in names):
    raise YoloFormatError(f'{path}: "names" must be a list of class names or a map of '
                          f'class index to name')
  for index, name in sorted(names.items()):
    if not isinstance(name, str):
      raise YoloFormatError(f'{path}: "names" entry {index} is {_yaml_kind(name)} '
                            f'({str(name)[:60]}), not a class name (quote a name YAML '
                            f'would read as something else)')
  return {index + 1: name.strip() for index, name in sorted(names.items())}


def keypoint_values(text: str, path: str) -> int:
  """How many keypoint values follow `class cx cy w h` on each row of a pose
  dataset (data.yaml's `kpt_shape: [points, 2 or 3]`: points times 2 or 3);
  0 without `kpt_shape`. Its rows' extra numbers read as polygon points made
  a box from the keypoints and the box's own width and height as corners,
  without a word. YoloFormatError when `kpt_shape` is not such a pair."""
  from transforms.core import plain_yaml
  try:
    data = plain_yaml.load(text, path)
  except plain_yaml.PlainYamlError as error:
    raise YoloFormatError(str(error)) from None
  shape = data.get('kpt_shape') if isinstance(data, dict) else None
  if shape is None:
    return 0
  if not (isinstance(shape, list) and len(shape) == 2 and all(
      isinstance(n, int) and not isinstance(n, bool) for n in shape) and shape[0] > 0
          and shape[1] in (2, 3)):
    raise YoloFormatError(f'{path}: "kpt_shape" must be [number of keypoints, 2 or 3], '
                          f'not {str(shape)[:60]}')
  return shape[0] * shape[1]


def _yaml_kind(value) -> str:
  kinds = {list: 'a list', dict: 'a mapping', type(None): 'null', bool: 'a boolean'}
  return kinds.get(type(value), 'a number' if isinstance(value, (int, float)) else
                   type(value).__name__)


def names_from_text(text: str, path: str) -> dict:
  """classes.txt: line i (from 0) names class i. YoloFormatError when it names
  none: every box would be an unknown_category line and the run would exit 0
  with no object (an empty data.yaml `names` exits 2 too)."""
  lines = [line.strip() for line in text.splitlines()]
  while lines and not lines[-1]:
    lines.pop()
  if not lines:
    raise YoloFormatError(f'{path} names no class (it is empty)')
  return {i + 1: name for i, name in enumerate(lines)}


def decode_text(data: bytes, path: str) -> str:
  """A YOLO text file's bytes (data.yaml, classes.txt, a label file) -> its
  text: UTF-8, a leading byte-order mark dropped; YoloFormatError naming the
  first byte that is not UTF-8."""
  try:
    return data.decode('utf-8-sig')
  except UnicodeDecodeError as error:
    raise YoloFormatError(f'{path} is not UTF-8 text: byte 0x{data[error.start]:02x} at '
                          f'offset {error.start}') from None


def parse_labels(text: str, ordinal: int, source: str, keypoints: int = 0) -> tuple:
  """A label file -> (ImageAnnotation with normalised boxes, [rejection of
  a line that is no YOLO row]). keypoints: a pose dataset's keypoint values
  per row (keypoint_values): its rows are `class cx cy w h` and exactly
  that many more numbers, the keypoints (not written)."""
  parsed, rejected = [], []
  first_line = {}  # (class, coordinates) -> the line that gave them first
  for line, raw in enumerate(text.splitlines(), 1):
    fields = raw.split()
    if not fields:
      continue
    shown = raw.strip()

    def reject(code: str, reason: str, shown=shown, line=line) -> None:
      rejected.append(objects.reject_object(objects.ObjectAnnotation(
          -1, (0, 0, 0, 0), shown=shown, source=source, line=line), code, reason))

    if not _whole_number(fields[0]):  # Ultralytics would read "0.0" as 0: not guessed here
      reject(objects.BAD_ANNOTATION, f'class {fields[0]!r} is not a whole number')
      continue
    label = int(fields[0]) + 1
    values, bad = _numbers(fields[1:])
    polygon = len(values) >= 6 and len(values) % 2 == 0
    if bad is not None:
      reject(objects.BAD_ANNOTATION, f'coordinate {bad!r} is not a number')
    elif keypoints and len(values) != 4 + keypoints:
      reject(objects.BAD_ANNOTATION, f'line is not "class cx cy w h" and the {keypoints} '
             f'keypoint values kpt_shape gives ({len(fields)} fields)')
    elif not (len(values) == 4 or keypoints or polygon):  # one point: a polygon too short
      reject(objects.SHORT_POLYGON if len(values) == 2 else objects.BAD_ANNOTATION,
             f'line is not "class cx cy w h" or "class x1 y1 x2 y2 x3 y3 ..." '
             f'({len(fields)} fields)')
    elif first_line.setdefault((label, tuple(values)), line) != line:
      # A box given twice would be two objects in the record: Ultralytics
      # drops the repeat (verify_image_label), and so a model trained from
      # either sees the object once. Only a row kept counts as the first: a
      # malformed row given twice is bad_annotation twice, not a repeat.
      # Not "the object is kept once": the first may be dropped as a bad box.
      first = first_line[label, tuple(values)]
      reject(objects.DUPLICATE_ANNOTATION, f'line {line} repeats line {first} (the same '
             f'class and coordinates): only line {first} is read')
    elif len(values) == 4 or keypoints:
      cx, cy, w, h = values[:4]
      parsed.append(objects.ObjectAnnotation(
          label, (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), shown=shown,
          source=source, line=line, category=f'class {fields[0]}'))
    else:  # a segmentation polygon
      xs, ys = values[0::2], values[1::2]
      parsed.append(objects.ObjectAnnotation(
          label, (min(xs), min(ys), max(xs), max(ys)), segmentation=('polygons', [values]),
          shown=shown, source=source, line=line, category=f'class {fields[0]}'))
  return objects.ImageAnnotation(ordinal, None, tuple(parsed), normalized=True), rejected


def missing_image(label: str, image_folder: str, unread=()) -> tuple:
  """(MISSING_IMAGE, why) of a label file no image of `image_folder` has:
  its rows would otherwise vanish without a word. unread: the names of the
  files of its stem there that the run does not read as images (b.mpo,
  b.jfif): "no b.* image" was said of a folder holding b.mpo."""
  stem = label.rsplit('/', 1)[-1].rsplit('.', 1)[0]
  if unread:
    shown = ', '.join(unread[:3]) + (f' and {len(unread) - 3} more' if len(unread) > 3 else '')
    return objects.MISSING_IMAGE, (
        f'label file {label} has no image: {image_folder} holds {shown}, but only files '
        f'ending {", ".join("." + e for e in DEFAULT_IMAGE_EXTENSIONS)} are read as '
        f'images (rename it if it is one)')
  return objects.MISSING_IMAGE, (f'label file {label} has no image: no {stem}.* image in '
                                 f'{image_folder}')


def _whole_number(text: str) -> bool:
  try:
    int(text)
  except ValueError:
    return False
  return True


def _numbers(texts: list) -> tuple:
  """(the texts as floats, None), or ([], the first that is not a number)."""
  values = []
  for text in texts:
    try:
      values.append(float(text))
    except ValueError:
      return [], text
  return values, None
