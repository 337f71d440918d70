"""Preparing the output folder: refuse a non-empty folder or clear our own
files (after the run lock, pipeline/runs/run_lock.py, is taken); and taking back
what a run wrote when it fails or publishes nothing (NothingPublished)."""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import fnmatch
import json
import os
import shutil
import sys
from typing import Optional

from pipeline.errors import UsageError
from pipeline.runs import interrupts
from pipeline.runs import staged_dir
from pipeline.runs.lock_stores import LOCK_PREFIX
from transforms import filesystem
from transforms.core import info_shape
from transforms.core import not_answering
from transforms.core import paths
from transforms.core.dataset_info import MAX_INFO_BYTES
from transforms.core.dataset_info import InfoError
from transforms.core.spec import COMPRESSIONS
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import INDEX_SUFFIX
from transforms.core.spec import LABEL_MAP
from transforms.core.spec import LABEL_MAP_PBTXT
from transforms.core.spec import REJECTED_FILE
from transforms.core.spec import SHARD_NUMBERS_GLOBS
from transforms.core.spec import SOURCES_SUFFIX
from transforms.core.spec import TFDS_FEATURES_FILE
from transforms.core.spec import VALIDATION_REPORT
from transforms.core.spec import shard_suffix

# Files convert writes besides shards (and the temp name an earlier version
# wrote each under).
_SIDE_FILES = (DATASET_INFO, LABEL_MAP, LABEL_MAP_PBTXT, VALIDATION_REPORT, REJECTED_FILE)
OUR_FILES = tuple(name + suffix for name in _SIDE_FILES for suffix in ('', '.tmp'))


def our_patterns(split_names: tuple) -> tuple:
  """Names a finished or killed run with these splits may have left."""
  patterns = ['beam-temp-*']  # Beam's own temp folders, never a user's
  patterns += [f'{name}.*.tmp' for name in _SIDE_FILES]  # a killed write's (paths.temp_name)
  for split in split_names:
    for numbers in SHARD_NUMBERS_GLOBS:
      patterns += [f'{split}{numbers}{shard_suffix(compression)}'
                   for compression in COMPRESSIONS]
      patterns.append(f'{split}{numbers}{shard_suffix("none")}{INDEX_SUFFIX}')
    patterns.append(f'{split}{SOURCES_SUFFIX}')
  return tuple(patterns)


def _names(output_dir: str, files: Optional[filesystem.FileAccess] = None) -> set:
  """Names directly inside output_dir (for a remote bucket: top-level names)."""
  if not paths.is_remote(output_dir):
    if not os.path.exists(output_dir):
      return set()
    if not os.path.isdir(output_dir):
      raise UsageError(f'--output_dir {output_dir} exists and is not a folder')
    return set(os.listdir(output_dir))
  prefix = output_dir.rstrip('/') + '/'
  return {path[len(prefix):].split('/', 1)[0]
          for path, _ in (files or filesystem.FileAccess()).list(prefix)}


def list_entries(output_dir: str, files: Optional[filesystem.FileAccess] = None) -> list:
  """Names directly inside output_dir (for a remote bucket: top-level names),
  run locks left out."""
  return sorted(n for n in _names(output_dir, files) if not n.startswith(LOCK_PREFIX))


def run_traces(folder: str, files: Optional[filesystem.FileAccess] = None) -> list:
  """The names in `folder` that a convert run writes, or a killed one leaves
  (its lock, shards of any split, Beam's temp folders, label map,
  rejected.jsonl): [] for a folder no run wrote to. validate's report is no
  trace: it is not convert's."""
  return sorted(n for n in _names(folder, files)
                if n.startswith(LOCK_PREFIX) or (
                    ours(n, set(), ('*',)) and not n.startswith(VALIDATION_REPORT)))


def _previous_shards(output_dir: str, files: filesystem.FileAccess) -> set:
  try:
    data = files.read_at_most(filesystem.join(output_dir, DATASET_INFO), MAX_INFO_BYTES)
    if len(data) > MAX_INFO_BYTES:  # no dataset_info.json convert writes: patterns only
      return set()
    info = json.loads(data)
    return {name for split in info.get('splits', {}).values()
            for s in split.get('shards', []) for name in (s, s + INDEX_SUFFIX)} | {
                split['sources'] for split in info.get('splits', {}).values()
                if split.get('sources')}
  except Exception:  # no previous (or a damaged) dataset_info: patterns only
    return set()


def ours(name: str, previous_shards: set, split_names: tuple) -> bool:
  return (name in OUR_FILES or name in previous_shards or
          any(fnmatch.fnmatchcase(name, p) for p in our_patterns(split_names)))


def _delete(output_dir: str, name: str, files: filesystem.FileAccess) -> None:
  path = filesystem.join(output_dir, name)
  if not paths.is_remote(output_dir) and os.path.isdir(path):
    shutil.rmtree(path)
  elif paths.is_remote(output_dir) and name.startswith('beam-temp-'):
    files.delete([path + '/'])
  else:
    files.delete([path])


def _clear(output_dir: str, split_names: tuple, files: filesystem.FileAccess,
           keep: tuple = ()) -> None:
  """Deletes our files from output_dir (see ours), dataset_info.json first, so
  an interrupted clean-up never leaves a folder that looks complete."""
  entries = list_entries(output_dir, files)
  previous = _previous_shards(output_dir, files) if DATASET_INFO in entries else set()
  doomed = [n for n in entries if ours(n, previous, split_names) and n not in keep]
  doomed.sort(key=lambda n: n != DATASET_INFO)
  for name in doomed:
    _delete(output_dir, name, files)


def _info_of_ours(output_dir: str, files: filesystem.FileAccess) -> bool:
  """Whether output_dir's dataset_info.json is a JSON object holding every
  field convert's always has (info_shape.REQUIRED): another tool's (TFDS's,
  a user's own) is not ours to remove."""
  try:
    data = files.read_at_most(filesystem.join(output_dir, DATASET_INFO), MAX_INFO_BYTES)
    info = json.loads(data)
  except Exception:  # unreadable, not JSON: nothing shows convert wrote it
    return False
  return isinstance(info, dict) and all(name in info for name in info_shape.REQUIRED)


def not_ours(output_dir: str, entries: list,
             files: Optional[filesystem.FileAccess] = None) -> list:
  """The names in output_dir that --overwrite would remove though nothing
  there shows a run of ours wrote them: our side files' names (label_map.txt,
  dataset_info.json, ...), which a user's own folder holds as well (a label
  map beside the images, another tool's dataset), with neither a
  dataset_info.json of ours nor a shard, sidecar, temp file or Beam temp
  folder beside them. [] when there is no such name, or such proof."""
  side = [name for name in entries if name in _SIDE_FILES]
  if not side or any(ours(name, set(), ('*',)) and name not in _SIDE_FILES
                     for name in entries):
    return []
  if DATASET_INFO in side and _info_of_ours(output_dir, files or filesystem.FileAccess()):
    return []
  return side


def _no_dataset(entries: list) -> bool:
  return DATASET_INFO not in entries and all(n in (REJECTED_FILE, VALIDATION_REPORT)
                                             for n in entries)


def prepare_output_dir(output_dir: str, overwrite: bool, split_names: tuple = (),
                       files: Optional[filesystem.FileAccess] = None) -> None:
  """Creates output_dir, or clears a previous dataset from it with --overwrite.

  Only the previous dataset's files (as its dataset_info.json lists them) and
  what a killed run left go: shards of `split_names` (this run's, and those a
  taken-over lock names), Beam's temp folders; an export linking to its
  shards (linked_exports), and the folders killed exports left (staged_dir:
  like any entry, one makes output_dir not empty). Other files are left alone. A
  folder holding only what a run that published nothing leaves (rejected.jsonl
  when every row was rejected, and validate's report on it) holds no dataset:
  it is replaced without --overwrite.
  """
  files = files or filesystem.FileAccess()
  entries = list_entries(output_dir, files)
  if entries and not overwrite and not _no_dataset(entries):
    raise UsageError(f'--output_dir {output_dir} is not empty ({len(entries)} entries, '
                     f'e.g. {entries[0]!r}); pass --overwrite to replace a previous dataset')
  foreign = [] if _no_dataset(entries) else not_ours(output_dir, entries, files)
  if foreign:
    # --overwrite into a folder of the user's own (the manifest's, a label
    # map's) deleted their label_map.txt, dataset_info.json or rejected.jsonl.
    raise UsageError(f'--output_dir {output_dir} holds {", ".join(foreign)} but no dataset '
                     f'convert wrote (no {DATASET_INFO} of its own, no shard): --overwrite '
                     f'replaces only a previous dataset; give a new or empty --output_dir')
  if entries:
    exports = [] if paths.is_remote(output_dir) else linked_exports(output_dir)
    _clear(output_dir, split_names, files)
    for name in exports:
      shutil.rmtree(os.path.join(output_dir, name))
      print(f'note: removed {os.path.join(output_dir, name)}, an export whose shards are '
            f"links to the replaced dataset's; export again", file=sys.stderr)
    if not paths.is_remote(output_dir):  # export writes local folders only
      # What an export into OUT/NAME killed while writing left (not one of
      # linked_exports, even with its features.json): it stayed through every
      # --overwrite. One an export is still writing (its flock) is left to it.
      for path in staged_dir.remove_unheld(staged_dir.leftovers_in(output_dir)):
        print(staged_dir.REMOVED_NOTE.format(path=path), file=sys.stderr)
  if not paths.is_remote(output_dir):
    os.makedirs(output_dir, exist_ok=True)


def linked_exports(output_dir: str) -> list:
  """The folders in a local output_dir that hold an export (its
  TFDS_FEATURES_FILE) whose shards are symlinks to files of output_dir (export's
  default, OUT/tfds/). Replaced, the dataset's new shards would be read
  under the export's old metadata: its class names and record counts (a
  relabelled rerun gave the new ids TFDS's old names, silently). An
  export's staging folder is not one: it holds features.json and links once
  its metadata is written (what a kill -9 then leaves), and it is
  staged_dir's to remove, with its note, and only if no live export holds it."""
  root = os.path.realpath(output_dir)
  staged = {os.path.basename(path) for path in staged_dir.leftovers_in(output_dir)}
  found = []
  for name in sorted(os.listdir(output_dir)):
    folder = os.path.join(output_dir, name)
    if (name in staged or os.path.islink(folder)
        or not os.path.isfile(os.path.join(folder, TFDS_FEATURES_FILE))):
      continue
    with os.scandir(folder) as entries:
      if any(entry.is_symlink() and os.path.dirname(os.path.realpath(entry.path)) == root
             for entry in entries):
        found.append(name)
  return found


def unpublish(output_dir: str, split_names: tuple,
              files: Optional[filesystem.FileAccess] = None) -> None:
  """Takes back a dataset this run wrote, rejected.jsonl aside (the evidence
  of why nothing was published)."""
  _clear(output_dir, split_names, files or filesystem.FileAccess(), keep=(REJECTED_FILE,))


class NothingPublished(UsageError):
  """No example at all (every row rejected) and no --allow_empty: an empty
  dataset is no success. What was written but rejected.jsonl is taken back."""

  def __init__(self, info: dict, output_dir: str):
    rejected = filesystem.join(output_dir, REJECTED_FILE)
    super().__init__(f'all {info["num_manifest_rows"]} rows were rejected (see {rejected}); '
                     f'nothing was published' if info['num_manifest_rows'] else
                     'the input had no rows when the job read it; nothing was published')
    self.info = info


class PublishedFirst:
  """Whether a signal that interrupted the command line's run
  (interrupts.swallowed) came after its job had published the dataset:
  output_dir holds this run's dataset_info.json, which the job writes last
  (by a rename) and readers take as the dataset being complete, so it must
  not be taken back. Asked as the run unwinds (removed_on_failure's
  complete); `info` is then that dataset_info.json.

  Without it, a SIGTERM as soon as dataset_info.json appeared deleted the
  dataset in about half of the tries (printing that nothing was published):
  the job still had to end, and the run to learn that it had."""

  def __init__(self, output_dir: str, run_id: str, allow_empty: bool,
               files: filesystem.FileAccess):
    self._output_dir, self._run_id, self._allow_empty = output_dir, run_id, allow_empty
    self._files = files
    self.info: Optional[dict] = None

  def __call__(self) -> bool:
    if self.info is None and interrupts.swallowed():
      try:
        info = filesystem.read_info(self._output_dir, self._files)
      except InfoError:
        return False  # not written yet: nothing was published
      if info.get('run_id') == self._run_id and (info['num_examples'] or self._allow_empty):
        self.info = info
    return self.info is not None


@contextlib.contextmanager
def removed_on_failure(output_dir: str, split_names: tuple,
                       files: Optional[filesystem.FileAccess] = None,
                       complete: Callable[[], bool] = lambda: False):
  """A run that fails inside the block deletes what it wrote to output_dir
  (partial shards, temp files and folders) before the failure goes on: on a
  full disk, what it wrote would keep the disk full. Only this run's files
  can be there: the block starts after prepare_output_dir, under the lock.
  An interrupted run too (KeyboardInterrupt, the command line's SIGINT and
  SIGTERM: pipeline/runs/interrupts.py): nothing of it is published.
  Unless complete() says the run's output was published before the failure
  (a signal just after the job wrote dataset_info.json): that stays."""
  try:
    yield
  except BaseException:
    if complete():
      raise
    try:
      _clear(output_dir, split_names, files or filesystem.FileAccess())
    except Exception as error:  # the failure being raised is the one to report
      if not_answering.line_of(error):  # transforms/s3_client.py: not waited on
        print(f'note: {output_dir} was left as it is: its store stopped answering before '
              f'the run could remove what it wrote there (partial shards, temp objects, its '
              f'lock); rerun with --overwrite once it answers', file=sys.stderr)
      else:
        print(f'note: could not remove the partial output in {output_dir}: '
              f'{type(error).__name__}: {error}', file=sys.stderr)
    raise
