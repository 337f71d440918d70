"""transforms/core/json_escapes.py: a \\u escape of a high surrogate without
its low one is found wherever the reads cut the text, as Python's json
reads the same text (a lone high surrogate in the string it gives)."""

import io
import json

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from transforms.core.json_escapes import LoneSurrogate
from transforms.core.json_escapes import SurrogateCheck

# pieces of a JSON string's text: escaped backslashes (\\ then "ud83d" is
# text, not an escape), high and low surrogates' escapes, other escapes
PIECES = ['a', 'ud83d', '\\\\', '\\ud83d', '\\uD83D', '\\udbff', '\\ude00', '\\uDC00',
          '\\u0041', '\\n', '\\"', 'é']


class _Chunks(io.RawIOBase):
  """A stream whose reads return at most the next of `sizes` bytes."""

  def __init__(self, data: bytes, sizes: list):
    self._data, self._sizes, self._at, self._n = data, sizes, 0, 0

  def read(self, size=-1):
    step = self._sizes[self._n % len(self._sizes)]
    self._n += 1
    size = step if size is None or size < 0 else min(size, step)
    data = self._data[self._at:self._at + size]
    self._at += len(data)
    return data


def _first_lone(data: bytes, sizes: list, size: int = 7):
  """The offset SurrogateCheck raises at, or None; reading to the end."""
  check = SurrogateCheck(_Chunks(data, sizes))
  try:
    while check.read(size):
      pass
  except LoneSurrogate as lone:
    return lone.offset
  return None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PIECES), max_size=12), min_size=1, max_size=4),
       st.lists(st.integers(1, 13), min_size=1, max_size=5))
def test_found_as_pythons_json_reads_it_however_the_reads_cut(strings, sizes):
  text = json.dumps(['PLACEHOLDER'] * len(strings))
  for pieces in strings:  # the pieces as they are: json.dumps would escape them
    text = text.replace('PLACEHOLDER', ''.join(pieces), 1)
  data = text.encode()
  decoded = json.loads(text)
  lone = any('\ud800' <= c <= '\udbff' for string in decoded for c in string)
  whole = _first_lone(data, [len(data) + 1], len(data) + 1)
  assert (whole is not None) == lone, text
  assert _first_lone(data, sizes) == whole  # the same wherever the reads cut
  if lone:
    assert data[whole:whole + 3].lower() == b'\\ud'


def test_what_it_reads_is_the_stream_unchanged():
  data = b'["\\ud83d\\ude00 \\\\ud83d", "' + b'\\\\' * 40 + b'ud83d"]'
  check = SurrogateCheck(_Chunks(data, [3, 1, 5]))
  read = b''
  while chunk := check.read(4):
    read += chunk
  assert read == data and json.loads(read) == ['\U0001F600 \\ud83d', '\\' * 40 + 'ud83d']


@pytest.mark.parametrize('text, offset, shown', [
    (b'["dog \\ud83d"]', 6, '\\ud83d"]'),
    (b'["\\ud83d\\u0041"]', 2, '\\ud83d\\u0041'),
    (b'["\\ud83d\\ude00", "\\\\\\ud83d\\ud83d\\ude00"]', 20, '\\ud83d\\ud83d'),
])
def test_the_first_lone_one_is_named(text, offset, shown):
  check = SurrogateCheck(io.BytesIO(text))
  with pytest.raises(LoneSurrogate) as raised:
    while check.read(5):
      pass
  assert (raised.value.offset, raised.value.shown) == (offset, shown)
