"""Pascal VOC: one XML file per image (object/name, bndbox, difficult,
truncated), instance masks in SegmentationObject/<id>.png: plain functions.

VOC corners are 1-based and inclusive (xmin 1 is the first column): the box
is (xmin - 1, ymin - 1, xmax, ymax) in the continuous pixel coordinates of
transforms.core.boxes.
"""

from __future__ import annotations

import dataclasses
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
  objects: tuple  # (name, (x0, y0, x1, y1) or None, difficult, truncated, shown)


def _int(element, path: str, default: int = 0) -> int:
  if element is None or element.text is None or not element.text.strip():
    return default
  return int(float(element.text.strip()))


def parse_xml(text: str, path: str) -> VocImage:
  """One annotation XML -> VocImage; VocFormatError if it is not VOC's XML."""
  try:
    root = ElementTree.fromstring(text)
  except ElementTree.ParseError as error:
    raise VocFormatError(f'{path} is not valid XML: {error}')
  if root.tag != 'annotation':
    raise VocFormatError(f'{path}: the root element is <{root.tag}>, not <annotation>')
  size = root.find('size')
  recorded = None
  if size is not None:
    width, height = _int(size.find('width'), path), _int(size.find('height'), path)
    recorded = (width, height) if width > 0 and height > 0 else None
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
    found.append((name, corners, _int(obj.find('difficult'), path),
                  _int(obj.find('truncated'), path), shown))
  return VocImage((root.findtext('filename') or '').strip(), recorded, tuple(found))


def class_names(images) -> dict:
  """Label id -> name: VOC ids are 1-based in sorted-name order."""
  names = sorted({name for image in images for name, *_ in image.objects if name})
  return {i: name for i, name in enumerate(names, 1)}


def image_annotation(image: VocImage, ordinal: int, ids: dict, source: str,
                     mask_path: Optional[str]) -> tuple:
  """-> (ImageAnnotation, [rejection of an object without a usable box]).
  ids: name -> label id; mask_path: its SegmentationObject PNG, if any."""
  parsed, rejected = [], []
  for index, (name, corners, difficult, truncated, shown) in enumerate(image.objects, 1):
    obj = objects.ObjectAnnotation(
        ids.get(name, -1), corners or (0, 0, 0, 0), difficult=difficult, truncated=truncated,
        segmentation=('png', mask_path, index) if mask_path else None, shown=shown,
        source=source, line=index)
    if corners is None:
      rejected.append(objects.reject_object(obj, objects.BAD_ANNOTATION,
                                            'the object has no usable <bndbox>'))
      continue
    parsed.append(obj)
  return objects.ImageAnnotation(ordinal, image.size, tuple(parsed)), rejected


def split_of(lists: dict) -> dict:
  """{split: [image id, ...]} (ImageSets/Main) -> {image id: split}."""
  return {name: split for split, names in lists.items() for name in names}
