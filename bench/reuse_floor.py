"""python -m bench.reuse_floor [WORKDIR]: the least CPU a reused row costs
in plain Python, with no Beam at all, on the incremental benchmark's corpus
(run `make bench BENCH_ARGS="--incremental"` first; WORKDIR is its workdir).

Night 2's rows go one after another through a single thread, using the
project's own per-row functions, with no Beam in between. Each row's CSV line
is split, its file's metadata fingerprint is taken (a stat), its previous
record is looked up and compared, the record is read with one pread with both
CRCs checked (and its sidecar CRC, key, label, path and SHA-256 compared), and
it is written with its sidecar line. A real run also builds
the label map, counts, writes the index and checks far more. So this is a
lower bound on what a reused row can cost.

Why it matters: the 10x target for `metadata` leaves (full / 10 - floor run)
/ 12,020 rows (night 2's) per row, where the floor run is the incremental benchmark's
5-row run (start-up, Beam's job, the previous dataset's sidecars).
"""

import csv
import gzip
import io
import os
import sys
import time

from transforms.core import copies
from transforms.core import fingerprints
from transforms.core import reuse
from transforms.core.tfrecord import unframe

DEFAULT_WORKDIR = '/tmp/img2tfrecord-bench'
CHECK = copies.CopyCheck('image/key', 'image/class/label', 'image/class/text', 'image/filename',
                        'image/key/sha256')


def previous_records(night1: str) -> dict:
  """{key: PreviousRecord} of night 1's single split, `train`."""
  shards = sorted(os.path.join(night1, name) for name in os.listdir(night1)
                  if name.startswith('train-') and name.endswith('.tfrecord'))
  with gzip.open(os.path.join(night1, 'train.sources.jsonl.gz')) as stream:
    return dict(reuse.parse_line(line, 'train', shards, False) for line in reuse.read_lines(stream))


def reuse_rows(manifest: str, previous: dict) -> tuple[int, float, bytes]:
  """-> (rows reused, seconds, the framed records written): night 2's rows,
  each copied if unchanged."""
  folder = os.path.dirname(manifest)
  with open(manifest, newline='') as f:
    lines = f.read().splitlines()[1:]
  shards = {path: os.open(path, os.O_RDONLY) for path in
            {record.shard_path for record in previous.values()}}
  out, sidecar, reused = io.BytesIO(), io.BytesIO(), 0
  started = time.perf_counter()
  for text in lines:
    (image, label), = csv.reader([text])
    record = previous.get(image)
    fingerprint = fingerprints.local_fingerprint(os.path.join(folder, image))
    if reuse.decide(record, 'train', fingerprint, (record.label_id, label) if record else None,
                    record.option_digest if record else '', image) is not None:
      continue
    framed = os.pread(shards[record.shard_path], record.length, record.offset)
    data = unframe(framed, record.length, record.offset)
    copies.checked_copy(data, int.from_bytes(framed[-4:], 'little'), record, image, CHECK)
    sidecar.write(reuse.sidecar_line(image, 0, reused, out.tell(), record.length,
                                     record.data_crc, fingerprint, record.source_sha256, image,
                                     record.label_id, label, record.option_digest))
    out.write(framed)
    reused += 1
  seconds = time.perf_counter() - started
  for fd in shards.values():
    os.close(fd)
  return reused, seconds, out.getvalue()


def plain_loop_us(root: str) -> float:
  """us a reused row in plain Python, on one size's folder of the incremental
  benchmark (WORKDIR/incremental-N: its night1 and corpus/night2.csv)."""
  previous = previous_records(os.path.join(root, 'night1'))
  reused, seconds, _ = reuse_rows(os.path.join(root, 'corpus', 'night2.csv'), previous)
  return round(seconds / max(reused, 1) * 1e6, 1)


COPY_CHUNK = 1 << 20  # what cat reads and writes at a time (and ShardReader reads ahead)


def copy_floor_us(night1: str) -> float:
  """us a record to read night 1's shards and write them again into a new
  file beside them, 1 MiB at a time, as `cat a b > c` does: the bytes alone,
  no Python per record. A reused row's record is read and written so in a
  run, besides its other work; on a VM whose memory is slow this alone is
  a large part of a reused row."""
  shards = sorted(os.path.join(night1, name) for name in os.listdir(night1)
                  if name.startswith('train-') and name.endswith('.tfrecord'))
  with gzip.open(os.path.join(night1, 'train.sources.jsonl.gz')) as stream:
    records = sum(1 for _ in reuse.read_lines(stream))
  target = os.path.join(night1, '.copy-floor')
  started = time.perf_counter()
  try:
    with open(target, 'wb', buffering=0) as out:
      for shard in shards:
        with open(shard, 'rb', buffering=0) as source:
          while chunk := source.read(COPY_CHUNK):
            out.write(chunk)
    seconds = time.perf_counter() - started
  finally:  # not a file of the dataset: never left beside it
    if os.path.exists(target):
      os.remove(target)
  return round(seconds / max(records, 1) * 1e6, 1)


def main(argv: list) -> int:
  root = os.path.join(argv[0] if argv else DEFAULT_WORKDIR, 'incremental-12000')
  previous = previous_records(os.path.join(root, 'night1'))
  reused, seconds, _ = reuse_rows(os.path.join(root, 'corpus', 'night2.csv'), previous)
  print(f'{reused} rows reused in {seconds:.2f} s of plain Python: '
        f'{seconds / max(reused, 1) * 1e6:.0f} us a row; their bytes alone (read and '
        f'written as cat does): {copy_floor_us(os.path.join(root, "night1")):.0f} us a record')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
