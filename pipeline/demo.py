"""`make demo`: a small sample set converted, validated and described.

Draws 36 images of three classes (circle, square, triangle) in assorted
formats and modes, writes demo_data/manifest.csv, runs convert and validate
exactly as a user would, then shows what the output folder holds and runs
inspect on it (a sample, a contact sheet, a histogram and a report page in
demo_output/inspect/). demo_data/ also gets the same images as every other
kind of input (OTHER_INPUTS), so each example of README and docs/convert.md
runs as pasted.

`make demo-flink` / `make demo-spark` (`python -m pipeline.demo --engine
flink|spark`): convert and validate the same sample on an embedded Flink or a
local Spark, into demo_output_flink/ or demo_output_spark/.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import time

from PIL import Image
from PIL import ImageDraw

from pipeline import errors

if __name__ == '__main__':
  errors.refuse_optimized_python()  # before Beam, which fails as it is imported under -OO

from pipeline import convert
from pipeline import look
from pipeline import validate
from pipeline.runs import exits

DATA_DIR = 'demo_data'
OUTPUT_DIR = 'demo_output'
EXPORT_DIR = os.path.join(OUTPUT_DIR, 'inspect')
CLASSES = ('circle', 'square', 'triangle')
# (extension, Pillow mode): the sample mixes formats and modes on purpose.
VARIANTS = (('jpg', 'RGB'), ('png', 'RGBA'), ('png', 'L'), ('gif', 'P'), ('bmp', 'RGB'),
            ('webp', 'RGB'))
# The same images as the examples (docs/convert.md) take them, in demo_data/
# beside manifest.csv: "path label" lines, gzip JSONL, a split column (train, dev),
# key,image joined with key,label, columns named filename,class, shape|format
# label lists, weight/bbox/tags/boxes columns, a label map, and a
# <split>/<class>/<image> folder tree.
OTHER_INPUTS = ('manifest.txt', 'manifest.jsonl.gz', 'split.tsv', 'images.csv', 'labels.csv',
                'columns.csv', 'tags.csv', 'extras.jsonl', 'classes.txt', 'folders/')


def draw_shape(shape: str, rng: random.Random, mode: str) -> tuple:
  """-> (the image, the shape's box as x0,y0,x1,y1 fractions of its size)."""
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
  fractions = [round(v / size, 4) for v, size in zip(box, (width, height, width, height))]
  return image.convert(mode), fractions


def make_sample(directory: str, per_class: int = 12) -> str:
  """Draws the images, writes manifest.csv (-> its path) and OTHER_INPUTS."""
  rng = random.Random(7)
  os.makedirs(os.path.join(directory, 'images'), exist_ok=True)
  rows = []
  for shape in CLASSES:
    for i in range(per_class):
      extension, mode = VARIANTS[i % len(VARIANTS)]
      name = f'images/{shape}_{i:02d}.{extension}'
      image, box = draw_shape(shape, rng, mode)
      image.save(os.path.join(directory, name))
      rows.append({'image': name, 'label': shape, 'key': f'{shape}_{i:02d}',
                   'split': 'dev' if i % 4 == 3 else 'train', 'format': extension,
                   'mode': mode, 'box': box})
  path = os.path.join(directory, 'manifest.csv')
  _write(path, ['image,label'] + [f'{r["image"]},{r["label"]}' for r in rows])
  write_other_inputs(directory, rows)
  return path


def _write(path: str, lines: list) -> None:
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'wt', encoding='utf-8') as handle:
    handle.write('\n'.join(lines) + '\n')


def write_other_inputs(directory: str, rows: list) -> None:
  """OTHER_INPUTS, from the rows make_sample drew."""
  def at(name):
    return os.path.join(directory, name)

  _write(at('manifest.txt'), [f'{r["image"]} {r["label"]}' for r in rows])
  _write(at('manifest.jsonl.gz'), [json.dumps({'image': r['image'], 'label': r['label']})
                                   for r in rows])
  _write(at('split.tsv'), ['image\tlabel\tsplit'] + [
      f'{r["image"]}\t{r["label"]}\t{r["split"]}' for r in rows])
  _write(at('images.csv'), ['key,image'] + [f'{r["key"]},{r["image"]}' for r in rows])
  _write(at('labels.csv'), ['key,label'] + [f'{r["key"]},{r["label"]}' for r in rows])
  _write(at('columns.csv'), ['filename,class'] + [f'{r["image"]},{r["label"]}' for r in rows])
  _write(at('tags.csv'), ['image,label'] + [f'{r["image"]},{r["label"]}|{r["format"]}'
                                            for r in rows])
  _write(at('extras.jsonl'), [json.dumps({
      'image': r['image'], 'label': r['label'], 'weight': 0.5 if r['format'] == 'jpg' else 1.0,
      'bbox': r['box'], 'tags': [r['format'], r['mode']], 'boxes': [r['box']]}) for r in rows])
  _write(at('classes.txt'), list(CLASSES))
  folders = at('folders')
  if os.path.isdir(folders):  # a previous demo's tree: start afresh
    shutil.rmtree(folders)
  for r in rows:
    split = 'validation' if r['split'] == 'dev' else 'train'
    target = os.path.join(folders, split, r['label'], os.path.basename(r['image']))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(at(r['image']), target)


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
  parser = errors.UsageParser(description='convert, validate and inspect a sample set')
  parser.add_argument('--engine', choices=sorted(ENGINE_RUNNERS),
                      help='run convert and validate on this engine (default: locally)')
  engine = parser.parse_args(argv).engine
  manifest = make_sample(DATA_DIR)
  print(f'Sample: {manifest} ({len(CLASSES) * 12} images); the same images as other inputs '
        f'(docs/convert.md "Examples"): {", ".join(OTHER_INPUTS)}\n')
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
  print('Load it for training: read.load / read.examples, see docs/reading.md.')
  return code


ENGINE_RUNNERS = {'flink': 'FlinkRunner', 'spark': 'SparkRunner'}


def on_engine(manifest: str, engine: str) -> int:
  """convert and validate with nothing but --runner: the job server, master
  and workers are what the launcher fills in (pipeline/engines/runners.py)."""
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
  exits.exit_with(lambda: exits.main_with_usage_errors(main))
