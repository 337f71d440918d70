"""validate's checks of the files beside the shards (core/side_files.py):
each shard's first bytes against dataset_info.json's compression, read by
ReadShardFn before the shard; the index files and sidecars against the
records' places (RecordPlace), where a split's places meet (RecordFacts on
a single local worker, a GroupByKey by split on the others)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from transforms import filesystem
from transforms.core import reuse
from transforms.core import side_files
from transforms.core.record_facts import RecordFacts
from transforms.core.spec import INDEX_SUFFIX

# More than any `offset length` line of an index (two 20-digit numbers).
INDEX_LINE_BYTES = 64


@dataclasses.dataclass(frozen=True)
class SideFiles:
  """Which files beside the shards dataset_info.json declares, and where."""
  input_dir: str
  schema: str
  index_files: bool  # an index beside each shard (sink.index_files)
  sidecars: dict  # split -> (sidecar name, [its shards, by their number in its lines])
  version: Optional[int] = None  # sources_format_version
  # shards with an index on disk that sink.index_files does not declare
  indexed: frozenset = frozenset()
  # sink.record_order 'shuffled': each shard's records in the order of this
  # --seed's hash of their keys (side_files.order_problems); None: unchecked
  order_seed: Optional[int] = None
  # with order_seed: --num_shards N (side_files.placement_problems), and
  # split -> (its listed shards, its num_examples); 0: shards cut by size,
  # placement unchecked. Checked last, for a split read whole (no damaged
  # shard) whose index, order and sidecar checks found nothing
  num_shards: int = 0
  shard_lists: dict = dataclasses.field(default_factory=dict)

  @classmethod
  def from_info(cls, input_dir: str, info: dict) -> SideFiles:
    sidecars = {split: (side_files.sidecar_name(info, split), list(entry['shards']))
                for split, entry in info['splits'].items()
                if side_files.sidecar_name(info, split) is not None}
    declared = side_files.declares_index_files(info)
    return cls(input_dir, info['schema'], declared, sidecars, info.get('sources_format_version'),
               frozenset() if declared else undeclared_indexes(input_dir, info),
               side_files.shuffled_seed(info), side_files.fixed_num_shards(info),
               {split: (list(entry['shards']), entry['num_examples'])
                for split, entry in info['splits'].items()})

  @property
  def needed(self) -> bool:
    """Whether the records' places are to be gathered at all."""
    return (self.index_files or bool(self.indexed) or bool(self.sidecars)
            or self.order_seed is not None)

  def problems(self, split: str, places) -> list:
    """[Problem] of `split`'s index files and sidecar against its records'
    places (every record of the split read, in any order), and of each
    shard's record order (order_seed)."""
    places = sorted(places)
    files = filesystem.FileAccess()
    problems, by_shard = [], {}
    for place in places:
      by_shard.setdefault(place.shard, []).append(place)
    for shard, shard_places in sorted(by_shard.items()):
      if self.index_files or shard in self.indexed:
        problems += self._index(files, shard + INDEX_SUFFIX, shard_places)
      if self.order_seed is not None:
        problems += side_files.order_problems(shard, shard_places, self.order_seed)
    if split in self.sidecars:
      problems += self._sidecar(files, split, places)
    shards, count = self.shard_lists.get(split, ([], None))
    if self.order_seed is not None and not problems and len(places) == count:
      # read whole, every side file agreeing: were its records dealt to the right shards?
      problems += side_files.placement_problems(split, shards, places, self.order_seed,
                                                self.num_shards)
    return problems

  def _index(self, files, name: str, places: list) -> list:
    try:
      with files.open(filesystem.join(self.input_dir, name)) as stream:
        # enough for every record's line (each under INDEX_LINE_BYTES): a
        # longer file differs past them, and a huge one is not held whole
        text = stream.read(INDEX_LINE_BYTES * (len(places) + 1))
    except filesystem.read_errors():
      return [side_files.missing_index(name)]
    return side_files.index_problems(name, text, places)

  def _sidecar(self, files, split: str, places: list) -> list:
    name, shards = self.sidecars[split]
    if self.version not in (1, 2):
      return [side_files.missing_sidecar(name, ValueError(
          f'sources_format_version {self.version!r} is not one this tool reads'))]
    try:
      with files.open_checked(filesystem.join(self.input_dir, name)) as stream:
        return side_files.sidecar_problems(name, reuse.read_lines(stream), split, shards,
                                           places, self.version, self.schema)
    except filesystem.read_errors() as error:  # no such file, or it cannot be opened
      return [side_files.missing_sidecar(name, error)]

  def into_facts(self, facts: RecordFacts) -> RecordFacts:
    """facts with the problems of every split's side files added (a single
    local worker, where every record's place is in `facts`)."""
    for split, places in sorted(facts.places.items()):
      for problem in self.problems(split, places):
        facts.add_problem(problem)
    facts.places = {}
    return facts


def undeclared_indexes(input_dir: str, info: dict) -> frozenset:
  """The listed shards with a `<shard>.index` beside them though
  dataset_info.json's sink.index_files is not true (one the tfrecord
  package's tfrecord2idx wrote, or one left when that flag was edited):
  readers that seek by it (the tfrecord package, DALI) trust it all the
  same, so it is checked as a declared one. One listing of the folder."""
  names = {path.replace('\\', '/').rsplit('/', 1)[-1]
           for path, _ in filesystem.FileAccess().list(filesystem.join(input_dir, ''))}
  return frozenset(shard for entry in info['splits'].values() for shard in entry['shards']
                   if shard + INDEX_SUFFIX in names)


def compression_problem(files: filesystem.FileAccess, path: str, shard: str,
                        declared: Optional[str]) -> tuple:
  """side_files.compression_problem of the shard at `path`, from its first
  bytes; (None, True) when it cannot be opened (reading it names that)."""
  try:
    with files.open(path) as stream:
      head = stream.read(side_files.HEAD_BYTES)
  except filesystem.read_errors():
    return None, True
  return side_files.compression_problem(declared, shard, head)
