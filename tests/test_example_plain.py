"""parse_example_plain (validate's copy-free reader) against protobuf's parser:
the same features for every input it reads, None for every input it leaves to
protobuf (which then decides), on real Examples and on damaged ones."""

from __future__ import annotations

import math
import random
import struct

from google.protobuf.message import DecodeError
import pytest

from transforms.core.example_proto import parse_example
from transforms.core.example_proto import parse_example_plain
from transforms.core.example_proto import serialize_example


def canonical(parsed: dict) -> dict:
  """Values comparable across both parsers: views as bytes, floats by their bits."""
  def value(v):
    if isinstance(v, memoryview):
      return bytes(v)
    if isinstance(v, float):
      return ('float', struct.pack('<f', v))
    return v
  return {name: (kind, [value(v) for v in values]) for name, (kind, values) in parsed.items()}


def protobuf_reading(data: bytes):
  try:
    return canonical(parse_example(data))
  except DecodeError:
    return 'DecodeError'


def random_example(rng: random.Random) -> bytes:
  features = {}
  for i in range(rng.randrange(0, 6)):
    kind = rng.choice(['bytes', 'int64', 'float'])
    n = rng.randrange(0, 4)
    if kind == 'bytes':
      values = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
                for _ in range(n)]
    elif kind == 'int64':
      values = [rng.choice([0, 1, -1, 2**63 - 1, -2**63, rng.randrange(-2**40, 2**40)])
                for _ in range(n)]
    else:
      values = [rng.choice([0.0, -1.5, 1e30, math.inf, rng.random()]) for _ in range(n)]
    features[rng.choice(['image/encoded', 'label', 'é', f'f{i}', ''])] = (kind, values)
  return serialize_example(features)


def damaged(rng: random.Random, data: bytes) -> bytes:
  data = bytearray(data)
  for _ in range(rng.randrange(1, 4)):
    action = rng.randrange(4)
    if action == 0 and data:
      data[rng.randrange(len(data))] = rng.randrange(256)
    elif action == 1:
      del data[rng.randrange(len(data) + 1):]
    elif action == 2:
      data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
    elif data:
      del data[rng.randrange(len(data))]
  return bytes(data)


def test_the_same_features_as_protobuf_on_random_and_damaged_examples():
  rng = random.Random(14)
  read_plainly = left = 0
  for _ in range(1500):
    data = random_example(rng)
    if rng.random() < 0.6:
      data = damaged(rng, data)
    plain = parse_example_plain(data, frozenset({'image/encoded'}))
    if plain is None:
      left += 1
    else:
      read_plainly += 1
      assert canonical(plain) == protobuf_reading(data), data
  assert read_plainly > 500 and left > 150  # both ways were exercised


def test_a_real_record_reads_plainly_and_views_are_not_copies():
  data = serialize_example({'image/encoded': ('bytes', b'\x01' * 1000),
                            'image/class/label': ('int64', 7),
                            'weight': ('float', [0.5, 2.0]), 'image/key': ('bytes', 'a.png')})
  plain = parse_example_plain(data, frozenset({'image/encoded'}))
  assert canonical(plain) == canonical(parse_example(data))
  (pixels,) = plain['image/encoded'][1]
  assert isinstance(pixels, memoryview) and pixels.obj is data and len(pixels) == 1000
  assert plain['image/key'] == ('bytes_list', [b'a.png'])
  assert plain['image/class/label'] == ('int64_list', [7])


@pytest.mark.parametrize('data', [
    b'\x0a\x02\x0a\x00\x0a\x00',  # Example.features twice: protobuf merges them
    b'\x12\x00',  # an unknown field
    b'\x0a\x0a\x0a\x08\x0a\x01a\x12\x03\x1a\x01\x08',  # a Feature that is cut short
    # an unpacked int64 and a key seen twice (protobuf keeps the last)
    b'\x0a\x14\x0a\x08\x0a\x01a\x12\x03\x1a\x01\x00\x0a\x08\x0a\x01a\x12\x03\x1a\x01\x01',
    b'\x0a\x07\x0a\x05\x0a\x01\xff\x12\x00',  # a name that is not UTF-8
    b'\x0a\x07\x0a\x05\x0a\x01a\x12\x00',  # a Feature holding no list
])
def test_unusual_layouts_are_left_to_protobuf(data):
  assert parse_example_plain(data) is None


def field(tag: int, payload: bytes) -> bytes:
  """A length-delimited field (payloads here are under 128 bytes)."""
  return bytes([tag, len(payload)]) + payload


def test_unpacked_values_read_as_protobuf_reads_them():
  # int64 as single varints, float as single fixed32 values: valid, not what we write
  ints = field(0x0a, field(0x0a, b'i') + field(0x12, field(0x1a, b'\x08\x05\x08\x7f')))
  floats = field(0x0a, field(0x0a, b'f') + field(
      0x12, field(0x12, b'\x0d' + struct.pack('<f', 1.5))))
  data = field(0x0a, ints + floats)
  assert canonical(parse_example_plain(data)) == protobuf_reading(data) == {
      'i': ('int64_list', [5, 127]), 'f': ('float_list', [('float', struct.pack('<f', 1.5))])}
