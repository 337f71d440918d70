"""Checks of one record against dataset_info.json: plain functions. The
totals' checks are dataset_checks.py's (count_problems); what validate
gathers of the checked records for its report: record_facts.py."""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple
from typing import Optional

from google.protobuf.message import DecodeError

from transforms.core import decoders
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import parse_example_plain
from transforms.core.feature_checks import check_features
from transforms.core.feature_tables import declares_label_lists
from transforms.core.feature_tables import feature_table
from transforms.core.spec import COMPRESSIONS
from transforms.core.spec import ImageSpec
from transforms.core.splits import HashSplit


@dataclasses.dataclass(frozen=True)
class Problem:
  """One finding: what is wrong, in which file and record (-1: whole file)."""
  kind: str
  file: str
  record: int
  detail: str

  def sort_key(self):
    # detail too: one record can have several problems of one kind (two
    # missing features), and the report lists them in one order on every path
    return (self.file, self.record, self.kind, self.detail)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RecordSummary:
  split: str
  shard: str
  record: int
  label: Optional[int]  # a multi-label record's: a tuple of ids
  key: Optional[str]
  sha256: Optional[str] = None  # image/key/sha256: the source file's digest
  # (problem kind, feature, value) of its other values no other record may
  # share (FeatureTable.unique: detection's image/source_id)
  unique: tuple = ()
  # (offset, framed length, data CRC) in the shard's uncompressed bytes, and
  # the values of sidecar_features(): what the index files and the sidecar
  # are compared with; () when the dataset has neither
  framing: tuple = ()
  sides: tuple = ()

  def names(self) -> tuple:
    """(problem kind, what, value) of each name no other record may share:
    its key, then `unique`."""
    return (('duplicate_key', 'key', self.key),) * (self.key is not None) + self.unique

  def place(self) -> RecordPlace:
    return RecordPlace(self.shard, self.record, *self.framing, self.label, self.sides, self.key)


class RecordPlace(NamedTuple):
  """What the files beside the shards say of one record, as its shard has it
  (an index line: offset and length; a sidecar line: all of it)."""
  shard: str
  record: int
  offset: int
  length: int
  data_crc: int
  label: object  # an int; a multi-label or detection record's: a tuple
  sides: tuple  # sidecar_features()' values in order (None: its features did not check)
  key: Optional[str] = None  # the record's key (RecordSummary.key): its place in write order


# The sidecar's fields that repeat a feature of each --schema's records
# (sidecar field, feature): a detection row's line has no image path or class
# text, its key is not in the record; --schema seed's records hold the label
# alone (the label id: the table's label feature in every schema).
SIDECAR_FEATURES = {
    'default': (('key', 'image/key'), ('image', 'image/filename'),
                ('source_sha256', 'image/key/sha256'), ('label.text', 'image/class/text')),
    'seed': (),
    'detection': (('source_sha256', 'image/key/sha256'),),
}


def sidecar_features(schema: str) -> tuple:
  """SIDECAR_FEATURES of `schema` (an unknown one: the default's, as its table)."""
  return SIDECAR_FEATURES.get(schema, SIDECAR_FEATURES['default'])


@dataclasses.dataclass(frozen=True)
class Expected:
  """What every record must look like, from dataset_info.json."""
  schema: str
  feature_spec: dict
  image: ImageSpec
  label_map: tuple
  # a hash --split: each record's split is checked
  split_rule: HashSplit = dataclasses.field(default_factory=HashSplit)
  # the shards' compression ('none', 'gzip'); None: dataset_info.json's is
  # neither (a problem of its own), each shard is read as its name says
  compression: Optional[str] = 'none'
  # written with --dedupe content: no two records hold one source SHA-256
  content_unique: bool = False

  @classmethod
  def from_info(cls, info: dict) -> Expected:
    compression = info.get('compression')
    config = info.get('config')
    return cls(info['schema'], info['feature_spec'], ImageSpec.from_json(info['image']),
               tuple(info['label_map']), HashSplit.from_config(config),
               compression if compression in COMPRESSIONS else None,
               isinstance(config, dict) and config.get('dedupe') == 'content')

  @functools.cached_property  # once, not per record (a frozenset: it pickles)
  def lists(self) -> frozenset:
    """The features declared as lists (any shape but [])."""
    return frozenset(name for name, declared in self.feature_spec.items()
                     if declared['shape'] != [])

  @functools.cached_property
  def own(self) -> frozenset:
    """The schema's own features (their checks see their values)."""
    return frozenset(feature.name for feature in self.table().features)

  def table(self):
    """The feature table the records are checked by (an unknown schema: the default's)."""
    return feature_table(self.schema, declares_label_lists(self.feature_spec),
                         'image/object/mask' in self.feature_spec)


# Findings of one record that do not make the dataset invalid (warnings).
UNDECLARED_FEATURE = 'undeclared_feature'
RECORD_WARNING_KINDS = frozenset({UNDECLARED_FEATURE})


DUPLICATE_CONTENT = 'duplicate_content'


def _unique_values(features, table, sha256: Optional[str], content_unique: bool) -> tuple:
  """(problem kind, feature, value) of each of the table's unique features a
  parsed record holds not empty (an empty one is its check's problem); and
  its source SHA-256 in a --dedupe content dataset, where a second record of
  one content was written after the run (convert rejects them all)."""
  if features is None:
    return ()
  values = ((kind, name, features.get(name, (None, ()))[1]) for name, kind in table.unique)
  return tuple((kind, name, decoders.text(stored[0])) for kind, name, stored in values
               if stored and stored[0].strip()) + (
      ((DUPLICATE_CONTENT, 'image/key/sha256', sha256),) if content_unique and sha256 else ())


def _source_digest(features) -> Optional[str]:
  """image/key/sha256 of a parsed record (None when it has none)."""
  if features is None or not features.get('image/key/sha256', (None, ()))[1]:
    return None
  return decoders.text(features['image/key/sha256'][1][0])


def _check_record(data: bytes, expected: Expected) -> tuple:
  table = expected.table()
  # Raw pixels are only measured (their check is a length test): they stay a
  # view into `data` instead of being copied out.
  views = frozenset(f.name for f in table.features
                    if f.decodes) if expected.image.encoding == 'raw' else frozenset()
  features = parse_example_plain(data, views)
  if features is None:  # not the plain layout: protobuf's parser decides
    try:
      features = parse_example(data)
    except DecodeError as error:
      return None, None, [('unparseable_record', f'not a tf.train.Example: {error}')], None
  # Undeclared: readers that parse by the feature_spec never see it (a warning).
  undeclared = [(UNDECLARED_FEATURE, f'feature {name!r} is in the record but not in '
                 f"dataset_info.json's feature_spec")
                for name in sorted(features) if name not in expected.feature_spec]
  problems = check_features(features, expected.feature_spec, expected.own)
  if problems:
    return None, None, problems + undeclared, None
  # a scalar feature's one value; a list feature's whole list
  record = decoders.StoredValues(features, expected.lists)
  for feature in table.checked:
    problems += feature.check(record[feature.name], record, expected)
  key = decoders.text(record[table.key]) if table.key else None
  label = record[table.label]
  return (tuple(label) if isinstance(label, list) else label, key, problems + undeclared,
          features)


def _sides(features, expected: Expected) -> tuple:
  """The record's values of sidecar_features() (text; a list feature's: a
  tuple), None for each when its features did not check."""
  names = [name for _, name in sidecar_features(expected.schema)]
  if features is None:
    return (None,) * len(names)
  found = [[decoders.text(value) for value in features.get(name, (None, ()))[1]]
           for name in names]
  return tuple(tuple(texts) if name in expected.lists else (texts or [None])[0]
               for name, texts in zip(names, found))


def check_records(records: list, expected: Expected) -> list:
  """_check_record of each record, plus its source digest (image/key/sha256 or
  None), its unique values (_unique_values) and its sidecar values (_sides):
  (label, key, problems, sha256, unique, sides). A record whose check raised
  gets an unexpected_error problem instead (the others are still checked)."""
  results, table = [], expected.table()
  for data in records:
    try:
      label, key, problems, features = _check_record(data, expected)
      sha256 = _source_digest(features)
      results.append((label, key, problems, sha256,
                      _unique_values(features, table, sha256, expected.content_unique),
                      _sides(features, expected)))
    except Exception as error:  # (one record's problem)
      results.append(unexpected_check_error(error))
  return results


def unexpected_check_error(error: Exception) -> tuple:
  """The check_records result for a record whose check failed unexpectedly."""
  return None, None, [('unexpected_error', f'checking the record failed: '
                                           f'{type(error).__name__}: {error}')], None, (), None
