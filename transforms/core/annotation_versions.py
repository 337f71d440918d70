"""--schema detection: the fingerprint of what one image's objects were read
from (its COCO image record and annotations; its VOC XML or YOLO label file,
VOC mask PNG, split and place in the listing), which convert records as the
record's sidecar `fingerprint`: validate --recompute tells by it whether the
annotations changed since the run (a warning) or the same annotations give
other bytes (a problem). Plain functions."""

from __future__ import annotations

import hashlib
import json
from typing import Optional

# The sidecar fingerprint of a detection record: this prefix, then the hex SHA-256.
PREFIX = 'annotations:sha256:'


def _digest(parts: list, data: bytes = b'', mask: Optional[bytes] = None) -> str:
  text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=repr,
                    separators=(',', ':'))
  hashed = hashlib.sha256(text.encode('utf-8', 'surrogatepass'))
  for chunk in (data, b'' if mask is None else mask):
    hashed.update(len(chunk).to_bytes(8, 'big'))
    hashed.update(chunk)
  hashed.update(b'\x01' if mask is not None else b'\x00')
  return PREFIX + hashed.hexdigest()


def coco_fingerprint(images: list, anns: list) -> str:
  """images, anns: one image id's (position, image record)s and (position,
  annotation)s, as coco.image_row takes them: its first image record and its
  annotations in position order (what its Example is made of; not the
  positions themselves, which only order the writes)."""
  first = sorted(images, key=lambda item: item[0])[0][1] if images else None
  return _digest(['coco', first, [ann for _, ann in sorted(anns, key=lambda a: a[0])]])


def file_fingerprint(fmt: str, image: str, split: str, ordinal: int, data: bytes,
                     mask: Optional[bytes]) -> str:
  """A VOC or YOLO image's: its path, split and ordinal (its source id) as
  listed, its annotation file's bytes and its mask PNG's (None: no mask)."""
  return _digest([fmt, image, split, ordinal], data, mask)
