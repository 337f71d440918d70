"""Paths that are local files or URLs (gs://, s3://, ...): the one test of
which a path is, and the one way to join under it."""

from __future__ import annotations

import os
from typing import Optional
import urllib.parse
import uuid

# What an image path may be besides a local path (docs/manifests.md, "Where
# files may be"): Beam's filesystems for gs:// and s3://, and http(s)://,
# fetched by transforms/workers/http_fetch.py (any case, as it tells them).
# A file:// URL is read as the local path it names (local_file).
HTTP_SCHEMES = ('http', 'https')
URL_SCHEMES = ('gs', 's3', *HTTP_SCHEMES)
FILE_SCHEME = 'file'
SUPPORTED = 'local paths, file:///, gs://, s3://, http(s)://'


def is_remote(path: str) -> bool:
  """A URL (gs://bucket/..., s3://..., http://...), not a local path."""
  return '://' in path


def is_gzip_name(path: str) -> bool:
  """A gzip file by its name: `.gz` in any case (`DATA.CSV.GZ`, as Windows
  tools name files; Beam's own detection ignores case too)."""
  return path[-3:].lower() == '.gz'


def temp_name(path: str) -> str:
  """A temp name beside `path` no other writer of it picks (PATH.<12 hex>.tmp),
  to write under and rename over `path`: two validate runs of one dataset
  shared validation_report.json.tmp, the second truncating it while the first
  wrote it, and published the first's tail after its own bytes."""
  return f'{path}.{uuid.uuid4().hex[:12]}.tmp'


def nearest_existing(path: str) -> str:
  """`path` if it exists (as anything), else its closest ancestor that does."""
  while not os.path.lexists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  return path


def has_glob(path: str) -> bool:
  """A pattern (*, ?, [...]) naming any number of files, not one path."""
  return any(c in path for c in '*?[')


def stays_inside(relative: str) -> bool:
  """Whether a path an annotation file gives (relative to --image_dir) names
  something inside that folder: not absolute, not a URL, and no `..` that
  climbs above it (`a/../b.jpg` stays inside)."""
  if not relative or is_remote(relative) or relative.startswith('/'):
    return False
  depth = 0
  for part in relative.split('/'):
    if part == '..':
      depth -= 1
      if depth < 0:
        return False
    elif part not in ('', '.'):
      depth += 1
  return True


def join(base: str, *parts: str) -> str:
  """`base`/part/...: '/' after a URL (its trailing slashes dropped), the
  local convention (os.path.join) for a local path."""
  if is_remote(base):
    for part in parts:
      base = base.rstrip('/') + '/' + part
    return base
  return os.path.join(base, *parts)


def short_names(paths, pattern: str) -> tuple:
  """Each of the files a manifest `pattern` names, named by its path below
  the folder of the pattern's part before its first wildcard (`*`, `?`,
  `[`, or a brace `{`); a pattern naming one file: that file's folder. So
  `default/*/0000.parquet` names `train/0000.parquet` and
  `test/0000.parquet` (the keys and image names built on them stay apart),
  the same whichever of its folders exist on a night; `data/train-*.tar`
  names `train-000.tar`. A path outside that folder (no such pattern):
  below the deepest folder holding them all."""
  paths = [path.replace('\\', '/') for path in paths]
  pattern = pattern.replace('\\', '/')
  wild = [at for at in (pattern.find(c) for c in '*?[{') if at >= 0]
  # a file's own name may hold those characters
  literal = pattern[:min(wild)] if wild and pattern not in paths else pattern
  folder = literal[:literal.rfind('/') + 1]
  if all(path.startswith(folder) for path in paths):
    return tuple(path[len(folder):] for path in paths)
  split = [path.split('/') for path in paths]
  common = min((len(parts) - 1 for parts in split), default=0)
  for depth in range(common):
    if len({parts[depth] for parts in split}) > 1:
      common = depth
      break
  return tuple('/'.join(parts[common:]) for parts in split)


def url_scheme(path: str) -> str:
  """The scheme of a URL (`gs` of gs://b/a.jpg); '' for a local path."""
  return path.split('://', 1)[0] if is_remote(path) else ''


def image_problem(path: str) -> Optional[str]:
  """Why an image path names no file a run can read (a URL scheme not among
  URL_SCHEMES, a file:// URL of another host, a NUL byte), or None."""
  if '://' not in path:  # a local path, as most rows' (0.3 of 0.4 us a row)
    return 'holds a NUL byte: no file name can' if '\x00' in path else None
  scheme = url_scheme(path)
  if scheme.lower() == FILE_SCHEME:
    host = path.split('://', 1)[1].split('/', 1)[0]
    if host not in ('', 'localhost'):
      return (f"is a file:// URL of the host {host!r}: only this machine's files are "
              f'read (file:///absolute/path)')
  elif scheme and scheme not in URL_SCHEMES and scheme.lower() not in HTTP_SCHEMES:
    return f'has an unsupported URL scheme {scheme!r} (supported: {SUPPORTED})'
  elif scheme.lower() in HTTP_SCHEMES:
    problem = _http_problem(path)
    if problem:
      return problem
  if '\x00' in local_file(path):  # a file:// URL's %00 too
    return 'holds a NUL byte: no file name can'
  return None


def _http_problem(url: str) -> Optional[str]:
  """Why the fetch cannot parse an http(s) URL, or None: what urllib3 refuses
  before it connects (a port out of range or no number, no host, a host with
  a space or control character) was read/http_error, an unclosed [IPv6
  bracket read/unexpected_error, as if a server had failed."""
  try:
    parts = urllib.parse.urlsplit(url)  # what the fetch parses first
  except ValueError as error:
    return f'is no URL that parses ({error})'
  try:
    parts.port  # noqa: B018 (raises for a port out of 0-65535 or no number)
  except ValueError:  # not its message: it quotes the cell (a password a user put there)
    return 'is no URL that parses (its port is no number from 0 to 65535)'
  if not parts.hostname:  # http:///a.jpg, http://:80/a.jpg, http://user@/a.jpg
    return 'is no URL that parses (no host)'
  # Its host as written: urlsplit drops every tab, CR and LF first (WHATWG),
  # urllib3 does not ('ho\tst' was read/http_error 'Host ... contains invalid
  # character', after 3 retries).
  written = url.partition('//')[2].split('/', 1)[0].split('?', 1)[0].split('#', 1)[0]
  if any(c <= ' ' or c == '\x7f' for c in written.rpartition('@')[2]):
    return 'is no URL that parses (a space or control character in its host)'
  return None


def local_file(path: str) -> str:
  """A file:// URL of this machine (image_problem None) -> the local path it
  names (file:///data/a%20b.jpg -> /data/a b.jpg: percent-escapes decoded,
  as RFC 8089 writes them); any other path as it is."""
  if '://' not in path or url_scheme(path).lower() != FILE_SCHEME:
    return path
  rest = path.split('://', 1)[1]
  return urllib.parse.unquote(rest[rest.index('/'):] if '/' in rest else '/',
                              errors='surrogateescape')


def not_utf8_shown(text: str) -> Optional[str]:
  """None for text that is UTF-8; for a name that is not (Python's surrogate
  escapes of a file system's bytes), the name with its bad bytes as \\xNN,
  as a message shows it. Beam's coders, the manifest's text and
  dataset_info.json carry UTF-8 only."""
  try:
    text.encode('utf-8')
  except UnicodeEncodeError:
    return text.encode('utf-8', 'surrogateescape').decode('utf-8', 'backslashreplace')
  return None
