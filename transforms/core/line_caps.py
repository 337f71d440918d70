"""Caps on a manifest's lines and fields, one place for every format: a
field's length (MAX_FIELD_CHARS), a line's (MAX_LINE_BYTES: read_line never
holds more), and how much of a rejected line rejected.jsonl shows."""

from __future__ import annotations

import json
from typing import NamedTuple
from typing import Optional

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


# Byte order marks of text that is not UTF-8 (UTF-32's first: FF FE 00 00
# starts with UTF-16's). Excel's "Unicode Text" export is UTF-16 LE.
_FOREIGN_BOMS = ((b'\xff\xfe\x00\x00', 'UTF-32'), (b'\x00\x00\xfe\xff', 'UTF-32'),
                 (b'\xff\xfe', 'UTF-16'), (b'\xfe\xff', 'UTF-16'))


def encoding_problem(first: bytes) -> Optional[str]:
  """Why a manifest whose first line (as read_line reads it) is `first`
  cannot be read as UTF-8 lines, or None: text in UTF-16 or UTF-32 (its
  byte order mark), whose every line would be `manifest/bad_encoding`."""
  for bom, name in _FOREIGN_BOMS:
    if first.startswith(bom):
      return (f'it is {name} text (it starts with the byte order mark '
              f'{bom.hex(" ").upper()}): save it as UTF-8')
  return None


def lone_cr_problem(first: bytes) -> Optional[str]:
  """Why a header line holding a b'\\r' before its end is unusable: lines
  that end with a lone CR (classic Mac OS) are one line here, since only
  b'\\n' ends a line (a quoted CSV field cannot hold a line break either)."""
  if b'\r' in first.rstrip(b'\r\n'):
    return ("its lines end with a lone \\r (classic Mac OS line breaks): only \\n or "
            "\\r\\n end a line; convert them (tr '\\r' '\\n')")
  return None


def first_row_cr_problem(first: bytes, fmt: str) -> Optional[str]:
  """lone_cr_problem for a .txt or JSONL manifest's first line (it has no
  header): rows that end with a lone CR are one line, which was read as one
  row (a .txt's path `a.jpg cat\\rb.jpg`, labelled with the last label) or one
  bad_json line holding them all. A JSONL line may hold a CR as whitespace
  between its tokens: only one whose part before its first CR is a whole
  JSON object, with more after it, is refused."""
  body = first.rstrip(b'\r\n')
  if fmt not in ('txt', 'jsonl') or b'\r' not in body:
    return None
  if fmt == 'jsonl':
    before, after = body.split(b'\r', 1)
    try:
      whole = isinstance(json.loads(before.decode('utf-8-sig')), dict)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
      whole = False
    if not whole or not after.strip():
      return None
  return lone_cr_problem(first)
