"""Manifest parsing: plain functions for one line and one row (one key:
manifest_keys.py)."""

from __future__ import annotations

from collections.abc import Iterator
import csv
import dataclasses
import functools
import math
import posixpath
from typing import Optional

from transforms.core import json_objects
from transforms.core import line_caps
from transforms.core import manifest_hints
from transforms.core import paths
from transforms.core.extra_values import ABSENT
from transforms.core.extra_values import is_null
from transforms.core.extra_values import parse_extra
from transforms.core.labels import DEFAULT_NORMALIZE
from transforms.core.labels import NFC
from transforms.core.labels import normalize_label
from transforms.core.pickling import cheap_pickle
from transforms.core.redact import shown_url
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import Rejection
from transforms.core.rejects import RowError
from transforms.core.splits import DEFAULT_SPLIT
from transforms.core.splits import SplitConfig

FORMATS = ('csv', 'tsv', 'jsonl', 'txt', 'parquet', 'webdataset')
PARQUET = 'parquet'
WEBDATASET = 'webdataset'  # tars of samples (core/webdataset.py)
TAR_SUFFIXES = ('.tar', '.tar.gz', '.tgz')

# What a manifest holds: images and labels together, or one side of a join.
ROLE_COMBINED = 'combined'
ROLE_IMAGES = 'images'
ROLE_LABELS = 'labels'
REQUIRED_COLUMNS = {
    ROLE_COMBINED: ('image', 'label'),
    ROLE_IMAGES: ('key', 'image'),
    ROLE_LABELS: ('key', 'label'),
}

# Logical columns a manifest may name differently (--image_column, ...).
COLUMNS = ('image', 'label', 'key', 'split')
DEFAULT_LABEL_SEPARATOR = ';'


class ManifestFormatError(ValueError):
  """The manifest as a whole cannot be used (a usage error)."""


def manifest_format(path: str) -> str:
  if path.lower().endswith(TAR_SUFFIXES):
    return WEBDATASET
  name = path[:-3] if paths.is_gzip_name(path) else path
  extension = name.rsplit('.', 1)[-1].lower() if '.' in name else ''
  if extension not in FORMATS or (extension == PARQUET and name != path):
    raise ManifestFormatError(
        f'cannot tell the format of manifest {path!r}: expected a .csv, .tsv, '
        f'.jsonl or .txt file (optionally .gz), a .parquet file, WebDataset .tar or .tar.gz '
        f'files, or give --manifest_format')
  return extension


def manifest_format_or_none(path: str) -> Optional[str]:
  try:
    return manifest_format(path)
  except ManifestFormatError:
    return None


def parse_header(line: str, fmt: str) -> tuple[str, ...]:
  line = line.lstrip('\ufeff').rstrip('\r\n')
  if fmt == 'csv':
    columns = next(csv.reader([line], strict=True), [])
  else:
    columns = line.split('\t')
  columns = tuple(column.strip() for column in columns)
  duplicated = sorted({c for c in columns if columns.count(c) > 1})
  if duplicated:
    raise ManifestFormatError(f'header repeats column(s) {duplicated}' + (
        f': {columns.count("")} columns have no name (empty cells at the end of the '
        f'header, as Excel writes for columns that were formatted once): delete them'
        if '' in duplicated else ''))
  return columns


@dataclasses.dataclass(frozen=True)
class ManifestConfig:
  """Everything needed to turn one manifest line into a row."""
  path: str
  fmt: str
  header: tuple = ()  # csv/tsv columns; empty for jsonl and txt
  role: str = ROLE_COMBINED
  split: SplitConfig = SplitConfig()  # noqa: RUF009  (frozen: one shared default is safe)
  extra_features: tuple = ()  # ExtraFeature
  columns: tuple = ()  # ((logical column, the file's name for it), ...)
  multi_label: bool = False  # a label cell (or JSON list) holds several labels
  label_separator: str = DEFAULT_LABEL_SEPARATOR
  label_normalize: frozenset = DEFAULT_NORMALIZE  # labels.parse_normalize
  # (path, size in bytes) of each file `path` names, sorted by path (a
  # pattern names several, read as one manifest); empty: `path` itself.
  files: tuple = ()
  # Rows given in Python (pipeline.api's rows=), written to `path` for the
  # run: the name their rows and rejections give as source instead of
  # `path`, and the folder their relative image paths resolve against
  # instead of `path`'s ('': `path` and its folder).
  source_name: str = ''
  relative_to: str = ''
  # A Parquet or WebDataset manifest: what the launcher read of its files
  # (core/parquet.ParquetLayout, core/webdataset.TarLayout); None: a line format.
  layout: Optional[object] = None
  listed: bool = False  # --image_dir: image names as listed, never stripped as cells are

  def column(self, name: str) -> str:
    """The file's name of logical column `name` (image, label, key, split)."""
    return self._names.get(name, name)

  @functools.cached_property  # six calls a row
  def _names(self) -> dict:
    return dict(self.columns)  # the last pair of a name counts

  @property
  def source(self) -> str:
    return self.source_name or self.path

  @functools.cached_property  # a row each: in __dict__, not a field (not compared)
  def base_dir(self) -> str:
    if self.relative_to:
      return self.relative_to
    return posixpath.dirname(self.path) if paths.is_remote(self.path) else (
        self.path.rsplit('/', 1)[0] if '/' in self.path else '.')


@cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class ManifestRow:
  """A parsed manifest line: its fields as read plus the resolved values."""
  fields: dict
  source: str
  line: int
  image: str = ''
  path: str = ''
  key: str = ''
  label: Optional[str] = None
  split: str = DEFAULT_SPLIT
  extras: tuple = ()  # ((name, kind, values), ...)
  label_padded: bool = False  # the label cell had surrounding spaces (stripped)
  content_sha256: str = ''  # hex SHA-256 of the source file, when hashed before decoding
  # its (width, height) as its header gives it, when hashed for --schema detection
  content_size: Optional[tuple] = None
  # What stopped that hashing: the row is rejected with it when its image
  # would be loaded, without reading the file again.
  read_error: Optional[RowError] = None
  # The line's number in all of the manifest's files read one after another
  # (files sorted by path); 0: `line` (one file).
  position: int = 0
  # --schema detection: the image's objects (annotations.ImageAnnotation).
  annotation: object = None
  # The source's fingerprint (core/fingerprints.py; '' until taken), and the
  # previous dataset's record of this key (core/reuse.PreviousRecord), if any.
  fingerprint: str = ''
  previous: Optional[object] = None
  # Why the row is encoded rather than copied (core/reuse.REASONS, or
  # reuse_fallback: its copy failed); '' when not decided (counted by example).
  reuse: str = ''
  # Where the image's bytes are when no file of its own holds them (a Parquet
  # cell: core/parquet.ParquetCell); None: `path` is the image. `path` is then
  # the file holding them, fingerprinted with the row.
  ref: Optional[object] = None

  @property
  def place(self) -> int:
    """The row's place in manifest order (what --shuffle off writes by)."""
    return self.position or self.line

  def reject(self, stage: str, code: str, reason: str,
             counts_as_row: bool = True) -> Rejection:
    return Rejection(self.fields, stage, code, reason, self.source, self.line,
                     counts_as_row)


def split_fields(text: str, config: ManifestConfig) -> dict:
  """One manifest line -> {column: value}; RowError if it does not parse."""
  if config.fmt == 'jsonl':
    try:
      fields = json_objects.loads(text)  # a member named twice: a ValueError
      json_objects.check_unicode(fields)
    except UnicodeEncodeError as error:
      raise RowError(STAGE_MANIFEST, 'bad_encoding',
                     f'line holds text that is not valid Unicode: {error.reason}')
    except (ValueError, RecursionError) as error:
      # JSONDecodeError, integers of thousands of digits, deep nesting
      raise RowError(STAGE_MANIFEST, 'bad_json', f'line is not usable JSON: {error}')
    if not isinstance(fields, dict):
      raise RowError(STAGE_MANIFEST, 'bad_json',
                     f'line is JSON {type(fields).__name__}, not an object')
    line_caps.check_field_lengths(fields, 'JSON line')
    return fields
  if config.fmt == 'txt':
    # `path label`: the last field is the label, so a path may hold spaces
    values = text.strip().rsplit(None, 1)
    line_caps.check_lengths(values, 'line')
    if len(values) != 2:
      raise RowError(STAGE_MANIFEST, 'wrong_field_count',
                     f'line has {len(values)} field(s), expected 2 (the last is the '
                     f'{REQUIRED_COLUMNS[config.role][1]})')
    return dict(zip(REQUIRED_COLUMNS[config.role], values))
  if config.fmt == 'csv' and text and len(text) <= line_caps.MAX_FIELD_CHARS and not (
      '"' in text or '\r' in text or '\n' in text or '\x00' in text):
    values = text.split(',')  # what csv.reader gives such a line: 0.3 against 1.1 us
  elif config.fmt == 'csv':
    try:
      values = next(csv.reader([text], strict=True))
    except csv.Error as error:
      if str(error) == 'unexpected end of data':
        # Each line is one row, read by whichever worker reads its bytes: a
        # quoted field cannot run on to the next line (which is a row of its own).
        raise RowError(STAGE_MANIFEST, 'bad_quoting',
                       'CSV line does not parse: a quoted field is not closed on its line '
                       '(a field cannot hold a line break: each line is one row)')
      if str(error).startswith('field larger than field limit'):
        raise line_caps.field_too_long('CSV line')
      if str(error).startswith('new-line character seen in unquoted field'):
        # csv's own words go on 'do you need to open the file in
        # universal-newline mode?': advice about Python's open(), not the file.
        raise RowError(STAGE_MANIFEST, 'bad_quoting',
                       'CSV line does not parse: a carriage return (\\r) in a field that is '
                       'not quoted: quote the field ("...") or remove the \\r')
      raise RowError(STAGE_MANIFEST, 'bad_quoting', f'CSV line does not parse: {error}')
    line_caps.check_lengths(values, 'CSV line')  # csv's limit is global: anyone may raise it
  else:
    values = text.split('\t')
    line_caps.check_lengths(values, 'TSV line')
  if len(values) != len(config.header):
    raise RowError(STAGE_MANIFEST, 'wrong_field_count',
                   f'line has {len(values)} fields, the header has {len(config.header)}'
                   f'{manifest_hints.field_count_hint(config, len(values))}')
  return dict(zip(config.header, values))


def text_of(fields: dict, column: str, numbers: bool = True) -> Optional[str]:
  """A column as text: JSON numbers as written (1.0 -> '1'; numbers False: a
  string only, as the image's path or URL), never a bool or list."""
  value = fields.get(column)
  if is_null(value):
    return None
  return value.strip() if type(value) is str else _item_text(value, column, numbers)


def _item_text(value, column: str, numbers: bool = True) -> str:
  if not numbers or isinstance(value, (dict, list, bool)) or is_null(value) or value in (
      math.inf, -math.inf):
    raise RowError(STAGE_MANIFEST, 'bad_value', f'column {column!r} must be a string' + (
        ' or a finite number' if numbers else ' (a path or URL)') + f', not {value!r}')
  if isinstance(value, float) and value.is_integer():
    value = int(value)
  return str(value).strip()


def _labels(fields: dict, config: ManifestConfig):
  """The label as text, or with multi_label a tuple of labels in the order
  given, each once (a cell split at the separator, or a JSON list). An empty
  one beside others ('a;;b', 'a;b;', ["a", ""]) stays as '', for the label
  stage to reject (LabelMap.lookup_all); only empty ones: no label, ()."""
  column = config.column('label')
  if not config.multi_label:
    return text_of(fields, column)
  value = fields.get(column)
  if is_null(value):
    return ()
  if isinstance(value, list):
    # A JSON list already says where each label ends: an item is one label,
    # separator and all ('salt;pepper' was split into two classes, silently).
    labels = [_item_text(item, column) for item in value]
  else:
    text = _item_text(value, column)
    if isinstance(value, str) and NFC in config.label_normalize:
      # split as stored: NFC makes U+037E (Greek question mark) a ';', which
      # split after it left 'a;b' one class holding the separator
      text = normalize_label(text, frozenset({NFC}))
    labels = text.split(config.label_separator) if isinstance(value, str) else [text]
    if config.label_separator.isspace():  # 'haze  primary': spaces line labels up, lose none
      labels = [label for label in labels if label.strip()]
  labels = tuple(dict.fromkeys(label.strip() for label in labels))
  return labels if any(labels) else ()


def _normalized(label, modes: frozenset):
  """--label_normalize on a label, or on each of a multi-label row's (each once)."""
  if isinstance(label, tuple):
    return tuple(dict.fromkeys(normalize_label(one, modes) for one in label))
  return normalize_label(label, modes)


def label_list(label) -> tuple:
  """A row's label(s) as a tuple: none, one, or a multi-label row's list."""
  if label is None:
    return ()
  return label if isinstance(label, tuple) else (label,)


def resolve_path(image: str, base_dir: str) -> str:
  """Relative image paths resolve against the manifest's own folder."""
  if '://' in image or image.startswith('/') or base_dir == '.':  # remote, absolute, here
    return image  # else posixpath.join's result at a fifth of its cost (a row each):
  return base_dir + image if base_dir.endswith('/') else f'{base_dir}/{image}'


def image_path(image: str, base_dir: str, column: str = 'image') -> str:
  """An image cell -> the path to read (a file:// URL's local path, resolved);
  RowError manifest/bad_value if no file a run reads has it (paths.image_problem)."""
  problem = paths.image_problem(image)
  if problem:
    raise RowError(STAGE_MANIFEST, 'bad_value', f'column {column!r} {problem}')
  return resolve_path(paths.local_file(image), base_dir)


def row_from_fields(fields: dict, config: ManifestConfig, line: int,
                    position: int = 0) -> ManifestRow:
  """Checks and resolves a parsed line; RowError if the row is unusable.
  position: see ManifestRow.position."""
  for column in REQUIRED_COLUMNS[config.role]:
    if column != 'label' and not text_of(fields, config.column(column), column != 'image'):
      raise RowError(STAGE_MANIFEST, f'empty_{column}',
                     f'column {config.column(column)!r} is empty')
  label = _normalized(_labels(fields, config), config.label_normalize)
  # multi_label: each label is stripped where the cell is split, as intended
  padded = not config.multi_label and is_padded(fields.get(config.column('label')))
  if config.role == ROLE_LABELS:
    return ManifestRow(fields, config.source, line, key=text_of(fields, config.column('key')),
                       label=label, label_padded=padded, position=position)
  image = fields['image'] if config.listed else text_of(fields, config.column('image'), False)
  path = image_path(image, config.base_dir, config.column('image'))
  image = shown_url(image)  # a URL's credentials never reach image/filename or the key
  key = text_of(fields, config.column('key')) or image
  extras = tuple((f.name, f.kind, parse_extra(fields.get(f.name, ABSENT), f.kind, f.name,
                                              config.fmt, f.shape))
                 for f in config.extra_features)
  split = config.split.assign(key, split_cell(fields, config.column('split')))
  # One constructor call, not a row then dataclasses.replace (which walks every
  # field again): a few us less a row, on a parse of ~20-40 us.
  return ManifestRow(
      fields, config.source, line, image=image, path=path,
      key=key, label=label, split=split, extras=extras, label_padded=padded,
      position=position)


def split_cell(fields: dict, column: str) -> Optional[str]:
  """The split cell as text; None only when the row has no such column (a
  JSONL object without the member: the default split). A JSONL `null` or
  `NaN` (pandas' gap, api.convert's None) is an empty cell, '', rejected as a
  CSV's empty cell is: it went to train, a test row trained on. Parquet and
  WebDataset rows too (a null cell, a `.json` split member of null), where a
  split their path names stands in for it."""
  text = text_of(fields, column)
  return '' if text is None and column in fields else text


def is_padded(value) -> bool:
  """Whether a label cell had surrounding spaces (stripped, and warned about:
  ManifestRow.label_padded), in every format."""
  return isinstance(value, str) and value.strip() != value and bool(value.strip())


def line_fields(raw, line: int, config: ManifestConfig) -> dict:
  """Raw line (bytes; a line_caps.LongLine is rejected) -> {column: value}, or RowError."""
  if isinstance(raw, line_caps.LongLine):
    raise line_caps.line_too_long(raw)
  try:
    text = raw.decode('utf-8')
  except UnicodeDecodeError as error:
    raise RowError(STAGE_MANIFEST, 'bad_encoding', f'line is not UTF-8: {error}'
                   f'{manifest_hints.cp1252_hint(raw[error.start:error.start + 1])}: save the manifest as '
                   f'UTF-8')
  if line == 1:
    text = text.lstrip('\ufeff')  # a byte order mark before the first row
  return split_fields(text.rstrip('\r\n'), config)


def has_header(fmt: str) -> bool:
  return fmt in ('csv', 'tsv')


def iter_lines(stream, fmt: str) -> Iterator[tuple]:
  """Numbered non-blank data lines, header skipped (bytes; line_caps.LongLine if long)."""
  number = 0
  while raw := line_caps.read_line(stream):
    number += 1
    if (number > 1 or not has_header(fmt)) and not line_caps.is_blank(raw):
      yield number, line_caps.without_break(raw)
