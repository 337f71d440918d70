"""Preparing the output folder: refuse a non-empty one, or clear our own files."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil

from apache_beam.io.filesystems import FileSystems

from pipeline.launch import UsageError
from transforms import dataset_info
from transforms.spec import DATASET_INFO
from transforms.spec import LABEL_MAP
from transforms.spec import REJECTED_FILE
from transforms.spec import VALIDATION_REPORT

# Files a previous run (finished or killed) of convert may have left.
OUR_PATTERNS = (DATASET_INFO, DATASET_INFO + '.tmp', LABEL_MAP, LABEL_MAP + '.tmp',
                'rejected*.jsonl', VALIDATION_REPORT, VALIDATION_REPORT + '.tmp',
                '*-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].tfrecord',
                '*-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].tfrecord.gz',
                'beam-temp-*')


def _is_remote(path: str) -> bool:
  return '://' in path


def list_entries(output_dir: str) -> list:
  """Names directly inside output_dir (for a remote bucket: top-level names)."""
  if not _is_remote(output_dir):
    if not os.path.exists(output_dir):
      return []
    if not os.path.isdir(output_dir):
      raise UsageError(f'--output_dir {output_dir} exists and is not a folder')
    return sorted(os.listdir(output_dir))
  prefix = output_dir.rstrip('/') + '/'
  matched = FileSystems.match([prefix + '**'])[0].metadata_list
  return sorted({m.path[len(prefix):].split('/', 1)[0] for m in matched})


def _previous_shards(output_dir: str) -> set:
  try:
    info = json.loads(dataset_info.read_text(dataset_info.join(output_dir, DATASET_INFO)))
    return {s for split in info.get('splits', {}).values() for s in split.get('shards', [])}
  except Exception:  # no previous (or a damaged) dataset_info: patterns only
    return set()


def ours(name: str, previous_shards: set) -> bool:
  return name in previous_shards or any(fnmatch.fnmatchcase(name, p) for p in OUR_PATTERNS)


def _delete(output_dir: str, name: str) -> None:
  path = dataset_info.join(output_dir, name)
  if not _is_remote(output_dir) and os.path.isdir(path):
    shutil.rmtree(path)
  elif _is_remote(output_dir) and name.startswith('beam-temp-'):
    FileSystems.delete([path + '/'])
  else:
    FileSystems.delete([path])


def prepare_output_dir(output_dir: str, overwrite: bool) -> None:
  """Creates output_dir, or clears a previous dataset from it with --overwrite.

  dataset_info.json goes first, so an interrupted clean-up never leaves a
  folder that looks complete. Files that are not ours are left alone.
  """
  entries = list_entries(output_dir)
  if entries and not overwrite:
    raise UsageError(f'--output_dir {output_dir} is not empty ({len(entries)} entries, '
                     f'e.g. {entries[0]!r}); pass --overwrite to replace a previous dataset')
  if entries:
    previous = _previous_shards(output_dir)
    doomed = [n for n in entries if ours(n, previous)]
    doomed.sort(key=lambda n: n != DATASET_INFO)
    for name in doomed:
      _delete(output_dir, name)
  if not _is_remote(output_dir):
    os.makedirs(output_dir, exist_ok=True)
