"""`make demo`: a small sample set converted, validated and described.

Draws 36 images of three classes (circle, square, triangle) in assorted
formats and modes, writes demo_data/manifest.csv, runs convert and validate
exactly as a user would, then shows what the output folder holds.
"""

from __future__ import annotations

import json
import os
import random
import sys

from PIL import Image
from PIL import ImageDraw

from pipeline import convert
from pipeline import validate
from transforms.core.example_proto import parse_example
from transforms.core.tfrecord import read_records

DATA_DIR = 'demo_data'
OUTPUT_DIR = 'demo_output'
CLASSES = ('circle', 'square', 'triangle')
# (extension, Pillow mode): the sample mixes formats and modes on purpose.
VARIANTS = (('jpg', 'RGB'), ('png', 'RGBA'), ('png', 'L'), ('gif', 'P'), ('bmp', 'RGB'),
            ('webp', 'RGB'))


def draw_shape(shape: str, rng: random.Random, mode: str) -> Image.Image:
  width, height = rng.randint(160, 480), rng.randint(160, 480)
  image = Image.new('RGB', (width, height), tuple(rng.randint(0, 90) for _ in range(3)))
  draw = ImageDraw.Draw(image)
  colour = tuple(rng.randint(140, 255) for _ in range(3))
  size = min(width, height) * rng.uniform(0.4, 0.8)
  cx, cy = width / 2, height / 2
  box = (cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2)
  if shape == 'circle':
    draw.ellipse(box, fill=colour)
  elif shape == 'square':
    draw.rectangle(box, fill=colour)
  else:
    draw.polygon([(cx, box[1]), (box[2], box[3]), (box[0], box[3])], fill=colour)
  return image.convert(mode)


def make_sample(directory: str, per_class: int = 12) -> str:
  rng = random.Random(7)
  os.makedirs(os.path.join(directory, 'images'), exist_ok=True)
  rows = ['image,label']
  for shape in CLASSES:
    for i in range(per_class):
      extension, mode = VARIANTS[i % len(VARIANTS)]
      name = f'images/{shape}_{i:02d}.{extension}'
      draw_shape(shape, rng, mode).save(os.path.join(directory, name))
      rows.append(f'{name},{shape}')
  path = os.path.join(directory, 'manifest.csv')
  with open(path, 'w') as handle:
    handle.write('\n'.join(rows) + '\n')
  return path


def describe(output_dir: str) -> str:
  with open(os.path.join(output_dir, 'dataset_info.json')) as handle:
    info = json.load(handle)
  lines = [f'\nThe dataset is in {os.path.abspath(output_dir)}/:']
  for name in sorted(os.listdir(output_dir)):
    lines.append(f'  {name:40s} {os.path.getsize(os.path.join(output_dir, name)):>10,d} bytes')
  image = info['image']
  lines.append(f'{info["num_examples"]} examples of {image["height"]}x{image["width"]}x'
               f'{image["channels"]} {image["encoding"]} pixels, classes {info["label_map"]}.')
  first_shard = next(iter(info['splits'].values()))['shards'][0]
  with open(os.path.join(output_dir, first_shard), 'rb') as stream:
    _, record = next(read_records(stream))
  features = parse_example(record)
  lines.append(f'First record of {first_shard}:')
  for name, (kind, values) in sorted(features.items()):
    shown = (f'<{len(values[0])} bytes>' if kind == 'bytes_list' and len(values[0]) > 64
             else values[0] if len(values) == 1 else values)
    lines.append(f'  {name:20s} {kind:11s} {shown!r}')
  lines.append('Read it with tf.data: see "Reading the output" in README.md.')
  return '\n'.join(lines)


def main() -> int:
  manifest = make_sample(DATA_DIR)
  print(f'Sample: {manifest} ({len(CLASSES) * 12} images)\n')
  code = convert.main(['--manifest', manifest, '--output_dir', OUTPUT_DIR, '--overwrite'])
  if code != 0:
    return code
  code = validate.main(['--input_dir', OUTPUT_DIR])
  if code != 0:
    return code
  print(describe(OUTPUT_DIR))
  return 0


if __name__ == '__main__':
  sys.exit(main())
