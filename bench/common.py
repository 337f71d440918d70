"""Helpers shared by the benchmark's child programs: manifest, image ops, framing.

Kept free of TensorFlow and Beam so that the bare loops (ceiling, bare
validate) import only Pillow, numpy and google_crc32c.
"""

import csv
from dataclasses import dataclass
import gzip
import io
import os
import struct

import google_crc32c

CRC_MASK_DELTA = 0xA282EAD8
JPEG_QUALITY = 95
GZIP_MAGIC = b'\x1f\x8b'


@dataclass(frozen=True)
class Case:
  """One output format to benchmark: how images are encoded and sized."""

  name: str
  encoding: str  # "raw" or "jpeg"
  height: int
  width: int

  @property
  def raw_size(self):
    """Byte length of one raw RGB image of this case."""
    return self.height * self.width * 3


CASES = {
    'raw300': Case('raw300', 'raw', 300, 300),
    'jpeg224': Case('jpeg224', 'jpeg', 224, 224),
    # bench/engines.py's case for the tiny corpus (bench/corpus.py): 16x16 PNGs
    # to raw 16x16, 768 bytes a row, so what a run spends is per-row work, not
    # pixels or disk writes.
    'raw16': Case('raw16', 'raw', 16, 16),
}
# What `make bench` runs without --cases: the cases of the photo corpus.
BENCH_CASES = ('raw300', 'jpeg224')


def add_case_arguments(parser):
  """Add --encoding/--height/--width to an argparse parser."""
  parser.add_argument('--encoding', choices=('raw', 'jpeg'), default='raw')
  parser.add_argument('--height', type=int, default=300)
  parser.add_argument('--width', type=int, default=300)


def read_manifest(manifest):
  """Return [(absolute image path, label name)] from a CSV `image,label`.

    Image paths are relative to the manifest's folder (absolute ones are kept).
    """
  base = os.path.dirname(os.path.abspath(manifest))
  with open(manifest, newline='') as f:
    return [(os.path.join(base, row['image']), row['label']) for row in csv.DictReader(f)]


def label_indices(rows):
  """Map each label name to an int: its rank among the sorted names."""
  return {name: i for i, name in enumerate(sorted({label for _, label in rows}))}


def encode(img, encoding):
  """Bytes of an RGB image: raw pixels, or a JPEG of quality 95."""
  if encoding == 'raw':
    return img.tobytes()
  buf = io.BytesIO()
  img.save(buf, format='JPEG', quality=JPEG_QUALITY)
  return buf.getvalue()


def masked_crc(data):
  """TFRecord's masked CRC32C of `data`."""
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + CRC_MASK_DELTA) & 0xFFFFFFFF


def write_record(f, data):
  """Append one TFRecord-framed record to the binary file `f`."""
  header = struct.pack('<Q', len(data))
  f.write(header)
  f.write(struct.pack('<I', masked_crc(header)))
  f.write(data)
  f.write(struct.pack('<I', masked_crc(data)))


class CorruptRecord(ValueError):
  """A TFRecord whose framing or CRC is wrong."""


def iter_records(path):
  """Yield the payload of each record of a TFRecord file, checking both CRCs.

    GZIP-compressed files (recognised by their magic bytes) are read through gzip.
    """
  with open(path, 'rb') as f:
    gzipped = f.read(2) == GZIP_MAGIC
  with (gzip.open if gzipped else open)(path, 'rb') as f:
    while True:
      header = f.read(12)
      if not header:
        return
      if len(header) != 12:
        raise CorruptRecord(f'{path}: truncated header')
      length_bytes, (length_crc,) = header[:8], struct.unpack('<I', header[8:])
      if masked_crc(length_bytes) != length_crc:
        raise CorruptRecord(f'{path}: bad length crc')
      (length,) = struct.unpack('<Q', length_bytes)
      data = f.read(length)
      footer = f.read(4)
      if len(data) != length or len(footer) != 4:
        raise CorruptRecord(f'{path}: truncated record')
      if masked_crc(data) != struct.unpack('<I', footer)[0]:
        raise CorruptRecord(f'{path}: bad data crc')
      yield data


def split_evenly(n, parts):
  """Return `parts` contiguous (start, stop) ranges covering range(n)."""
  bounds = [n * i // parts for i in range(parts + 1)]
  return list(zip(bounds[:-1], bounds[1:]))
