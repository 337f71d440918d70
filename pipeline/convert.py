"""Convert an image dataset into sharded TFRecords of tf.train.Example.

  python -m pipeline.convert --manifest data.csv --output_dir out/ [options]
      [any Beam pipeline option]

Exit codes: 0 done, 1 crashed, 2 usage error or no example at all (nothing
published but rejected.jsonl; --allow_empty publishes an empty dataset), 3
more rejected rows than --max_error_rate allows (everything is still written);
interrupted by SIGINT, SIGTERM or SIGHUP, it cleans up and ends by the signal (a
shell shows 130, 143 or 129).
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from pipeline.beam_runtime import startup
from pipeline.errors import refuse_optimized_python
from pipeline.runs import interrupts
from pipeline.runs import utf8_mode

if __name__ == '__main__':
  refuse_optimized_python()  # before Beam, which fails as it is imported under -OO
  utf8_mode.in_utf8_mode()  # first: it may start the command again
  interrupts.before_run(interrupts.CONVERT_LINES[0])
  startup.begin(sys.argv[1:])

import apache_beam as beam

from pipeline import errors
from pipeline.beam_runtime import local_runner
from pipeline.configuration import config as opts
from pipeline.configuration import configs
from pipeline.configuration.convert_plan import fingerprints_fetched
from pipeline.configuration.convert_plan import info_settings
from pipeline.configuration.convert_plan import label_map_made_here
from pipeline.configuration.convert_plan import previous_used
from pipeline.engines import flink_jobs
from pipeline.engines import runners
from pipeline.runs import exits
from pipeline.runs import progress
from pipeline.runs.locked_run import run_locked
from pipeline.runs.output_dir import NothingPublished
from pipeline.runs.run_guard import RunGuard
from pipeline.runs.summary import over_budget_line
from pipeline.runs.summary import summary
from transforms import detection
from transforms import filesystem
from transforms.batches import BatchedFn
from transforms.batches import PartitionBatches
from transforms.batches import in_batches
from transforms.beam_util import CLASSES
from transforms.beam_util import EXAMPLES
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.beam_util import SKIPPED
from transforms.beam_util import TALLIES
from transforms.beam_util import TallyPerBundle
from transforms.beam_util import count_rejection
from transforms.core import duplicates
from transforms.core import fingerprints
from transforms.core import tally
from transforms.core.copies import copy_check
from transforms.core.paths import is_remote
from transforms.core.spec import SINK_TFRECORDIO
from transforms.core.spec import shard_suffix
from transforms.dedupe import ContentDuplicates
from transforms.dedupe import DedupeContent
from transforms.dedupe import HashSourceFn
from transforms.dedupe import copy_fits
from transforms.encode import EncodeRows
from transforms.encode import LoadImageFn
from transforms.label_maps import LabelMapFromRows
from transforms.label_maps import LabelMapHere
from transforms.label_maps import label_map_side_input
from transforms.reuse import decide_and_copy
from transforms.reuse import tally_reuse
from transforms.reuse_join import FingerprintFn
from transforms.reuse_join import JoinPrevious
from transforms.sources import ReadImageDir
from transforms.sources import ReadManifest
from transforms.sources import ResolveKeys
from transforms.workers import source_image
from transforms.workers import spare_children
from transforms.workers.pooled_step import PoolSize
from transforms.workers.pooled_step import available_cores
from transforms.workers.pooled_step import pool_size
from transforms.workers.process_pool import WORKER_MODULE
from transforms.workers.source_image import hash_sized_in_worker
from transforms.workers.source_image import hash_sized_sources
from transforms.write_metadata import WriteInfoFn
from transforms.write_metadata import WriteRejected
from transforms.write_shards import WriteShards
from transforms.write_tfrecordio import WriteTFRecordIO


def _read_rows(p, config: configs.ConvertConfig, in_order: bool, progress_dir=None,
               label_map_here: Optional[LabelMapHere] = None):
  """-> (rows, [rejected], [tallies], skipped names or None, class folders or None).
  in_order: the rows come out in their write order (a single local worker).
  progress_dir: where the manifest's reader leaves the progress line's total;
  label_map_here: made by the step that resolves the rows (in_order only)."""
  parse = None
  if config.detection is not None:
    source = detection.read_annotations(p, config.detection, config.split)
  elif config.image_dir:
    source = p | 'ReadImageDir' >> ReadImageDir(
        config.image_dir, config.split, config.image_dir_layout, config.image_extensions,
        config.label_normalize)
  else:
    # In order, a manifest's lines are parsed where the rows meet (fewer bytes
    # pickled: ReadManifest's deferred).
    reader = ReadManifest(config.manifests[0], progress_dir=progress_dir, deferred=in_order)
    source = p | 'ReadManifest' >> reader
    parse = reader.parser
  label_rows = None
  tallies = [source[TALLIES]]
  if len(config.manifests) > 1:
    labels = p | 'ReadLabelManifest' >> ReadManifest(config.manifests[1])
    label_rows = labels[ROWS]
    tallies.append(labels[TALLIES])
  resolved = source[ROWS] | 'ResolveKeys' >> ResolveKeys(
      label_rows, config.ordering, in_order, label_map_here=label_map_here,
      classes=source.get(CLASSES), parse=parse)
  rejected = [source[REJECTED], resolved[REJECTED]]
  if label_rows is not None:
    rejected.append(labels[REJECTED])
  return resolved[ROWS], rejected, tallies, source.get(SKIPPED), source.get(CLASSES)


def image_pool(config: configs.ConvertConfig, options) -> PoolSize:
  """The image step's pool. Elsewhere than on a single local worker it is
  sized in each worker, from its cores and the SDK harnesses sharing them
  (pooled_step.in_worker). Cores: those this process may use, as a worker
  counts them (os.cpu_count() counts the host's: pinned to 1 core, 2 image
  processes on this 2-core machine; in a 2-CPU container on a 64-core host, 64)."""
  in_order = runners.single_local_worker(options)
  return pool_size(config.image_threads, config.image_processes, config.image.encoding,
                   in_order, available_cores(), timeout_s=config.image_timeout_s,
                   harnesses=None if in_order else runners.harnesses_per_machine(options))


def build(p, config: configs.ConvertConfig, progress_dir=None, lock=None):
  """Adds the whole conversion to pipeline `p`; returns the info PCollection.

  progress_dir: where local workers report their progress (None: nowhere).
  lock: (lock file name, run_id) of the run's lock, which must still be held
  when dataset_info.json is written (WriteInfoFn); None: not checked.
  """
  # A single local worker sorts the rows (small) into their write order before
  # any image is decoded and writes records as they come: no image payload
  # goes through a shuffle. Other runners shuffle the records to their shards.
  in_order = runners.single_local_worker(p.options)
  # A single local worker copies reused records in its image step, in write
  # order, as the images come (local previous shards); elsewhere by shard.
  inline = in_order and previous_used(config) and not any(
      is_remote(sidecar.path) for sidecar in config.previous.sidecars)
  here = LabelMapHere() if label_map_made_here(config, in_order, inline) else None
  rows, rejected, tallies, skipped, classes = _read_rows(p, config, in_order, progress_dir, here)
  pool = image_pool(config, p.options)
  rows, join_tallies = _previous_rows(rows, config, inline)
  tallies += join_tallies
  content = 'content' in (config.dedupe, config.split_by)
  if content or (previous_used(config) and config.change_detection == 'content'):
    # Rows whose SHA-256 a previous record proves are not read (HashSourceFn).
    # --schema detection: with each file's header size, which copy to keep
    sized = {} if config.detection is None else dict(
        hash_on_thread=hash_sized_sources, hash_in_process=hash_sized_in_worker)
    rows = rows | 'HashSources' >> beam.ParDo(BatchedFn(HashSourceFn(
        config.image, pool, config.split if config.split_by == 'content' else None,
        http=config.http, check=copy_check(config.example.table()), **sized)))
  if config.detection is None:
    tallies.append(rows | 'TallyLabels' >> beam.ParDo(TallyPerBundle(in_batches(
        lambda row: [(key, 1) for key in tally.label_keys(row)]))))
  # The label map is made from every row, before --dedupe content: a class
  # whose rows all turn out to be copies keeps its id (an empty class, warned).
  if config.label_map is not None:
    label_map = (p | 'LabelMapOnce' >> beam.Impulse()
                 | 'LabelMapFromFile' >> beam.Map(lambda _, names: names, config.label_map))
  else:
    label_map = rows | 'LabelMap' >> LabelMapFromRows(classes)
  if config.dedupe == 'content':
    usable = {} if config.detection is None else dict(
        usable=copy_fits(config.detection.options.on_size_mismatch,
                         config.detection.options.on_bad_box))
    deduped = rows | 'DedupeContent' >> DedupeContent(config.ordering, in_order, label_map,
                                                      **usable)
    rows = deduped[ROWS]
    rejected.append(deduped[REJECTED])
  digest = fingerprints.options_digest(config.image, config.example)
  copied = None
  if previous_used(config):
    decided = decide_and_copy(rows, here or label_map, config.change_detection, digest,
                              config.ordering, copy_check(config.example.table()), inline)
    rows, copied = decided.rows, decided.examples
    tallies += decided.tallies
    # copied records join the encoded ones through the writer's shuffle
    in_order = in_order and inline
  if config.detection is not None:  # --schema detection: objects instead of a label
    encoded = rows | 'DetectRows' >> detection.DetectRows(
        config.label_map.names, config.image, config.example, config.detection.options,
        config.ordering, LoadImageFn(config.image, progress_dir, pool.threads, pool.processes,
                                     timeout_s=pool.timeout_s or 0.0, harnesses=pool.harnesses,
                                     http=config.http))
    tallies.append(encoded[TALLIES])
  else:
    encoded = rows | 'EncodeRows' >> EncodeRows(
        config.image, config.example, here or label_map, progress_dir, pool.threads,
        pool.processes, image_timeout_s=pool.timeout_s or 0.0, ordering=config.ordering,
        harnesses=pool.harnesses, options_digest=digest, http=config.http,
        fingerprint_fetches=fingerprints_fetched(config))
  examples = encoded[EXAMPLES]
  if copied is not None:
    examples = (examples, copied) | 'EncodedAndCopied' >> beam.Flatten()
  if config.previous is not None:
    tallies += tally_reuse(examples, encoded[REJECTED], missing=not previous_used(config))
  rejected.append(encoded[REJECTED])

  split_names = config.split.split_names()
  by_split = [examples] if len(split_names) == 1 else (
      examples | 'PartitionBySplit' >> PartitionBatches(
          lambda example: split_names.index(example.split), len(split_names)))
  shard_paths = []
  for split, split_examples in zip(split_names, by_split):
    prefix, suffix = filesystem.join(config.output_dir, split), shard_suffix(config.compression)
    if config.sink == SINK_TFRECORDIO:
      writer = WriteTFRecordIO(prefix, suffix, config.compression, config.num_shards)
    else:
      writer = WriteShards(prefix, suffix, config.compression, config.num_shards,
                           config.shard_size_mb * 1024 * 1024, in_order, config.write_index,
                           sources=True, splits=len(split_names))
    written = split_examples | f'Write[{split}]' >> writer
    shard_paths.append(written | f'Tag[{split}]' >> beam.Map(
        lambda path, split=split: (split, path)))

  all_rejected = (rejected
                  | 'AllRejected' >> beam.Flatten()
                  | 'CountRejected' >> beam.Map(count_rejection))
  rejected_files = all_rejected | 'WriteRejected' >> WriteRejected(config.output_dir)
  tallies.append(examples | 'TallyExamples' >> beam.ParDo(TallyPerBundle(in_batches(
      lambda example: [(tally.example_key(example.split, example.label_id), 1)]))))
  content_duplicates = examples | 'ContentDuplicates' >> ContentDuplicates()
  tallies.append(all_rejected | 'TallyRejected' >> beam.ParDo(TallyPerBundle(
      lambda rejection: [(tally.rejection_key(rejection), 1)])))
  counts = tallies | 'AllTallies' >> beam.Flatten() | 'SumTallies' >> beam.CombinePerKey(sum)
  side = beam.pvalue
  return (p
          | 'Once' >> beam.Impulse()
          | 'WriteDatasetInfo' >> beam.ParDo(
              WriteInfoFn(config.output_dir, split_names, len(config.manifests) > 1,
                          info_settings(config, p.options), lock, config.detection),
              side.AsList(shard_paths | 'AllShards' >> beam.Flatten()),
              side.AsDict(counts),
              label_map_side_input(label_map),
              side.AsList(rejected_files),
              side.AsSingleton(content_duplicates, default_value=duplicates.empty_report()),
              **({} if skipped is None else {'skipped_files': side.AsSingleton(
                  skipped, default_value=[])})))


def _previous_rows(rows, config: configs.ConvertConfig, in_order: bool):
  """Rows -> (rows with their sources' fingerprints and, with a previous
  dataset, its records, [tallies of dropped keys])."""
  if config.sink == SINK_TFRECORDIO:
    return rows, []  # no sidecar: nothing to fingerprint for
  if config.change_detection == fingerprints.METADATA:
    rows = rows | 'Fingerprint' >> beam.ParDo(FingerprintFn(
        config.image_timeout_s or None, config.http,
        http_from_fetch=fingerprints_fetched(config)))
  if not previous_used(config):
    return rows, []
  joined = rows | 'JoinPrevious' >> JoinPrevious(
      config.previous.sidecars, config.change_detection,
      config.split if config.split_by == 'content' else None, in_order)
  return joined[ROWS], [joined[TALLIES]]


def run(argv=None) -> int:
  config, pipeline_options = opts.parse_convert(list(argv or []),
                                                __doc__.strip().splitlines()[0])
  started = time.time()
  try:
    info = convert(config, pipeline_options)
  except NothingPublished as nothing:
    for reason, count in nothing.info['rejected_by_reason'].items():
      print(f'  rejected {reason}: {count}')
    for reason, count in nothing.info.get('label_manifest_rejected_by_reason', {}).items():
      print(f'  label manifest line rejected {reason}: {count} (not an image row)')
    raise
  if info is None:
    print(runners.dry_run_note(pipeline_options,
                               f'nothing was written to {config.output_dir}'))
    return errors.EXIT_OK
  print(summary(info, time.time() - started))
  if info['over_budget']:
    if sys.stdout is not None:  # None: started with stdout closed (`>&-`)
      sys.stdout.flush()  # the summary first, where both go to one terminal
    print(over_budget_line(info), file=sys.stderr)
    return errors.EXIT_OVER_BUDGET
  return errors.EXIT_OK


def convert(config: configs.ConvertConfig, pipeline_options,
            progress_display=None) -> Optional[dict]:
  """One conversion, checked, locked and prepared as the command line's
  (pipeline/runs/locked_run.py): -> the dataset_info.json written (None for a
  dry run, which writes nothing); failures raised. The command line's run()
  and pipeline.api call it; neither prints here.

  progress_display: what shows the progress (progress.Reporter), None: a
  line on stderr.
  """
  return run_locked(config, pipeline_options,
                    lambda options, guard, lock=None: _convert(config, options, guard,
                                                               progress_display, lock))


def _convert(config: configs.ConvertConfig, pipeline_options, guard: RunGuard,
             progress_display, lock=None) -> None:
  """lock: (lock file name, run_id) of the run's lock (build)."""
  # On a Flink cluster, a job whose job server is gone is cancelled there too
  # (RunGuard cancels through the job server).
  with progress.Reporter.for_run(config.progress, pipeline_options, config.image_dir,
                                 config.image_extensions,
                                 display=progress_display) as reporter, \
      flink_jobs.cancelled_if_abandoned(pipeline_options):
    p = beam.Pipeline(
        runner=local_runner.for_options(pipeline_options), options=pipeline_options)
    pool = image_pool(config, pipeline_options)
    try:
      # Within the try: a signal while they start (api: a notebook's Ctrl-C)
      # left them running, idle, for as long as the process lived.
      if runners.single_local_worker(pipeline_options) and pool.processes:
        # They start while Beam builds and starts the job and reads the
        # manifest, not when the first image to convert arrives (spare_children).
        spare_children.start(pool.processes, WORKER_MODULE, pool.timeout_s or None,
                             (source_image.__name__,))
      build(p, config, reporter.directory, lock)
      guard.run(p)
    finally:
      spare_children.discard()


def main(argv=None) -> int:
  """The command line: run(argv) with exit codes; SIGINT, SIGTERM and SIGHUP clean up
  and end the process by the signal (exits.run_command)."""
  return exits.run_command(run, argv, *interrupts.CONVERT_LINES)


if __name__ == '__main__':
  startup.end()
  exits.exit_with(main, fast=True)
