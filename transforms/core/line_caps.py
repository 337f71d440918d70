"""Caps on a manifest's lines and fields, one place for every format: a
field's length (MAX_FIELD_CHARS), a line's (MAX_LINE_BYTES: read_line never
holds more), and how much of a rejected line rejected.jsonl shows."""

from __future__ import annotations

from typing import NamedTuple

from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import RowError

# No field of a manifest row (a path, a label, a key, a feature's text) is
# longer than this many characters: Python's csv limit, which CSV always had,
# now every text format's and Parquet's (manifest/field_too_long). No path is
# that long (Linux: 4,096 bytes; GCS and S3 names: 1,024).
MAX_FIELD_CHARS = 131_072
# A line longer than this many bytes is no row (manifest/line_too_long): it is
# rejected as it is read, never held whole (only its first MAX_LINE_BYTES), so
# a line of any length costs memory of a small multiple of this. 8 fields at
# the cap, next to rows of 3-5 fields of at most a few KB (a 4,096-float
# feature is about 80 KB).
MAX_LINE_BYTES = 8 * MAX_FIELD_CHARS
# An over-long line's rest is skipped in reads of this many bytes.
_SKIP_BYTES = 1 << 20


class LongLine(NamedTuple):
  """A line longer than the limit it was read with: its first `limit` bytes,
  its length in bytes without its line break, the bytes it took in the
  stream (with its line break), and whether it is only whitespace."""
  head: bytes
  length: int
  consumed: int
  blank: bool


def read_line(stream, limit: int = MAX_LINE_BYTES):
  """The next line of a binary stream with its line break, as readline()
  gives it (b'' at the end), holding at most `limit` bytes in memory: a
  longer line is read on to its end (in reads of a MiB) and given as a
  LongLine."""
  raw = stream.readline(limit + 1)
  if len(raw) <= limit or raw.endswith(b'\n'):
    return raw
  consumed, blank, more = len(raw), not raw.strip(), raw
  while more and not more.endswith(b'\n'):
    more = stream.readline(_SKIP_BYTES)
    consumed += len(more)
    blank = blank and not more.strip()
  end = more[-2:] if more.endswith(b'\r\n') else more[-1:] if more.endswith(b'\n') else b''
  return LongLine(raw[:limit], consumed - len(end), consumed, blank)


def line_size(line) -> int:
  """The bytes a read_line result took in its stream."""
  return line.consumed if isinstance(line, LongLine) else len(line)


def is_blank(line) -> bool:
  return line.blank if isinstance(line, LongLine) else not line.strip()


def without_break(line):
  """A read_line result without its line break (a LongLine has none)."""
  return line if isinstance(line, LongLine) else line.rstrip(b'\r\n')


def field_too_long(what: str) -> RowError:
  return RowError(STAGE_MANIFEST, 'field_too_long',
                  f'{what} has a field over {MAX_FIELD_CHARS} characters (no path, '
                  f'label or feature is that long)')


def line_too_long(line: LongLine) -> RowError:
  return RowError(STAGE_MANIFEST, 'line_too_long',
                  f'line is {line.length} bytes, over {MAX_LINE_BYTES}: no row is that '
                  f'long (a field is at most {MAX_FIELD_CHARS} characters); not parsed')


def check_lengths(values, what: str) -> None:
  """RowError (field_too_long) if a text of `values` (strings, or a JSON
  value's lists of them) is over MAX_FIELD_CHARS."""
  pending = [iter(values)]  # a stack, not recursion: JSON may nest deeply
  while pending:
    for value in pending[-1]:
      if type(value) is str:
        if len(value) > MAX_FIELD_CHARS:
          raise field_too_long(what)
      elif isinstance(value, (list, dict)):
        pending.append(iter(value.values() if isinstance(value, dict) else value))
        break
    else:
      pending.pop()


def check_field_lengths(fields: dict, what: str) -> None:
  """RowError (manifest/field_too_long) if a field of a parsed line or row
  (a JSON object's values, a Parquet row's cells), or a text in one, is over
  MAX_FIELD_CHARS: the cap of every manifest format."""
  check_lengths(fields.values(), what)
  if any(len(name) > MAX_FIELD_CHARS for name in fields if type(name) is str):
    raise field_too_long(what)


# A rejected line is copied into rejected.jsonl up to this many characters.
MAX_SHOWN_LINE = 10_000


def shown_line(raw) -> str:
  """A raw line (bytes, or a LongLine) as rejected.jsonl's `row`."""
  if isinstance(raw, LongLine):
    return raw.head[:MAX_SHOWN_LINE].decode('utf-8', 'replace') + f'... ({raw.length} bytes)'
  return _shown_text(raw.decode('utf-8', 'replace'))


def shown_fields(fields: dict) -> dict:
  """A parsed row's fields as rejected.jsonl's `row`: a text over
  MAX_SHOWN_LINE characters cut there, as shown_line cuts a line."""
  return {name: _shown_text(value) if type(value) is str else value
          for name, value in fields.items()}


def _shown_text(text: str) -> str:
  if len(text) <= MAX_SHOWN_LINE:
    return text
  return text[:MAX_SHOWN_LINE] + f'... ({len(text)} characters)'
