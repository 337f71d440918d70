"""COCO `instances_*.json`: its structure checked in one streamed pass, its
images and annotations read as streams (ijson: never the whole document in
memory), and one image's record and annotations turned into a row: plain
functions."""

from __future__ import annotations

from collections.abc import Iterator
import dataclasses
import json
import math
from typing import Optional

from transforms.core import annotations as objects
from transforms.core import json_escapes
from transforms.core import masks
from transforms.core import paths
from transforms.core.extra_values import FLOAT32_MAX
from transforms.core.manifest import ManifestRow
from transforms.core.manifest import resolve_path
from transforms.core.splits import SplitConfig

SECTIONS = ('images', 'annotations', 'categories')
# Prefixes as _parse gives them: an array's element is None (a key is a string).
_ITEMS = {(name, None): name for name in SECTIONS}
_CATEGORY = ('categories', None)
# Arrays and objects nested deeper are refused: COCO's own documents nest 5
# levels (annotations, an annotation, its segmentation, a polygon). Deeper
# input took gigabytes on the launcher (ijson's prefixes), failed pickling
# (RecursionError) or crashed the interpreter.
MAX_DEPTH = 32
# Names of each object's first members kept to find one given twice; COCO's
# objects have a handful, and a hostile one's millions stay off the heap.
MAX_MEMBERS_CHECKED = 1000


class CocoFormatError(ValueError):
  """The file as a whole is not a usable COCO document (a usage error)."""


class _NamedTwice(Exception):
  """(prefix, name): an object of the document names a member twice."""


@dataclasses.dataclass(frozen=True)
class CocoSummary:
  categories: dict  # COCO category id -> name
  num_images: int
  num_annotations: int


_BOM = b'\xef\xbb\xbf'


class _Unmarked:
  """A binary stream read without its leading UTF-8 byte-order mark (a JSON
  file as Windows PowerShell and Notepad save it), which JSON parsers may
  drop (RFC 8259): ijson refused it as an invisible "invalid char" at the
  document's start. Reads through, no seeking (remote files)."""

  def __init__(self, stream):
    self._stream = stream
    head = stream.read(len(_BOM))
    self._head = b'' if head == _BOM else head
    # Windows PowerShell 5.1's Out-File and `>` write UTF-16 with its mark:
    # yajl said 'invalid char in json text. \ufffd\ufffd{', nothing to go by.
    self.utf16 = head[:2] in (b'\xff\xfe', b'\xfe\xff')

  def read(self, size: int = -1) -> bytes:
    if not self._head:
      return self._stream.read(size)
    if size is None or size < 0:
      data, self._head = self._head + self._stream.read(), b''
      return data
    data, self._head = self._head[:size], self._head[size:]
    return data + (self._stream.read(size - len(data)) if size > len(data) else b'')


def scan(stream, path: str) -> CocoSummary:
  """One streamed pass over the document: a JSON object whose images,
  annotations and categories are arrays of objects, nested at most
  MAX_DEPTH levels; the categories (small) are kept. CocoFormatError (one
  line) otherwise."""
  import ijson
  counts = {name: 0 for name in SECTIONS}
  kinds, categories, builder = {}, [], None
  prefix, event, value = (), None, None  # after a failure: the event before it
  stream = _Unmarked(json_escapes.SurrogateCheck(stream))
  if stream.utf16:
    raise CocoFormatError(f'{path} is UTF-16 text (it starts with its byte-order mark), not '
                          'UTF-8 as JSON is: save it as UTF-8')
  try:
    for prefix, event, value in _parse(ijson.basic_parse(stream, use_float=True), path):
      if prefix in _ITEMS and event not in ('start_map', 'map_key', 'end_map'):
        section = _ITEMS[prefix]
        raise CocoFormatError(f'{path}: element {counts[section] + 1} of "{section}" is '
                              f'{_kind(event)}, not an object')
      if prefix == () and event not in ('start_map', 'end_map', 'map_key'):
        raise CocoFormatError(f'{path}: the document is {_kind(event)}, '
                              f'not an object with {", ".join(SECTIONS)}')
      if len(prefix) == 1 and prefix[0] in SECTIONS and event in (
          'start_array', 'start_map', 'string', 'number', 'null', 'boolean'):
        kinds.setdefault(prefix[0], event)
      if prefix in _ITEMS and event == 'start_map':
        counts[_ITEMS[prefix]] += 1
      if prefix[:2] == _CATEGORY:
        if prefix == _CATEGORY and event == 'start_map':
          builder = ijson.ObjectBuilder()
        if builder is not None:
          builder.event(event, value)
          if prefix == _CATEGORY and event == 'end_map':
            categories.append(builder.value)
            builder = None
  except ijson.JSONError as error:
    raise CocoFormatError(f'{path} is not valid JSON: {_one_line(error)}')
  except _NamedTwice as twice:  # json.load keeps the last, ijson the last or both
    prefix, name = twice.args
    raise CocoFormatError(f'{path}: {_element(counts, prefix)} names "{name[:40]}" twice '
                          '(which value is meant?)') from None
  except json_escapes.LoneSurrogate as lone:  # yajl reads it as '?', or pairs it with any \u
    raise CocoFormatError(f'{path}: at byte {lone.offset}, {lone.shown} escapes a high '
                          'surrogate without the low one after it (half of a character, an '
                          'emoji cut short): no character, fix the text') from None
  except UnicodeDecodeError:
    # yajl2_c decodes each string's \u escapes as UTF-8: one of \ud800..\udfff
    # without its pair (half an emoji, as a JavaScript string cut short is
    # written) raised UnicodeDecodeError, a traceback and exit 1
    raise CocoFormatError(f'{path}: a string {_near(counts, prefix, event, value)} holds a lone UTF-16 '
                          'surrogate (an escape \\ud800..\\udfff without its pair, half '
                          'of a character): no character, fix the text') from None
  for name in SECTIONS:
    if kinds.get(name) != 'start_array':
      found = 'missing' if name not in kinds else _kind(kinds[name])
      raise CocoFormatError(f'{path}: "{name}" must be an array, it is {found}')
  return CocoSummary(_categories(categories, path), counts['images'], counts['annotations'])


def _parse(events, path: str) -> Iterator[tuple]:
  """ijson.parse's events from basic_parse's, nested at most MAX_DEPTH
  levels, each with its prefix as a tuple of at most its first 3 parts
  (('images', None, 'file_name'): None for an array's element). Never a
  string of the whole path: ijson.parse builds one per event, and a buffer's
  at once (30,000 levels in a 60 KB file took 2.3 GB; a 500 KB key over
  120,000 empty arrays, 95 s). _NamedTwice (prefix, name) when an object
  names a member twice."""
  parts, members = [], []  # members: each open object's names (its first ones)
  for event, value in events:
    if event == 'map_key':
      prefix = tuple(parts[:-1][:3])
      parts[-1] = value
      if value in members[-1]:
        raise _NamedTwice(prefix, value)
      if len(members[-1]) < MAX_MEMBERS_CHECKED:
        members[-1].add(value)
    elif event in ('start_map', 'start_array'):
      prefix = tuple(parts[:3])
      if len(parts) == MAX_DEPTH:
        shown = '.'.join('item' if part is None else part[:40] for part in parts[:3])
        raise CocoFormatError(f'{path}: nested deeper than {MAX_DEPTH} levels (in {shown})')
      parts.append('' if event == 'start_map' else None)
      if event == 'start_map':
        members.append(set())
    elif event in ('end_map', 'end_array'):
      if parts.pop() is not None:  # an object's
        members.pop()
      prefix = tuple(parts[:3])
    else:
      prefix = tuple(parts[:3])
    yield prefix, event, value


def _element(counts: dict, prefix: tuple) -> str:
  """The part of the document an event at `prefix` is in: 'element 3 of
  "images"', '"info"' or 'the document'."""
  if not prefix:
    return 'the document'
  if prefix[0] in SECTIONS and len(prefix) > 1 and counts[prefix[0]]:
    return f'element {counts[prefix[0]]} of "{prefix[0]}"'
  return f'"{prefix[0][:40]}"'


def _near(counts: dict, prefix: tuple, event: Optional[str], value) -> str:
  """Where the value after this event is: 'in element 3 of "images" (the
  value of "file_name")'."""
  return f'in {_element(counts, prefix)}' + (
      f' (the value of "{value[:40]}")' if event == 'map_key' else '')


def _kind(event: str) -> str:
  return f'a JSON {event.rsplit("_", maxsplit=1)[-1]}'


def _one_line(error: Exception) -> str:
  said = error.args[0] if len(error.args) == 1 else str(error)
  if isinstance(said, bytes):  # yajl2_c's messages: b'lexical error: ...\n ...'
    said = said.decode('utf-8', 'replace')
  return ' '.join(str(said).split())


def whole_id(value):
  """An id as pycocotools and the Model Garden match it: a whole-number float
  (6.0: pandas writes an integer column holding a NaN so) is that integer, as
  the Python dicts they index by hold 6.0 and 6 as one key; any other value
  as given (refused where an integer is needed). Refused, an annotation's
  `image_id: 6.0` lost all of the image's objects with exit 0."""
  if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 63:
    return int(value)
  return value


def _categories(found: list, path: str) -> dict:
  names = {}
  for category in found:
    if isinstance(category, dict):
      category = {**category, 'id': whole_id(category.get('id'))}
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
  yield from enumerate(ijson.items(_Unmarked(stream), f'{section}.item', use_float=True), 1)


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
  max_pixels: int = 0  # an RLE mask's size at most (0: any); checked with include_masks


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value) -> str:
  """A value as the JSON file writes it (true, not True), cut short."""
  return json.dumps(value, default=repr)[:60]


def coco_object(ann: dict, source: CocoSource, line: int) -> objects.ObjectAnnotation:
  """One annotation -> ObjectAnnotation (label: the mapped id, -1 for an
  unknown category); AnnotationError (with its code) or another ValueError
  if it is not COCO's shape."""
  bbox = ann['bbox']
  if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_number(v) for v in bbox)):
    raise objects.AnnotationError(objects.BAD_ANNOTATION,
                                  f'bbox {_shown(bbox)} is not [x, y, width, height]')
  x, y, w, h = (float(v) for v in bbox)
  category = whole_id(ann['category_id'])
  crowd = ann.get('iscrowd', 0)
  if not (_is_number(crowd) or isinstance(crowd, bool)) or crowd not in (0, 1):
    raise objects.AnnotationError(objects.BAD_ANNOTATION,
                                  f'iscrowd {_shown(crowd)} is not 0 or 1')
  area = ann.get('area')
  if area is not None and not (_is_number(area) and math.isfinite(area)
                               and 0 <= area <= FLOAT32_MAX):
    raise objects.AnnotationError(objects.BAD_ANNOTATION,
                                  f'area {_shown(area)} is not a number >= 0')
  segmentation = ann.get('segmentation')
  kind = None
  if isinstance(segmentation, list) and segmentation:
    # numbers only, as bbox's: float() took "1" (and true) as a point
    if not all(isinstance(polygon, list) for polygon in segmentation):
      raise objects.AnnotationError(objects.BAD_ANNOTATION,
                                    f'segmentation {_shown(segmentation)} is neither polygons '
                                    'nor an RLE')
    odd = [v for polygon in segmentation for v in polygon if not _is_number(v)]
    if odd:
      raise objects.AnnotationError(objects.BAD_ANNOTATION,
                                    f'polygon point {_shown(odd[0])} is not a number')
    kind = ('polygons', [[float(v) for v in polygon] for polygon in segmentation])
  elif isinstance(segmentation, dict) and 'counts' in segmentation:
    kind = ('rle', segmentation)
    if source.include_masks:  # its size checked before any mask is made
      try:
        masks.rle_runs(segmentation, source.max_pixels)
      except ValueError as error:
        raise objects.AnnotationError(objects.BAD_MASK, str(error)) from None
  elif segmentation not in (None, []):  # not "no segmentation": never a box in its place
    raise objects.AnnotationError(objects.BAD_ANNOTATION,
                                  f'segmentation {_shown(segmentation)} is neither polygons '
                                  'nor an RLE')
  known = isinstance(category, int) and not isinstance(category, bool)
  return objects.ObjectAnnotation(
      label=source.labels.get(category, -1) if known else -1,
      box=(x, y, x + w, y + h), is_crowd=int(crowd),
      area=None if area is None else float(area),
      segmentation=kind, shown=ann, source=source.path, line=line,
      category=f'category_id {_shown(category)}')


def image_row(image_id, images: list, anns: list, source: CocoSource) -> tuple:
  """One image id's (position, image record)s and (position, annotation)s
  -> (ManifestRow or None, [Rejection]). Annotations without an image are
  rejected (missing_image); bad ones are rejected, and with
  --on_bad_box reject_row take their image's row with them."""
  image_id = whole_id(image_id)
  rejected = []
  if not images:
    for line, ann in anns:
      obj = objects.ObjectAnnotation(-1, (0, 0, 0, 0), shown=ann, source=source.path,
                                     line=line)
      # '6' for 6 (a string written where the image's integer is): pycocotools
      # and the Model Garden drop such objects too, without a word
      hint = (" (a string: COCO image ids are integers, as an image record's id must be)"
              if isinstance(image_id, str) else '')
      rejected.append(objects.reject_object(
          obj, objects.MISSING_IMAGE, f'image_id {image_id!r} is not in "images"{hint}'))
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
      isinstance(image_id, bool)) or (size is None and ('width' in image or 'height' in image)):
    return None, repeated + [row.reject(objects.STAGE_ANNOTATION, objects.BAD_IMAGE_RECORD,
                                        'an image record needs an integer id, a file_name '
                                        'and positive width and height')]
  if not paths.stays_inside(name):  # never read: not even its first bytes are shown
    return None, repeated + [row.reject(
        objects.STAGE_ANNOTATION, objects.PATH_OUTSIDE_IMAGE_DIR,
        f'file_name {name!r} is outside --image_dir (an absolute path, or .. climbing out)')]
  if '\x00' in name:  # os.stat of it raised ValueError: the whole job failed
    return None, repeated + [row.reject(objects.STAGE_ANNOTATION, objects.BAD_IMAGE_RECORD,
                                        f'file_name {name!r} holds a NUL byte: no file name can')]
  parsed = []
  for ann_line, ann in sorted(anns, key=lambda a: a[0]):
    try:
      parsed.append(coco_object(ann, source, ann_line))
    except (KeyError, TypeError, ValueError) as error:
      obj = objects.ObjectAnnotation(-1, (0, 0, 0, 0), shown=ann, source=source.path,
                                     line=ann_line)
      code, reason = (error.code, str(error)) if isinstance(error, objects.AnnotationError) \
          else (objects.BAD_ANNOTATION, f'not a COCO annotation: {type(error).__name__}: '
                f'{error}')
      rejected.append(objects.reject_object(obj, code, reason))
  annotation = objects.ImageAnnotation(image_id, size, tuple(parsed))
  kept, bad = objects.checked_objects(annotation, set(source.labels.values()),
                                      source.include_masks, name)
  rejected += bad
  row = dataclasses.replace(
      row, split=source.split.assign(row.key, None),
      annotation=dataclasses.replace(annotation, objects=kept))
  row, rejected = reject_row_if_bad(row, rejected, source.on_bad_box)
  return row, repeated + rejected


def reject_row_if_bad(row: ManifestRow, rejected: list, on_bad_box: str) -> tuple:
  """--on_bad_box reject_row: a row with any bad annotation is rejected
  whole, saying why its first one was; drop: the row and the rejections. A
  repeated YOLO row is no bad annotation (its object is kept once)."""
  bad = [one for one in rejected if one.code != objects.DUPLICATE_ANNOTATION]
  if bad and on_bad_box == 'reject_row':
    first = bad[0]
    return None, [row.reject(objects.STAGE_ANNOTATION, objects.BAD_BOX_ROW,
                             f'{len(bad)} bad annotation(s) (--on_bad_box '
                             f'reject_row); the first: {first.code}: {first.reason}')]
  return row, rejected


def _recorded_size(image: dict) -> Optional[tuple]:
  width, height = image.get('width'), image.get('height')
  if _is_number(width) and _is_number(height) and 0 < width < math.inf and (
      0 < height < math.inf):
    return (width, height)
  return None

