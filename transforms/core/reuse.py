"""Reusing a previous dataset's records (--previous_dataset): the sidecar's
lines and the decision per row. Plain functions; reading a record back and
proving it the one a line names is in copies.py.

The sidecar SPLIT.sources.jsonl.gz holds one JSON line per record, in write
order (sources_format_version 2): key, shard (its index among the split's
shards in dataset_info.json), ordinal (its place in that shard), offset and
length (of the framed record in the shard's uncompressed bytes), data_crc
(the masked CRC32C that follows the record's data in the shard), fingerprint
(fingerprints.py), source_sha256, image (the row's image path as written),
label ({"id", "text"}; lists with --multi_label) and option_digest
(fingerprints.record_digest). Version 1 had neither data_crc nor image: its
records are read, never copied (SIDECAR_UPGRADE).
"""

from __future__ import annotations

import json
import re
from typing import BinaryIO
from typing import NamedTuple
from typing import Optional

# Why a row is encoded rather than copied (dataset_info.json reuse.encoded).
NEW = 'new'
SIDECAR_UPGRADE = 'sidecar_upgrade'  # its record's sidecar line is version 1
CHANGED_SOURCE = 'changed_source'
CHANGED_LABEL = 'changed_label'
CHANGED_SPLIT = 'changed_split'
CHANGED_FEATURES = 'changed_features'
CHANGED_OPTIONS = 'changed_options'
CHANGED_PATH = 'changed_path'  # the image path as written (image/filename)
REASONS = (NEW, CHANGED_SOURCE, CHANGED_LABEL, CHANGED_SPLIT, CHANGED_FEATURES,
           CHANGED_OPTIONS, CHANGED_PATH, SIDECAR_UPGRADE)
# Tally names (tally keys ('reuse', name)); bytes_copied sums bytes, not rows.
REUSED = 'reused'
DROPPED = 'dropped'
FALLBACK = 'reuse_fallback'
BYTES_COPIED = 'bytes_copied'
PREVIOUS = 'previous_records'  # in-order join: keys dropped = these - rows matched
MATCHED = 'matched'
DECIDED = 'decided'  # rows decided (each ends copied, encoded, fallen back or rejected)
SIDECARS_CUT_SHORT = 'sidecars_cut_short'  # read up to damage: rows past it encoded as new
TALLY = 'reuse'
# The longest sidecar line read (a line is ~300 bytes; a damaged or hostile
# sidecar must not make a reader hold a 4 GB line).
MAX_LINE_BYTES = 1 << 20


class PreviousRecord(NamedTuple):
  """Where one record of the previous dataset sits, and what it was made from."""
  split: str
  shard_path: str
  compressed: bool  # a gzip shard: offsets are in its uncompressed bytes
  ordinal: int
  offset: int
  length: int
  fingerprint: str
  source_sha256: str
  label_id: object  # an int, or a list of ints (--multi_label)
  label_text: object  # a str, or a list of str
  option_digest: str
  data_crc: Optional[int] = None  # None: a version-1 line (never copied)
  image: Optional[str] = None  # the image path as written; None: version 1


# json.dumps(..., ensure_ascii=False) builds an encoder on every call: one
# made once writes the same text (py-spy on 20,000 rows: json.dumps took
# 3.5% of the launcher, the encoding itself 2.7%).
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False)
# What that encoder writes for one string (the C escaper it calls).
_json_string = json.encoder.encode_basestring


def _json_value(value) -> str:
  if isinstance(value, str):
    return _json_string(value)
  if type(value) is int:  # a bool is written true or false
    return repr(value)
  return _LINE_ENCODER.encode(_plain(value))


def sidecar_line(key: str, shard: int, ordinal: int, offset: int, length: int,
                 data_crc: int, fingerprint: str, source_sha256: str, image: str,
                 label_id, label_text, option_digest: str) -> bytes:
  """One record's line of SPLIT.sources.jsonl.gz (the columns, in this order):
  the text _LINE_ENCODER writes for them as a dict, formatted directly (6.8
  against 2.9 us a line, one a record, in the writer)."""
  return (f'{{"key": {_json_string(key)}, "shard": {shard:d}, "ordinal": {ordinal:d}, '
          f'"offset": {offset:d}, "length": {length:d}, "data_crc": {data_crc:d}, '
          f'"fingerprint": {_json_string(fingerprint)}, '
          f'"source_sha256": {_json_string(source_sha256)}, "image": {_json_string(image)}, '
          f'"label": {{"id": {_json_value(label_id)}, "text": {_json_value(label_text)}}}, '
          f'"option_digest": {_json_string(option_digest)}}}\n').encode()


def _typed(data: dict, name: str, kind: type):
  value = data[name]
  if not isinstance(value, kind) or isinstance(value, bool):
    raise ValueError(f'{name} {value!r} is not a {kind.__name__}')
  return value


def _count(data: dict, name: str) -> int:
  value = _typed(data, name, int)
  if value < 0:
    raise ValueError(f'{name} {value} is negative')
  return value


# A version-2 line exactly as sidecar_line writes it for one label (an int id,
# a str text), with no escape in any string: its values are the bytes between
# the quotes, decoded as json.loads decodes them. 1.2 against 2.5 us a line for
# json.loads alone (timeit, 438-byte lines), which every previous record costs
# a nightly run; any other line (an escape, a list of labels, another order,
# a number JSON would refuse) is read by json.loads, as before.
_STRING = rb'"([^"\\\x00-\x1f]*)"'
_COUNT = rb'(0|[1-9][0-9]*)'
_PLAIN_LINE = re.compile(
    rb'\{"key": ' + _STRING + rb', "shard": ' + _COUNT + rb', "ordinal": ' + _COUNT
    + rb', "offset": ' + _COUNT + rb', "length": ' + _COUNT + rb', "data_crc": ' + _COUNT
    + rb', "fingerprint": ' + _STRING + rb', "source_sha256": ' + _STRING + rb', "image": '
    + _STRING + rb', "label": \{"id": ' + _COUNT + rb', "text": ' + _STRING
    + rb'\}, "option_digest": ' + _STRING + rb'\}\n?')


def _plain_line(line: bytes, split: str, shard_paths: list,
                compressed: bool) -> Optional[tuple[str, PreviousRecord]]:
  """parse_line's answer for a line _PLAIN_LINE matches; None for any other
  line, or one whose values json.loads would not take (bytes not UTF-8, a
  number past int()'s digit limit), which parse_line then reads as before."""
  match = _PLAIN_LINE.fullmatch(line)
  if match is None:
    return None
  (key, shard, ordinal, offset, length, data_crc, fingerprint, source_sha256, image,
   label_id, label_text, option_digest) = match.groups()
  try:
    shard = int(shard)
    if shard >= len(shard_paths):
      return None
    return key.decode('utf-8', 'surrogatepass'), PreviousRecord(
        split, shard_paths[shard], compressed, int(ordinal), int(offset), int(length),
        fingerprint.decode('utf-8', 'surrogatepass'),
        source_sha256.decode('utf-8', 'surrogatepass'), int(label_id),
        label_text.decode('utf-8', 'surrogatepass'),
        option_digest.decode('utf-8', 'surrogatepass'), int(data_crc),
        image.decode('utf-8', 'surrogatepass'))
  except ValueError:  # UnicodeDecodeError, int()'s digit limit
    return None


def parse_line(line: bytes, split: str, shard_paths: list, compressed: bool,
               version: int = 2) -> tuple[str, PreviousRecord]:
  """A sidecar line of format `version` -> (key, PreviousRecord); ValueError
  if it is not one (a field missing or of another type, a shard the dataset
  does not list). Offsets and lengths are bounded when read (ShardReader)."""
  plain = _plain_line(line, split, shard_paths, compressed) if version >= 2 else None
  if plain is not None:
    return plain
  return json_line(line, split, shard_paths, compressed, version)


def json_line(line: bytes, split: str, shard_paths: list, compressed: bool,
              version: int = 2) -> tuple[str, PreviousRecord]:
  """parse_line through json.loads, for every line (the reference the fast
  path is tested against)."""
  try:
    try:
      data = json.loads(line)
    except RecursionError:  # deep nesting, under the line cap: no line of ours
      raise ValueError('nested too deeply to be a sidecar line')
    if not isinstance(data, dict):
      raise ValueError('not a JSON object')
    shard = _count(data, 'shard')
    if shard >= len(shard_paths):
      raise ValueError(f'shard {shard!r} is not one of the {len(shard_paths)} shards')
    label = _typed(data, 'label', dict)
    v2 = version >= 2
    return _typed(data, 'key', str), PreviousRecord(
        split, shard_paths[shard], compressed, _count(data, 'ordinal'),
        _count(data, 'offset'), _count(data, 'length'), _typed(data, 'fingerprint', str),
        _typed(data, 'source_sha256', str), label['id'], label['text'],
        _typed(data, 'option_digest', str), _count(data, 'data_crc') if v2 else None,
        _typed(data, 'image', str) if v2 else None)
  except KeyError as missing:
    raise ValueError(f'no {missing} in the line')


def read_lines(stream: BinaryIO):
  """The lines of a sidecar stream, each read with at most MAX_LINE_BYTES in
  memory; ValueError at a longer one."""
  while True:
    line = stream.readline(MAX_LINE_BYTES)
    if not line:
      return
    if not line.endswith(b'\n') and len(line) >= MAX_LINE_BYTES:
      raise ValueError(f'a line longer than {MAX_LINE_BYTES} bytes')
    yield line


def _plain(value):
  """A multi-label row's tuples as the lists JSON reads back."""
  return list(value) if isinstance(value, tuple) else value


def first_written(records) -> PreviousRecord:
  """Of the lines one key has (a sidecar edited to give a key two lines;
  the writer gives each one), the one written first: by split, shard and
  place. Both copy paths take this one: a single local worker kept the last
  (a dict of the lines), the join by key the first its lists brought, so the
  two counted the same run differently."""
  return min(records, key=_written_at)


def _written_at(record: PreviousRecord) -> tuple:
  # repr last: two lines of one place that differ elsewhere still order the
  # same every run (a label list and an int do not compare)
  return record.split, record.shard_path, record.ordinal, record.offset, repr(record)


def decide(previous: Optional[PreviousRecord], split: str, fingerprint: str,
           label: Optional[tuple], option_digest: str, image: str) -> Optional[str]:
  """None: the row's record in the previous dataset may be copied (everything
  that went into it is unchanged); else why it is encoded (REASONS). label:
  the row's (id, text) in this run's label map, None if it resolves to none
  (the row is encoded, and rejected as always); image: its path as written."""
  if previous is None:
    return NEW
  if previous.data_crc is None:
    return SIDECAR_UPGRADE
  options, _, extras = option_digest.partition('-')
  previous_options, _, previous_extras = previous.option_digest.partition('-')
  if options != previous_options:
    return CHANGED_OPTIONS
  if not fingerprint or fingerprint != previous.fingerprint:
    return CHANGED_SOURCE
  if split != previous.split:
    return CHANGED_SPLIT
  if label is None or (_plain(label[0]), _plain(label[1])) != (
      previous.label_id, previous.label_text):
    return CHANGED_LABEL
  if extras != previous_extras:
    return CHANGED_FEATURES
  if image != previous.image:
    return CHANGED_PATH
  return None


def section(sums: dict, previous_dataset: Optional[str], previous_run_id: Optional[str],
            missing: bool = False, written: int = 0) -> dict:
  """dataset_info.json's `reuse`: {tally name: sum} -> the counts (of the
  rows written: a row rejected is counted as rejected, whatever its reason).
  missing: no previous dataset (--previous_dataset_missing full), so each of
  the `written` records is new, and DECIDED counts only the rows the image
  step rejected (tally_reuse): those a later night's decision counts as
  rejected. Without them `rejected` was 0 decided less the written records,
  -300 on a 300-row first night."""
  if missing:
    sums = {**sums, NEW: written, DECIDED: written + sums.get(DECIDED, 0)}
  encoded = sum(sums.get(reason, 0) for reason in REASONS)
  return {
      'previous_dataset': previous_dataset,
      'previous_run_id': previous_run_id,
      **({'previous_dataset_missing': True} if missing else {}),
      **({SIDECARS_CUT_SHORT: sums[SIDECARS_CUT_SHORT]} if sums.get(SIDECARS_CUT_SHORT) else {}),
      'reused': sums.get(REUSED, 0),
      'encoded': {reason: sums.get(reason, 0) for reason in REASONS},
      'num_encoded': encoded,
      # rows neither copied nor written (rejected as in any run), however often
      'rejected': sums.get(DECIDED, 0) - sums.get(REUSED, 0) - encoded - sums.get(FALLBACK, 0),
      'dropped': sums.get(DROPPED, 0) + sums.get(PREVIOUS, 0) - sums.get(MATCHED, 0),
      'reuse_fallback': sums.get(FALLBACK, 0),
      'bytes_copied': sums.get(BYTES_COPIED, 0),
  }


def summary_line(reuse: dict) -> str:
  """The console's one line about reuse."""
  if reuse.get('previous_dataset_missing'):
    return 'Reuse: no previous dataset; every row was encoded.'
  encoded = ', '.join(f'{reason} {n}' for reason, n in reuse['encoded'].items() if n)
  return (f'Reuse: {reuse["reused"]} record(s) copied ({reuse["bytes_copied"] / 1e6:.1f} MB) '
          f'from {reuse["previous_dataset"]}; {reuse["num_encoded"]} encoded'
          + (f' ({encoded})' if encoded else '')
          + (f'; {reuse["rejected"]} rejected' if reuse.get('rejected') else '')
          + f'; {reuse["dropped"]} dropped; {reuse["reuse_fallback"]} reuse_fallback.')


# --- What the image step is given for a row whose result needs no work.

class Known(NamedTuple):
  """A pool call's result known without any work: a source's SHA-256 the
  previous dataset gave (its file unchanged by its metadata fingerprint)."""
  result: object
