"""What convert reads of a Parquet manifest on the launcher: each file's
footer (schema, row groups; no row is read), the columns' types, the
ClassLabel names of the label column, the splits the files' paths name.
Every problem is a UsageError naming the file and the column."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Optional

from pipeline.configuration.manifest_files import path_splits
from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import manifest
from transforms.core import parquet
from transforms.core import paths
from transforms.core import splits
from transforms.core.labels import LabelMap
from transforms.core.labels import normalized_map
from transforms.core.store_errors import error_text

# Footers are read this many at a time (a remote open is a round trip).
FOOTER_READERS = 16


def _footer(path: str, access: filesystem.FileAccess):
  """(Arrow schema, rows of each row group) of one file."""
  import pyarrow.parquet as pq
  try:
    with (access.open(path) if paths.is_remote(path) else open(path, 'rb')) as stream:
      found = pq.ParquetFile(stream)
      meta = found.metadata
      return found.schema_arrow, tuple(meta.row_group(i).num_rows
                                       for i in range(meta.num_row_groups))
  except filesystem.read_errors() as error:
    raise UsageError(f'cannot read manifest {path}: {type(error).__name__}: {error_text(error)}')
  except Exception as error:  # pyarrow's ArrowInvalid: not a Parquet file
    raise UsageError(f'manifest {path} is not a readable Parquet file: '
                     f'{type(error).__name__}: {error}')


def _footers(files: tuple) -> list:
  access = filesystem.FileAccess()
  if len(files) == 1:
    return [_footer(files[0][0], access)]
  with concurrent.futures.ThreadPoolExecutor(min(FOOTER_READERS, len(files))) as pool:
    return list(pool.map(lambda file: _footer(file[0], access), files))


def _column_type(schema, name: str, path: str, flag: str):
  if name not in schema.names:
    raise UsageError(f'manifest {path} has no column {name} (its columns: '
                     f'{", ".join(schema.names) or "none"}){flag}')
  return schema.field(name).type


def _columns(schema) -> str:
  """'image: binary, label: int64' (pyarrow's to_string() is a line a column)."""
  return ', '.join(f'{field.name}: {field.type}' for field in schema)


def _class_names(files: tuple, footers: list, label: str, path: str) -> tuple:
  """The ClassLabel names of the label column, the same in every file: a
  file's ids mean its own names (datasets' int2str), so one pattern of files
  naming other classes (or none) would give an id two classes."""
  names = parquet.class_label_names(footers[0][0].metadata, label)
  for (other, _), (schema, _) in zip(files[1:], footers[1:]):
    found = parquet.class_label_names(schema.metadata, label)
    if found != names:
      first = next((i for i, (a, b) in enumerate(zip(names, found)) if a != b),
                   min(len(names), len(found)))
      raise UsageError(f'manifest {other}: the ClassLabel names of column {label} differ '
                       f'from those of {files[0][0]}: id {first} is '
                       f'{_name_at(found, first)} there, {_name_at(names, first)} in '
                       f'{files[0][0]}: the files of --manifest {path} need the same names')
  return names


def _name_at(names: tuple, index: int) -> str:
  return repr(names[index]) if index < len(names) else 'no name'


def parquet_config(path: str, files: tuple, role: str, split: splits.SplitConfig,
                   extras: tuple, columns: dict, multi_label: bool,
                   label_normalize: frozenset) -> manifest.ManifestConfig:
  """A Parquet --manifest (a file or a pattern; `files`: (path, size) of
  each, sorted) checked on the launcher -> its ManifestConfig, with the
  layout the pipeline reads it by (config.layout)."""
  if role != manifest.ROLE_COMBINED:
    raise UsageError(f'manifest {path} is Parquet: it holds images and labels together '
                     f'(--label_manifest takes a CSV, TSV, JSONL or txt manifest of both)')
  if multi_label:
    raise UsageError(f'--multi_label reads a label cell of several labels: not a Parquet '
                     f'manifest ({path})')
  footers = _footers(files)
  schema = footers[0][0]
  for (other, _), (found, _) in zip(files[1:], footers[1:]):
    if not found.remove_metadata().equals(schema.remove_metadata()):
      raise UsageError(f'manifest {other} has the columns {_columns(found)}, unlike '
                       f'{files[0][0]} ({_columns(schema)}): the files of --manifest '
                       f'{path} need the same columns')
  config = manifest.ManifestConfig(
      path=path, fmt=manifest.PARQUET, header=tuple(schema.names), role=role, split=split,
      extra_features=extras, columns=tuple(sorted(columns.items())),
      label_normalize=label_normalize, files=files)
  image = config.column('image')
  kind = parquet.image_kind(_column_type(schema, image, path, ' (set --image_column)'))
  if kind is None:
    raise UsageError(f'manifest {path}: column {image} is {schema.field(image).type}, not '
                     f'a path or URL (string), image bytes (binary) or a Hugging Face '
                     f'Image ({{bytes, path}})')
  label = config.column('label')
  label_type = _column_type(schema, label, path, ' (set --label_column)')
  problem = parquet.label_type_problem(label_type)
  if problem:
    raise UsageError(f'manifest {path}: column {label} is {problem}')
  for logical in ('key', 'split'):
    if logical in columns:
      _column_type(schema, columns[logical], path, '')
    name = config.column(logical)
    problem = name in schema.names and parquet.text_type_problem(schema.field(name).type)
    if problem:
      raise UsageError(f'manifest {path}: column {name}, the {logical} column, is {problem}')
  for feature in extras:
    problem = parquet.extra_type_problem(
        _column_type(schema, feature.name, path, ' (named by --extra_features)'), feature.kind)
    if problem:
      raise UsageError(f'manifest {path}: column {feature.name} is {problem}')
  names = _class_names(files, footers, label, path)
  short = paths.short_names([file for file, _ in files], path)
  file_splits = path_splits(
      files, short, path, split,
      config.column('split') if config.column('split') in schema.names else None,
      parquet.hub_split)
  parquet_files, position = [], 0
  for (file, size), (_, groups), found, name in zip(files, footers, file_splits, short):
    parquet_files.append(parquet.ParquetFile(file, size, groups, found, position, name))
    position += sum(groups)
  layout = parquet.ParquetLayout(
      files=tuple(parquet_files), image_kind=kind,
      light_columns=parquet.light_columns(config, kind, tuple(schema.names)), class_names=names)
  return dataclasses.replace(config, layout=layout)


def has_split(config: manifest.ManifestConfig) -> bool:
  """Rows may name their split: a split column, or a path that names one."""
  return config.column('split') in config.header or any(
      file.split for file in config.layout.files)


def label_map(config: manifest.ManifestConfig, given: Optional[LabelMap],
              given_path: Optional[str], modes: frozenset) -> Optional[LabelMap]:
  """The label map of a Parquet manifest: its ClassLabel names in their
  order (ids as in the file); with --label_map too, the names must agree
  (a UsageError names the first difference). None: no ClassLabel names."""
  names = config.layout.class_names
  if not names:
    return given
  try:
    if any('\n' in name or '\r' in name for name in names):
      raise ValueError('a name holds a line break, which label_map.txt cannot')
    # Read as a --label_map file is: names stripped (a ClassLabel ' dog' had
    # rejected every dog as label/unknown_label, its row's label being
    # stripped), none blank or given twice.
    found = normalized_map(LabelMap.from_text(''.join(f'{name}\n' for name in names)), modes)
  except ValueError as error:
    raise UsageError(f'manifest {config.path}: the ClassLabel names of column '
                     f'{config.column("label")} are unusable: {error}')
  if given is None or given.names == found.names:
    return found
  first = next((i for i, (a, b) in enumerate(zip(given.names, found.names)) if a != b),
               min(len(given.names), len(found.names)))
  theirs = repr(found.names[first]) if first < len(found.names) else 'nothing'
  ours = repr(given.names[first]) if first < len(given.names) else 'nothing'
  raise UsageError(f'--label_map {given_path} does not match the ClassLabel names of column '
                   f'{config.column("label")} in {config.layout.files[0].path}: line '
                   f'{first + 1} is {ours} in --label_map, {theirs} in the file')
