"""Which split a row goes to: a `split` column among the allowed names, or a
salted hash of the key (--split)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Optional
import unicodedata

from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import RowError
from transforms.core.spec import SHARD_SUFFIX
from transforms.core.spec import SOURCES_SUFFIX

SPLIT_NAME = re.compile(r'^[A-Za-z0-9_]+$')
DEFAULT_SPLIT = 'train'
DEFAULT_SPLIT_NAMES = ('train', 'validation', 'test')


def check_split_name(name: str, flag: str, error: type) -> None:
  """`error` naming `name` unless it is a split name: it names the split's
  shard files (<split>-00000-of-00001.tfrecord), so no '-', '.', '/' or space."""
  if not SPLIT_NAME.match(name):
    raise error(f'{flag}: {name!r} is not a split name (letters, digits and _ only)')


@dataclasses.dataclass(frozen=True)
class SplitConfig:
  """Split from a `split` column, or by salted hash of the key."""
  fractions: tuple = ()  # ((name, fraction), ...); empty: use the column
  seed: int = 0
  names: tuple = DEFAULT_SPLIT_NAMES  # allowed values of a split column

  def assign(self, key: str, column_value: Optional[str]) -> str:
    if self.fractions:
      return hash_split(key, self.fractions, self.seed)
    value = DEFAULT_SPLIT if column_value is None else column_value.strip()
    if not value:  # --split_names cannot help: a name is never empty
      raise RowError(STAGE_MANIFEST, 'unknown_split',
                     f'the split cell is empty; give one of {", ".join(self.names)}')
    if value not in self.names:
      raise RowError(
          STAGE_MANIFEST, 'unknown_split',
          f'split {value!r} is not one of {", ".join(self.names)}'
          f'{split_hint(value, self.names) or " (set --split_names)"}')
    return value

  def split_names(self) -> tuple:
    if self.fractions:
      return tuple(name for name, _ in self.fractions)
    return self.names


def split_hint(value: str, names: tuple) -> str:
  """What makes an unknown split cell no name, for its rejection: its
  non-ASCII characters ('tr<U+0430>in', a Cyrillic 'a', printed as 'train':
  the reason read "split 'train' is not one of train, ..."), or the allowed
  name it is a case variant or a split keyword of ('TRAIN', 'val'). '' if none."""
  foreign = [c for c in dict.fromkeys(value) if not c.isascii()]
  if foreign:
    shown = ', '.join(f'U+{ord(c):04X} {unicodedata.name(c, "")}'.rstrip() for c in foreign[:3])
    return (f': it holds {shown}{", ..." if len(foreign) > 3 else ""} (a split name is '
            f'ASCII letters, digits and _)')
  near = [name for name in names if name.casefold() == value.casefold()] or [
      name for name in names if value.lower() in _SPLIT_KEYWORDS.get(name, ())]
  return (f': did you mean {near[0]!r}? (names are matched exactly; or set --split_names)'
          if near else '')


def hash_split(key: str, fractions: tuple, seed: int) -> str:
  """Deterministic split: the salted SHA-256 of the key as a point in [0, 1)."""
  digest = hashlib.sha256(f'{seed}\x00{key}'.encode()).digest()
  point = int.from_bytes(digest[:8], 'big') / 2.0**64
  total = sum(fraction for _, fraction in fractions)
  cumulative = 0.0
  for name, fraction in fractions:
    cumulative += fraction / total
    if point < cumulative:
      return name
  return fractions[-1][0]


@dataclasses.dataclass(frozen=True)
class HashSplit:
  """The --split a dataset was converted with, as dataset_info.json's config
  records it: the fractions, the seed and what was hashed (key or content)."""
  fractions: tuple = ()  # ((name, fraction), ...); empty: splits not by hash
  seed: int = 0
  by: str = 'key'

  @classmethod
  def from_config(cls, config: Optional[dict]) -> HashSplit:
    config = config or {}
    fractions = tuple((name, fraction) for name, fraction in config.get('split') or ())
    return cls(fractions, config.get('seed', 0), config.get('split_by') or 'key')

  def describe(self) -> str:
    return (f'--split {",".join(f"{name}={fraction:g}" for name, fraction in self.fractions)} '
            f'--seed {self.seed}' + (' --split_by content' if self.by == 'content' else ''))


# Hugging Face datasets' split keywords (datasets.data_files.SPLIT_KEYWORDS)
# and the characters around a keyword in a name (its NON_WORDS_CHARS), for
# the files of a manifest pattern (Parquet files in none of the Hub's layouts,
# WebDataset tars): `load_dataset` reads a folder's train.parquet and
# test.parquet (train-000.tar and test-000.tar) as two splits; read as one,
# every test row would be trained on.
_SPLIT_KEYWORDS = {'train': ('train', 'training'),
                   'validation': ('validation', 'valid', 'dev', 'val'),
                   'test': ('test', 'testing', 'eval', 'evaluation')}
_AROUND = '[-._ 0-9]'
# A folder named by a keyword, alone or among words (`train/`, `2024_val/`);
# a file whose name holds one before a non-word (`train.parquet`, `my_test-1.parquet`).
_IN_FOLDER = {split: re.compile(rf'(?:^|.*{_AROUND})(?:{"|".join(words)})(?:{_AROUND}.*)?$')
              for split, words in _SPLIT_KEYWORDS.items()}
_IN_FILE = {split: re.compile(rf'(?:^|.*{_AROUND})(?:{"|".join(words)}){_AROUND}.*$')
            for split, words in _SPLIT_KEYWORDS.items()}


def keyword_splits(names) -> tuple:
  """The split each file's name (its path below the manifest pattern's folder,
  paths.short_names) gives as `datasets` reads a folder: a folder named by a
  split keyword if any file's folders have one, else a keyword in the file's
  name; None: no keyword. ValueError naming a file whose name gives two."""
  names = [name.replace('\\', '/') for name in names]
  by_folder = [_matched(_IN_FOLDER, name.split('/')[:-1]) for name in names]
  found = by_folder if any(by_folder) else [
      _matched(_IN_FILE, name.split('/')[-1:]) for name in names]
  for name, named in zip(names, found):
    if len(named) > 1:
      raise ValueError(f'{name} names the splits {" and ".join(sorted(named))}')
  return tuple(next(iter(named), None) for named in found)


def _matched(patterns: dict, parts: list) -> set:
  return {split for split, pattern in patterns.items() for part in parts if pattern.match(part)}


_SHARD_NAME = re.compile(r'(.*)-([0-9]{5,})-of-([0-9]{5,})' + re.escape(SHARD_SUFFIX)
                         + r'(\.gz)?')
WRONG_SHARD_NUMBER = 'wrong_shard_number'


def listed_split_problems(info: dict) -> list:
  """[(file, detail)] of each shard and sidecar dataset_info.json lists under a
  split its name does not say. Convert names them SPLIT-00000-of-00003.tfrecord
  and SPLIT.sources.jsonl.gz, and a reader asking for a split gets the files
  listed under it: a split renamed in dataset_info.json, or two splits' lists
  swapped with their counts, passed every other check (exit 0)."""
  problems = []
  for split, declared in info['splits'].items():
    for shard in declared['shards']:
      named = _SHARD_NAME.fullmatch(shard)
      if named is None or named.group(1) != split:
        says = f'split {named.group(1)!r}' if named else 'no split'
        problems.append((shard, f'listed under split {split!r} in dataset_info.json, but '
                         f'its name says {says} (convert names each shard '
                         f'{split}-NNNNN-of-NNNNN{SHARD_SUFFIX})'))
    sources = declared.get('sources')
    if sources is not None and sources != split + SOURCES_SUFFIX:
      problems.append((sources, f'the sidecar of split {split!r} in dataset_info.json, but '
                       f'convert names it {split + SOURCES_SUFFIX}'))
  return problems


def shard_number_problems(info: dict) -> list:
  """[(file, detail)] of each shard listed under a split whose numbers are
  not one of the N that convert names a split's N shards (SPLIT-00000-of-0000N
  to SPLIT-(N-1)-of-0000N). Readers that go by the names (-of-N: how many
  shards to expect) would look for shards that are not there, or miss some;
  every other check passed them. Names of no split's form are wrong_split's."""
  problems = []
  for split, declared in info['splits'].items():
    count = len(declared['shards'])
    for shard in declared['shards']:
      named = _SHARD_NAME.fullmatch(shard)
      if named and (int(named.group(3)) != count or int(named.group(2)) >= count):
        problems.append((shard, f'its name says shard {int(named.group(2))} of '
                         f'{int(named.group(3))}, but dataset_info.json lists {count} '
                         f'shard(s) under split {split!r} (convert names them '
                         f'{split}-00000-of-{count:05d} to {split}-{count - 1:05d}-of-{count:05d})'))
  return problems
