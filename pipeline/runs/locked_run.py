"""convert's run around its job: the checks before anything is locked, one
run per output folder, the folder prepared, the dataset published or taken
back (NothingPublished), and last the latest pointer. The job itself (the
pipeline built and run) is pipeline/convert.py's."""

from __future__ import annotations

from collections.abc import Callable
import functools
from typing import Optional

from pipeline.engines import runners
from pipeline.runs import interrupts
from pipeline.runs import open_files
from pipeline.runs.output_dir import NothingPublished
from pipeline.runs.output_dir import PublishedFirst
from pipeline.runs.output_dir import prepare_output_dir
from pipeline.runs.output_dir import removed_on_failure
from pipeline.runs.output_dir import unpublish
from pipeline.runs.previous import write_latest
from pipeline.runs.run_guard import RunGuard
from pipeline.runs.run_lock import RunLock
from pipeline.runs.run_lock import lock_name
from transforms import filesystem


def run_locked(config, pipeline_options, job: Callable[..., None]) -> Optional[dict]:
  """One conversion (config: a ConvertConfig), checked, locked and prepared as
  the command line's: -> the dataset_info.json written (None for a dry run,
  which writes nothing). Failures are raised (errors.UsageError,
  NothingPublished, the job's exception).

  job(pipeline_options, guard, lock=None) builds and runs the job, with the
  options as prepared for the runner; lock: (lock file name, run_id) of the
  run's lock, None on a dry run.
  """
  # Flink and Spark: Java, job server, master, workers, all checked before the lock.
  pipeline_options = runners.prepare(pipeline_options)
  # Before anything is locked, created or written: can the runner take the job?
  runners.check_before_submit(pipeline_options, config.job_endpoint_connect_timeout)
  open_files.room_for_shards(config, runners.single_local_worker(pipeline_options))
  if runners.is_dry_run(pipeline_options):  # only builds the job: writes nothing, locks nothing
    job(pipeline_options, RunGuard())
    return None
  files = filesystem.FileAccess()  # this thread's reads and writes of OUT (one S3 client)
  # One run per output folder: a second one exits 2 here, before anything is touched.
  with RunLock.acquire(config.output_dir, config.overwrite, pipeline_options, files=files,
                       splits=config.splits_to_clear(),
                       make_room=functools.partial(
                           prepare_output_dir, config.output_dir, True, files=files)) as lock:
    prepare_output_dir(config.output_dir, config.overwrite, lock.me.splits, files)
    # A run that does not finish (an error, a signal) cancels its job (RunGuard),
    # then takes back what it wrote, before the lock goes: nothing is published,
    # and a rerun needs no --overwrite. The job checks the lock before it publishes.
    published_first = PublishedFirst(config.output_dir, lock.me.run_id, config.allow_empty, files)
    try:
      with removed_on_failure(config.output_dir, lock.me.splits, files,
                              complete=published_first), RunGuard() as guard:
        job(pipeline_options, guard, (lock_name(lock.generation), lock.me.run_id))
        info = filesystem.read_info(config.output_dir, files)
        published = bool(info['num_examples'] or config.allow_empty)
        if not published:
          unpublish(config.output_dir, config.splits_to_clear(), files)
        else:  # a signal from here on: the run finishes, then says the dataset is complete
          interrupts.published(interrupts.CONVERT_PUBLISHED_LINE)
    except BaseException:
      if not published_first():
        raise
      # The signal came once the job had published: the run finishes as published.
      info, published = published_first.info, True
      interrupts.published_before_signal(interrupts.CONVERT_PUBLISHED_LINE)
  if not published:
    raise NothingPublished(info, config.output_dir)
  if config.previous is not None and not info['over_budget']:
    # Last, after the lock is released: the next night reads OUT/../latest.
    write_latest(config.output_dir, files)
  return info
