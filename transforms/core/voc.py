"""Pascal VOC: one XML file per image (object/name, bndbox, difficult,
truncated), instance masks in SegmentationObject/<id>.png: plain functions.

VOC corners are 1-based and inclusive (xmin 1 is the first column): the box
is (xmin - 1, ymin - 1, xmax, ymax) in the continuous pixel coordinates of
transforms.core.boxes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional
from xml.etree import ElementTree

from transforms.core import annotations as objects

# ImageSets/Main files that are splits; <class>_train.txt and trainval.txt are not.
SPLIT_FILES = ('train', 'val', 'test')


class VocFormatError(ValueError):
  """An XML file that does not parse (a usage error on the launcher)."""


@dataclasses.dataclass(frozen=True)
class VocImage:
  filename: str
  size: Optional[tuple]  # (width, height) as <size> records it
  # (name, (x0, y0, x1, y1) or None, difficult, truncated, shown, problem ('' or why
  # the object is unusable))
  objects: tuple
  problem: str = ''  # why the image's record is unusable (<size> not numbers), or ''


def _whole(element, default: int = 0) -> int:
  """An element's text as a whole number (64 or 64.0); `default` when it is
  missing or empty; ValueError naming the element otherwise."""
  if element is None or element.text is None or not element.text.strip():
    return default
  text = element.text.strip()
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not math.isfinite(value) or value != int(value):
    raise ValueError(f'<{element.tag}> {text[:40]!r} is not a whole number')
  return int(value)


def _flag(element) -> int:
  """<difficult> or <truncated>: 0 or 1 (missing or empty: 0)."""
  try:
    value = _whole(element)
  except ValueError:
    value = -1
  if value not in (0, 1):
    raise ValueError(f'<{element.tag}> {element.text.strip()[:40]!r} is not 0 or 1')
  return value


def parse_xml(data, path: str) -> VocImage:
  """One annotation XML (bytes, decoded as its declaration says, or text) ->
  VocImage; VocFormatError if it is not VOC's XML."""
  try:
    root = ElementTree.fromstring(data)
  except (ElementTree.ParseError, ValueError, LookupError) as error:
    # (ValueError, LookupError: an encoding expat cannot read, or no such encoding)
    raise VocFormatError(f'{path} is not valid XML: {error}')
  if root.tag != 'annotation':
    raise VocFormatError(f'{path}: the root element is <{root.tag}>, not <annotation>')
  size = root.find('size')
  recorded, problem = None, ''
  if size is not None:
    try:
      width, height = _whole(size.find('width')), _whole(size.find('height'))
      recorded = (width, height) if width > 0 and height > 0 else None
    except ValueError as error:
      problem = f'<size>: {error}'
  found = []
  for obj in root.findall('object'):
    name = (obj.findtext('name') or '').strip()
    box = obj.find('bndbox')
    corners = None
    if box is not None:
      try:
        corners = tuple(float(box.findtext(k)) for k in ('xmin', 'ymin', 'xmax', 'ymax'))
        corners = (corners[0] - 1, corners[1] - 1, corners[2], corners[3])
      except (TypeError, ValueError):
        corners = None
    shown = {'name': name, 'bndbox': None if box is None else {
        child.tag: child.text for child in box}}
    try:
      flags, flag_problem = (_flag(obj.find('difficult')), _flag(obj.find('truncated'))), ''
    except ValueError as error:
      flags, flag_problem = (0, 0), str(error)
    found.append((name, corners, *flags, shown, flag_problem))
  return VocImage((root.findtext('filename') or '').strip(), recorded, tuple(found), problem)


def class_names(images) -> dict:
  """Label id -> name: VOC ids are 1-based in sorted-name order."""
  names = sorted({name for image in images for name, *_ in image.objects if name})
  return {i: name for i, name in enumerate(names, 1)}


def image_annotation(image: VocImage, ordinal: int, ids: dict, source: str,
                     mask_path: Optional[str]) -> tuple:
  """-> (ImageAnnotation, [rejection of an object without a usable box]).
  ids: name -> label id; mask_path: its SegmentationObject PNG, if any."""
  parsed, rejected = [], []
  for index, (name, corners, difficult, truncated, shown, problem) in enumerate(
      image.objects, 1):
    obj = objects.ObjectAnnotation(
        ids.get(name, -1), corners or (0, 0, 0, 0), difficult=difficult, truncated=truncated,
        segmentation=('png', mask_path, index) if mask_path else None, shown=shown,
        source=source, line=index, category=f'<name> {name!r}')
    if corners is None or problem:
      rejected.append(objects.reject_object(obj, objects.BAD_ANNOTATION,
                                            problem or 'the object has no usable <bndbox>'))
      continue
    parsed.append(obj)
  return objects.ImageAnnotation(ordinal, image.size, tuple(parsed)), rejected


def missing_annotations(lists: dict, listings: dict, stems, xml_dir: str) -> list:
  """The ids the split files list without an annotation file -> [(id, split,
  (MISSING_ANNOTATION, why))], in the files' order, each id once (the split
  split_of gives it). lists: {split: [id, ...]}; listings: {split: its file};
  stems: the ids with an XML in xml_dir."""
  have, split_for, found = set(stems), split_of(lists), []
  for split, names in lists.items():
    for name in names:
      if name in have or split_for[name] != split:
        continue
      have.add(name)
      found.append((name, split, (objects.MISSING_ANNOTATION, (
          f'{name} is listed in {listings[split]} but has no annotation: '
          f'{xml_dir}/{name}.xml does not exist'))))
  return found


def split_of(lists: dict) -> dict:
  """{split: [image id, ...]} (ImageSets/Main) -> {image id: split}."""
  return {name: split for split, names in lists.items() for name in names}
