"""Ceiling: the fastest plain-Python conversion this machine can do.

One process per core (os.cpu_count()), each taking a contiguous slice of the
manifest: Pillow open, convert('RGB'), resize BILINEAR, raw bytes or JPEG q95,
then TFRecord framing (no tf.train.Example, no Beam) into its own file.

    python -m bench.ceiling --manifest M --output_dir OUT [--encoding jpeg --height 224 --width 224]
"""

import argparse
import json
import multiprocessing
import os
import time

from PIL import Image

from bench.common import add_case_arguments
from bench.common import encode
from bench.common import read_manifest
from bench.common import split_evenly
from bench.common import write_record


def convert_slice(paths, output_path, encoding, size):
  """Convert `paths` into one TFRecord file of bare image payloads."""
  with open(output_path, 'wb') as f:
    for path in paths:
      img = Image.open(path).convert('RGB').resize(size, Image.BILINEAR)
      write_record(f, encode(img, encoding))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--manifest', required=True)
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--processes', type=int, default=os.cpu_count())
  add_case_arguments(parser)
  args = parser.parse_args()

  start = time.perf_counter()
  paths = [path for path, _ in read_manifest(args.manifest)]
  os.makedirs(args.output_dir, exist_ok=True)
  workers = [
      multiprocessing.Process(
          target=convert_slice,
          args=(paths[lo:hi], os.path.join(args.output_dir, f'ceiling-{i:05d}.tfrecord'),
                args.encoding, (args.width, args.height)))
      for i, (lo, hi) in enumerate(split_evenly(len(paths), args.processes))
  ]
  for worker in workers:
    worker.start()
  for worker in workers:
    worker.join()
  failed = [w.exitcode for w in workers if w.exitcode != 0]
  print(
      json.dumps({
          'images': len(paths),
          'processes': len(workers),
          'loop_seconds': round(time.perf_counter() - start, 3)
      }))
  if failed:
    raise SystemExit(f'{len(failed)} worker(s) failed: exit codes {failed}')


if __name__ == '__main__':
  main()
