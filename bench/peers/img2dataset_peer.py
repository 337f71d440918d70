"""img2dataset peer (its own venv, .peers/img2dataset): the same job through
img2dataset: file:// URLs in (or the manifest's http:// URLs as they are),
webdataset tars of JPEG q95 out, centre crop.

One process per core (processes_count), img2dataset's default threads per
process; resize_mode center_crop (shorter side to the target size with
OpenCV's INTER_AREA, then the centre). Runs under
`if __name__ == '__main__'`: img2dataset starts its processes with spawn,
which re-imports this script in each of them.

    .peers/img2dataset/bin/python bench/peers/img2dataset_peer.py --manifest M --output_dir OUT
        [--height 224 --width 224]
"""

import argparse
import csv
import json
import os
import time


def url_list(manifest, path):
  """Write img2dataset's input: a CSV of file:// URLs and labels; return its path."""
  base = os.path.dirname(os.path.abspath(manifest))
  with open(manifest, newline='') as f, open(path, 'w', newline='') as out:
    writer = csv.writer(out)
    writer.writerow(['url', 'label'])
    for row in csv.DictReader(f):
      image = row['image']  # a URL (the bench's URL job) as it is, a path as file://
      writer.writerow([image if '://' in image else 'file://' + os.path.join(base, image),
                       row['label']])
  return path


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--manifest', required=True)
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--height', type=int, default=224)
  parser.add_argument('--width', type=int, default=224)
  parser.add_argument('--processes', type=int, default=os.cpu_count())
  args = parser.parse_args()
  if args.height != args.width:
    parser.error('img2dataset resizes to a square: --height must equal --width')

  # albumentations (an img2dataset dependency) asks PyPI for a newer version on import
  os.environ.setdefault('NO_ALBUMENTATIONS_UPDATE', '1')
  from img2dataset import download

  start = time.perf_counter()
  os.makedirs(args.output_dir, exist_ok=True)
  urls = url_list(args.manifest, os.path.join(os.path.dirname(
      os.path.abspath(args.output_dir)), 'img2dataset-urls.csv'))
  download(url_list=urls, input_format='csv', url_col='url', caption_col='label',
           output_format='webdataset', output_folder=args.output_dir,
           processes_count=args.processes, image_size=args.width,
           resize_mode='center_crop', encode_format='jpg', encode_quality=95,
           number_sample_per_shard=10000, distributor='multiprocessing',
           disallowed_header_directives=[], timeout=10, retries=0,
           enable_wandb=False)
  os.remove(urls)
  print(json.dumps({'loop_seconds': round(time.perf_counter() - start, 3)}))


if __name__ == '__main__':
  main()
