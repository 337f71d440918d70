"""Writing a dataset's TFRecord shards per split: the ordered writer (--sink
ordered, the default) and its index files. Beam's WriteToTFRecord (--sink
tfrecordio) is in transforms/write_tfrecordio.py."""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from transforms import filesystem
from transforms.beam_util import AnyOutput
from transforms.beam_util import in_global_window
from transforms.buckets import BufferByBucketFn
from transforms.buckets import ExactKeyFn
from transforms.core import shuffle
from transforms.core.paths import is_remote
from transforms.core.spec import INDEX_SUFFIX
from transforms.core.spec import SOURCES_SUFFIX
from transforms.shard_file import GATHER_BYTES
from transforms.shard_file import ShardFile
from transforms.shard_file import abandoned_on_error
from transforms.shard_plan import ShardStartsFn
from transforms.shard_plan import SortedOrdersFn
from transforms.shard_plan import assign_capped_shards
from transforms.shard_plan import assign_shards
from transforms.shard_plan import record_bytes
from transforms.spill import SpilledReader
from transforms.spill import SpillRecordsFn
from transforms.spill import remove_spilled
from transforms.spill import spill_folder
from transforms.workers.write_behind import IN_PLACE
from transforms.workers.write_behind import WriteBehind
from transforms.workers.write_behind import WriteInPlace
from transforms.write_sources import SidecarFile
from transforms.write_sources import WriteSidecar
from transforms.write_sources import line_of

SOURCES = 'sources'  # _WriteShardFn's (order, sidecar line) of each record
# A round-robin writer keeps every shard open, and on a single local worker
# the writers of every split run side by side: all their open shards'
# gathered records (shard_file.GATHER_BYTES at most each) stay within this
# together, however many shards (a share smaller than a record writes each
# record as it comes). Up to 16 shards still gather 1 MB each. A floor per
# shard instead let --num_shards 2000 hold all of 4,000 96x96 records (110
# MB) until the end: peak RSS 236 MB against 125.
GATHERED_AT_ONCE = 16 << 20


def shard_path(prefix: str, index: int, num_shards: int, suffix: str) -> str:
  """PREFIX-00001-of-00004SUFFIX (Beam's own shard names; SHARD_NUMBERS_GLOB matches them)."""
  return f'{prefix}-{index:05d}-of-{num_shards:05d}{suffix}'


@dataclasses.dataclass(frozen=True)
class _ShardTarget:
  """Where a split's shards go and how each is written: what every writer below shares."""
  prefix: str
  suffix: str
  compression: str
  write_index: bool = False
  sources: str | None = None  # the split's sidecar (write_sources.py); None: none

  def sidecar(self, files: filesystem.FileAccess, path: str | None = None,
              behind: WriteBehind | WriteInPlace = IN_PLACE) -> SidecarFile | None:
    return SidecarFile(path or self.sources, files, behind) if self.sources else None

  def path(self, index: int, num_shards: int) -> str:
    return shard_path(self.prefix, index, num_shards, self.suffix)

  def create(self, path: str, files: filesystem.FileAccess | None = None,
             open_at_once: int = 1, behind: WriteBehind | WriteInPlace = IN_PLACE) -> ShardFile:
    """open_at_once: how many shards the run's writers keep open together,
    which share GATHERED_AT_ONCE bytes of gathered records. behind: the thread
    its gathered records are written on (IN_PLACE: the caller's)."""
    return ShardFile(path, self.compression, self.write_index, files,
                     min(GATHER_BYTES, GATHERED_AT_ONCE // max(open_at_once, 1)), behind)


class _InOrderWriterFn(AnyOutput, beam.DoFn):
  """What both single-worker shard writers share: batches of examples, each
  written in turn (write), must come in write order and in one bundle (rows are sorted before decoding on a single local
  worker; a runner that reordered or split them would otherwise go unnoticed)."""

  def __init__(self, target: _ShardTarget):
    self._target = target

  def setup(self):
    self._written = False  # a bundle of this split wrote its shards already
    self._files = filesystem.FileAccess()

  def start_bundle(self):
    self._last = None
    # Local shards are written on a thread of their own while this one goes
    # on (write_behind.py); an object store's handle uploads on its own.
    self._behind = IN_PLACE if is_remote(self._target.prefix) else WriteBehind()

  def process(self, batch):
    try:
      for example in batch:
        self.write(example)
    except Exception:
      # Once a batch, not a record (two context managers a record cost 2.5 us).
      for handle in self.open_files():
        handle.abandon()
      self._end_behind()
      raise

  def _end_behind(self) -> None:
    self._behind.close()

  def write(self, example) -> None:
    raise NotImplementedError

  def open_files(self) -> list:
    """The files a failed write abandons (abandoned_on_error)."""
    raise NotImplementedError

  def _check(self, example) -> None:
    if self._written:
      raise RuntimeError(f'{type(self).__name__} writes from a single bundle; '
                         'this runner split the examples into several')
    if self._last is not None and example.order < self._last:
      raise RuntimeError(f'record {example.key!r} reached the writer out of write order')
    self._last = example.order


class _WriteRoundRobinFn(_InOrderWriterFn):
  """BuiltExamples in write order -> N shard files, example i to shard i mod N.

  For a single local worker, whose one bundle brings the split's examples in
  write order: shards are written as the images come, no image is held back.
  Out (at the end of the bundle): the N shard paths (none for an empty split).
  """

  def __init__(self, target: _ShardTarget, num_shards: int, splits: int = 1):
    super().__init__(target)
    self._num_shards = num_shards
    self._open_at_once = num_shards * splits  # every split's writer keeps its shards open

  def start_bundle(self):
    super().start_bundle()
    self._shards, self._count, self._sidecar = [], 0, None

  def write(self, example) -> None:
    self._check(example)
    if not self._shards:
      self._shards = [self._target.create(self._path(i), self._files, self._open_at_once,
                                          self._behind) for i in range(self._num_shards)]
      self._sidecar = self._target.sidecar(self._files, behind=self._behind)
    shard = shuffle.shard_of(self._count, self._num_shards)
    span = self._shards[shard].write_record(example.data, example.framed)
    if self._sidecar:
      self._sidecar.add(line_of(example, shard, self._count // self._num_shards, span))
    self._count += 1

  def open_files(self) -> list:
    return self._shards + [self._sidecar] if self._sidecar else self._shards

  def finish_bundle(self):
    try:
      with abandoned_on_error([self._sidecar] if self._sidecar else []):
        for handle in self._shards:
          handle.close()
      if self._sidecar:  # before the thread ends: its last lines would start another
        self._sidecar.close()
    finally:
      self._end_behind()
    if self._shards:
      self._written = True
      for i in range(self._num_shards):
        yield in_global_window(self._path(i))
    if self._sidecar:
      yield in_global_window(self._sidecar.path)
    self._shards, self._sidecar = [], None

  def _path(self, index: int) -> str:
    return self._target.path(index, self._num_shards)


class _WriteSizeCappedFn(_InOrderWriterFn):
  """BuiltExamples in write order -> shards of about max_bytes each: consecutive
  runs of the write order (shuffle.SizeCappedShards, as a distributed runner
  cuts them too). For a single local worker, whose one bundle brings the
  split's examples in write order: written as the images come, one file open
  at a time. N is known only at the end, so shards are written in
  `beam-temp-<split>-shards/` (cleaned like Beam's temp folders) and renamed
  to PREFIX-0000i-of-0000N in write order.
  Out (at the end of the bundle): the shard paths (none for an empty split).
  """

  def __init__(self, target: _ShardTarget, max_bytes: int):
    super().__init__(target)
    self._max_bytes = max_bytes
    folder, split = target.prefix.rsplit('/', 1)
    self._temp_dir = f'{folder}/beam-temp-{split}-shards'

  def start_bundle(self):
    super().start_bundle()
    self._file, self._count, self._ordinal = None, 0, 0
    self._cuts = shuffle.SizeCappedShards(self._max_bytes)
    self._sidecar = None

  def write(self, example) -> None:
    self._check(example)
    shard = self._cuts.add(shuffle.framed_size(len(example.data)))
    if shard == self._count:
      if self._file:
        self._file.close()
      else:
        self._sidecar = self._target.sidecar(
            self._files, self._temp_path(0, suffix=SOURCES_SUFFIX), self._behind)
      self._file = self._target.create(self._temp_path(shard), self._files, behind=self._behind)
      self._count, self._ordinal = self._count + 1, 0
    span = self._file.write_record(example.data, example.framed)
    if self._sidecar:
      self._sidecar.add(line_of(example, shard, self._ordinal, span))
    self._ordinal += 1

  def open_files(self) -> list:
    return [handle for handle in (self._file, self._sidecar) if handle]

  def finish_bundle(self):
    if not self._file:
      return
    try:
      with abandoned_on_error([self._sidecar] if self._sidecar else []):
        self._file.close()
      if self._sidecar:  # before the thread ends: its last lines would start another
        self._sidecar.close()
    finally:
      self._end_behind()
    self._file, self._written = None, True
    for i in range(self._count):
      final = self._target.path(i, self._count)
      temps, finals = [self._temp_path(i)], [final]
      if self._target.write_index:
        temps.append(self._temp_path(i) + INDEX_SUFFIX)
        finals.append(final + INDEX_SUFFIX)
      # A rename replaces an earlier attempt's file (see filesystem.replacing).
      self._files.rename(temps, finals)
      yield in_global_window(final)
    if self._sidecar:  # after the shards it indexes
      self._files.rename([self._sidecar.path], [self._target.sources])
      yield in_global_window(self._target.sources)
    if self._files.exists(self._temp_dir):  # object stores have no folders
      self._files.delete([self._temp_dir])

  def _temp_path(self, index: int, suffix: str | None = None) -> str:
    return f'{self._temp_dir}/{index:05d}{suffix or self._target.suffix}'


class _WriteShardFn(beam.DoFn):
  """(shard index, [(order, BuiltExample), ...]) -> that shard file, records in
  write order; with a sidecar, each record's (order, line) under SOURCES."""

  def __init__(self, target: _ShardTarget):
    self._target = target

  def setup(self):
    self._files = filesystem.FileAccess()

  def process(self, grouped, num_shards):
    index, records = grouped
    path = self._target.path(index, num_shards)
    lines = []
    with self._target.create(path, self._files) as shard, SpilledReader() as spilled:
      for ordinal, (order, example) in enumerate(sorted(records, key=lambda r: r[0])):
        span = shard.write_record(example.data, spilled.framed(example.spilled)
                                  if example.spilled else example.framed)
        if self._target.sources:
          lines.append((order, line_of(example, index, ordinal, span)))
    yield path
    for line in lines:
      yield beam.pvalue.TaggedOutput(SOURCES, line)


def _empty_shards(_, target: _ShardTarget, sorted_orders, num_shards):
  """Shards that got no record (a split of fewer examples than shards): the
  last ones of the round robin. A split without examples gets no shard."""
  if not sorted_orders:
    return []
  paths = [target.path(i, num_shards) for i in range(len(sorted_orders), num_shards)]
  for path in paths:
    target.create(path).close()
  return paths


class WriteShards(beam.PTransform):
  """Batches of BuiltExamples of one split -> `PREFIX-00000-of-0000N.tfrecord[.gz]` files.

  Records are written in their write order (BuiltExample.order).
  num_shards=N: example of rank i in the write order goes to shard i mod N.
  num_shards=0: shards are consecutive runs of the write order, each rolled
  over once it holds max_bytes_per_shard (shuffle.SizeCappedShards).
  in_order (a single local worker, whose examples arrive in write order, as
  rows were sorted before decoding): written as the images come; no image goes
  through a shuffle and memory stays flat. Otherwise (distributed runners):
  the same shards, through the runner's shuffle (the records in lists per
  shard and bundle, buckets.py), each sorted by order; with a local prefix,
  the records' bytes wait in files meanwhile and only their places are
  shuffled (transforms/spill.py). Either way the shards are the same on every
  run and every runner.
  write_index: an `<shard>.index` beside each (uncompressed) shard.
  sources: also the split's sidecar, `PREFIX.sources.jsonl.gz` (write_sources.py).
  splits: how many splits' writers run side by side (in_order: their open
  shards share GATHERED_AT_ONCE).
  Out: the shard paths (and the sidecar's).
  """

  def __init__(self, file_path_prefix: str, suffix: str, compression: str,
               num_shards: int = 0, max_bytes_per_shard: int | None = None,
               in_order: bool = False, write_index: bool = False, sources: bool = False,
               splits: int = 1):
    super().__init__()
    if write_index and compression == 'gzip':
      raise ValueError('gzip shards cannot be indexed (offsets are in the compressed stream)')
    self._target = _ShardTarget(file_path_prefix, suffix, compression, write_index,
                                file_path_prefix + SOURCES_SUFFIX if sources else None)
    self._num_shards = num_shards
    self._max_bytes = max_bytes_per_shard
    self._in_order = in_order
    self._splits = splits
    self._spill = None if in_order or is_remote(file_path_prefix) else spill_folder(
        file_path_prefix)

  def expand(self, examples):
    if self._in_order and self._num_shards:
      return examples | 'WriteRoundRobin' >> beam.ParDo(_WriteRoundRobinFn(
          self._target, self._num_shards, self._splits))
    if self._in_order:
      return examples | 'WriteSizeCapped' >> beam.ParDo(_WriteSizeCappedFn(
          self._target, self._max_bytes))
    side = beam.pvalue
    # batches of BuiltExamples, with a local prefix their bytes in files (spilled)
    placed = examples | 'SpillRecords' >> beam.ParDo(
        SpillRecordsFn(self._spill)) if self._spill else examples
    # (shard index, [(order, BuiltExample), ...]) per bundle -> GroupByShard ->
    # _WriteShardFn over each shard's lists, one after another
    write_shard = ExactKeyFn(_WriteShardFn(self._target))
    if not self._num_shards:
      starts = (examples
                | 'OrdersAndSizes' >> beam.FlatMap(
                    lambda batch: [(e.order, shuffle.framed_size(len(e.data))) for e in batch])
                | 'ShardStarts' >> beam.CombineGlobally(ShardStartsFn(self._max_bytes)))
      return self._removing_spilled(self._with_sidecar(
          placed
          | 'AssignShard' >> beam.ParDo(BufferByBucketFn(assign_capped_shards, record_bytes),
                                        side.AsSingleton(starts))
          | 'GroupByShard' >> beam.GroupByKey()
          | 'WriteShard' >> beam.ParDo(write_shard, side.AsSingleton(
              starts | 'NumShards' >> beam.Map(len))).with_outputs(SOURCES, main='paths')))
    orders = (examples
              | 'Orders' >> beam.FlatMap(lambda batch: [e.order for e in batch])
              | 'SortedOrders' >> beam.CombineGlobally(SortedOrdersFn()))
    written = self._with_sidecar(
        placed
        | 'AssignShard' >> beam.ParDo(BufferByBucketFn(assign_shards, record_bytes),
                                      side.AsSingleton(orders), self._num_shards)
        | 'GroupByShard' >> beam.GroupByKey()
        | 'WriteShard' >> beam.ParDo(write_shard, self._num_shards).with_outputs(
            SOURCES, main='paths'))
    empty = (examples.pipeline
             | 'Once' >> beam.Impulse()
             | 'EmptyShards' >> beam.FlatMap(
                 _empty_shards, self._target, side.AsSingleton(orders), self._num_shards))
    return self._removing_spilled((written, empty) | 'ShardPaths' >> beam.Flatten())

  def _removing_spilled(self, paths):
    """The written paths, once the spill folder (if any) is gone: what
    follows them (dataset_info.json) finds no temp folder left."""
    if not self._spill:
      return paths
    removed = (paths.pipeline
               | 'OnceWritten' >> beam.Impulse()
               | 'RemoveSpilled' >> beam.FlatMap(remove_spilled, self._spill,
                                                 beam.pvalue.AsList(paths)))
    return (paths, removed) | 'PathsAfterSpill' >> beam.Flatten()

  def _with_sidecar(self, written):
    """The shard writers' outputs -> the shard paths and, with a sidecar, its path."""
    if not self._target.sources:
      return written['paths']
    sidecar = written[SOURCES] | 'WriteSidecar' >> WriteSidecar(self._target.sources)
    return (written['paths'], sidecar) | 'WithSidecar' >> beam.Flatten()
