"""JSON text read through, a \\u escape of half a character found: a plain
stream wrapper.

JSON may escape a character outside the BMP as two \\u escapes, a high
surrogate (\\ud800..\\udbff) and then a low one (\\udc00..\\udfff). A high one
without its pair (an emoji whose string was cut short) is no character:
Python's json keeps it as it is, and ijson's yajl parser reads it as `?`,
or pairs it with whatever \\u escape follows (`\\ud83d\\u0041` read as one
emoji, not two characters), without a word. (A low one alone, yajl refuses:
UnicodeDecodeError.)
"""

from __future__ import annotations

import re

# A \u escape of a high surrogate (or an escaped backslash and then plain
# text "ud83d": the backslashes before it tell). A literal first: re finds it
# in 0.25 ms a MB, where a pattern led by (\\+) took 6 ms.
_HIGH = re.compile(rb'\\u[dD][89abAB][0-9a-fA-F]{2}')
_LOW = re.compile(rb'\\u[dD][c-fC-F][0-9a-fA-F]{2}')
_PAIR = 12  # bytes of a high escape and its low one: \ud83d\ude00
_BACKSLASH = 0x5c
_RUN_KEPT = 16  # backslashes carried over at most: only their parity counts


class LoneSurrogate(ValueError):
  """offset: where in the stream a high surrogate's escape without its
  pair starts; shown: that escape and what follows it."""

  def __init__(self, offset: int, shown: bytes):
    super().__init__(offset, shown)
    self.offset = offset
    self.shown = shown.decode('ascii', 'replace')


class SurrogateCheck:
  """A binary stream read through, unchanged; LoneSurrogate at the first
  \\u escape of a high surrogate not followed by a low one's. Escapes cut
  across reads are checked once the next read completes them (the last
  bytes of a read are carried over, a few: never a run of backslashes
  longer than _RUN_KEPT, whose parity is all that counts)."""

  def __init__(self, stream):
    self._stream = stream
    self._carry = b''
    self._offset = 0  # the stream offset of self._carry[0]

  def read(self, size: int = -1) -> bytes:
    data = self._stream.read(size)
    buffer = self._carry + data
    final = not data
    keep = len(buffer) if final else max(0, len(buffer) - _PAIR)
    while keep > 0 and not final and buffer[keep - 1] == _BACKSLASH:
      keep -= 1  # never carry part of a run of backslashes: its parity would be lost
    for match in _HIGH.finditer(buffer):
      start = match.start()
      if start >= keep:
        break
      run = start  # the backslashes before its own
      while run > 0 and buffer[run - 1] == _BACKSLASH:
        run -= 1
      if (start - run) % 2:  # an escaped backslash, then "ud83d"
        continue
      if not final and match.end() + 6 > len(buffer):
        keep = run  # its pair (or not) is in the next read
        break
      if not _LOW.match(buffer, match.end()):
        raise LoneSurrogate(self._offset + start, buffer[start:start + _PAIR])
    carry = buffer[keep:]
    run = len(carry) - len(carry.lstrip(b'\\'))
    if run > _RUN_KEPT:  # the same parity, fewer backslashes
      dropped = run - _RUN_KEPT - run % 2
      carry, keep = carry[dropped:], keep + dropped
    self._carry, self._offset = carry, self._offset + keep
    return data
