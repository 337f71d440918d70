"""Where export puts its folder (--output_dir): the checks before anything
is written, and the staging folder beside it (staged_dir). A folder is
replaced (--overwrite) only when it holds an export this command wrote, and
never when it is --input_dir or holds it."""

from __future__ import annotations

import json
import os
import sys

from pipeline.errors import UsageError
from pipeline.runs import staged_dir
from transforms.core import paths
from transforms.core.dataset_info import MAX_INFO_BYTES
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import TFDS_FEATURES_FILE

TFDS_DIR = 'tfds'  # the default --output_dir, INPUT_DIR/tfds


# How our export's TFDS dataset_info.json describes it (pipeline/export.py):
# the mark of a folder --overwrite may replace.
DESCRIPTION_PREFIX = 'img2tfrecord dataset '


def is_our_export(folder: str) -> bool:
  """Whether `folder` holds an export this command wrote: TFDS's
  features.json, and a TFDS dataset_info.json whose description is ours.
  features.json alone is any TFDS dataset's (~/tensorflow_datasets/NAME/V)."""
  if not os.path.isfile(os.path.join(folder, TFDS_FEATURES_FILE)):
    return False
  try:
    with open(os.path.join(folder, DATASET_INFO), 'rb') as handle:
      description = json.loads(handle.read(MAX_INFO_BYTES)).get('description')
  except (OSError, ValueError, AttributeError):  # none, not JSON, not an object: not ours
    return False
  return isinstance(description, str) and description.startswith(DESCRIPTION_PREFIX)


def _holds(folder: str, path: str) -> bool:
  """Whether local `path` is `folder` or inside it, symlinks resolved."""
  folder, path = os.path.realpath(folder), os.path.realpath(path)
  return path == folder or path.startswith(folder.rstrip('/') + '/')


def check_output_dir(output_dir: str, overwrite: bool, input_dir: str) -> None:
  """UsageError unless output_dir is empty, or holds a previous export of
  ours and --overwrite is given; or when it is --input_dir or holds it.
  Changes nothing."""
  if not paths.is_remote(input_dir) and _holds(output_dir, input_dir):
    # An --input_dir inside a previous export's folder went with it on
    # --overwrite: the dataset deleted, the new export's links dangling.
    raise UsageError(f'--output_dir {output_dir} holds --input_dir {input_dir}: give an '
                     f'--output_dir outside it (the default is INPUT_DIR/{TFDS_DIR})')
  if os.path.exists(output_dir) and not os.path.isdir(output_dir):
    raise UsageError(f'--output_dir {output_dir} is a file, not a folder')
  if os.path.exists(output_dir) and os.listdir(output_dir):
    if not overwrite:
      raise UsageError(f'--output_dir {output_dir} is not empty; pass --overwrite to '
                        f'replace a previous export')
    if not os.path.exists(os.path.join(output_dir, TFDS_FEATURES_FILE)):
      raise UsageError(f'--output_dir {output_dir} holds no previous TFDS export '
                        f'({TFDS_FEATURES_FILE} is missing): not replacing it')
    if not is_our_export(output_dir):
      # A TFDS dataset of another source (features.json and its own
      # dataset_info.json) was replaced whole, its data deleted.
      raise UsageError(f'--output_dir {output_dir} holds a TFDS dataset this export did not '
                        f"write ({DATASET_INFO}'s description is not ours): not replacing it")


def staging_beside(output_dir: str) -> staged_dir.Staging:
  """The folder the export is built in, beside --output_dir (the folder a
  symlink --output_dir leads to), after removing what killed exports left
  there (a note each)."""
  target = os.path.realpath(output_dir) if os.path.islink(output_dir) else output_dir
  target = os.path.abspath(target)
  for path in staged_dir.remove_leftovers(target):
    print(staged_dir.REMOVED_NOTE.format(path=path), file=sys.stderr)
  try:
    return staged_dir.Staging.beside(target)
  except OSError as error:  # a file on its path, no permission: bad input, not a failure
    raise UsageError(f'--output_dir {output_dir} cannot be created: '
                     f'{error.strerror or error}') from error
