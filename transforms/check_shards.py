"""Beam steps of validate: read every shard, check every record, sum up."""

from __future__ import annotations

from typing import Optional
import zlib

import apache_beam as beam

from transforms import filesystem
from transforms.beam_util import FIRST_PROBLEMS
from transforms.beam_util import FIRST_WARNINGS
from transforms.beam_util import PROBLEMS
from transforms.beam_util import SUMMARIES
from transforms.beam_util import TALLY_SUMS
from transforms.beam_util import WARNINGS
from transforms.beam_util import counter
from transforms.beam_util import in_global_window
from transforms.check_side_files import SideFiles
from transforms.check_side_files import compression_problem
from transforms.core import dataset_checks
from transforms.core import paths
from transforms.core import record_facts
from transforms.core import validation
from transforms.core.image import prepare_pillow
from transforms.core.side_files import COMPRESSION_MISMATCH
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import plan_spans
from transforms.core.tfrecord import read_framed
from transforms.workers.child_process import WorkerDied
from transforms.workers.ordered_pool import OrderedPool
from transforms.workers.pooled_step import PooledStep
from transforms.workers.pooled_step import PoolSize
from transforms.workers.shard_span import check_span
from transforms.workers.shard_span import read_failure

# Records per call to a check worker process: one pipe round trip per batch.
PROCESS_BATCH = 32
# Bytes of a local shard one check process reads and checks per call (spans).
SPAN_BYTES = 8 << 20


class ReadShardFn(beam.DoFn):
  """(split, shard name) -> RecordSummary per record; Problems under PROBLEMS,
  a record's warnings (validation.RECORD_WARNING_KINDS) under WARNINGS.
  With gather: one RecordFacts of the bundle's records and problems instead
  (at the end of the bundle; it keeps the first max_problems problems).

  A damaged file is a Problem naming the file and record, never a failed job.
  With span_processes > 0, a local uncompressed shard is cut into spans of
  SPAN_BYTES (whole_shards: a span is a whole shard) that that many child
  processes read, verify and check themselves (check_span): shards are read
  concurrently, and no record crosses a pipe. Other shards are read by this
  thread, which verifies the framing; with threads > 1 their records are
  checked on a PooledStep (JPEG/PNG decoding releases the GIL), with
  processes > 0 in that many child processes, in batches. `check`: what
  checks a batch of records (tests swap it). Only the global window is used
  (outputs of finish_bundle are placed in it).
  """

  def __init__(self, input_dir: str, expected: validation.Expected, threads: int = 1,
               processes: int = 0, check=validation.check_records, span_processes: int = 0,
               gather: bool = False, whole_shards: bool = False, max_problems: int = 100,
               places: bool = False):
    self._input_dir = input_dir
    self._places = places  # each summary with its framing and sides (check_side_files)
    self._whole_shards = whole_shards
    self._gather = gather
    self._max_problems = max_problems
    self._facts = None
    self._expected = expected
    self._check = check
    self._step = PooledStep(PoolSize(threads, processes), PROCESS_BATCH)
    self._span_processes = span_processes
    self._spans = None
    self._ended = set()
    self._records = counter('records_validated')

  def setup(self):
    self._files = filesystem.FileAccess()
    prepare_pillow(self._expected.image.max_pixels)
    self._step.start(self._call)
    if self._span_processes:
      self._spans = OrderedPool(self._span_processes, processes=True)

  def teardown(self):
    self._step.close()
    if self._spans is not None:
      self._spans.shutdown()
      self._spans = None

  def process(self, element):
    split, shard = element
    path = filesystem.join(self._input_dir, shard)
    mismatch, readable = compression_problem(self._files, path, shard,
                                             self._expected.compression)
    if mismatch:
      yield from self._gathered([self._problem(COMPRESSION_MISMATCH, shard, -1, mismatch)])
    if not readable:  # read as its name says, it would only fail at record 0
      return
    spans = self._plan(path)
    if spans is None:
      yield from self._gathered(self._read_here(split, shard))
    else:
      yield from self._gathered(self._read_in_spans(split, shard, path, spans))

  def _plan(self, path: str):
    """The spans to check `path` in, in worker processes; None: read it here
    (no span processes, a remote or compressed file, or one that cannot be
    opened: reading it here names the problem as ever)."""
    if self._spans is None or paths.is_remote(path) or path.endswith('.gz'):
      return None
    try:
      with open(path, 'rb') as stream:
        return [(0, 0, None)] if self._whole_shards else plan_spans(stream, SPAN_BYTES)
    except OSError:
      return None

  def start_bundle(self):
    self._ended = set()  # shards whose reading ended in damage
    self._facts = record_facts.RecordFacts(self._max_problems) if self._gather else None

  def finish_bundle(self):
    if self._spans is not None:
      for due in self._spans.drain():
        for output in self._gathered(self._span_done(*due)):
          yield in_global_window(output)
    if self._facts is not None and self._facts.tallies:
      yield in_global_window(self._facts)
    self._facts = None

  def _gathered(self, outputs):
    """outputs, but with gather a problem or warning goes into the bundle's facts."""
    for output in outputs:
      if self._facts is None or not isinstance(output, beam.pvalue.TaggedOutput):
        yield output
      elif output.tag == PROBLEMS:
        self._facts.add_problem(output.value)
      elif output.tag == WARNINGS:
        self._facts.add_warning(output.value)
      else:
        yield output

  def _read_in_spans(self, split, shard, path, spans):
    """Spans go to the check processes, which read and check them; results
    come back in order, the last ones in finish_bundle (so the processes go
    on to the next shard's spans meanwhile). After a span that ends in damage,
    the rest of its shard is not reported (read_records stops there)."""
    for span in spans:
      for due in self._spans.submit((split, shard, path, span), check_span, path, *span,
                                    self._check, self._expected):
        yield from self._span_done(*due)

  def _span_done(self, tag, future):
    split, shard, path, span = tag
    try:
      first, results, failure, places = future.result()
    except WorkerDied:  # a record killed its process: again, one record at a time
      first, results, failure, places = check_span(path, *span, self._check_alone,
                                                   self._expected)
    if shard in self._ended:
      return
    self._records.inc(len(results))
    yield from self._summarise(split, shard, [((first + i, None, place), result)
                                              for i, (result, place)
                                              in enumerate(zip(results, places))])
    if failure is not None:
      self._ended.add(shard)
      yield self._problem(failure[0], shard, failure[1], failure[2])

  def _check_alone(self, records: list, expected) -> list:
    """check(records) with each record in a process of its own call: only a
    record that kills its worker gets the WorkerDied (as PooledStep does)."""
    return [self._spans.batch_results(self._spans.call_alone(self._check, [data], expected),
                                      1, lambda _, data=data: (self._check, [data], expected))[0]
            for data in records]

  def _read_here(self, split, shard):
    read = 0  # records read whole: the index of the first one not read
    try:
      with self._files.open_checked(filesystem.join(self._input_dir, shard)) as stream:
        for index, data, place in read_framed(stream):
          self._records.inc()
          read = index + 1
          yield from self._summarise(split, shard, self._step.add((index, data, place)))
    except ShardError as error:
      yield self._problem(error.kind, shard, error.index, error.detail)
    except EOFError as error:
      yield self._problem('truncated_shard', shard, read,
                          f'compressed file ends early, inside record {read} '
                          f'({read} read whole): {error}')
    except (zlib.error, OSError) as error:
      kind, record, detail = read_failure(error, read)
      yield self._problem(kind, shard, record, detail)
    yield from self._summarise(split, shard, self._step.flush())

  def _call(self, batch: list) -> tuple:
    """(function, *args) checking these (index, record, place) items on the pool."""
    return self._check, [data for _, data, _ in batch], self._expected

  def _summarise(self, split, shard, done: list):
    for (index, _, place), result in done:
      if isinstance(result, Exception):  # the record killed its worker process
        result = validation.unexpected_check_error(result)
      label, key, problems, sha256, unique, sides = result
      problems = problems + dataset_checks.split_problems(
          self._expected.split_rule, split, key, sha256)
      summary = validation.RecordSummary(
          split, shard, index, label, key, sha256, unique,
          *((place, sides or ()) if self._places else ()))
      if self._facts is None:
        yield summary
      else:
        self._facts.add(summary)
      for kind, detail in problems:
        yield self._problem(kind, shard, index, detail)

  @staticmethod
  def _problem(kind, shard, index, detail):
    """A Problem under PROBLEMS, or under WARNINGS for a record warning."""
    return beam.pvalue.TaggedOutput(
        WARNINGS if kind in validation.RECORD_WARNING_KINDS else PROBLEMS,
        validation.Problem(kind, shard, index, detail))


class _MergeFactsFn(beam.CombineFn):
  """RecordFacts of bundles -> one RecordFacts of every record."""

  def __init__(self, max_problems: int):
    super().__init__()
    self._max_problems = max_problems

  def create_accumulator(self):
    return record_facts.RecordFacts(self._max_problems)

  def add_input(self, facts, more):
    return facts.merge(more)

  def merge_accumulators(self, accumulators):
    accumulators = iter(accumulators)
    merged = next(accumulators)
    for facts in accumulators:
      merged.merge(facts)
    return merged

  def extract_output(self, facts):
    return facts


class CheckShards(beam.PTransform):
  """(split, shard name) pairs -> {TALLY_SUMS: (tally key, sum) pairs of the
  records' shards and labels and of the problems' and warnings' kinds,
  FIRST_PROBLEMS: one list of the first max_problems Problems, FIRST_WARNINGS:
  one list of the first warnings (findings that do not make the dataset
  invalid)}; the two lists are missing when there is nothing to report.

  spread (distributed runners): reshuffle the shards first, so they are read
  on many workers; each record's summary is then grouped by name (duplicate
  keys, detection's source ids) and by source digest (copies across
  splits), and the tallies and findings are combined. Without spread (a single local worker), the reader
  gathers its records' facts and problems itself (RecordFacts), one element
  per bundle, merged into one, from which the three outputs come. Validate of
  12,000 raw records went from 4.33 s to 4.14 s with the facts (the whole
  process, median of 3, interleaved; the report is the same); the problems in
  the facts too took the run from 12 stages to 3: a 10-record validate run in
  a process that had run one, 0.38 -> 0.25-0.34 s.
  span_processes, whole_shards: see ReadShardFn.
  """

  def __init__(self, input_dir: str, expected: validation.Expected, threads: int = 1,
               processes: int = 0, spread: bool = True, check=validation.check_records,
               span_processes: int = 0, whole_shards: bool = False, max_problems: int = 100,
               side_files: Optional[SideFiles] = None):
    super().__init__()
    self._side = side_files if side_files is not None and side_files.needed else None
    self._read = ReadShardFn(input_dir, expected, threads, processes, check, span_processes,
                             gather=not spread, whole_shards=whole_shards,
                             max_problems=max_problems, places=self._side is not None)
    self._spread = spread
    self._max_problems = max_problems

  def expand(self, shards):
    if self._spread:  # one shard per worker on distributed runners
      shards = shards | 'SpreadShards' >> beam.Reshuffle()
    read = (shards
            | 'ReadShard' >> beam.ParDo(self._read)
            .with_outputs(PROBLEMS, WARNINGS, main=SUMMARIES))
    if not self._spread:
      # one (tally sums, first problems, first warnings); none without records
      found = (read[SUMMARIES]
               | 'AllFacts' >> beam.CombineGlobally(
                   _MergeFactsFn(self._max_problems)).without_defaults()
               | 'ReportInputs' >> beam.Map(self._report_inputs))
      return {TALLY_SUMS: found | 'TallySums' >> beam.FlatMap(lambda f: f[0].items()),
              FIRST_PROBLEMS: found | 'FirstProblems' >> beam.Map(lambda f: f[1]),
              FIRST_WARNINGS: found | 'FirstWarnings' >> beam.Map(lambda f: f[2])}
    summaries = read[SUMMARIES]
    duplicates = (summaries
                  | 'KeyedPlaces' >> beam.FlatMap(
                      lambda s: [(name, (s.shard, s.record)) for name in s.names()])
                  | 'GroupByKey' >> beam.GroupByKey()
                  | 'Duplicates' >> beam.FlatMapTuple(
                      lambda name, places: record_facts.duplicate_key_problems(
                          name, list(places))))
    copies = (summaries
              | 'ContentPlaces' >> beam.FlatMap(
                  lambda s: [(s.sha256, (s.split, s.shard, s.record, s.key))]
                  if s.sha256 else [])
              | 'GroupByContent' >> beam.GroupByKey()
              | 'CrossSplitCopies' >> beam.FlatMapTuple(
                  lambda sha, places: record_facts.cross_split_copies(sha, list(places))))
    found = [read[PROBLEMS], duplicates]
    if self._side is not None:  # a split's records' places meet its side files
      found.append(summaries
                   | 'SplitPlaces' >> beam.FlatMap(
                       lambda s: [(s.split, s.place())] if s.framing else [])
                   | 'GroupBySplit' >> beam.GroupByKey()
                   | 'SideFiles' >> beam.FlatMapTuple(self._side.problems))
    problems = found | 'AllProblems' >> beam.Flatten()
    warnings = (read[WARNINGS], copies) | 'AllWarnings' >> beam.Flatten()
    tallies = (summaries | 'TallySummaries' >> beam.FlatMap(record_facts.summary_tallies),
               problems | 'TallyProblems' >> beam.Map(record_facts.problem_tally),
               warnings | 'TallyWarnings' >> beam.Map(record_facts.warning_tally))
    # Without Beam's default value (four more steps and a stage each): an empty
    # input gives no list, and the report's side inputs supply [].
    return {
        TALLY_SUMS: (tallies | 'AllTallies' >> beam.Flatten()
                     | 'SumTallies' >> beam.CombinePerKey(sum)),
        FIRST_PROBLEMS: problems | 'FirstProblems' >> beam.combiners.Top.Smallest(
            self._max_problems, key=validation.Problem.sort_key, has_defaults=False),
        FIRST_WARNINGS: warnings | 'FirstWarnings' >> beam.combiners.Top.Smallest(
            self._max_problems, key=validation.Problem.sort_key, has_defaults=False)}


  def _report_inputs(self, facts: record_facts.RecordFacts) -> tuple:
    if self._side is not None:
      facts = self._side.into_facts(facts)
    return facts.report_inputs()
