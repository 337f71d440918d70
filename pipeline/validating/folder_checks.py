"""The dataset folder against its dataset_info.json, on the launcher before
validate's job: the shards listed, missing, not regular files or not listed,
what their sizes add up to, and the files beside them (rejected.jsonl's row
accounting, the label maps)."""

from __future__ import annotations

import fnmatch
import os

from pipeline.runs.output_dir import list_entries
from transforms import filesystem
from transforms.core import dataset_checks
from transforms.core import file_kinds
from transforms.core import paths
from transforms.core import side_files
from transforms.core import splits
from transforms.core import validation
from transforms.core.spec import INDEX_SUFFIX
from transforms.core.spec import LABEL_MAP
from transforms.core.spec import LABEL_MAP_PBTXT
from transforms.core.spec import REJECTED_FILE
from transforms.core.spec import SHARD_NUMBERS_GLOBS
from transforms.core.spec import SHARD_SUFFIX
from transforms.core.spec import shard_suffix

SHARD_PATTERNS = tuple(f'*{numbers}{SHARD_SUFFIX}*' for numbers in SHARD_NUMBERS_GLOBS)


def shard_listing(input_dir: str, info: dict, files=None) -> tuple:
  """-> ([(split, shard) to read], [Problem] for missing and unlisted shards)."""
  present = set(list_entries(input_dir, files))
  listed = [(split, shard) for split, declared in info['splits'].items()
            for shard in declared['shards']]
  listed_names = {shard for _, shard in listed}
  problems = [validation.Problem('missing_shard', shard, -1,
                                 'listed in dataset_info.json but not on disk')
              for _, shard in listed if shard not in present]
  if not paths.is_remote(input_dir):  # a FIFO would hang its reader, a device never end
    kinds = {shard: file_kinds.not_regular(os.path.join(input_dir, shard))
             for shard in listed_names & present}
    problems += [validation.Problem('missing_shard', shard, -1,
                                    f'listed in dataset_info.json, but on disk a {kind}, '
                                    f'not a regular file: not read')
                 for shard, kind in sorted(kinds.items()) if kind]
    present -= {shard for shard, kind in kinds.items() if kind}
  problems += [validation.Problem('extra_shard', name, -1,
                                  'a shard file on disk that dataset_info.json does not list')
               for name in sorted(present - listed_names)
               if any(fnmatch.fnmatchcase(name, p) for p in SHARD_PATTERNS)
               and not name.endswith(INDEX_SUFFIX)]  # --write_index files
  problems += [validation.Problem('extra_shard', name, -1, detail)
               for name, detail in _globbed_strays(info, sorted(present - listed_names))]
  problems += [validation.Problem(dataset_checks.WRONG_SPLIT, name, -1, detail)
               for name, detail in splits.listed_split_problems(info)]
  problems += [validation.Problem(splits.WRONG_SHARD_NUMBER, name, -1, detail)
               for name, detail in splits.shard_number_problems(info)]
  return [(split, shard) for split, shard in listed if shard in present], problems


def _globbed_strays(info: dict, unlisted: list) -> list:
  """(name, detail) of each unlisted file that is no numbered shard but that
  a split's glob, `SPLIT-*.tfrecord` (`.gz` with gzip) as docs/reading.md
  gives it, matches: `train-00000-of-00004 (1).tfrecord`, a second download;
  `train-old.tfrecord`. tf.data reads its records with the split's, and
  validate said OK."""
  suffix = shard_suffix(info.get('compression'))
  strays = []
  for name in unlisted:
    if any(fnmatch.fnmatchcase(name, p) for p in SHARD_PATTERNS):
      continue  # a numbered shard: reported above
    for split in info['splits']:
      if name.startswith(f'{split}-') and name.endswith(suffix):
        strays.append((name, f"not a shard name convert writes, but the glob "
                             f"'{split}-*{suffix}' (docs/reading.md) matches it, and "
                             f"dataset_info.json does not list it: a reader globbing the "
                             f"split's shards reads it too"))
        break
  return strays


def split_bytes(input_dir: str, info: dict, shards: list, files) -> dict:
  """{split: (shards, bytes)} of the splits whose listed shards are all among
  `shards` (those to read: on disk, regular files): what their sizes add up to."""
  read = {}
  for split, shard in shards:
    read.setdefault(split, []).append(filesystem.join(input_dir, shard))
  whole = {split: read.get(split, []) for split, declared in info['splits'].items()
           if len(read.get(split, [])) == len(declared['shards'])}
  try:
    if paths.is_remote(input_dir):
      sizes = files.sizes([name for names in whole.values() for name in names])
    else:
      sizes = {name: os.path.getsize(name) for names in whole.values() for name in names}
  except filesystem.read_errors():  # gone since it was listed: reading it will say so
    return {}
  return {split: (len(names), sum(sizes[name] for name in names))
          for split, names in whole.items() if all(name in sizes for name in names)}


def file_problems(input_dir: str, info: dict, files) -> list:
  """[Problem] of the files beside the shards against dataset_info.json: the
  row accounting with rejected.jsonl (read line by line), label_map.txt and
  (--schema detection) label_map.pbtxt; the numbers of dataset_info.json that
  follow from its others (dataset_checks.declared_number_problems); and its
  compression itself (each shard's, its index files and sidecars:
  check_side_files, in the job)."""
  rejected_path = filesystem.join(input_dir, REJECTED_FILE)
  problems = (side_files.declared_compression_problems(info)
              + dataset_checks.declared_number_problems(info))
  try:
    if files.exists(rejected_path):
      with files.open(rejected_path) as stream:
        rejected = dataset_checks.count_rejected(dataset_checks.capped_lines(stream), info)
    else:  # an object store gets none when nothing was rejected
      rejected = dataset_checks.RejectedLines(missing=True)
  except filesystem.read_errors() as error:
    rejected = None
    problems.append(validation.Problem(
        dataset_checks.ROW_ACCOUNTING, REJECTED_FILE, -1,
        f'cannot be read: {type(error).__name__}: {error}'))
  if rejected is not None:
    problems += dataset_checks.row_accounting_problems(info, rejected)
  checks = [(LABEL_MAP, dataset_checks.label_map_problems)]
  if info.get('schema') == 'detection':
    checks.append((LABEL_MAP_PBTXT, dataset_checks.label_map_pbtxt_problems))
  for name, check in checks:
    path = filesystem.join(input_dir, name)
    try:
      text = dataset_checks.side_text(files, path) if files.exists(path) else None
    except (UnicodeDecodeError, ValueError, *filesystem.read_errors()) as error:
      problems.append(validation.Problem(dataset_checks.LABEL_MAP_MISMATCH, name, -1,
                                         f'cannot be read: {type(error).__name__}: {error}'))
      continue
    problems += check(info, text)
  return problems
