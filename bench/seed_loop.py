"""Seed loop: the classic single-process TensorFlow tutorial conversion.

For each image: Image.open(p).convert('RGB').resize((W, H)) (Pillow's default
filter, as in the tutorial), raw bytes or JPEG q95, a tf.train.Example with
'img_raw' and 'label', written by one tf.io.TFRecordWriter. Run as its own
process so its time includes importing TensorFlow and its memory is its own.

    python -m bench.seed_loop --manifest M --output OUT.tfrecord [--encoding jpeg --height 224 --width 224]
"""

import argparse
import json
import os
import time

from PIL import Image
import tensorflow as tf

from bench.common import add_case_arguments
from bench.common import encode
from bench.common import label_indices
from bench.common import read_manifest


def make_example(image_bytes, label):
  """The tutorial's tf.train.Example: image bytes and an int label."""
  return tf.train.Example(
      features=tf.train.Features(
          feature={
              'img_raw': tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes])),
              'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
          }))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--manifest', required=True)
  parser.add_argument('--output', required=True)
  add_case_arguments(parser)
  args = parser.parse_args()

  start = time.perf_counter()
  rows = read_manifest(args.manifest)
  labels = label_indices(rows)
  os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
  with tf.io.TFRecordWriter(args.output) as writer:
    for path, label in rows:
      img = Image.open(path).convert('RGB').resize((args.width, args.height))
      example = make_example(encode(img, args.encoding), labels[label])
      writer.write(example.SerializeToString())
  print(json.dumps({'images': len(rows), 'loop_seconds': round(time.perf_counter() - start, 3)}))


if __name__ == '__main__':
  main()
