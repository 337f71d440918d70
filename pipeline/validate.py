"""Validate a dataset written by convert: every shard, every record.

  python -m pipeline.validate --input_dir out/ [--expected_count N]
      [--report PATH] [any Beam pipeline option]

Exit codes: 0 everything holds, 1 problems found (listed in the report) or,
with --strict, warnings found; 2 usage error; interrupted by SIGINT or
SIGTERM, it writes no report and ends by the signal (a shell shows 130 or
143); a signal once the report is written lets it finish first.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Optional

from pipeline.beam_runtime import startup
from pipeline.errors import refuse_optimized_python
from pipeline.runs import interrupts
from pipeline.runs import utf8_mode

if __name__ == '__main__':
  refuse_optimized_python()  # before Beam, which fails as it is imported under -OO
  utf8_mode.in_utf8_mode()  # first: it may start the command again
  interrupts.before_run(interrupts.VALIDATE_LINES[0])
  startup.begin(sys.argv[1:])

import apache_beam as beam

from pipeline import errors
from pipeline.beam_runtime import local_runner
from pipeline.configuration import config as opts
from pipeline.configuration import configs
from pipeline.engines import flink_jobs
from pipeline.engines import runners
from pipeline.runs import exits
from pipeline.runs.output_dir import run_traces
from pipeline.runs.run_guard import RunGuard
from pipeline.runs.run_lock import live_holder
from pipeline.validating import recompute
from pipeline.validating.folder_checks import file_problems
from pipeline.validating.folder_checks import shard_listing
from pipeline.validating.folder_checks import split_bytes
from transforms import filesystem
from transforms.beam_util import FIRST_PROBLEMS
from transforms.beam_util import FIRST_WARNINGS
from transforms.beam_util import TALLY_SUMS
from transforms.check_shards import CheckShards
from transforms.check_side_files import SideFiles
from transforms.core import dataset_checks
from transforms.core import file_kinds
from transforms.core import paths
from transforms.core import recompute as recompute_core
from transforms.core import validation
from transforms.core.dataset_info import InfoError
from transforms.core.dataset_info import how_changed
from transforms.validation_report import WriteReportFn
from transforms.validation_report import build_report
from transforms.workers.pooled_step import available_cores
from transforms.workers.pooled_step import pool_size

# Below this many bytes of local uncompressed shards, starting span processes
# costs more than reading here saves (a child's start is ~0.1 s of CPU; 10
# raw 300x300 records take ~3 ms to check here).
SPAN_MIN_BYTES = 32 << 20
# From this many local uncompressed shards per span process, none of them
# over 1 / (2 x processes) of their bytes, each process reads whole shards:
# enough shards keep every process busy, and no pass over the record headers
# here cuts them into spans (25 shards of 128 MiB, 2 processes: 2.81 -> 2.60 s
# after imports, median of 6). A span's results come back in one message.
WHOLE_SHARDS_PER_PROCESS = 4


def check_pools(check_threads: int, check_processes: int, encoding: str,
                single_local_worker: bool, input_dir: str, shards: list,
                cpu_count: int) -> tuple:
  """-> (PoolSize of the reader's own checks, span processes, whole shards):
  the check processes that read local uncompressed shards themselves
  (ReadShardFn's spans, whole shards or 8 MiB spans), and the pool checking
  the records of the shards the reader reads (compressed, remote, or all of
  them without spans).

  --check_processes N asks for N of both, --check_threads N for N threads and
  no processes. By default on a single local worker: one span process per
  core once the local uncompressed shards hold SPAN_MIN_BYTES; the reader's
  pool (pool_size) then starts no processes unless compressed shards are left
  for it. None on other runners (they spread shards over workers).
  """
  local = not paths.is_remote(input_dir)
  plain, compressed = {}, 0
  for _, shard in (shards if local else ()):
    try:
      size = os.path.getsize(os.path.join(input_dir, shard))
    except OSError:
      continue  # reading it will name the problem
    if shard.endswith('.gz'):
      compressed += size
    else:
      plain[shard] = size
  if check_processes or check_threads or not local or not single_local_worker:
    pool = pool_size(check_threads, check_processes, encoding, single_local_worker,
                     cpu_count, inline_raw=True)
    # --check_processes N: N span processes as asked (remote and .gz shards
    # are still read by the reader, in its N check processes).
    spans = check_processes
  else:
    spans = cpu_count if sum(plain.values()) >= SPAN_MIN_BYTES else 0
    pool = pool_size(0, 0, encoding, single_local_worker, cpu_count, inline_raw=True,
                     records_here=not spans or compressed > 0)
  whole = bool(spans) and len(plain) >= WHOLE_SHARDS_PER_PROCESS * spans and (
      max(plain.values()) * 2 * spans <= sum(plain.values()))
  return pool, spans, whole


def build(p, input_dir: str, info: dict, shards: list, listing_problems: list,
          report_path: str, expected_count=None, max_problems: int = 100,
          check_threads: int = 0, check_processes: int = 0,
          check_records=validation.check_records, listing_warnings=(), more=None,
          report_temp=None):
  """Adds the validation to pipeline `p`; returns the report PCollection.

  check_records: what checks a batch of records (tests swap it).
  listing_problems, listing_warnings: what the launcher found (--recompute...);
  more: more fields of the report. report_temp: the name it is written under.
  """
  expected = validation.Expected.from_info(info)
  single = runners.single_local_worker(p.options)
  pool, spans, whole_shards = check_pools(
      check_threads, check_processes, expected.image.encoding, single, input_dir, shards,
      available_cores())  # not os.cpu_count(): the host's, in a container
  checked = (p
             | 'ShardList' >> beam.Create(shards, reshuffle=False)
             | 'CheckShards' >> CheckShards(
                 input_dir, expected, pool.threads, pool.processes, spread=not single,
                 check=check_records, span_processes=spans, whole_shards=whole_shards,
                 max_problems=max_problems,
                 side_files=SideFiles.from_info(input_dir, info)))
  side = beam.pvalue
  return (p
          | 'Once' >> beam.Impulse()
          | 'WriteReport' >> beam.ParDo(
              WriteReportFn(info, report_path, listing_problems, expected_count,
                            max_problems, list(listing_warnings), more, report_temp),
              side.AsDict(checked[TALLY_SUMS]),
              side.AsSingleton(checked[FIRST_PROBLEMS], default_value=[]),
              side.AsSingleton(checked[FIRST_WARNINGS], default_value=[])))


OVER_BUDGET_NOTE = ('Note: convert rejected more rows than its --max_error_rate allowed, '
                    'or every annotation (over_budget in dataset_info.json): the records '
                    'are sound, but rows or objects are missing; see rejected.jsonl.')


def _location(problem: dict) -> str:
  """'shard record N: ' / 'shard: ' / '' for a problem of the whole dataset."""
  place = problem['file'] + (f' record {problem["record"]}' if problem['record'] >= 0 else '')
  return f'{place}: ' if place else ''


def _examples(findings: list) -> list:
  return [f'  e.g. {_location(p)}{p["detail"]}' for p in findings[:5]]


def summary(report: dict, report_path: str, strict: bool = False) -> str:
  warned = report.get('num_warnings', 0)
  warnings = []
  if warned:
    warnings = [f'WARNING: {warned} warning(s)'
                + (' (--strict: exit 1)' if strict else ' (exit code unchanged without --strict)')]
    warnings += [f'  {kind}: {count}' for kind, count in report['warnings_by_kind'].items()]
    warnings += _examples(report['warnings'])
  note = [OVER_BUDGET_NOTE] if report.get('over_budget') else []
  if 'num_recomputed' in report:
    skipped = report.get('num_recompute_skipped', 0)
    why = ', or '.join(f'{text} ({kind})' for kind, text in recompute_core.SKIPPED.items()
                       if report.get('warnings_by_kind', {}).get(kind))
    note.append(f'--recompute: {report["num_recomputed"]} record(s) converted again from '
                f'their sources and compared byte for byte'
                + (f'; {skipped} sampled record(s) skipped, not compared: {why}'
                   if skipped else '') + '.')
  if report['valid']:
    splits = ', '.join(f'{name} {s["num_examples"]}' for name, s in report['splits'].items())
    return '\n'.join([f'OK: {report["num_examples"]} examples'
                      + (f' ({splits})' if splits else '')
                      + f', every record checked. Report: {report_path}'] + note + warnings)
  lines = [f'INVALID: {report["num_problems"]} problem(s) found. Report: {report_path}']
  lines += [f'  {kind}: {count}' for kind, count in report['problems_by_kind'].items()]
  lines += _examples(report['problems'])
  return '\n'.join(lines + note + warnings)


def run(argv=None, check_records=validation.check_records) -> int:
  """check_records: what checks a batch of records (tests swap it)."""
  config, pipeline_options = opts.parse_validate(list(argv or []),
                                                 __doc__.strip().splitlines()[0])
  report = validate(config, pipeline_options, check_records)
  if report is None:
    print(runners.dry_run_note(pipeline_options, 'nothing was checked or written'))
    return errors.EXIT_OK
  print(summary(report, config.report_path, config.strict))
  if not report['valid'] or (config.strict and report['num_warnings']):
    return errors.EXIT_FAILED
  return errors.EXIT_OK


def validate(config: configs.ValidateConfig, pipeline_options,
             check_records=validation.check_records) -> Optional[dict]:
  """One validation, as the command line's: -> the report written (None for
  a dry run, which checks nothing). A dataset without a usable
  dataset_info.json gets a report of that one problem; a folder holding
  nothing convert writes (no dataset at all) is a UsageError, nothing written.
  Failures are raised.
  The command line's run() and pipeline.api call it; neither prints here."""
  pipeline_options = runners.prepare(pipeline_options)  # Flink and Spark: see convert
  # Before anything is read or written: can the runner take the job?
  runners.check_before_submit(pipeline_options, config.job_endpoint_connect_timeout)
  files = filesystem.FileAccess()  # this thread's reads of the dataset (one S3 client)
  writer = live_holder(config.input_dir, pipeline_options, files)
  if writer is not None:  # a dataset not published yet, or being replaced: no verdict
    raise errors.UsageError(f'--input_dir {config.input_dir} is being written by '
                            f'{writer.describe()}; validate it once that run has ended')
  try:
    info = filesystem.read_info(config.input_dir, files)
  except InfoError as error:
    if not run_traces(config.input_dir, files):  # e.g. an images folder: a usage error
      raise errors.UsageError(f'{error} (and nothing else convert writes is there: not a '
                              'folder written by convert)')
    problem = validation.Problem('missing_dataset_info', 'dataset_info.json', -1, str(error))
    # No dataset to count: that one problem, not also "the dataset has no examples".
    nothing = {'splits': {}, 'label_map': [], 'options': {'allow_empty': True}}
    report = build_report(nothing, {}, {}, {}, [], [problem], config.expected_count,
                          config.max_problems)
    _write_report_if_possible(config.report_path, report)
    return report
  shards, listing_problems = shard_listing(config.input_dir, info, files)
  listing_problems += file_problems(config.input_dir, info, files)
  listing_problems += dataset_checks.byte_count_problems(
      info, split_bytes(config.input_dir, info, shards, files))
  listing_warnings, more = [], {}
  if config.recompute is not None:  # before the job: a usage error writes nothing
    (problems, listing_warnings, more['num_recomputed'],
     more['num_recompute_skipped']) = recompute.findings(
         config.input_dir, info, config.recompute, config.manifest, files)
    listing_problems += problems
  p = beam.Pipeline(
      runner=local_runner.for_options(pipeline_options), options=pipeline_options)
  # Its own: another validate of the dataset at once writes under another.
  report_temp = paths.temp_name(config.report_path)
  build(p, config.input_dir, info, shards, listing_problems, config.report_path,
        config.expected_count, config.max_problems, config.check_threads,
        config.check_processes, check_records, listing_warnings, more, report_temp)
  # A run that does not finish (an error, a signal) cancels its job and
  # leaves no half-written report behind (FileAccess.replacing writes it under
  # report_temp, then renames it), nor a whole one when the signal came as
  # the job ended (RunGuard: a signal Beam swallowed), so that "nothing was
  # checked" holds.
  # The job renames its report into place as its last step, before the job
  # ends: a signal then (on Flink about 1 s before the launcher learnt the
  # job ended) found this run's whole report there, kept under "nothing was
  # checked". So the report goes too when it is not what was there before.
  # On a Flink cluster, a job whose job server is gone is cancelled there too.
  report_before = _regular_bytes(config.report_path, files)
  guard = RunGuard(lambda: _delete_if_present(
      [report_temp] + ([config.report_path] if guard.job_done or _regular_bytes(
          config.report_path, files) != report_before else []), files))
  with flink_jobs.cancelled_if_abandoned(pipeline_options), guard:
    try:
      guard.run(p)
    except file_kinds.NotReplaced as error:  # a FIFO made there once the job started
      raise errors.UsageError(f'--report {config.report_path} cannot be written: '
                              f'{error}') from error
    except Exception:
      # That convert's --overwrite deleted the report's temp file before
      # its rename: "the job failed: FileNotFoundError" said nothing of why.
      _still_the_dataset_read(config.input_dir, info, pipeline_options, files)
      raise
    # A convert into the folder since dataset_info.json was read: the report
    # (deleted by the guard) judged the records of one dataset by another's.
    _still_the_dataset_read(config.input_dir, info, pipeline_options, files)
    if guard.job_done and not runners.is_dry_run(pipeline_options):
      interrupts.published(interrupts.VALIDATE_REPORTED_LINE)
  if runners.is_dry_run(pipeline_options):
    return None
  return json.loads(files.read_text(config.report_path))


def _still_the_dataset_read(input_dir: str, info: dict, pipeline_options,
                            files: filesystem.FileAccess) -> None:
  """UsageError unless input_dir still holds the dataset_info.json `info`
  was read from, with no convert writing there: a convert --overwrite that
  started while validate read left its report (INVALID for a valid dataset,
  or a verdict on a dataset no longer there) in the new dataset."""
  writer = live_holder(input_dir, pipeline_options, files)
  try:
    now = filesystem.read_info(input_dir, files)
  except InfoError:
    now = None
  why = f'{writer.describe()} is writing there' if writer is not None else how_changed(info, now)
  if why:
    raise errors.UsageError(f'--input_dir {input_dir} changed while validate read it ({why}); '
                            f'nothing was reported: validate it again'
                            + (' once that run has ended' if writer is not None else ''))


def _delete_if_present(targets: list, files: filesystem.FileAccess) -> None:
  """Deletes those of `targets` there, never a local one that is no regular
  file (a FIFO someone made at the report's name is theirs)."""
  present = [path for path in targets if files.exists(path)
             and (paths.is_remote(path) or not file_kinds.not_regular(path))]
  if present:
    files.delete(present)


def _regular_bytes(path: str, files: filesystem.FileAccess) -> Optional[bytes]:
  """The bytes of the file at `path`; None if there is none, or a local one
  that is no regular file (a FIFO would block the read)."""
  if not files.exists(path) or (not paths.is_remote(path) and file_kinds.not_regular(path)):
    return None
  return files.read_bytes(path)


def _write_report_if_possible(path: str, report: dict) -> None:
  try:
    filesystem.write_text(path, json.dumps(report, indent=2) + '\n')
  except Exception as error:  # e.g. the input folder itself does not exist
    print(f'note: could not write the report to {path}: {error}', file=sys.stderr)


def main(argv=None, check_records=validation.check_records) -> int:
  """The command line: run(argv) with exit codes; SIGINT, SIGTERM and SIGHUP clean up
  and end the process by the signal (exits.run_command)."""
  return exits.run_command(functools.partial(run, check_records=check_records), argv,
                         *interrupts.VALIDATE_LINES)


if __name__ == '__main__':
  startup.end()
  exits.exit_with(main, fast=True)
