"""The files of a --manifest: the file itself, or each file a pattern
matches, listed on the launcher (preflight.py, preflight_tars.py); and the
check every file a flag names passes before the launcher reads it
(require_file)."""

from __future__ import annotations

from collections.abc import Callable
import os
from typing import Optional

from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import file_kinds
from transforms.core import paths
from transforms.core import splits
from transforms.core.store_errors import error_text


def manifest_files(path: str) -> tuple:
  """(path, size in bytes) of each file of a --manifest, sorted by path: the
  file itself, or each file a pattern (*, ?, [...]) matches on any Beam
  filesystem. Lists, reads nothing."""
  try:
    if not is_pattern(path):
      require_file('manifest', path)
      return ((path, filesystem.FileAccess().size(path)),)
    files = tuple((p, size) for p, size in _match(path)
                  if paths.is_remote(p) or os.path.isfile(p))
  except filesystem.read_errors() as error:
    raise UsageError(f'cannot read manifest {path}: {type(error).__name__}: {error_text(error)}')
  if not files:
    raise UsageError(f'manifest {path} matches no file')
  return files


def _match(pattern: str) -> list:
  """FileAccess.match, and a relative local pattern matched from `./`: Beam's
  local match lists the folder before the first wildcard, which is '' for
  `*.csv` and `sub` for `sub*/*.csv`, and found no file in either."""
  files = filesystem.FileAccess()
  if paths.is_remote(pattern) or os.path.isabs(pattern) or pattern.startswith('./'):
    return files.match(pattern)
  return [(p[2:] if p.startswith('./') else p, size) for p, size in files.match('./' + pattern)]


def require_file(named: str, path: str) -> None:
  """UsageError unless the local `path` is a regular file (file_kinds.require_file)."""
  file_kinds.require_file(named, path, UsageError)


def is_pattern(path: str) -> bool:
  """Glob characters, and not the name of a local file that has them."""
  return paths.has_glob(path) and (paths.is_remote(path) or not os.path.isfile(path))


def path_splits(files: tuple, names: tuple, path: str, split: splits.SplitConfig,
                split_column: Optional[str] = None,
                layout_split: Callable[[str], Optional[str]] = lambda file: None) -> tuple:
  """Each of a manifest's `files` ((path, size)) split from its path, None
  where it names none: `layout_split`'s (the Hub's Parquet layouts), else a
  split keyword in its name below the pattern's folder (`names`,
  paths.short_names), as `datasets` reads a folder (splits.keyword_splits).

  --split fractions split the rows of paths naming one split alone (then
  all None); with the split column `split_column`, or paths naming two or
  more splits, they are a UsageError; so is a split not in --split_names.
  """
  try:
    keywords = splits.keyword_splits(names)
  except ValueError as error:
    raise UsageError(f'manifest {path}: {error} (datasets reads such a file into both): '
                     f'rename it, or give each row its split in a column')
  found = [layout_split(file) or keyword for (file, _), keyword in zip(files, keywords)]
  if split.fractions and (split_column or len(set(filter(None, found))) > 1):
    where = f'column {split_column}' if split_column else 'the paths of ' + ', '.join(
        f'{file} ({named})' for (file, _), named in zip(files, found) if named)[:300]
    raise UsageError(f'manifest {path} gives each row its split ({where}): drop --split')
  if split.fractions:
    return (None,) * len(files)
  for (file, _), named in zip(files, found):
    if named is not None and named not in split.names:
      raise UsageError(f'manifest {file} names the split {named!r} in its path, not one of '
                       f'{", ".join(split.names)} (set --split_names)')
  return tuple(found)


def refuse_path_splits(files: tuple, path: str, fmt: str, split: splits.SplitConfig,
                       split_column: Optional[str]) -> None:
  """A CSV, TSV or txt pattern takes no split from its files' names: when the
  names say two or more splits (train.csv and test.csv, as `datasets` would
  read them) and neither a split column (`split_column`: none in the header)
  nor --split fractions give the rows theirs, every row would go to train,
  the test rows with them: a UsageError instead."""
  if len(files) < 2 or split.fractions or split_column:
    return
  try:
    named = splits.keyword_splits(paths.short_names([file for file, _ in files], path))
  except ValueError:  # a name saying two splits (train_test.csv): no split by name to miss
    return
  found = sorted(set(filter(None, named)))
  if len(found) > 1:
    shown = ', '.join(f'{file} ({split_name})' for (file, _), split_name in zip(files, named)
                      if split_name)[:300]
    raise UsageError(
        f'manifest {path}: its files name splits ({shown}), which a {fmt} manifest does '
        f'not take from file names: every row would go to train. Give each row its split '
        f'in a split column, or convert each file on its own (--split test=1 puts all of '
        f"a file's rows in test)")
