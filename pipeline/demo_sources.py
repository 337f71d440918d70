"""`make demo-sources`: a small dataset in each shape datasets are shared in
today, converted and validated.

The demo's shapes (circle, square, triangle) are written as a Hugging Face
Parquet set (Image and ClassLabel features, the Hub's file names: train and
test splits from the paths), as WebDataset tars (.jpg + .cls, a brace range
and a label map), and as a URL list served by an HTTP server this demo
starts on 127.0.0.1. Each is converted with the flags it needs and
validated, into demo_output_sources/<shape>/.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import os
import random
import shutil
import tarfile
import threading

from pipeline import errors

if __name__ == '__main__':
  errors.refuse_optimized_python()  # before Beam, which fails as it is imported under -OO

from pipeline import convert
from pipeline import validate
from pipeline.demo import CLASSES
from pipeline.demo import draw_shape
from pipeline.runs import exits

DATA_DIR = 'demo_data_sources'
OUTPUT_DIR = 'demo_output_sources'
PER_CLASS = 4


def _images() -> list:
  """(name, JPEG bytes, class id) of PER_CLASS images of each class."""
  rng = random.Random(7)
  images = []
  for i in range(PER_CLASS * len(CLASSES)):
    label = i % len(CLASSES)
    image, _ = draw_shape(CLASSES[label], rng, 'RGB')
    buffer = io.BytesIO()
    image.save(buffer, 'JPEG', quality=90)
    images.append((f'{CLASSES[label]}_{i:02d}.jpg', buffer.getvalue(), label))
  return images


def write_parquet(folder: str, images: list) -> str:
  """data/train-00000-of-00001.parquet and data/test-...: as `datasets`
  writes an Image + ClassLabel dataset. -> the --manifest pattern."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  features = {'image': {'_type': 'Image'},
              'label': {'_type': 'ClassLabel', 'names': list(CLASSES)}}
  metadata = {'huggingface': json.dumps({'info': {'features': features}})}
  image_type = pa.struct([('bytes', pa.binary()), ('path', pa.string())])
  os.makedirs(os.path.join(folder, 'data'), exist_ok=True)
  for split, rows in (('train', images[:-3]), ('test', images[-3:])):
    table = pa.table({
        'image': pa.array([{'bytes': data, 'path': name} for name, data, _ in rows],
                          image_type),
        'label': pa.array([label for _, _, label in rows], pa.int64())})
    pq.write_table(table.replace_schema_metadata(metadata),
                   os.path.join(folder, 'data', f'{split}-00000-of-00001.parquet'),
                   row_group_size=4)
  return os.path.join(folder, 'data', '*.parquet')


def write_tars(folder: str, images: list) -> str:
  """shard-000000.tar and shard-000001.tar of .jpg + .cls samples, and
  classes.txt (a .cls id's name). -> the --manifest brace range."""
  os.makedirs(folder, exist_ok=True)
  for shard in range(2):
    with tarfile.open(os.path.join(folder, f'shard-{shard:06d}.tar'), 'w') as tar:
      for i, (_, data, label) in enumerate(images[shard::2]):
        for member, content in ((f'{i:04d}.jpg', data), (f'{i:04d}.cls', str(label).encode())):
          info = tarfile.TarInfo(member)
          info.size = len(content)
          tar.addfile(info, io.BytesIO(content))
  with open(os.path.join(folder, 'classes.txt'), 'w') as handle:
    handle.write(''.join(f'{name}\n' for name in CLASSES))
  return os.path.join(folder, 'shard-{000000..000001}.tar')


def write_urls(folder: str, images: list, base: str) -> str:
  """images/<name>.jpg, served at `base`, and urls.csv listing them."""
  os.makedirs(os.path.join(folder, 'images'), exist_ok=True)
  for name, data, _ in images:
    with open(os.path.join(folder, 'images', name), 'wb') as handle:
      handle.write(data)
  manifest = os.path.join(folder, 'urls.csv')
  with open(manifest, 'w') as handle:
    handle.write('image,label\n' + ''.join(f'{base}/images/{name},{CLASSES[label]}\n'
                                           for name, _, label in images))
  return manifest


class _Quiet(http.server.SimpleHTTPRequestHandler):

  def log_message(self, *args):
    del args


class LocalServer(http.server.ThreadingHTTPServer):
  """A thread per connection, and a listen backlog as a real server's: with
  socketserver's 5, a convert opening 14 connections at once had some of its
  SYNs dropped, retried by the kernel after 1 s (a timeout under
  --http_timeout_s 1)."""
  request_queue_size = 128
  daemon_threads = True


@contextlib.contextmanager
def serving(folder: str):
  """A static HTTP server on 127.0.0.1 for `folder`; -> its base URL."""
  server = LocalServer(('127.0.0.1', 0), functools.partial(_Quiet, directory=folder))
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield f'http://127.0.0.1:{server.server_address[1]}'
  finally:
    server.shutdown()
    server.server_close()


def run(name: str, manifest: str, *flags: str) -> int:
  output_dir = os.path.join(OUTPUT_DIR, name)
  print(f'\n== {name}: convert --manifest {manifest} {" ".join(flags)}', flush=True)
  code = convert.main(['--manifest', manifest, '--output_dir', output_dir, '--overwrite',
                       '--progress', 'off', *flags])
  if code != 0:
    return code
  return validate.main(['--input_dir', output_dir])


def main(argv=None) -> int:
  errors.UsageParser(description=__doc__.strip().splitlines()[0]).parse_args(argv)
  shutil.rmtree(DATA_DIR, ignore_errors=True)
  images = _images()
  parquet = write_parquet(os.path.join(DATA_DIR, 'parquet'), images)
  tars = write_tars(os.path.join(DATA_DIR, 'webdataset'), images)
  code = run('parquet', parquet)  # the splits and class names come from the files
  if code == 0:
    code = run('webdataset', tars, '--label_map',
               os.path.join(DATA_DIR, 'webdataset', 'classes.txt'))
  if code == 0:
    with serving(os.path.join(DATA_DIR, 'urls')) as base:
      urls = write_urls(os.path.join(DATA_DIR, 'urls'), images, base)
      code = run('urls', urls)
  if code == 0:
    print(f'\nThree sources, converted and validated: {OUTPUT_DIR}/parquet, webdataset, urls')
  return code


if __name__ == '__main__':
  exits.exit_with(lambda: exits.main_with_usage_errors(main))
