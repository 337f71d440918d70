"""Room for the shards a local run writes at once: a single local worker's
writer of --num_shards N (--sink ordered) keeps all N shards of each split open
from its first record to its last, the writers of every split side by side
(transforms/write_shards.py's round robin). N over the files a process may open
(`ulimit -n`: 1,024 on many desktops) failed the job at the first record
(exit 1, `OSError: [Errno 24] Too many open files`, a 170-line traceback).

Before anything is locked or written, the run raises its own limit (the soft
one, up to the hard one any process may raise it to) as far as it needs; a
hard limit too low for it is a usage error naming the largest --num_shards
that fits. A nightly run's reader of the previous shards keeps each open
likewise (previous_files_open_at_once): room is made for them too.
pipeline.api puts the limit back after its run (in_process.py).
"""

from __future__ import annotations

import os

from pipeline.errors import UsageError
from transforms.core.paths import is_remote
from transforms.core.spec import SINK_TFRECORDIO

try:
  import resource
except ImportError:  # not on Windows: no limit to raise there
  resource = None

# Files the run holds open besides its shards (Beam, the manifest, the
# sidecars, logging), and the pipes of each image worker process.
OTHER_FILES = 64
FILES_PER_CORE = 4


def shards_open_at_once(config, single_local_worker: bool) -> int:
  """How many shard files the run's writers hold open together: N per split
  for a single local worker's round robin (--num_shards N, --sink ordered,
  a local --output_dir, no nightly reuse through a shuffle); 0 for any other
  writer, which holds one at a time (or none of this process's files)."""
  if not (single_local_worker and config.num_shards and config.sink != SINK_TFRECORDIO):
    return 0
  previous = config.previous
  if previous is not None and previous.dataset is not None and any(
      is_remote(sidecar.path) for sidecar in previous.sidecars):
    return 0  # its records are written through a shuffle, a shard at a time
  if is_remote(config.output_dir):
    return 0
  return config.num_shards * len(config.split.split_names())


def previous_files_open_at_once(config, single_local_worker: bool) -> int:
  """How many files reading a local previous dataset's records holds open
  together on a single local worker: its reader of copies (and, with
  --dedupe content, the dedupe step's) keeps each shard it reads open until
  the run's one bundle ends (core/copies.ShardReader), a gzip shard as its
  stream and its inflated copy. A nightly run over 2,000 previous shards
  failed at ulimit -n 1,024 (exit 1, `OSError: [Errno 24] Too many open
  files`, a traceback, its partial output and temp folder left behind)."""
  previous = config.previous
  if not single_local_worker or previous is None or previous.dataset is None:
    return 0
  if any(is_remote(sidecar.path) for sidecar in previous.sidecars):
    return 0  # read through a shuffle, a shard at a time
  readers = 2 if config.dedupe == 'content' else 1
  return readers * sum(len(sidecar.shard_paths) * (2 if sidecar.compressed else 1)
                       for sidecar in previous.sidecars)


def room_for_shards(config, single_local_worker: bool) -> None:
  """Raises this process's soft limit of open files to what the run's
  shards need (shards_open_at_once, previous_files_open_at_once) beside its
  other files; UsageError when the hard limit is too low."""
  shards = shards_open_at_once(config, single_local_worker)
  previous = previous_files_open_at_once(config, single_local_worker)
  if not (shards or previous) or resource is None:
    return
  others = OTHER_FILES + FILES_PER_CORE * (os.cpu_count() or 1)
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  wanted = shards + previous + others
  if soft == resource.RLIM_INFINITY or soft >= wanted:
    return
  if hard != resource.RLIM_INFINITY and hard < wanted and previous:
    raise UsageError(
        f'--previous_dataset {config.previous.given}: a local run reusing its records keeps '
        f'its shards open at once ({previous} files'
        + (f', beside {shards} shards written' if shards else '')
        + f'), and this process may open {hard} files (ulimit -Hn): raise the limit')
  if hard != resource.RLIM_INFINITY and hard < wanted:
    splits = len(config.split.split_names())
    each = f' ({config.num_shards} for each of {splits} splits)' if splits > 1 else ''
    fits = (hard - others) // splits
    fewer = f'--num_shards {fits} or fewer, or ' if fits > 0 else ''
    raise UsageError(
        f'--num_shards {config.num_shards}: a local run keeps its {shards} shards open at '
        f'once{each}, and this process may open {hard} files (ulimit -Hn): give {fewer}'
        f'--num_shards 0 (shards cut at --shard_size_mb), or raise the limit')
  resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def limit():
  """This process's (soft, hard) limit of open files; None without one."""
  return None if resource is None else resource.getrlimit(resource.RLIMIT_NOFILE)


def set_limit(before) -> None:
  """Puts back the limit limit() returned, if it changed since."""
  if before is not None and resource.getrlimit(resource.RLIMIT_NOFILE) != before:
    resource.setrlimit(resource.RLIMIT_NOFILE, before)
