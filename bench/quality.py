"""Image quality of a tool's output: mean pixel error against a Pillow reference.

The reference for a source image is Pillow's own: open, convert('RGB'),
resize with BILINEAR (Pillow widens the filter when it shrinks, so it is
antialiased) to the case's size, optionally from the centred crop of the
target's aspect ratio; kept in float, not rounded. A tool's stored image
(raw pixels or a JPEG, decoded with Pillow) is compared to it: the mean
absolute difference over every pixel and channel, in 0-255 levels, over the
first `sample` images of the manifest that the output holds (found by the
image/key each record carries).
"""

import io
import json
import os
import tarfile

import numpy as np
from PIL import Image

from bench.bare_validate import parse_example
from bench.common import iter_records

SAMPLE_IMAGES = 100


def crop_box(src, dst):
  """The centred box of `src` (w, h) with the aspect ratio of `dst` (w, h)."""
  src_w, src_h = src
  dst_w, dst_h = dst
  if src_w * dst_h > src_h * dst_w:  # wider than the target: trim the sides
    crop_w = src_h * dst_w / dst_h
    return ((src_w - crop_w) / 2, 0, (src_w + crop_w) / 2, src_h)
  crop_h = src_w * dst_h / dst_w
  return (0, (src_h - crop_h) / 2, src_w, (src_h + crop_h) / 2)


def reference(path, width, height, crop=False):
  """Pillow's antialiased resize of the image at `path`, as float32 H x W x 3."""
  with Image.open(path) as img:
    img = img.convert('RGB')
    planes = []
    box = crop_box(img.size, (width, height)) if crop else None
    for band in img.split():  # mode 'F' keeps the filter's output unrounded
      planes.append(np.asarray(band.convert('F').resize((width, height), Image.BILINEAR,
                                                          box=box)))
  return np.stack(planes, axis=-1)


def stored_pixels(data, encoding, width, height):
  """A stored image as uint8 H x W x 3: raw bytes, or an encoded image."""
  if encoding == 'raw':
    return np.frombuffer(bytes(data), np.uint8).reshape(height, width, 3)
  with Image.open(io.BytesIO(bytes(data))) as img:
    return np.asarray(img.convert('RGB'))


def tfrecord_images(files, key_base, image='image/encoded', key='image/key'):
  """(source path, image bytes) of every record of the TFRecord `files`, by
    the feature `key` (relative keys are relative to `key_base`)."""
  for path in files:
    for data in iter_records(path):
      features = parse_example(data)
      source = bytes(features[key][1][0]).decode()
      yield os.path.normpath(os.path.join(key_base, source)), features[image][1][0]


def webdataset_images(tars):
  """(source path, JPEG bytes) of every sample of img2dataset's webdataset
    `tars`: the .jpg of each key, its source from the file:// URL of its .json."""
  for path in tars:
    samples = {}
    with tarfile.open(path) as tar:
      for member in tar:
        key, _, ext = member.name.rpartition('.')
        if ext in ('jpg', 'json'):
          samples.setdefault(key, {})[ext] = tar.extractfile(member).read()
    for sample in samples.values():
      if 'jpg' in sample and 'json' in sample:
        url = json.loads(sample['json'])['url']
        yield os.path.normpath(url[len('file://'):] if url.startswith('file://') else url), \
            sample['jpg']


def mean_pixel_error(images, manifest_rows, encoding, width, height, crop=False,
                     sample=SAMPLE_IMAGES):
  """Mean absolute error against the reference over the first `sample` images of
    `manifest_rows` ([(path, label)]) among `images` ((source path, stored
    image) pairs); None if none of them is there."""
  wanted = {os.path.normpath(path) for path, _ in manifest_rows[:sample]}
  total, count = 0.0, 0
  for source, image in images:
    if source in wanted:
      diff = stored_pixels(image, encoding, width, height) - reference(
          source, width, height, crop)
      total += float(np.abs(diff).mean())
      count += 1
  return round(total / count, 3) if count else None
