"""tf.data peer: the converter a TensorFlow user would write, for the same job.

tf.data reads and decodes the images in parallel (AUTOTUNE), resizes them with
tf.image.resize(method='bilinear', antialias=True) (without antialiasing a
downscale aliases visibly), rounds to uint8 and stores raw pixels or a JPEG of
quality 95; the Python loop builds a tf.train.Example (image/encoded,
image/class/label, image/key) and one tf.io.TFRecordWriter writes them.

    python -m bench.tfdata_peer --manifest M --output_dir OUT [--encoding jpeg --height 224 --width 224]
"""

import argparse
import json
import os
import time

import tensorflow as tf

from bench.common import JPEG_QUALITY
from bench.common import add_case_arguments
from bench.common import label_indices
from bench.common import read_manifest


def make_example(image_bytes, label, key):
  return tf.train.Example(features=tf.train.Features(feature={
      'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes])),
      'image/class/label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
      'image/key': tf.train.Feature(bytes_list=tf.train.BytesList(value=[key])),
  }))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--manifest', required=True)
  parser.add_argument('--output_dir', required=True)
  add_case_arguments(parser)
  args = parser.parse_args()

  start = time.perf_counter()
  rows = read_manifest(args.manifest)
  labels = label_indices(rows)
  size = (args.height, args.width)

  def load(path, label):
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    image = tf.image.resize(image, size, method='bilinear', antialias=True)
    image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
    if args.encoding == 'jpeg':
      return tf.io.encode_jpeg(image, quality=JPEG_QUALITY), label, path
    return image, label, path

  paths = [path for path, _ in rows]
  dataset = (tf.data.Dataset.from_tensor_slices((paths, [labels[name] for _, name in rows]))
             .map(load, num_parallel_calls=tf.data.AUTOTUNE)
             .prefetch(tf.data.AUTOTUNE))
  os.makedirs(args.output_dir, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(args.output_dir, 'tfdata.tfrecord')) as writer:
    for image, label, path in dataset.as_numpy_iterator():
      data = image if args.encoding == 'jpeg' else image.tobytes()
      writer.write(make_example(data, int(label), path).SerializeToString())
  print(json.dumps({'images': len(rows), 'loop_seconds': round(time.perf_counter() - start, 3)}))


if __name__ == '__main__':
  main()
