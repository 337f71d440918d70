"""The files beside the shards checked against the records as read: each
shard's index file (--write_index), each split's sidecar
(SPLIT.sources.jsonl.gz), and each shard's compression against
dataset_info.json's. Readers trust them without reading the records: the
`tfrecord` package and DALI seek by the index, a later convert
--previous_dataset copies records (and keeps their labels) by the sidecar,
and read.load decompresses by dataset_info.json. Plain functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional
import zlib

from transforms.core import reuse
from transforms.core.shuffle import Ordering
from transforms.core.spec import COMPRESSIONS
from transforms.core.spec import SOURCES_SUFFIX
from transforms.core.tfrecord import starts_with_a_record
from transforms.core.validation import Problem
from transforms.core.validation import RecordPlace
from transforms.core.validation import sidecar_features

INDEX_MISMATCH = 'index_mismatch'
SIDECAR_MISMATCH = 'sidecar_mismatch'
COMPRESSION_MISMATCH = 'compression_mismatch'
WRONG_RECORD_ORDER = 'wrong_record_order'
GZIP_MAGIC = b'\x1f\x8b'
# The bytes of a shard's start that tell gzip from a plain record header.
HEAD_BYTES = 12


def declares_index_files(info: dict) -> bool:
  """Whether dataset_info.json promises an index file beside each shard."""
  sink = info.get('sink')
  return isinstance(sink, dict) and sink.get('index_files') is True


def sidecar_name(info: dict, split: str) -> Optional[str]:
  """The name of `split`'s sidecar; None for a dataset written without them
  (--sink tfrecordio, or before sidecars existed: no sources_format_version)."""
  if info.get('sources_format_version') is None:
    return None
  return info['splits'][split].get('sources') or split + SOURCES_SUFFIX


def index_problems(index_name: str, text: bytes, places: list) -> list:
  """The index file `index_name` (its bytes) against its shard's records
  read (RecordPlace, in order): one index_mismatch at the first line that
  differs, or for the lines past the records."""
  lines = text.decode('utf-8', 'replace').split('\n')
  if lines[-1] == '':  # the last line's newline
    lines.pop()
  for place in places:
    expected = f'{place.offset} {place.length}'
    found = lines[place.record] if place.record < len(lines) else None
    if found != expected:
      said = f'is {found!r}' if found is not None else 'is missing'
      return [Problem(INDEX_MISMATCH, index_name, place.record,
                      f'line {place.record + 1} {said}; record {place.record} is at byte '
                      f'{place.offset}, {place.length} bytes framed: {expected!r}')]
  if len(lines) > len(places):
    return [Problem(INDEX_MISMATCH, index_name, len(places),
                    f'{len(lines)} lines, for {len(places)} record(s) read from the shard: '
                    f'line {len(places) + 1} is {lines[len(places)]!r}')]
  return []


def shuffled_seed(info: dict) -> Optional[int]:
  """The --seed of the write order when dataset_info.json's sink.record_order
  says 'shuffled' (the ordered writer's --shuffle on); None: no order to check
  (--shuffle off, --sink tfrecordio's arrival order, a dataset before it)."""
  sink, config = info.get('sink'), info.get('config')
  if not isinstance(sink, dict) or sink.get('record_order') != 'shuffled':
    return None
  return (config.get('seed') if isinstance(config, dict) else None) or 0


def order_problems(shard: str, places: list, seed: int) -> list:
  """A shard's records read (RecordPlace, in record order) against the order
  sink.record_order 'shuffled' promises: by the salted hash of each key
  (core/shuffle.Ordering, ties by key), however the writer cut the shards.
  Records in manifest order, or by another seed, passed every other check,
  and a reader that does not shuffle read them so (an --image_dir by
  class). One problem a shard, at its first record out of order; records
  without a key (their features did not check, an empty_key, --schema seed)
  are skipped."""
  ordering, before = Ordering(shuffle=True, seed=seed), None
  for place in places:
    if not place.key:
      continue
    here = (ordering.key(place.key, 0), place.key)
    if before is not None and here < before[0]:
      return [Problem(WRONG_RECORD_ORDER, shard, place.record, (
          f'record {place.record} (key {place.key!r}) comes after record {before[1].record} '
          f'(key {before[1].key!r}), which the write order puts after it: '
          f"dataset_info.json's sink.record_order says 'shuffled' (each shard's records "
          f'by a salted hash of their key, --seed {seed})'))]
    before = (here, place)
  return []


def fixed_num_shards(info: dict) -> int:
  """config.num_shards when it forces N shards a split (--num_shards N); 0:
  shards rolled over by size, or the runner's."""
  config = info.get('config')
  number = config.get('num_shards') if isinstance(config, dict) else None
  return number if isinstance(number, int) and not isinstance(number, bool) and number > 0 else 0


def placement_problems(split: str, shards: list, places: list, seed: int,
                       num_shards: int) -> list:
  """A split's records read (RecordPlace) against the shards --num_shards N
  deals them to: in write order (the salted hash of each key), round robin,
  the record of rank r in shard r % N as its record r // N (shuffle.shard_of).
  Each shard's own order holding, a record swapped with one of another shard,
  or dropped with every count and side file made to match, is out of place.
  One problem a split, at the first record out of place; a split holding a
  record without a key, or listing other than N shards, is not checked."""
  number = {shard: index for index, shard in enumerate(shards)}
  if (not num_shards or len(shards) != num_shards
      or any(not place.key or place.shard not in number for place in places)):
    return []
  ordering = Ordering(shuffle=True, seed=seed)
  ranked = sorted(places, key=lambda place: (ordering.key(place.key, 0), place.key))
  for rank, place in enumerate(ranked):
    shard, record = shards[rank % num_shards], rank // num_shards
    if (place.shard, place.record) != (shard, record):
      return [Problem(WRONG_RECORD_ORDER, place.shard, place.record, (
          f'record {place.record} (key {place.key!r}) is record {rank} of split {split!r} '
          f'in write order, which --num_shards {num_shards} deals to {shard} as its record '
          f"{record}: dataset_info.json's sink.record_order says 'shuffled' (a split's "
          f'records dealt round robin to its shards by a salted hash of their key, --seed {seed})'))]
  return []


def missing_index(index_name: str) -> Problem:
  return Problem(INDEX_MISMATCH, index_name, -1,
                 "missing: dataset_info.json's sink.index_files says each shard has one")


def _plain(value):
  """A list or tuple (multi-label, detection) as a tuple, to compare."""
  return tuple(_plain(v) for v in value) if isinstance(value, (list, tuple)) else value


def _differences(key: str, line: reuse.PreviousRecord, place: RecordPlace,
                 schema: str) -> Optional[str]:
  """What of a sidecar line differs from its record: the first field in
  full ('label.id is 1, the record's 0'), the others by name; None if
  nothing does (fields the record did not give, or a version-1 line lacks,
  are not compared)."""
  said = {'key': key, 'label.id': line.label_id, 'label.text': line.label_text,
          'image': line.image, 'source_sha256': line.source_sha256,
          'data_crc': line.data_crc, 'offset': line.offset, 'length': line.length}
  actual = dict(zip((field for field, _ in sidecar_features(schema)), place.sides))
  actual.update({'label.id': place.label, 'data_crc': place.data_crc,
                 'offset': place.offset, 'length': place.length})
  differ = [field for field in said  # in this order: what tells most first
            if actual.get(field) is not None and said[field] is not None
            and _plain(said[field]) != _plain(actual[field])]
  if not differ:
    return None
  first = f"{differ[0]} is {said[differ[0]]!r}, the record's {actual[differ[0]]!r}"
  return first + (f" (also {', '.join(differ[1:])})" if differ[1:] else '')


def sidecar_problems(name: str, lines: Iterable[bytes], split: str, shards: list,
                     places: list, version: int, schema: str) -> list:
  """The sidecar `name` of `split` (its lines; reading them may raise what
  a damaged gzip raises) against the split's records read (RecordPlace):
  one line per record, each shard's records in order, and each line's
  fields the record's. A sidecar_mismatch per line that differs, per shard
  with records that have no line, and where the file cannot be read on."""
  by_place = {(place.shard, place.record): place for place in places}
  read = {}  # shard -> records read
  for place in places:
    read[place.shard] = max(read.get(place.shard, 0), place.record + 1)
  problems, seen, after, past = [], set(), {}, set()
  number = 0
  lines = iter(lines)
  while True:
    try:
      line = next(lines, None)
    except (ValueError, EOFError, OSError, zlib.error) as error:
      return problems + [Problem(SIDECAR_MISMATCH, name, number + 1,
                                 f'cannot be read past line {number}: '
                                 f'{type(error).__name__}: {error}')]
    if line is None:
      break
    number += 1
    try:
      key, said = reuse.parse_line(line, split, shards, False, version)
    except ValueError as error:
      problems.append(Problem(SIDECAR_MISMATCH, name, number,
                              f'line {number} is not a sidecar line: {error}'))
      continue
    shard, ordinal = said.shard_path, said.ordinal
    where = f'line {number} (record {ordinal} of {shard})'
    if ordinal < after.get(shard, 0):
      problems.append(Problem(SIDECAR_MISMATCH, name, number,
                              f'{where}: out of write order or repeated (a line for record '
                              f'{after[shard] - 1} of that shard came before it)'))
      continue
    after[shard] = ordinal + 1
    place = by_place.get((shard, ordinal))
    if place is None:
      if shard not in past:  # once a shard: the lines past a damaged shard's end
        past.add(shard)
        problems.append(Problem(SIDECAR_MISMATCH, name, number,
                                f'{where}: no such record ({read.get(shard, 0)} read '
                                f'from that shard)'))
      continue
    seen.add((shard, ordinal))
    differences = _differences(key, said, place, schema)
    if differences:
      problems.append(Problem(SIDECAR_MISMATCH, name, number, f'{where}: {differences}'))
  unnamed = {}
  for place in places:
    if (place.shard, place.record) not in seen:
      unnamed.setdefault(place.shard, []).append(place.record)
  for shard, records in sorted(unnamed.items()):
    records.sort()
    more = f' (and {len(records) - 1} more of that shard)' if len(records) > 1 else ''
    problems.append(Problem(SIDECAR_MISMATCH, name, number + 1,
                            f'record {records[0]} of {shard}{more} has no line'))
  return problems


def missing_sidecar(name: str, error: Exception) -> Problem:
  return Problem(SIDECAR_MISMATCH, name, -1,
                 f"cannot be read: {type(error).__name__}: {error} (dataset_info.json's "
                 f'sources_format_version says each split has one)')


def declared_compression_problems(info: dict) -> list:
  """dataset_info.json's compression itself: read.load decompresses every
  shard by it."""
  if info.get('compression') in COMPRESSIONS:
    return []
  return [Problem(COMPRESSION_MISMATCH, 'dataset_info.json', -1,
                  f"compression is {info.get('compression')!r}, not one of "
                  f"{', '.join(map(repr, COMPRESSIONS))}: read.load cannot read the shards")]


def gzip_by_content(head: bytes) -> bool:
  """Whether a file's first HEAD_BYTES bytes are gzip: its magic 1f 8b, and
  not an intact record header (a plain shard's length may start so)."""
  return head.startswith(GZIP_MAGIC) and not starts_with_a_record(head)


def compression_problem(declared: Optional[str], shard: str, head: bytes) -> tuple:
  """A shard (its name, its first HEAD_BYTES bytes) against dataset_info.json's
  compression (None: not one of COMPRESSIONS, reported once) -> (the detail of
  a compression_mismatch or None, whether the shard can be read as its name
  says: read.examples and validate decompress by the name, read.load by
  dataset_info.json). Gzip starts with 1f 8b; a plain shard with a record
  header whose CRC holds (a length whose low bytes are 1f 8b may)."""
  named = shard.endswith('.gz')
  content = named if not head else gzip_by_content(head)
  if declared is None:
    return None, content == named
  wanted = declared == 'gzip'
  wrong = []
  if named != wanted:
    wrong.append(f"its name {'ends' if named else 'does not end'} in .gz (read.examples and "
                 f'validate decompress by the name)')
  if content != wanted:
    wrong.append(f"it is {'gzip' if content else 'not gzip'} (it starts with "
                 f"{head[:4].hex(' ')})")
  detail = (f'dataset_info.json says compression {declared!r} (read.load and tf.data '
            f"decompress by it), but {' and '.join(wrong)}") if wrong else None
  return detail, content == named
