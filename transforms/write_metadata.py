"""Writing a dataset's metadata: rejected.jsonl, label_map.txt and, last,
dataset_info.json."""

from __future__ import annotations

import json
from typing import Optional

import apache_beam as beam

from transforms import filesystem
from transforms.beam_util import AnyOutput
from transforms.core import dataset_info
from transforms.core import detection_info
from transforms.core import labels
from transforms.core import paths
from transforms.core import rejects
from transforms.core import reuse
from transforms.core import tally
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import LABEL_MAP
from transforms.core.spec import REJECTED_FILE
from transforms.core.spec import SOURCES_SUFFIX
from transforms.core.spec import in_shard_order


class _WriteRejectedFn(AnyOutput, beam.DoFn):
  """Runs once: every rejection (a side input) -> one JSON line each in
  `path`, by source and line (rejects.sorted_lines: the same bytes on every
  runner), written under a temp name and renamed. An object store gets no
  object when nothing was rejected."""

  def __init__(self, path: str):
    self._path = path

  def process(self, _, rejections):
    lines = rejects.sorted_lines(rejections)
    first = next(lines, None)
    if first is None and paths.is_remote(self._path):
      return
    with filesystem.FileAccess().replacing(self._path) as handle:
      if first is not None:
        handle.write(first)
      for line in lines:
        handle.write(line)
    yield self._path


@beam.ptransform_fn
def WriteRejected(rejections, output_dir: str):
  """Rejection -> OUT/rejected.jsonl (one JSON object per line; empty if none).

  Out: the file's path (none for an empty object store write). Two steps
  where Beam's WriteToText took twelve in five stages; each step costs a
  pipeline's start-up ~20 ms (measured on 2 cores).
  """
  return (rejections.pipeline
          | 'Once' >> beam.Impulse()
          | 'WriteJsonl' >> beam.ParDo(_WriteRejectedFn(
              filesystem.join(output_dir, REJECTED_FILE)), beam.pvalue.AsIter(rejections)))


class RunNotCurrent(RuntimeError):
  """The run this job belongs to no longer holds OUT's run lock: its launcher
  failed or was stopped (and took back what it had written), or another run
  took over. The job must not publish."""


def check_lock_held(files: filesystem.FileAccess, output_dir: str, lock: tuple) -> None:
  """RunNotCurrent unless OUT/<lock name> still names run `run_id` (lock:
  (lock file name, run_id), the launcher's lock, pipeline/runs/run_lock.py)."""
  name, run_id = lock
  path = filesystem.join(output_dir, name)
  try:
    text = files.read_text(path)
  except OSError:  # gone (FileNotFoundError here, BeamIOError remote), or unreadable
    if files.exists(path):
      return  # there but unreadable: no reason to give up a finished job
    text = None
  try:
    holder = None if text is None else json.loads(text).get('run_id')
  except (ValueError, AttributeError):
    return  # caught mid-write by a heartbeat on a store without atomic replace
  if holder != run_id:
    raise RunNotCurrent(
        f'run {run_id} no longer holds the lock of {output_dir} ({name} is '
        f'{"gone" if holder is None else "held by run " + str(holder)}): its launcher '
        f'ended or gave up the run, so this job does not publish dataset_info.json')


class WriteInfoFn(AnyOutput, beam.DoFn):
  """Runs once, after every shard and reject file exists: writes the label map
  and, last, dataset_info.json. Splits that got no example (and so, with
  skip_if_empty, no shard) are left out.

  lock: (lock file name, run_id) of the launcher's run lock, checked just
  before publishing (check_lock_held): a job that outlives its launcher (a
  cluster's job after its job server died) publishes nothing. None: no check
  (a dry run, tests building the pipeline alone)."""

  def __init__(self, output_dir: str, split_names: tuple, has_label_manifest: bool,
               settings: dataset_info.InfoSettings, lock: Optional[tuple] = None,
               detection: Optional[detection_info.DetectionConfig] = None):
    self._detection = detection  # --schema detection: its counts and label files
    self._output_dir = output_dir
    self._split_names = split_names
    self._has_label_manifest = has_label_manifest
    self._settings = settings
    self._lock = lock

  def process(self, _, shard_paths, tally_sums, label_map, rejected_files,
              content_duplicates, skipped_files=None):
    """skipped_files: with --image_dir, the first skipped file names."""
    del rejected_files  # only orders this step after the reject file is written
    files = filesystem.FileAccess()  # one S3 client for the sizes and both files
    counts = tally.read_counts(tally_sums)
    names = list(label_map.names)
    balance = labels.class_balance(counts.class_counts, names)
    splits = {}
    for split in self._split_names:
      paths = [p for s, p in shard_paths if s == split]
      sidecars = [p for p in paths if p.endswith(SOURCES_SUFFIX)]
      paths = in_shard_order(p for p in paths if not p.endswith(SOURCES_SUFFIX))
      count = counts.examples.get(split, 0)
      if not count:
        continue
      sizes = files.sizes(paths)
      splits[split] = {
          'num_examples': count,
          'num_bytes': sum(sizes.values()),
          'shards': [filesystem.basename(p) for p in paths],
          **balance.get(split, {}),
          **({'sources': filesystem.basename(sidecars[0])} if sidecars else {}),
      }
    info = dataset_info.build_info(
        self._settings, label_names=names, splits=splits,
        num_manifest_rows=counts.manifest_rows, rejected=counts.rejected,
        num_label_rows=counts.label_manifest_rows if self._has_label_manifest else None,
        label_rows_rejected=counts.label_rows_rejected,
        skipped=None if skipped_files is None else (counts.skipped_files, skipped_files),
        label_warnings=labels.label_warnings(counts.label_rows, counts.padded_labels,
                                             self._settings.label_normalize, names,
                                             counts.class_counts, not label_map.fixed),
        content_duplicates=content_duplicates,
        reuse=None if self._settings.reuse is None else reuse.section(
            {key[1]: n for key, n in tally_sums.items() if key[0] == reuse.TALLY},
            self._settings.reuse['previous_dataset'], self._settings.reuse['previous_run_id'],
            self._settings.reuse['missing'], sum(counts.examples.values())),
        run_id=self._lock[1] if self._lock else None)
    dataset_info.check_every_row_ended(info)
    label_texts = {LABEL_MAP: label_map.to_text()}
    if self._detection is not None:
      info = detection_info.finish_info(info, tally_sums, self._detection)
      label_texts = detection_info.label_files(label_map.names)
    if self._lock is not None:
      check_lock_held(files, self._output_dir, self._lock)
    for name, text in label_texts.items():
      files.write_text(filesystem.join(self._output_dir, name), text)
    files.write_text(
        filesystem.join(self._output_dir, DATASET_INFO),
        json.dumps(info, indent=2, ensure_ascii=False) + '\n')
    yield info
