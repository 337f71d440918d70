"""`make demo`: a small sample set converted, validated and described.

Draws 36 images of three classes (circle, square, triangle) in assorted
formats and modes, writes demo_data/manifest.csv, runs convert and validate
exactly as a user would, then shows what the output folder holds and runs
inspect on it (a sample, a contact sheet, a histogram and a report page in
demo_output/inspect/).

`make demo-flink` / `make demo-spark` (`python -m pipeline.demo --engine
flink|spark`): convert and validate the same sample on an embedded Flink or a
local Spark, into demo_output_flink/ or demo_output_spark/.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

from PIL import Image
from PIL import ImageDraw

from pipeline import convert
from pipeline import look
from pipeline import validate

DATA_DIR = 'demo_data'
OUTPUT_DIR = 'demo_output'
EXPORT_DIR = os.path.join(OUTPUT_DIR, 'inspect')
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


def describe(output_dir: str, inspect: bool = True) -> str:
  """The output folder's files, then (inspect) what `inspect` shows and exports."""
  lines = [f'\nThe dataset is in {os.path.abspath(output_dir)}/:']
  for name in sorted(os.listdir(output_dir)):
    path = os.path.join(output_dir, name)
    if os.path.isfile(path):
      lines.append(f'  {name:40s} {os.path.getsize(path):>10,d} bytes')
  if inspect:
    lines.append(f'\n$ img2tfrecord inspect --input_dir {output_dir} --export_dir {EXPORT_DIR}')
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description='convert, validate and inspect a sample set')
  parser.add_argument('--engine', choices=sorted(ENGINE_RUNNERS),
                      help='run convert and validate on this engine (default: locally)')
  engine = parser.parse_args(argv).engine
  manifest = make_sample(DATA_DIR)
  print(f'Sample: {manifest} ({len(CLASSES) * 12} images)\n')
  if engine:
    return on_engine(manifest, engine)
  code = convert.main(['--manifest', manifest, '--output_dir', OUTPUT_DIR, '--overwrite'])
  if code != 0:
    return code
  code = validate.main(['--input_dir', OUTPUT_DIR])
  if code != 0:
    return code
  print(describe(OUTPUT_DIR))
  code = look.main(['--input_dir', OUTPUT_DIR, '--export_dir', EXPORT_DIR])
  print('Load it for training: read.load / read.examples, see "Reading the output" in README.md.')
  return code


ENGINE_RUNNERS = {'flink': 'FlinkRunner', 'spark': 'SparkRunner'}


def on_engine(manifest: str, engine: str) -> int:
  """convert and validate with nothing but --runner: the job server, master
  and workers are what the launcher fills in (pipeline/engines.py)."""
  output_dir = f'{OUTPUT_DIR}_{engine}'
  runner = ['--runner', ENGINE_RUNNERS[engine]]
  started = time.time()
  code = convert.main(['--manifest', manifest, '--output_dir', output_dir, '--overwrite',
                       *runner])
  if code != 0:
    return code
  code = validate.main(['--input_dir', output_dir, *runner])
  if code != 0:
    return code
  print(describe(output_dir, inspect=False))
  print(f'convert + validate on {ENGINE_RUNNERS[engine]}: {time.time() - started:.0f} s')
  return code


if __name__ == '__main__':
  sys.exit(main())
