"""The checked, typed configs of convert and validate (ConvertConfig,
ValidateConfig) and the parsers of single flag values; pipeline/configuration/config.py
assembles them from the parsed flags."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from pipeline.configuration.flags import DEFAULT_IMAGE_TIMEOUT_S
from pipeline.configuration.flags import DEFAULT_JOB_ENDPOINT_CONNECT_TIMEOUT_S
from pipeline.errors import UsageError
from pipeline.runs.previous import Previous
from transforms.core import fingerprints
from transforms.core import image_dir
from transforms.core import manifest
from transforms.core import paths
from transforms.core import redact
from transforms.core import splits
from transforms.core.dataset_info import InfoSettings
from transforms.core.dataset_info import sink_info
from transforms.core.detection_info import DetectionConfig
from transforms.core.labels import DEFAULT_NORMALIZE
from transforms.core.labels import LabelMap
from transforms.core.shuffle import DEFAULT_ORDERING
from transforms.core.shuffle import Ordering
from transforms.core.spec import DEFAULT_FORMATS
from transforms.core.spec import SINK_ORDERED
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.core.spec import parse_extra_feature
from transforms.workers.http_fetch import HttpConfig

# Manifest columns, and the fields read.load and read.examples give each record
# (image, label, key, class_text): an extra feature named class_text was the
# column's value in read.load's records and the class's name in read.examples'.
_RESERVED_FEATURES = ('image', 'label', 'key', 'split', 'class_text')


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
  """Checked convert options."""
  output_dir: str
  overwrite: bool
  manifests: tuple  # ManifestConfig for the image rows [, the label rows]
  image_dir: Optional[str]
  label_map: Optional[LabelMap]
  image: ImageSpec
  example: ExampleSpec
  split: splits.SplitConfig
  num_shards: int
  shard_size_mb: int
  compression: str
  max_error_rate: float
  progress: str
  image_threads: int = 0
  image_processes: int = 0
  label_map_path: Optional[str] = None
  write_index: bool = False
  image_dir_layout: str = image_dir.LAYOUT_LABEL
  image_extensions: Optional[tuple] = image_dir.DEFAULT_IMAGE_EXTENSIONS  # None: all
  image_timeout_s: float = DEFAULT_IMAGE_TIMEOUT_S  # 0: no limit
  ordering: Ordering = DEFAULT_ORDERING
  dedupe: str = 'key'
  split_by: str = 'key'
  label_normalize: frozenset = DEFAULT_NORMALIZE
  options: dict = dataclasses.field(default_factory=dict)  # every option in effect
  config_file: Optional[str] = None  # --config FILE, if the options came from one
  sink: str = SINK_ORDERED
  allow_empty: bool = False  # no example at all: publish an empty dataset, exit 0
  # Every split this configuration names (--split, --split_names), even those
  # it ends up not writing: their shards are ours to clear (--overwrite, and
  # the clean-up of a failed run).
  known_splits: tuple = ()
  job_endpoint_connect_timeout: float = DEFAULT_JOB_ENDPOINT_CONNECT_TIMEOUT_S  # 0: no check
  detection: Optional[DetectionConfig] = None  # --annotations (--schema detection)
  previous: Optional[Previous] = None  # --previous_dataset, checked
  change_detection: str = 'metadata'
  http: HttpConfig = HttpConfig()  # noqa: RUF009 (frozen: the --http_* flags)

  def splits_to_clear(self) -> tuple:
    return tuple(dict.fromkeys((*self.split.split_names(), *self.known_splits)))

  def info_settings(self, engine: Optional[dict] = None) -> InfoSettings:
    """What dataset_info.json records from these options (and `engine`: what ran it)."""
    return InfoSettings(image=self.image, example=self.example,
                        max_error_rate=self.max_error_rate, config=self.to_json(),
                        options=self.options, config_file=self.config_file,
                        label_normalize=self.label_normalize,
                        sink=sink_info(self.sink, self.write_index, self.ordering.shuffle),
                        engine=engine or {},
                        manifest_versions=manifest_versions(self.manifests))

  def to_json(self) -> dict:
    indexed = {'write_index': True} if self.write_index else {}  # absent: as before
    data = {
        'output_dir': self.output_dir,
        'manifest': self.manifests[0].source if self.manifests else None,
        'label_manifest': self.manifests[1].path if len(self.manifests) > 1 else None,
        'image_dir': self.image_dir,
        'label_map_file': self.label_map_path,
        'schema': self.example.schema,
        'compression': self.compression,
        'num_shards': self.num_shards,
        'shard_size_mb': self.shard_size_mb if self.sink == SINK_ORDERED else None,
        'split': [list(f) for f in self.split.fractions] or None,
        'seed': self.split.seed,
        'shuffle': 'on' if self.ordering.shuffle else 'off',
        'dedupe': self.dedupe,
        'split_by': self.split_by,
        'label_normalize': sorted(self.label_normalize),
        'extra_features': {f.name: f.declaration().split(':', 1)[1]
                           for f in self.example.extra_features},
        **indexed,
        **({'detection': self.detection.to_json()} if self.detection else {}),
    }
    # Options of #11, recorded only where they apply or differ from their
    # default: a dataset converted as before gets the same dataset_info.json.
    if self.sink != SINK_ORDERED:
      data['sink'] = self.sink
    if self.image_dir:
      data['image_dir_layout'] = self.image_dir_layout
      data['image_extensions'] = list(self.image_extensions or ()) or 'all'
    if self.manifests:
      first = self.manifests[0]
      if first.fmt != manifest.manifest_format_or_none(first.path):
        data['manifest_format'] = first.fmt
      columns = dict(first.columns)
      if len(self.manifests) > 1:
        columns.update(self.manifests[1].columns)
      if columns:
        data['columns'] = columns
      if first.multi_label:
        data['multi_label'] = True
        data['label_separator'] = first.label_separator
    return data


@dataclasses.dataclass(frozen=True)
class ValidateConfig:
  """Checked validate options."""
  input_dir: str
  report_path: str
  expected_count: Optional[int] = None
  max_problems: int = 100
  check_threads: int = 0
  check_processes: int = 0
  strict: bool = False  # warnings exit 1 too
  job_endpoint_connect_timeout: float = DEFAULT_JOB_ENDPOINT_CONNECT_TIMEOUT_S  # 0: no check
  recompute: Optional[float] = None  # --recompute: a count (int) or a fraction (float)
  manifest: Optional[str] = None  # --manifest: where the run's manifest lives now


def parse_split_fractions(text: str) -> tuple:
  fractions = []
  for part in text.split(','):
    name, sep, value = part.partition('=')
    name = name.strip()
    try:
      fraction = float(value)
    except ValueError:
      fraction = -1.0
    if not sep or not 0 < fraction <= 1:
      raise UsageError(f'--split: {part!r} is not NAME=FRACTION with 0 < FRACTION <= 1')
    splits.check_split_name(name, '--split', UsageError)
    fractions.append((name, fraction))
  names = [n for n, _ in fractions]
  if len(set(names)) != len(names):
    raise UsageError(f'--split repeats a split name: {text}')
  _distinct_on_any_disk(names, '--split')
  if abs(sum(f for _, f in fractions) - 1.0) > 1e-6:
    raise UsageError(f'--split fractions add up to {sum(f for _, f in fractions):g}, not 1')
  return tuple(fractions)


def parse_split_names(text: str) -> tuple:
  """--split_names as a tuple of names, each once; UsageError naming the first
  problem (no name, a name no shard file can be named by, two names one on a
  case-insensitive disk)."""
  names = tuple(dict.fromkeys(n.strip() for n in text.split(',') if n.strip()))
  if not names:
    raise UsageError(f'--split_names {text!r} names no split')
  for name in names:
    splits.check_split_name(name, '--split_names', UsageError)
  _distinct_on_any_disk(names, '--split_names')
  return names


def _distinct_on_any_disk(names, flag: str) -> None:
  """UsageError when two split names differ only in case: their shards
  (train-00000-of-00001.tfrecord, Train-00000-of-00001.tfrecord) and sidecars
  are one file on macOS' and Windows' default file systems, where one split
  overwrote the other; and a split column of `Train` and `train` cells is one
  split mistyped, which --split_names must not turn into two."""
  seen = {}
  for name in names:
    other = seen.setdefault(name.casefold(), name)
    if other != name:
      raise UsageError(f'{flag}: {other!r} and {name!r} differ only in case: their shard '
                       f'files would be one file on a case-insensitive file system (macOS, '
                       f"Windows); give one name (a split column's cells must match it "
                       f'exactly)')


def parse_extra_features(text: Optional[str]) -> tuple:
  if not text:
    return ()
  features = []
  for part in text.split(','):
    try:
      feature = parse_extra_feature(part)
    except ValueError:
      raise UsageError(f'--extra_features: {part!r} is not COLUMN:bytes|float|int64 with '
                       f'an optional shape [N], [] or [][N] (N >= 1)')
    if feature.name in _RESERVED_FEATURES or feature.name.startswith('image/'):
      raise UsageError(f'--extra_features: {feature.name!r} is a reserved column/feature '
                       f'name')
    features.append(feature)
  if len({f.name for f in features}) != len(features):
    raise UsageError(f'--extra_features repeats a column: {text}')
  return tuple(features)


def parse_background(text: str) -> tuple:
  try:
    colour = tuple(int(v) for v in text.split(','))
  except ValueError:
    colour = ()
  if len(colour) != 3 or not all(0 <= v <= 255 for v in colour):
    raise UsageError(f'--background {text!r} is not R,G,B with values 0..255')
  return colour


def parse_name_list(text: str, flag: str, lower: bool) -> Optional[tuple]:
  """'a,b' -> ('a', 'b') (dots stripped, case folded); 'all' -> None."""
  if text.strip().lower() == 'all':
    return None
  names = tuple(dict.fromkeys(
      n.strip().lstrip('.').lower() if lower else n.strip().upper()
      for n in text.split(',') if n.strip().lstrip('.')))
  if not names:
    raise UsageError(f'{flag} {text!r} names nothing (give a list, or all)')
  return names


def parse_formats(text: str) -> Optional[tuple]:
  """--formats: Pillow format names (JPEG, PNG, ...), or all."""
  formats = parse_name_list(text, '--formats', lower=False)
  if formats is None or formats == DEFAULT_FORMATS:
    return formats
  # Pillow's plugins are loaded only to check a list other than the default
  # (about 0.1 s of start-up otherwise)
  from PIL import Image
  Image.init()
  unknown = [f for f in formats if f not in Image.OPEN]
  if unknown:
    raise UsageError(f'--formats: Pillow reads no format {", ".join(unknown)} '
                     f'(it reads {", ".join(sorted(Image.OPEN))})')
  return tuple(sorted(formats))


def exclusive_pool_sizes(threads: int, processes: int, what: str) -> None:
  """--X_threads and --X_processes choose one pool: not both."""
  if threads and processes:
    raise UsageError(f'give either --{what}_threads or --{what}_processes, not both')


def recorded_config_file(path: Optional[str]) -> Optional[str]:
  """--config FILE as dataset_info.json records it: a local path absolute (the
  path as typed was relative to a folder the record does not name), a URL as
  given, any credential in it redacted."""
  if not path:
    return None
  return redact.redact_text(path) if paths.is_remote(path) else os.path.abspath(path)


# The roles of a run's manifests, in ConvertConfig.manifests' order.
MANIFEST_ROLES = ('rows', 'labels')


def manifest_paths(config: manifest.ManifestConfig) -> list:
  """The files a manifest reads: those its pattern matched, else its path."""
  return [path for path, _ in config.files] or [config.path]


def manifest_versions(manifests: tuple) -> Optional[dict]:
  """dataset_info.json's manifest_versions ({'rows': [each manifest file's
  fingerprints.file_version], 'labels': [the label manifest's]}), taken
  before any line is read: validate --recompute counts the rows of a manifest
  still at these versions. None: a remote file, or no manifest."""
  versions = {role: [fingerprints.file_version(path) for path in manifest_paths(config)]
              for role, config in zip(MANIFEST_ROLES, manifests)}
  if not versions or not all(all(found) for found in versions.values()):
    return None
  return versions
