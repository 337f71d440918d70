"""COCO `instances_*.json`: its structure checked in one streamed pass, its
images and annotations read as streams (ijson: never the whole document in
memory), and one image's record and annotations turned into a row: plain
functions."""

from __future__ import annotations

from collections.abc import Iterator
import dataclasses
from typing import Optional

from transforms.core import annotations as objects
from transforms.core.manifest import ManifestRow
from transforms.core.manifest import resolve_path
from transforms.core.splits import SplitConfig

SECTIONS = ('images', 'annotations', 'categories')


class CocoFormatError(ValueError):
  """The file as a whole is not a usable COCO document (a usage error)."""


@dataclasses.dataclass(frozen=True)
class CocoSummary:
  categories: dict  # COCO category id -> name
  num_images: int
  num_annotations: int


def scan(stream, path: str) -> CocoSummary:
  """One streamed pass over the document: a JSON object whose images,
  annotations and categories are arrays; the categories (small) are kept.
  CocoFormatError (one line) otherwise."""
  import ijson
  counts = {name: 0 for name in SECTIONS}
  kinds, categories, builder = {}, [], None
  try:
    for prefix, event, value in ijson.parse(stream, use_float=True):
      if prefix == '' and event not in ('start_map', 'end_map', 'map_key'):
        raise CocoFormatError(f'{path}: the document is a JSON {event.split("_")[-1]}, '
                              f'not an object with {", ".join(SECTIONS)}')
      if prefix in SECTIONS and event in ('start_array', 'start_map', 'string', 'number',
                                          'null', 'boolean'):
        kinds.setdefault(prefix, event)
      if prefix in ('images.item', 'annotations.item') and event == 'start_map':
        counts[prefix.split('.')[0]] += 1
      if prefix.startswith('categories.item'):
        if prefix == 'categories.item' and event == 'start_map':
          builder = ijson.ObjectBuilder()
        if builder is not None:
          builder.event(event, value)
          if prefix == 'categories.item' and event == 'end_map':
            categories.append(builder.value)
            builder = None
  except ijson.JSONError as error:
    raise CocoFormatError(f'{path} is not valid JSON: {_one_line(error)}')
  for name in SECTIONS:
    if kinds.get(name) != 'start_array':
      found = 'missing' if name not in kinds else f'a JSON {kinds[name].split("_")[-1]}'
      raise CocoFormatError(f'{path}: "{name}" must be an array, it is {found}')
  return CocoSummary(_categories(categories, path), counts['images'], counts['annotations'])


def _one_line(error: Exception) -> str:
  return ' '.join(str(error).split())


def _categories(found: list, path: str) -> dict:
  names = {}
  for category in found:
    if not isinstance(category, dict) or not isinstance(category.get('id'), int) or (
        isinstance(category.get('id'), bool)) or not isinstance(category.get('name'), str):
      raise CocoFormatError(f'{path}: a category is not {{"id": integer, "name": string}}: '
                            f'{str(category)[:200]}')
    if category['id'] in names:
      raise CocoFormatError(f'{path}: category id {category["id"]} is given twice')
    if category['id'] < 0:
      raise CocoFormatError(f'{path}: category id {category["id"]} is negative')
    names[category['id']] = category['name'].strip()
  if not names:
    raise CocoFormatError(f'{path}: "categories" is empty')
  return names


def label_ids(categories: dict) -> tuple:
  """COCO category id -> label id, and the shift (1 when category 0 is used:
  the Object Detection API keeps 0 for the background)."""
  shift = objects.category_shift(categories)
  return {cid: cid + shift for cid in categories}, shift


def items(stream, section: str) -> Iterator[tuple]:
  """(position from 1, element) of one top-level array, streamed."""
  import ijson
  yield from enumerate(ijson.items(stream, f'{section}.item', use_float=True), 1)


@dataclasses.dataclass(frozen=True)
class CocoSource:
  """What turns one image's records into a row."""
  path: str  # the annotations file (rejections' source)
  image_dir: str
  split: SplitConfig
  labels: dict  # COCO category id -> label id
  include_masks: bool = False
  on_bad_box: str = 'drop'
  skip_empty: bool = False  # an image without annotations is no row (counted)


def coco_object(ann: dict, source: CocoSource, line: int) -> objects.ObjectAnnotation:
  """One annotation -> ObjectAnnotation (label: the mapped id, -1 for an
  unknown category); ValueError if it is not COCO's shape."""
  x, y, w, h = (float(v) for v in ann['bbox'])
  category = ann['category_id']
  segmentation = ann.get('segmentation')
  kind = None
  if isinstance(segmentation, list) and segmentation:
    kind = ('polygons', [[float(v) for v in polygon] for polygon in segmentation])
  elif isinstance(segmentation, dict) and 'counts' in segmentation:
    kind = ('rle', segmentation)
  return objects.ObjectAnnotation(
      label=source.labels.get(category, -1) if isinstance(category, int) else -1,
      box=(x, y, x + w, y + h), is_crowd=int(bool(ann.get('iscrowd', 0))),
      area=float(ann['area']) if isinstance(ann.get('area'), (int, float)) else None,
      segmentation=kind, shown=ann, source=source.path, line=line)


def image_row(image_id, images: list, anns: list, source: CocoSource) -> tuple:
  """One image id's (position, image record)s and (position, annotation)s
  -> (ManifestRow or None, [Rejection]). Annotations without an image are
  rejected (missing_image); bad ones are rejected, and with
  --on_bad_box reject_row take their image's row with them."""
  rejected = []
  if not images:
    for line, ann in anns:
      obj = objects.ObjectAnnotation(-1, (0, 0, 0, 0), shown=ann, source=source.path,
                                     line=line)
      rejected.append(objects.reject_object(
          obj, objects.MISSING_IMAGE, f'image_id {image_id!r} is not in "images"'))
    return None, rejected
  line, image = images[0]
  # the same id again: rows of their own, rejected; the first by position is kept
  repeated = [ManifestRow(other, source.path, again).reject(
      objects.STAGE_ANNOTATION, 'duplicate_image_id',
      f'image id {image_id!r} is given again: kept the one at position {line}')
      for again, other in images[1:]]
  name = image.get('file_name')
  row = ManifestRow(image, source.path, line, image=str(name or ''),
                    path=resolve_path(str(name or ''), source.image_dir), key=str(name or ''))
  size = _recorded_size(image)
  if not isinstance(name, str) or not name or not isinstance(image_id, int) or (
      size is None and ('width' in image or 'height' in image)):
    return None, repeated + [row.reject(objects.STAGE_ANNOTATION, 'bad_image_record',
                                        'an image record needs an integer id, a file_name '
                                        'and positive width and height')]
  parsed = []
  for ann_line, ann in sorted(anns, key=lambda a: a[0]):
    try:
      parsed.append(coco_object(ann, source, ann_line))
    except (KeyError, TypeError, ValueError) as error:
      obj = objects.ObjectAnnotation(-1, (0, 0, 0, 0), shown=ann, source=source.path,
                                     line=ann_line)
      rejected.append(objects.reject_object(
          obj, objects.BAD_ANNOTATION, f'not a COCO annotation: {type(error).__name__}: '
          f'{error}'))
  annotation = objects.ImageAnnotation(image_id, size, tuple(parsed))
  kept, bad = objects.checked_objects(annotation, set(source.labels.values()),
                                      source.include_masks)
  rejected += bad
  row = dataclasses.replace(
      row, split=source.split.assign(row.key, None),
      annotation=dataclasses.replace(annotation, objects=kept))
  row, rejected = reject_row_if_bad(row, rejected, source.on_bad_box)
  return row, repeated + rejected


def reject_row_if_bad(row: ManifestRow, rejected: list, on_bad_box: str) -> tuple:
  """--on_bad_box reject_row: a row with any bad annotation is rejected
  whole, saying why its first one was; drop: the row and the rejections."""
  if rejected and on_bad_box == 'reject_row':
    first = rejected[0]
    return None, [row.reject(objects.STAGE_ANNOTATION, objects.BAD_BOX_ROW,
                             f'{len(rejected)} bad annotation(s) (--on_bad_box '
                             f'reject_row); the first: {first.code}: {first.reason}')]
  return row, rejected


def _recorded_size(image: dict) -> Optional[tuple]:
  width, height = image.get('width'), image.get('height')
  if isinstance(width, (int, float)) and isinstance(height, (int, float)) and (
      width > 0 and height > 0):
    return (width, height)
  return None

