"""What convert checks on the launcher before any work: reads of the input
(a manifest's header line and columns, the --label_map file, the split folders
of --image_dir), each a UsageError naming the problem. Whether there is any
row at all: preflight_input.py."""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import json
import os
import shlex
from typing import Optional

from pipeline.configuration import flag_files
from pipeline.configuration.manifest_files import is_pattern
from pipeline.configuration.manifest_files import manifest_files
from pipeline.configuration.manifest_files import refuse_path_splits
from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import line_caps
from transforms.core import manifest
from transforms.core import manifest_hints
from transforms.core import paths
from transforms.core import splits
from transforms.core.labels import DEFAULT_NORMALIZE
from transforms.core.store_errors import error_text


def _first_line(path: str, skip_blank: bool = False,
                access: Optional[filesystem.FileAccess] = None):
  """The first (non-blank) line of a manifest, read on the launcher; a
  line_caps.LongLine when it is over MAX_LINE_BYTES (never held whole)."""
  try:
    with (access or filesystem.FileAccess()).open_checked(path) as stream:
      first = line_caps.read_line(stream)
      while skip_blank and first and line_caps.is_blank(first):
        first = line_caps.read_line(stream)
      return first
  except filesystem.read_errors() as error:
    raise UsageError(f'cannot read manifest {path}: {type(error).__name__}: {error_text(error)}')


def read_manifest_header(path: str, fmt: str,
                         access: Optional[filesystem.FileAccess] = None) -> tuple:
  """The header of a CSV/TSV manifest, read on the launcher to check columns."""
  if not manifest.has_header(fmt):
    return ()
  first = _first_line(path, access=access)
  if isinstance(first, line_caps.LongLine):
    raise UsageError(f'manifest {path} has an unusable header line: it is {first.length} '
                     f'bytes, over {line_caps.MAX_LINE_BYTES}')
  problem = manifest_hints.encoding_problem(first)
  try:
    text = '' if problem else first.decode('utf-8')
  except UnicodeDecodeError as error:  # a binary file: no line break of it to mend
    problem = f'it is not UTF-8 text ({error})'
  problem = problem or manifest_hints.lone_cr_problem(first)
  if problem:
    raise UsageError(f'manifest {path} has an unusable header line: {problem}')
  try:
    return manifest.parse_header(text, fmt)
  except (csv.Error, manifest.ManifestFormatError) as error:
    raise UsageError(f'manifest {path} has an unusable header line: {error}')


def _jsonl_columns(path: str) -> Optional[tuple]:
  """The keys of a JSONL manifest's first object (None if it does not parse:
  that line is then rejected on its own)."""
  line = _first_line(path, skip_blank=True)
  if isinstance(line, line_caps.LongLine):
    return None  # rejected on its own (manifest/line_too_long)
  try:
    first = json.loads(line.decode('utf-8').lstrip('\ufeff'))
  except (UnicodeDecodeError, ValueError):
    return None
  return tuple(first) if isinstance(first, dict) else None


@dataclasses.dataclass(frozen=True)
class Rows:
  """api.convert's rows=, as the preflight sees them: written to a JSONL
  manifest at `path`, `count` rows holding, between them, `columns`. The
  checks are the command line's; their messages name the rows `rows=`."""
  path: str
  count: int
  columns: tuple


ROWS = 'rows='


# Which logical columns each kind of manifest reads.
_ROLE_COLUMNS = {
    manifest.ROLE_COMBINED: ('image', 'label', 'key', 'split'),
    manifest.ROLE_IMAGES: ('image', 'key', 'split'),
    manifest.ROLE_LABELS: ('key', 'label'),
}


def manifest_config(path: str, role: str, split: splits.SplitConfig, extras: tuple,
                    fmt: Optional[str] = None, columns: Optional[dict] = None,
                    multi_label: bool = False,
                    label_separator: str = manifest.DEFAULT_LABEL_SEPARATOR,
                    label_normalize: frozenset = DEFAULT_NORMALIZE,
                    rows: Optional[Rows] = None) -> manifest.ManifestConfig:
  """Checks one manifest on the launcher: a file, or a pattern whose files
  are read as one manifest. `columns`: {logical column: the file's name} as
  given by --image_column etc. A named column the file lacks is a usage error
  that lists the columns it has. Reads each file's first line at most.
  rows: the manifest holds api.convert's rows=, whose columns are known: the
  same checks, against every row's columns."""
  listed = None
  if not fmt and '{' in path:  # brace ranges name WebDataset shards: their names tell
    from pipeline.configuration.preflight_tars import tar_files
    listed = tar_files(path)
    fmt = _files_format(path, listed)
  if not fmt and is_pattern(path) and not manifest.manifest_format_or_none(path):
    # 'shards/*' names no format: its files do. Tars read as a line manifest
    # crashed the launch (TypeError: replace() should be called on dataclass
    # instances, exit 1).
    listed = manifest_files(path)
    fmt = _files_format(path, listed)
  if (fmt or manifest.manifest_format_or_none(path)) == manifest.WEBDATASET:
    from pipeline.configuration.preflight_tars import tar_config  # tars: listed, not read
    return tar_config(path, role, split, extras, dict(columns or {}), multi_label,
                      label_normalize, listed)
  if not fmt and not is_pattern(path):
    # a name of no known format is refused before the file is looked for
    fmt = _files_format(path, ((path, 0),))
  files = listed or manifest_files(path)
  fmt = fmt or _files_format(path, files)
  named = {c: n for c, n in (columns or {}).items() if c in _ROLE_COLUMNS[role]}
  split_column = (columns or {}).get('split', 'split')
  if fmt == manifest.PARQUET:  # a footer per file, not a header line
    from pipeline.configuration.preflight_parquet import parquet_config
    return parquet_config(path, files, role, split, extras, named, multi_label,
                          label_normalize)
  if named and fmt == 'txt':
    raise UsageError(f'manifest {path} is a txt list ("path label" per line), which has no '
                     f'column names: drop --{next(iter(named))}_column')
  if multi_label and role != manifest.ROLE_IMAGES:
    _check_separator(path, fmt, label_separator)
  # An empty file (a part with nothing in it) has no header and no rows.
  filled = [p for p, size in files if size] or [files[0][0]]
  headers = _headers(filled, fmt)
  # A compressed empty part (a gzip stream of nothing) is not 0 bytes long:
  # it too has no header line to compare.
  read = [(p, found) for p, found in zip(filled, headers) if found] or [(filled[0], headers[0])]
  filled, (header, *others) = [p for p, _ in read], [found for _, found in read]
  for other, found in zip(filled[1:], others):
    if found != header:
      raise UsageError(f'manifest {other} has the columns {", ".join(found) or "none"}, '
                       f'unlike {filled[0]} ({", ".join(header)}): the files of '
                       f'--manifest {path} need the same header line')
  if fmt != 'jsonl' and role != manifest.ROLE_LABELS:  # a JSON line may name its split
    refuse_path_splits(files, path, fmt, split, manifest.has_header(fmt) and (
        named.get('split', 'split') in header))
  config = manifest.ManifestConfig(
      path=path, fmt=fmt, header=header, role=role, split=split, extra_features=extras,
      columns=tuple(sorted(named.items())), multi_label=multi_label,
      label_separator=label_separator, label_normalize=label_normalize, files=files)
  needed = [config.column(c) for c in manifest.REQUIRED_COLUMNS[role]]
  needed += [n for n in named.values() if n not in needed]
  if role != manifest.ROLE_LABELS:
    needed += [f.name for f in extras]
  if rows is not None:
    if rows.count:  # no row at all: require_input's to say
      _check_columns(ROWS, needed, rows.columns)
      _check_optional_columns(ROWS, config, role, named, rows.columns)
  elif manifest.has_header(fmt):
    _check_columns(f'manifest {path}', needed, header, fmt)
    _check_optional_columns(f'manifest {path}', config, role, named, header, split_column)
  elif fmt == 'jsonl':
    found = _jsonl_columns(filled[0])
    if found is not None and named:
      _check_columns(f'manifest {path}', list(named.values()), found)
    if found is not None:
      _check_optional_columns(f'manifest {path}', config, role, named, found, split_column)
  return config


def _check_separator(path: str, fmt: str, separator: str) -> None:
  """A --label_separator no label cell of this format can hold: every row of
  several labels was a wrong_field_count (TSV), a missing file (txt: 'a.png
  cat dog' is the path 'a.png cat'), or one label."""
  if fmt == 'tsv' and '\t' in separator:
    held = 'a TSV cell cannot hold a tab'
  elif fmt == 'txt' and any(c.isspace() for c in separator):
    held = 'the label of a txt line ("path label") is its last field, which holds no space'
  elif fmt in ('csv', 'tsv', 'txt') and any(c in '\r\n' for c in separator):
    held = 'a cell cannot hold a line break (each line is one row)'
  else:
    return
  raise UsageError(f'--label_separator {separator!r} cannot separate the labels of '
                   f'manifest {path}: {held}')


def _check_optional_columns(named: str, config: manifest.ManifestConfig, role: str,
                            given: dict, found, split_column: str = 'split') -> None:
  """An optional column (key, split) the file names in another case than
  the column it is read from ('Split'): unread, every row went to train,
  test rows trained on, with exit 0. Also a --label_manifest's split column
  (split_column: --split_column's name), which nothing reads."""
  if role == manifest.ROLE_LABELS and not config.split.fractions:
    _refuse_label_manifest_split(named, split_column, found)
  for column in ('split', 'key'):
    name = config.column(column)
    if column in given or column not in _ROLE_COLUMNS[role] or name in found:
      continue
    twin = next((c for c in found if str(c).casefold() == name.casefold()), None)
    if twin is not None:
      unread = ("every row would be in --split's splits (train by default)"
                if column == 'split' else "each row's key would be its image")
      raise UsageError(f'{named} has a column {twin!r}, not {name!r}, so it would not be '
                       f'read ({unread}): rename it {name}, or pass --{column}_column '
                       f'{shlex.quote(str(twin))}')


def _refuse_label_manifest_split(named: str, split_column: str, found) -> None:
  """A label manifest of key,label,split: its split column went unread (a
  row's split is --manifest's split cell, or --split's hash), so every row
  was in train, the test rows it names trained on, with exit 0."""
  twin = next((c for c in found if str(c).casefold() == split_column.casefold()), None)
  if twin is not None:  # named: 'manifest PATH'
    raise UsageError(f"--label_{named} has a column {twin!r}, which is not read (a row's "
                     f"split is its --manifest split cell or --split's hash; without either, "
                     f'train): move the column to --manifest, or drop it')


# A pattern's headers are read this many at a time: a remote open is a round
# trip, and 1,000 parts read one after another would hold a launch for minutes.
HEADER_READERS = 16


def _headers(files: list, fmt: str) -> list:
  """The header of each CSV/TSV file (() for other formats, nothing read)."""
  if not manifest.has_header(fmt):
    return [() for _ in files]
  access = filesystem.FileAccess()  # one S3 client per reading thread, not per file
  if len(files) == 1:
    return [read_manifest_header(files[0], fmt, access)]
  with concurrent.futures.ThreadPoolExecutor(min(HEADER_READERS, len(files))) as pool:
    return list(pool.map(lambda path: read_manifest_header(path, fmt, access), files))


def _files_format(path: str, files: tuple) -> str:
  """The format the name of each file gives: one for all of them."""
  try:
    formats = {manifest.manifest_format(p): p for p, _ in files}
  except manifest.ManifestFormatError as error:
    raise UsageError(str(error))
  if len(formats) > 1:
    (a, first), (b, second) = sorted(formats.items())[:2]
    raise UsageError(f'manifest {path} names files of two formats ({first} is {a}, '
                     f'{second} is {b}): the files of one --manifest share one format')
  return next(iter(formats))


def _check_columns(named: str, needed: list, found: tuple, fmt: str = '') -> None:
  """named: the manifest as the message names it (`manifest PATH`, `rows=`)."""
  missing = [c for c in needed if c not in found]
  if missing and not found:
    raise UsageError(f'{named} has no header line (the file is empty or its first '
                     f'line is blank): it needs the column(s) {", ".join(needed)}')
  if missing:
    raise UsageError(f'{named} has no column(s) {", ".join(missing)} '
                     f'(its columns: {_shown(found) or "none"}){manifest_hints.header_hint(found, fmt)}')


# What a message quotes of a header: a binary or one-column file's first line
# (up to 1 MiB) was quoted whole, a 100 KB line on stderr.
_SHOWN_COLUMNS, _SHOWN_CHARACTERS = 20, 60


def _shown(columns: tuple) -> str:
  """The first columns' names, each cut to a readable length."""
  names = [c if len(c) <= _SHOWN_CHARACTERS else f'{c[:_SHOWN_CHARACTERS]}... '
           f'({len(c)} characters)' for c in columns[:_SHOWN_COLUMNS]]
  more = f', ... ({len(columns)} in all)' if len(columns) > _SHOWN_COLUMNS else ''
  return ', '.join(names) + more


def source_label_map(manifests: tuple, path: Optional[str], modes: frozenset,
                     extensions: Optional[tuple]) -> tuple:
  """(manifests, label map): --label_map read; a Parquet manifest's ClassLabel
  names instead or checked against it; WebDataset tars told the image
  extensions and the names their .cls ids stand for."""
  given = flag_files.read_label_map(path, modes)
  if manifests and manifests[0].fmt == manifest.PARQUET:
    from pipeline.configuration import preflight_parquet
    given = preflight_parquet.label_map(manifests[0], given, path, modes)
  if manifests and manifests[0].fmt == manifest.WEBDATASET:
    from pipeline.configuration import preflight_tars
    manifests = (preflight_tars.with_options(manifests[0], extensions, given),)
  return manifests, given


def may_have_split_column(manifests: tuple) -> bool:
  if manifests and manifests[0].fmt == manifest.PARQUET:
    from pipeline.configuration.preflight_parquet import has_split
    return has_split(manifests[0])
  if manifests and manifests[0].fmt == manifest.WEBDATASET:  # a .json field, if named
    return 'split' in dict(manifests[0].columns) or any(manifests[0].layout.splits)
  return bool(manifests) and (manifests[0].fmt == 'jsonl' or
                              manifests[0].column('split') in manifests[0].header)


def image_dir_splits(directory: str, names: tuple) -> None:
  """--image_dir_layout split/label: every first-level folder must be a split
  name; a usage error names the first that is not."""
  if paths.is_remote(directory):
    from transforms.sources import list_files
    folders = {r.split('/')[0] for r in list_files(directory) if '/' in r}
  else:
    try:
      with os.scandir(directory) as listing:
        folders = {e.name for e in listing if e.is_dir()}
    except OSError:  # the run's listing rejects it, as with layout label: a row './'
      return
  unknown = sorted(f for f in folders if not f.startswith('.') and f not in names)
  if unknown:
    raise UsageError(f'--image_dir {directory}: folder {unknown[0]!r} is not a split name '
                     f'({", ".join(names)}; set --split_names)')
