"""Small files a flag names, read capped and never whole: --label_map and
--config (UTF-8 text), a detection dataset's class list; a UsageError naming
the flag when one cannot be read, holds too much or is not UTF-8."""

from __future__ import annotations

from typing import Optional

from pipeline.configuration.manifest_files import require_file
from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import manifest_hints
from transforms.core.labels import LabelMap
from transforms.core.labels import normalized_map

# The most bytes a --label_map file may hold. The launcher holds the map as
# Python strings and dicts (measured: 1M short names, 16 MiB of text, cost
# 118 MiB) and every worker gets a copy; the largest real maps (ImageNet-21k's
# 21,841 classes) are under 1 MiB. Without a cap a huge file (or a .gz bomb)
# was read whole and died in a MemoryError traceback.
MAX_LABEL_MAP_BYTES = 16 << 20


def read_capped(named: str, path: str, max_bytes: int, needs: str,
                files: Optional[filesystem.FileAccess] = None) -> bytes:
  """The bytes of a small file a user hands over, read at most max_bytes + 1
  (a .gz: once decompressed), never whole; a UsageError starting `named` if
  it cannot be read or holds more (`more than {needs} needs`)."""
  try:
    data = (files or filesystem.FileAccess()).read_at_most(path, max_bytes)
  except filesystem.read_errors() as error:
    raise UsageError(f'{named} cannot be read: {type(error).__name__}: {error}')
  if len(data) > max_bytes:
    raise UsageError(f'{named} holds more than {max_bytes} bytes, more than {needs} needs')
  return data


def read_flag_text(flag: str, path: str, max_bytes: int) -> str:
  """The UTF-8 text of the file `flag` names (--label_map, --config); a
  UsageError naming the flag if it is not a regular file (require_file: no
  device or FIFO is opened), cannot be read, or holds more than `max_bytes`
  bytes (a .gz: once decompressed; at most max_bytes + 1 are read)."""
  require_file(flag, path)
  data = read_capped(f'{flag} {path}', path, max_bytes, f'any {flag} file')
  try:
    return data.decode('utf-8')
  except UnicodeDecodeError as error:
    raise UsageError(f'{flag} {path} is not UTF-8 text: {manifest_hints.encoding_problem(data) or error}')


def read_label_map(path: Optional[str], modes: frozenset) -> Optional[LabelMap]:
  if not path:
    return None
  text = read_flag_text('--label_map', path, MAX_LABEL_MAP_BYTES)
  try:
    return normalized_map(LabelMap.from_text(text), modes)
  except ValueError as error:  # empty, blank or repeated lines
    raise UsageError(f'--label_map {path}: {error}')
