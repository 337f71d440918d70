"""What a manifest made by Windows, Excel, PowerShell, macOS or pandas does
that this project does not read, said as the fix: text that is not UTF-8
(UTF-16, Windows-1252), lines that end with a lone CR, a header line that
is no header (Excel's `sep=;`, PowerShell's `#TYPE`) or split at other
separators. Messages only: what is refused is decided where it is read."""

from __future__ import annotations

import json
from typing import Optional

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


def header_hint(columns: tuple, fmt: str) -> str:
  """Why a header lacking needed columns may have them after all: a line
  before it (Excel's 'sep=;', PowerShell's '#TYPE'), quoted TSV cells, or
  fields separated by what the format does not split at ('' when none)."""
  first = columns[0] if columns and fmt in ('csv', 'tsv') else ''
  if first.lower().startswith('sep=') and len(columns) <= 2:
    split_at = ',' if fmt == 'csv' else '\t'
    separator = first[4:] or split_at  # 'sep=,' is the columns 'sep=' and ''
    return (f": its first line {'sep=' + separator!r} is Excel's separator line, no "
            f'header: delete it' + ('' if separator == split_at else
                                    f' (and if its fields are separated by {separator!r}, '
                                    f'separate them with {split_at!r})'))
  if first.startswith('#TYPE '):
    return (": its first line is the '#TYPE' line of Windows PowerShell's Export-Csv, no "
            'header: delete it (Export-Csv -NoTypeInformation leaves it out)')
  if fmt == 'tsv' and any(len(c) > 1 and c[0] == c[-1] == '"' for c in columns):
    return (': its header cells are in quotes, and TSV cells are taken literally, quotes '
            'and all: write it without quotes, or as a CSV')
  if len(columns) != 1 or not first:
    return ''
  for separator, name in ((';', "';' (Excel's CSV in a European locale)"), ('\t', 'tabs'),
                          (',', 'commas')):
    if separator in first and separator != (',' if fmt == 'csv' else '\t'):
      fix = ('name it .tsv or give --manifest_format tsv' if separator == '\t' else
             'name it .csv or give --manifest_format csv' if separator == ',' else
             'save it with commas between its fields (a .csv) or tabs (a .tsv)')
      return f': its fields are separated by {name}, which a {fmt.upper()} does not split at: {fix}'
  return ''


def cp1252_hint(byte: bytes) -> str:
  """What a byte that is not UTF-8 is in Windows-1252 (what Excel's plain
  'CSV' and Notepad's 'ANSI' write: 'é' is 0xE9), or ''."""
  try:
    return f' (0x{byte.hex().upper()} is {byte.decode("cp1252")!r} in Windows-1252)'
  except UnicodeDecodeError:  # 0x81, 0x8D, ...: no Windows-1252 character
    return ''


def field_count_hint(config, found: int) -> str:
  """A CSV line of too many fields, read with --multi_label --label_separator
  ',': its label cell was surely meant to be quoted."""
  if config.multi_label and config.fmt == 'csv' and ',' in config.label_separator and (
      found > len(config.header)):
    return f' (a label cell holding --label_separator {config.label_separator!r} is quoted: "cat,dog")'
  return ''
