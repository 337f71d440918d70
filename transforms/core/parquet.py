"""Parquet manifests (Hugging Face's layouts, URL lists): plain functions.

What the launcher reads of each file (its footer: schema, row groups), the
split a Hub path names, the class names of a `ClassLabel` column, and how a
row group's light columns become ManifestRows. A row never carries image
bytes: a bytes cell becomes a ParquetCell (file, row group, row), and the
image step reads it (transforms/workers/source_refs.py). pyarrow is imported
by the functions that need it, never at import time.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from typing import NamedTuple
from typing import Optional

from transforms.core import line_caps
from transforms.core import manifest
from transforms.core.extra_values import ABSENT
from transforms.core.extra_values import parse_extra
from transforms.core.labels import normalize_label
from transforms.core.redact import shown_url
from transforms.core.rejects import STAGE_LABEL
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import RowError

# What the image column holds.
IMAGE_PATH = 'path'  # a string: a path or URL
IMAGE_BYTES = 'bytes'  # binary: the image's bytes
IMAGE_STRUCT = 'struct'  # Hugging Face's Image feature: {bytes, path}
# Hugging Face's "no label" in a ClassLabel column (and any integer label column).
NO_LABEL = -1

# The Hub's layouts that name a split (SPLIT_NAME's characters):
# {split}-00000-of-00003.parquet, optionally with a fingerprint suffix ...
_SHARDED = re.compile(r'^([A-Za-z0-9_]+)-\d+-of-\d+(-[0-9A-Za-z]+)?\.parquet$')
# ... data/{split}-*.parquet, and the parquet-converter's
# {config}/{split}/0000.parquet and {config}/partial-{split}/0000.parquet.
_DATA_FILE = re.compile(r'^([A-Za-z0-9_]+)-[^/]*\.parquet$')
_CONVERTED_FILE = re.compile(r'^\d+\.parquet$')
_CONVERTED_FOLDER = re.compile(r'^(?:partial-)?([A-Za-z0-9_]+)$')


def hub_split(path: str) -> Optional[str]:
  """The split a Hub file's path names, or None."""
  parts = path.replace('\\', '/').rstrip('/').split('/')
  name, folder = parts[-1], parts[-2] if len(parts) > 1 else ''
  found = _SHARDED.match(name)
  if found:
    return found.group(1)
  if folder == 'data':
    found = _DATA_FILE.match(name)
    return found.group(1) if found else None
  if _CONVERTED_FILE.match(name) and folder:
    found = _CONVERTED_FOLDER.match(folder)
    return found.group(1) if found else None
  return None


class ParquetFile(NamedTuple):
  """One file of a Parquet manifest, as its footer describes it."""
  path: str
  size: int
  row_groups: tuple  # rows in each row group
  split: Optional[str]  # from the path (hub_split), if it names one
  first_position: int  # rows of the files before it (the manifest's order)
  short_name: str = ''  # paths.short_names: the file's name among the manifest's files

  @property
  def num_rows(self) -> int:
    return sum(self.row_groups)

  @property
  def name(self) -> str:
    """What keys say of the file: its name, or its path below the folder all
    the manifest's files share when two have one name (`test/0000.parquet`)."""
    return self.short_name or posixpath.basename(self.path)


@dataclasses.dataclass(frozen=True)
class ParquetLayout:
  """What the launcher read of a Parquet manifest: its files, what the image
  column holds, the light columns the first pass reads, and the ClassLabel
  names of the label column (empty: the labels are as written)."""
  files: tuple  # ParquetFile, sorted by path
  image_kind: str
  light_columns: tuple  # the file's columns read by the first pass, image bytes never
  class_names: tuple = ()

  @property
  def num_rows(self) -> int:
    return sum(file.num_rows for file in self.files)


class ParquetCell(NamedTuple):
  """An image's bytes in a Parquet file: the cell of `column` (a path such
  as 'image.bytes') in row `index` of row group `row_group`. `fallback`: the
  path read instead when the cell is null (an HF Image whose bytes are
  null and whose path is set); `row`: the row's index in the file (messages)."""
  file: str
  row_group: int
  index: int
  column: str
  row: int
  fallback: str = ''

  def where(self) -> str:
    return f'{self.file} row {self.row}'

  def part(self) -> str:
    """The cell's place in its file, for its fingerprint."""
    return f'row={self.row}'


def value_type(arrow_type):
  """The type of a column's values: a dictionary-encoded column's value type
  (pandas writes a `category` column as dictionary<values=string, ...>, and
  pyarrow reads it back so; its cells read as their values), else itself."""
  import pyarrow as pa
  return arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type


def _is_string(arrow_type) -> bool:
  import pyarrow as pa
  return (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
          or pa.types.is_string_view(arrow_type))


def image_kind(arrow_type) -> Optional[str]:
  """IMAGE_PATH, IMAGE_BYTES or IMAGE_STRUCT for a column's Arrow type, or
  None when it is none of them."""
  import pyarrow as pa
  arrow_type = value_type(arrow_type)
  if _is_string(arrow_type):
    return IMAGE_PATH
  if (pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)
      or pa.types.is_binary_view(arrow_type)):
    return IMAGE_BYTES
  if pa.types.is_struct(arrow_type):
    fields = {arrow_type.field(i).name: arrow_type.field(i).type
              for i in range(arrow_type.num_fields)}
    if 'bytes' in fields and image_kind(fields['bytes']) == IMAGE_BYTES and (
        'path' not in fields or image_kind(fields['path']) == IMAGE_PATH):
      return IMAGE_STRUCT
  return None


def label_type_problem(arrow_type) -> Optional[str]:
  """Why a column's type cannot hold labels (None: it can: a string or an integer)."""
  import pyarrow as pa
  if _is_string(value_type(arrow_type)) or pa.types.is_integer(value_type(arrow_type)):
    return None
  if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or (
      pa.types.is_fixed_size_list(arrow_type)):
    # a Hugging Face Sequence(ClassLabel): name the way that does take it
    return (f'{arrow_type}, not a string or an integer (several labels a row: '
            f'--multi_label reads them from a CSV, TSV, JSONL or txt manifest)')
  return f'{arrow_type}, not a string or an integer'


def text_type_problem(arrow_type) -> Optional[str]:
  """Why a key or split column of this Arrow type gives no text (None: it
  does). A struct was read as its fields, so the column was never there:
  every key its file and row, every row in train, without a word."""
  import pyarrow as pa
  arrow_type = value_type(arrow_type)
  if pa.types.is_nested(arrow_type) or image_kind(arrow_type) == IMAGE_BYTES:
    return f'{arrow_type}, not a string or a number'
  return None


def extra_type_problem(arrow_type, kind: str) -> Optional[str]:
  """Why an --extra_features column of this Arrow type cannot give `kind`
  values (None: it can): its values, or a list's (of lists'), must be
  strings or numbers. A binary, struct, date or time cell had rejected every
  row with a reason beside the point (a struct, read as its fields: `column
  is missing`; bytes: `not JSON serializable`)."""
  import pyarrow as pa
  leaf = value_type(arrow_type)
  while (pa.types.is_list(leaf) or pa.types.is_large_list(leaf)
         or pa.types.is_fixed_size_list(leaf) or pa.types.is_list_view(leaf)):
    leaf = value_type(leaf.value_type)
  numbers = pa.types.is_integer(leaf) or pa.types.is_floating(leaf)
  if _is_string(leaf) or numbers or (kind != 'bytes' and pa.types.is_decimal(leaf)) or (
      kind == 'bytes' and pa.types.is_boolean(leaf)):  # 'true', as a JSON line's true
    return None
  return (f'{arrow_type}, which --extra_features cannot read as {kind}: it reads strings '
          f'and numbers, and lists of them' + (' (decimals as float or int64)'
                                               if pa.types.is_decimal(leaf) else ''))


def class_label_names(metadata: Optional[dict], column: str) -> tuple:
  """The names of a ClassLabel `column` in a schema's metadata (Hugging
  Face's `huggingface` key: {"info": {"features": {column: {"_type":
  "ClassLabel", "names": [...]}}}}); () when it declares none."""
  text = (metadata or {}).get(b'huggingface')
  if not text:
    return ()
  try:
    info = json.loads(text)
  except ValueError:
    return ()
  features = (info.get('info') or {}).get('features') if isinstance(info, dict) else None
  feature = features.get(column) if isinstance(features, dict) else None
  if isinstance(feature, dict) and feature.get('_type') == 'ClassLabel' and isinstance(
      feature.get('names'), list):
    return tuple(str(name) for name in feature['names'])
  return ()


def light_columns(config: manifest.ManifestConfig, kind: str, names: tuple) -> tuple:
  """The columns the first pass reads (of those in the file: `names`): the
  label, key and split columns, the extra features, and of the image only a
  path (a string column, or an HF Image's `path`), never bytes."""
  image = config.column('image')
  wanted = []
  if kind == IMAGE_PATH:
    wanted.append(image)
  for logical in ('label', 'key', 'split'):
    if config.column(logical) in names:
      wanted.append(config.column(logical))
  wanted += [f.name for f in config.extra_features]
  return tuple(dict.fromkeys(wanted))


def image_path_column(config: manifest.ManifestConfig, layout: ParquetLayout) -> str:
  """The column path the first pass reads for an HF Image's path ('' if none)."""
  return f'{config.column("image")}.path' if layout.image_kind == IMAGE_STRUCT else ''


def bytes_column(config: manifest.ManifestConfig, layout: ParquetLayout) -> str:
  """The column path of an image's bytes (read by the image step)."""
  image = config.column('image')
  return f'{image}.bytes' if layout.image_kind == IMAGE_STRUCT else image


def _label(value, layout: ParquetLayout, column: str):
  """A label cell -> its text: a ClassLabel id its name; NO_LABEL rejected."""
  if value is None:
    return None
  if isinstance(value, bool):
    raise RowError(STAGE_MANIFEST, 'bad_value', f'column {column!r} must be a string or '
                   f'an integer, not {value!r}')
  if isinstance(value, int):
    if value == NO_LABEL:
      raise RowError(STAGE_LABEL, 'no_label', f'column {column!r} is {NO_LABEL}: the row '
                     f'has no label')
    if layout.class_names:
      if not 0 <= value < len(layout.class_names):
        raise RowError(STAGE_LABEL, 'unknown_label', f'class id {value} is not among the '
                       f'{len(layout.class_names)} ClassLabel names of column {column!r}')
      return layout.class_names[value]
    return str(value)
  return str(value).strip()


def row_from_cells(cells: dict, config: manifest.ManifestConfig, layout: ParquetLayout,
                   file: ParquetFile, row_group: int, index: int, row: int
                   ) -> manifest.ManifestRow:
  """One row's light cells ({column: Python value}; an HF Image's path under
  image_path_column) -> its ManifestRow; RowError when the row is unusable.
  row: its index in the file; index: in its row group."""
  line_caps.check_field_lengths(cells, 'row')
  image = config.column('image')
  hf_path = cells.get(image_path_column(config, layout)) if layout.image_kind == IMAGE_STRUCT \
      else None
  stated_key = manifest.text_of(cells, config.column('key'))
  cell = cells.get(config.column('label'))
  label = normalize_label(_label(cell, layout, config.column('label')), config.label_normalize)
  ref = None
  if layout.image_kind == IMAGE_PATH:
    shown = manifest.text_of(cells, image)
    if not shown:
      raise RowError(STAGE_MANIFEST, 'empty_image', f'column {image!r} is empty')
    path = manifest.image_path(shown, config.base_dir, image)
    shown = shown_url(shown)
    key = stated_key or shown
  else:
    hf_path = (hf_path or '').strip()
    # Not the Image's path: datasets keeps only its file name (push_to_hub),
    # so cat/1.jpg and dog/1.jpg are both '1.jpg'; file and row are unique.
    key = stated_key or f'{file.name}:{row}'
    shown = shown_url(hf_path) if hf_path else key  # no URL's credentials in image/filename
    fallback = manifest.image_path(hf_path, config.base_dir, image_path_column(
        config, layout)) if hf_path else ''
    ref = ParquetCell(file.path, row_group, index, bytes_column(config, layout), row, fallback)
    path = file.path  # what fingerprints the row (with its row number)
  extras = tuple((f.name, f.kind, parse_extra(cells.get(f.name, ABSENT), f.kind, f.name, 'jsonl',
                                              f.shape))
                 for f in config.extra_features)
  # A null cell ('') takes the path's split, else is rejected: it went to train.
  stated_split = manifest.split_cell(cells, config.column('split'))
  split = config.split.assign(key, stated_split or file.split or stated_split)
  return manifest.ManifestRow(
      cells, file.path, row, image=shown, path=path, key=key, label=label, split=split,
      extras=extras, position=file.first_position + row + 1, ref=ref,
      label_padded=manifest.is_padded(cell))
