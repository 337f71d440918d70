"""TensorFlow Datasets peer (its own venv, .peers/tfds): the same job as a
TFDS user writes it: a GeneratorBasedBuilder whose _generate_examples opens
each image with Pillow, crops its centre to the target's aspect ratio and
resizes it (BILINEAR, antialiased), and whose tfds.features.Image
(encoding_format='jpeg') encodes it; download_and_prepare writes the TFRecords.

    .peers/tfds/bin/python bench/peers/tfds_peer.py --manifest M --output_dir OUT
        [--height 224 --width 224]
"""

import argparse
import csv
import json
import os
import time


def crop_box(src, dst):
  """The centred box of `src` (w, h) with the aspect ratio of `dst` (w, h)."""
  src_w, src_h = src
  dst_w, dst_h = dst
  if src_w * dst_h > src_h * dst_w:
    crop_w = src_h * dst_w / dst_h
    return ((src_w - crop_w) / 2, 0, (src_w + crop_w) / 2, src_h)
  crop_h = src_w * dst_h / dst_w
  return (0, (src_h - crop_h) / 2, src_w, (src_h + crop_h) / 2)


def make_builder(rows, height, width):
  """A builder class for these (absolute path, label) rows."""
  import numpy as np
  from PIL import Image
  import tensorflow_datasets as tfds

  names = sorted({label for _, label in rows})

  class BenchCorpus(tfds.core.GeneratorBasedBuilder):
    """The bench corpus, centre-cropped and resized."""
    VERSION = tfds.core.Version('1.0.0')

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
          'image': tfds.features.Image(shape=(height, width, 3), encoding_format='jpeg'),
          'label': tfds.features.ClassLabel(names=names),
          'key': tfds.features.Text(),
      }))

    def _split_generators(self, dl_manager):
      del dl_manager
      return {'train': self._generate_examples()}

    def _generate_examples(self):
      for path, label in rows:
        with Image.open(path) as img:
          img = img.convert('RGB')
          img = img.resize((width, height), Image.BILINEAR,
                           box=crop_box(img.size, (width, height)))
        yield path, {'image': np.asarray(img), 'label': label, 'key': path}

  return BenchCorpus


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--manifest', required=True)
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--height', type=int, default=224)
  parser.add_argument('--width', type=int, default=224)
  args = parser.parse_args()

  start = time.perf_counter()
  base = os.path.dirname(os.path.abspath(args.manifest))
  with open(args.manifest, newline='') as f:
    rows = [(os.path.join(base, row['image']), row['label']) for row in csv.DictReader(f)]
  builder = make_builder(rows, args.height, args.width)(data_dir=args.output_dir)
  builder.download_and_prepare()
  print(json.dumps({'images': len(rows), 'loop_seconds': round(time.perf_counter() - start, 3)}))


if __name__ == '__main__':
  main()
