"""Synthetic ImageNet-like corpus: photo-like JPEGs (quality 90) and a manifest.

Each image is a function of its index only, so a corpus of N images is the
first N images of any larger one. Images live in one cache folder per
generator version; `manifest-<N>.csv` lists the first N of them, and a rerun
with the same N reuses everything.

    python -m bench.corpus --num_images 3000 --workdir /tmp/img2tfrecord-bench

The tiny corpus (--tiny; bench/engines.py --corpus tiny) is 16x16 PNGs in the
same ten classes, cached the same way in its own folder: images too small to
cost anything, so what a run of them spends is what it spends per row.
"""

import argparse
import csv
import multiprocessing
import os
import time

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFilter

GENERATOR_VERSION = 'v1'
TINY_VERSION = 'v1'
TINY_SIZE = 16
NUM_CLASSES = 10
JPEG_QUALITY = 90
SEED = 20240601


def label_of(index):
  """Class name of image `index`, e.g. 'class_03'."""
  return f'class_{index % NUM_CLASSES:02d}'


def relative_path(index):
  """Path of image `index`, relative to the corpus folder."""
  return os.path.join('images', label_of(index), f'{index:07d}.jpg')


def image_size(rng):
  """(width, height) around ImageNet's typical 500x375; a quarter are portrait."""
  long_side = int(rng.integers(440, 521))
  short_side = int(long_side * rng.uniform(0.66, 0.80))
  if rng.random() < 0.25:
    return short_side, long_side
  return long_side, short_side


def smooth_field(rng, size, cells, amplitude):
  """Low-frequency random RGB field: a small random grid upscaled bicubically."""
  grid = rng.integers(0, 256, (cells[1], cells[0], 3), dtype=np.uint8)
  field = Image.fromarray(grid).resize(size, Image.BICUBIC)
  return (np.asarray(field, dtype=np.float32) - 128.0) * (amplitude / 128.0)


def gradient(rng, size):
  """Linear blend between two random colours along a random direction."""
  w, h = size
  angle = rng.uniform(0, 2 * np.pi)
  ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
  t = xs / w * np.cos(angle) + ys / h * np.sin(angle)
  t = (t - t.min()) / (t.max() - t.min() + 1e-6)
  c0, c1 = rng.uniform(20, 235, (2, 3)).astype(np.float32)
  return c0 + t[..., None] * (c1 - c0)


def draw_shapes(rng, img):
  """Draw a few ellipses, rectangles and polygons with random colours."""
  w, h = img.size
  draw = ImageDraw.Draw(img)
  for _ in range(int(rng.integers(3, 9))):
    x0, y0 = rng.uniform(-0.2, 1.0) * w, rng.uniform(-0.2, 1.0) * h
    x1, y1 = x0 + rng.uniform(0.1, 0.6) * w, y0 + rng.uniform(0.1, 0.6) * h
    colour = tuple(int(c) for c in rng.integers(0, 256, 3))
    kind = rng.integers(3)
    if kind == 0:
      draw.ellipse((x0, y0, x1, y1), fill=colour)
    elif kind == 1:
      draw.rectangle((x0, y0, x1, y1), fill=colour)
    else:
      points = [(float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1)))
                for _ in range(int(rng.integers(3, 7)))]
      draw.polygon(points, fill=colour)


def make_image(index, size=None):
  """The photo-like RGB image number `index` (deterministic), at its own
  ImageNet-like size or at `size` (width, height)."""
  rng = np.random.default_rng([SEED, index])
  size = size or image_size(rng)
  base = gradient(rng, size) + smooth_field(rng, size, (5, 4), 50)
  img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
  draw_shapes(rng, img)
  img = img.filter(ImageFilter.GaussianBlur(1.5))
  pixels = np.asarray(img, dtype=np.float32)
  pixels += smooth_field(rng, size, (size[0] // 6, size[1] // 6), 14)
  pixels += smooth_field(rng, size, (size[0] // 2, size[1] // 2), 40)
  pixels += rng.standard_normal(pixels.shape, dtype=np.float32) * 7.0
  return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def write_image(args):
  """Pool task: generate image `index` into `folder` unless already there."""
  folder, index = args
  path = os.path.join(folder, relative_path(index))
  if os.path.exists(path):
    return 0
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f'{path}.tmp{os.getpid()}'
  make_image(index).save(tmp, format='JPEG', quality=JPEG_QUALITY)
  os.replace(tmp, path)  # a file that exists is always complete
  return 1


def write_manifest(path, num_images, path_of=relative_path):
  """Write the CSV `image,label` listing the first `num_images` images
  (`path_of(index)`: an image's path relative to the corpus folder)."""
  tmp = path + '.tmp'
  with open(tmp, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['image', 'label'])
    for index in range(num_images):
      writer.writerow([path_of(index), label_of(index)])
  os.replace(tmp, path)


def corpus_folder(workdir):
  """Folder holding the cached images of this generator version."""
  return os.path.join(workdir, f'corpus-{GENERATOR_VERSION}')


def ensure_corpus(workdir, num_images, processes=None):
  """Generate (or reuse) a corpus of `num_images` images; return its manifest path
    and a dict describing it (images generated now, seconds, bytes on disk)."""
  folder = corpus_folder(workdir)
  manifest = os.path.join(folder, f'manifest-{num_images}.csv')
  start = time.perf_counter()
  generated = 0
  if not os.path.exists(manifest):
    tasks = [(folder, i) for i in range(num_images)]
    with multiprocessing.Pool(processes or os.cpu_count()) as pool:
      generated = sum(pool.imap_unordered(write_image, tasks, chunksize=16))
    write_manifest(manifest, num_images)
  described = _described(manifest, folder, num_images, relative_path, generated, start)
  return manifest, {**described, 'mean_file_kib': round(described['mean_file_bytes'] / 1024, 1)}


def tiny_relative_path(index: int) -> str:
  """Path of tiny image `index`, relative to the tiny corpus' folder."""
  return os.path.join('images', label_of(index), f'{index:07d}.png')


def make_tiny_image(index: int) -> Image.Image:
  """The 16x16 RGB image number `index` (deterministic): a two-colour
  gradient with noise, so that no two rows are alike."""
  rng = np.random.default_rng([SEED, TINY_SIZE, index])
  size = (TINY_SIZE, TINY_SIZE)
  pixels = gradient(rng, size) + rng.standard_normal((*size, 3), dtype=np.float32) * 12.0
  return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def tiny_folder(workdir: str) -> str:
  """Folder holding the cached tiny images of this generator version."""
  return os.path.join(workdir, f'tiny{TINY_SIZE}-{TINY_VERSION}')


def write_tiny_image(folder: str, index: int) -> int:
  """Write tiny image `index` into `folder` unless already there; -> 1 if written."""
  path = os.path.join(folder, tiny_relative_path(index))
  if os.path.exists(path):
    return 0
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f'{path}.tmp{os.getpid()}'
  make_tiny_image(index).save(tmp, format='PNG')
  os.replace(tmp, path)  # a file that exists is always complete
  return 1


def ensure_tiny_corpus(workdir: str, num_images: int) -> tuple[str, dict]:
  """Generate (or reuse) a corpus of `num_images` 16x16 PNGs; return its
  manifest path and a dict describing it, as ensure_corpus does.

  One process: an image costs ~0.65 ms to make and write (2,000 in 1.3 s,
  measured), so 20,000 take ~13 s once, and a pool would only take a core from
  whatever else runs on the machine.
  """
  folder = tiny_folder(workdir)
  manifest = os.path.join(folder, f'manifest-{num_images}.csv')
  start = time.perf_counter()
  generated = 0
  if not os.path.exists(manifest):
    generated = sum(write_tiny_image(folder, i) for i in range(num_images))
    write_manifest(manifest, num_images, tiny_relative_path)
  return manifest, _described(manifest, folder, num_images, tiny_relative_path, generated,
                              start)


def _described(manifest: str, folder: str, num_images: int, relative, generated: int,
               start: float) -> dict:
  """What ensure_corpus and ensure_tiny_corpus say of a corpus they made or found."""
  total_bytes = sum(os.path.getsize(os.path.join(folder, relative(i)))
                    for i in range(num_images))
  return {'manifest': manifest, 'num_images': num_images, 'generated_now': generated,
          'seconds': round(time.perf_counter() - start, 2),
          'mean_file_bytes': round(total_bytes / num_images)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--num_images', type=int, default=3000)
  parser.add_argument('--workdir', default='/tmp/img2tfrecord-bench')
  parser.add_argument('--tiny', action='store_true', help='the corpus of 16x16 PNGs')
  args = parser.parse_args()
  ensure = ensure_tiny_corpus if args.tiny else ensure_corpus
  _, info = ensure(args.workdir, args.num_images)
  print(info)


if __name__ == '__main__':
  main()
