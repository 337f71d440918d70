"""Bare validate loop: check convert's TFRecords with plain Python, one process per core.

Each process takes whole files (`OUT/*.tfrecord*`, GZIP ones read through gzip):
it checks both CRCs of every record with google_crc32c, then parses the
tf.train.Example by walking the protobuf wire format by hand (importing
tensorflow's example_pb2 would import all of TensorFlow in every process).
The check is feature-name agnostic: the image is the longest bytes value of
the Example, which must be H*W*3 bytes long (raw) or
a JPEG that decodes to the expected size (jpeg), and some int64 feature must hold the label.

    python -m bench.bare_validate --input_dir OUT [--encoding jpeg --height 224 --width 224]
"""

import argparse
import glob
import io
import json
import multiprocessing
import os
import struct
import sys
import time

from PIL import Image

from bench.common import CorruptRecord
from bench.common import add_case_arguments
from bench.common import iter_records

MAX_REPORTED_ERRORS = 5


def read_varint(buf, pos):
  """Decode the varint at `pos`; return (value, next position)."""
  result = shift = 0
  while True:
    byte = buf[pos]
    pos += 1
    result |= (byte & 0x7F) << shift
    if byte < 0x80:
      return result, pos
    shift += 7


def iter_fields(buf):
  """Yield (field number, wire type, value) of a protobuf message.

    Varints are ints; length-delimited fields are memoryview slices (no copy).
    """
  buf = memoryview(buf)
  pos = 0
  while pos < len(buf):
    key, pos = read_varint(buf, pos)
    number, wire = key >> 3, key & 7
    if wire == 0:
      value, pos = read_varint(buf, pos)
    elif wire == 2:
      length, pos = read_varint(buf, pos)
      value, pos = buf[pos:pos + length], pos + length
    elif wire in (1, 5):
      width = 8 if wire == 1 else 4
      value, pos = buf[pos:pos + width], pos + width
    else:
      raise ValueError(f'unsupported wire type {wire}')
    if pos > len(buf):
      raise ValueError('field runs past the end of the message')
    yield number, wire, value


def length_delimited(buf, wanted):
  """Values of field number `wanted` of a message; each must be length-delimited."""
  for number, wire, value in iter_fields(buf):
    if number == wanted:
      if wire != 2:
        raise ValueError(f'field {number} has wire type {wire}, expected 2')
      yield value


def parse_int64_list(buf):
  """Values of an Int64List (packed or not)."""
  values = []
  for number, wire, value in iter_fields(buf):
    if number != 1:
      continue
    if wire == 0:
      values.append(value)
    elif wire == 2:
      pos = 0
      while pos < len(value):
        v, pos = read_varint(value, pos)
        values.append(v)
    else:
      raise ValueError(f'int64 value of wire type {wire}')
  return values


def parse_feature(buf):
  """(kind, values) of a tf.train.Feature; float values are not decoded."""
  for number, wire, value in iter_fields(buf):
    if wire != 2:
      raise ValueError(f'Feature field {number} has wire type {wire}')
    if number == 1:
      return 'bytes', list(length_delimited(value, 1))
    if number == 2:
      return 'float', None
    if number == 3:
      return 'int64', parse_int64_list(value)
  return 'empty', []


def parse_example(data):
  """{feature name: (kind, values)} of a serialized tf.train.Example."""
  features = {}
  for features_msg in length_delimited(data, 1):
    for entry in length_delimited(features_msg, 1):
      name = b''.join(bytes(v) for v in length_delimited(entry, 1)).decode()
      value = b''.join(bytes(v) for v in length_delimited(entry, 2))
      features[name] = parse_feature(value)
  return features


def check_example(features, encoding, height, width):
  """Raise ValueError unless the Example holds a well-formed image and a label.

    The same checks as pipeline.validate: raw byte length, or a JPEG that
    decodes (Pillow) to width x height.
    """
  raw_size = height * width * 3
  images = [v for kind, values in features.values() if kind == 'bytes' for v in values]
  if not images:
    raise ValueError('no bytes feature')
  image = max(images, key=len)
  if encoding == 'raw' and len(image) != raw_size:
    raise ValueError(f'raw image of {len(image)} bytes, expected {raw_size}')
  if encoding == 'jpeg':
    decoded = Image.open(io.BytesIO(image))
    decoded.load()
    if decoded.size != (width, height):
      raise ValueError(f'JPEG decodes to {decoded.size}, expected {(width, height)}')
  if not any(kind == 'int64' and values for kind, values in features.values()):
    raise ValueError('no int64 label')


def validate_file(task):
  """Pool task: (records, [error messages]) for one TFRecord file."""
  path, encoding, height, width = task
  records, errors = 0, []
  try:
    for data in iter_records(path):
      try:
        check_example(parse_example(data), encoding, height, width)
      except (ValueError, IndexError, UnicodeDecodeError, OSError) as e:
        errors.append(f'{os.path.basename(path)} record {records}: {e}')
      records += 1
  except (CorruptRecord, OSError, struct.error) as e:
    errors.append(str(e))
  return records, errors


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--input_dir', required=True)
  parser.add_argument('--processes', type=int, default=os.cpu_count())
  add_case_arguments(parser)
  args = parser.parse_args()

  start = time.perf_counter()
  files = sorted(
      glob.glob(os.path.join(args.input_dir, '*.tfrecord*')), key=os.path.getsize,
      reverse=True)  # big files first balances better
  tasks = [(path, args.encoding, args.height, args.width) for path in files]
  records, errors = 0, []
  with multiprocessing.Pool(max(1, min(args.processes, len(files)))) as pool:
    for n, errs in pool.imap_unordered(validate_file, tasks):
      records += n
      errors += errs
  print(
      json.dumps({
          'files': len(files),
          'records': records,
          'errors': len(errors),
          'first_errors': errors[:MAX_REPORTED_ERRORS],
          'loop_seconds': round(time.perf_counter() - start, 3)
      }))
  if errors or not records:
    sys.exit(1)


if __name__ == '__main__':
  main()
