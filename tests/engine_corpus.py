"""A corpus for comparing engines: NUM_IMAGES photo-like images (bench.corpus's
generator: gradients, shapes, blur and noise) at varied sizes, a tenth of them
PNG, in CLASSES classes, with rejects spread through the manifest: missing
files, corrupt and truncated images, a text file, empty and control-character
labels, a line with a field too many and a repeated key.

Every image is a function of its index, so the corpus is the same bytes on
every run.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import multiprocessing
import os
import pathlib

from bench.corpus import make_image

NUM_IMAGES = 2000
CLASSES = tuple(f'class_{i}' for i in range(10))
REJECT_EVERY = 97  # a reject row after every this many images


def image_size(index: int) -> tuple:
  """(width, height) between 48 and 240 pixels on the long side, a third portrait."""
  long_side = 48 + (index * 37) % 193
  short_side = max(16, long_side * (60 + index % 25) // 100)
  return (short_side, long_side) if index % 3 == 0 else (long_side, short_side)


def relative_path(index: int) -> str:
  ext = 'png' if index % 10 == 7 else 'jpg'
  return f'images/{CLASSES[index % len(CLASSES)]}/{index:05d}.{ext}'


def _write_image(job: tuple) -> None:
  root, index = job
  path = os.path.join(root, relative_path(index))
  buffer = io.BytesIO()
  image = make_image(index, image_size(index))
  if path.endswith('.png'):
    image.save(buffer, format='PNG')
  else:
    image.save(buffer, format='JPEG', quality=90)
  with open(path, 'wb') as handle:
    handle.write(buffer.getvalue())


@dataclasses.dataclass(frozen=True)
class Corpus:
  root: pathlib.Path
  manifest: pathlib.Path
  num_rows: int  # manifest rows (lines but the header)
  num_images: int  # rows that become examples
  rejected: dict  # 'stage/code' -> rows


def _reject_rows(root: pathlib.Path, n: int) -> tuple:
  """The n-th reject: (manifest line as fields or a raw line, 'stage/code')."""
  kind = n % 8
  if kind == 0:
    return [f'images/gone/{n}.jpg', CLASSES[n % 10]], 'read/missing_file'
  if kind == 1:
    path = root / f'images/bad/{n}.jpg'  # a JPEG cut short
    good = io.BytesIO()
    make_image(10_000 + n, (120, 90)).save(good, format='JPEG', quality=90)
    path.write_bytes(good.getvalue()[:len(good.getvalue()) // 3])
    return [f'images/bad/{n}.jpg', CLASSES[n % 10]], 'decode/truncated'
  if kind == 2:
    png = io.BytesIO()  # a PNG whose pixel data is damaged (its header is sound)
    make_image(10_000 + n, (120, 90)).save(png, format='PNG')
    data = bytearray(png.getvalue())
    start = data.index(b'IDAT') + 40
    data[start:start + 64] = bytes(64)
    (root / f'images/bad/{n}.png').write_bytes(bytes(data))
    return [f'images/bad/{n}.png', CLASSES[n % 10]], 'decode/corrupt'
  if kind == 3:
    (root / f'images/bad/{n}.jpg').write_text('not an image at all\n')
    return [f'images/bad/{n}.jpg', CLASSES[n % 10]], 'decode/not_an_image'
  if kind in (4, 5, 6):  # a sound image of its own, but a bad line
    path = f'images/bad/{n}.jpg'
    make_image(10_000 + n, (100, 80)).save(root / path, format='JPEG', quality=90)
    if kind == 4:
      return [path, ''], 'label/empty_label'
    if kind == 5:
      return [path, 'class\x07bell'], 'label/bad_label'
    return [path, CLASSES[0], 'extra'], 'manifest/wrong_field_count'
  return [relative_path(n), CLASSES[n % 10]], 'duplicate/duplicate_key'  # an earlier row's key


def make_corpus(root: pathlib.Path, num_images: int = NUM_IMAGES) -> Corpus:
  """The images and manifest.csv (image,label) under `root`."""
  for name in CLASSES + ('bad',):
    (root / 'images' / name).mkdir(parents=True, exist_ok=True)
  with multiprocessing.get_context('spawn').Pool(os.cpu_count() or 1) as pool:
    pool.map(_write_image, [(str(root), i) for i in range(num_images)], chunksize=32)
  rows, rejected = [], {}
  for index in range(num_images):
    rows.append([relative_path(index), CLASSES[index % len(CLASSES)]])
    if index % REJECT_EVERY == REJECT_EVERY - 1:
      fields, reason = _reject_rows(root, index // REJECT_EVERY)
      rows.append(fields)
      rejected[reason] = rejected.get(reason, 0) + 1
  manifest = root / 'manifest.csv'
  with open(manifest, 'w', newline='', encoding='utf-8') as handle:
    writer = csv.writer(handle, lineterminator='\n')
    writer.writerow(['image', 'label'])
    writer.writerows(rows)
  return Corpus(root, manifest, len(rows), num_images, rejected)
