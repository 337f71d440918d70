"""The checked, typed configs of convert and validate, assembled from the
parsed flags (pipeline/flags.py) by pure cross-field checks; the reads on the
launcher they need are in pipeline/preflight.py."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from pipeline import command_line
from pipeline.cli import UsageError
from pipeline.flags import DEFAULT_IMAGE_TIMEOUT_S
from pipeline.flags import DEFAULT_JOB_ENDPOINT_CONNECT_TIMEOUT_S
from pipeline.flags import ConvertOptions
from pipeline.flags import ValidateOptions
from pipeline.flags import http_config
from pipeline.output_flags import output_options
from pipeline.preflight import image_dir_splits
from pipeline.preflight import manifest_config
from pipeline.preflight import may_have_split_column
from pipeline.preflight import require_input
from pipeline.preflight import source_label_map
from pipeline.previous import Previous
from pipeline.previous import check as check_previous
from transforms import filesystem
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
from transforms.core.labels import parse_normalize
from transforms.core.shuffle import DEFAULT_ORDERING
from transforms.core.shuffle import Ordering
from transforms.core.spec import DEFAULT_FORMATS
from transforms.core.spec import SINK_ORDERED
from transforms.core.spec import VALIDATION_REPORT
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.core.spec import parse_extra_feature
from transforms.workers.http_fetch import HttpConfig

_RESERVED_FEATURES = ('image', 'label', 'key', 'split')


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
                        engine=engine or {})

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
    if not sep or not splits.SPLIT_NAME.match(name) or not 0 < fraction <= 1:
      raise UsageError(f'--split: {part!r} is not NAME=FRACTION with 0 < FRACTION <= 1')
    fractions.append((name, fraction))
  names = [n for n, _ in fractions]
  if len(set(names)) != len(names):
    raise UsageError(f'--split repeats a split name: {text}')
  if abs(sum(f for _, f in fractions) - 1.0) > 1e-6:
    raise UsageError(f'--split fractions add up to {sum(f for _, f in fractions):g}, not 1')
  return tuple(fractions)


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


def parse_convert(argv: list, description: str = '') -> tuple:
  """convert's command line -> (ConvertConfig, PipelineOptions)."""
  parsed = command_line.parse(argv, ConvertOptions, description)
  return convert_config(parsed), parsed.pipeline_options


def parse_validate(argv: list, description: str = '') -> tuple:
  """validate's command line -> (ValidateConfig, PipelineOptions)."""
  parsed = command_line.parse(argv, ValidateOptions, description)
  return validate_config(parsed.args), parsed.pipeline_options


def validate_config(args) -> ValidateConfig:
  """Checks the parsed validate options; UsageError names the first problem."""
  if not args.input_dir:
    raise UsageError('--input_dir is required')
  exclusive_pool_sizes(args.check_threads, args.check_processes, 'check')
  input_dir = args.input_dir.rstrip('/') or '/'
  if not paths.is_remote(input_dir) and not os.path.isdir(input_dir):
    raise UsageError(f'--input_dir {input_dir} is not a folder')
  if args.manifest and args.recompute is None:
    raise UsageError("--manifest goes with --recompute (where the run's manifest lives now)")
  return ValidateConfig(
      input_dir=input_dir,
      report_path=args.report or filesystem.join(input_dir, VALIDATION_REPORT),
      expected_count=args.expected_count, max_problems=args.max_problems,
      check_threads=args.check_threads, check_processes=args.check_processes,
      strict=args.strict, job_endpoint_connect_timeout=args.job_endpoint_connect_timeout,
      recompute=args.recompute, manifest=args.manifest)


def convert_config(parsed: command_line.Parsed) -> ConvertConfig:
  """Checks the parsed convert options; UsageError names the first problem."""
  args = parsed.args
  if args.annotations or args.schema == 'detection':  # objects, not a label per image
    from pipeline import detection_config
    return detection_config.convert_config(parsed)
  sources = [bool(args.manifest), bool(args.image_dir)]
  if not any(sources):
    raise UsageError('--manifest is required (or --image_dir for a folder per class)')
  if not args.output_dir:
    raise UsageError('--output_dir is required')
  if all(sources):
    raise UsageError('give either --manifest or --image_dir, not both')
  if args.label_manifest and not args.manifest:
    raise UsageError('--label_manifest goes with --manifest')
  exclusive_pool_sizes(args.image_threads, args.image_processes, 'image')
  image = ImageSpec(
      height=args.height, width=args.width, channels=args.channels,
      encoding=args.encoding, resize_mode=args.resize_mode,
      resize_filter=args.resize_filter, jpeg_quality=args.jpeg_quality,
      background=parse_background(args.background), max_pixels=args.max_pixels,
      formats=parse_formats(args.formats), max_image_bytes=args.max_image_bytes)
  extras = parse_extra_features(args.extra_features)
  if args.resize_mode != 'none' and args.height * args.width > args.max_pixels:
    raise UsageError(f'--height x --width = {args.height * args.width} pixels is more '
                     f'than --max_pixels {args.max_pixels}')
  if args.schema == 'seed':
    if args.encoding != 'raw' or args.resize_mode == 'none' or args.channels != 3:
      raise UsageError('--schema seed stores fixed-size raw RGB pixels (read back with '
                       'reshape([H, W, 3])): it needs --encoding raw, --channels 3 and '
                       'a --resize_mode other than none')
    if extras:
      raise UsageError('--schema seed writes exactly img_raw and label; '
                       'drop --extra_features or use --schema default')
    if args.multi_label:
      raise UsageError('--schema seed stores one int64 label per record; '
                       '--multi_label needs --schema default')
  options = output_options(parsed)
  split_names = tuple(n.strip() for n in args.split_names.split(',') if n.strip())
  if not split_names or not all(splits.SPLIT_NAME.match(n) for n in split_names):
    raise UsageError(f'--split_names {args.split_names!r} is not a list of names')
  split = splits.SplitConfig(
      fractions=parse_split_fractions(args.split) if args.split else (),
      seed=args.seed, names=split_names)
  columns = {c: getattr(args, f'{c}_column') for c in manifest.COLUMNS
             if getattr(args, f'{c}_column')}
  if not args.label_separator:
    raise UsageError('--label_separator is empty')
  if args.split_by == 'content' and not split.fractions:
    raise UsageError('--split_by content draws --split fractions from the image bytes: '
                     'give --split too')
  try:
    label_normalize = parse_normalize(args.label_normalize)
  except ValueError as error:
    raise UsageError(f'--label_normalize: {error}')
  reading = dict(fmt=args.manifest_format, columns=columns, multi_label=args.multi_label,
                 label_separator=args.label_separator, label_normalize=label_normalize)
  manifests = ()
  if args.manifest:
    role = manifest.ROLE_IMAGES if args.label_manifest else manifest.ROLE_COMBINED
    manifests = (manifest_config(args.manifest, role, split, extras, **reading),)
    if args.label_manifest:
      manifests += (manifest_config(args.label_manifest, manifest.ROLE_LABELS,
                                    split, (), **reading),)
  else:
    image_dir_flags = [f'--{c}_column' for c in columns] + [
        flag for flag, given in (('--manifest_format', args.manifest_format),
                                 ('--multi_label', args.multi_label)) if given]
    if image_dir_flags:
      raise UsageError(f'{image_dir_flags[0]} goes with --manifest, not --image_dir')
    if not paths.is_remote(args.image_dir) and not os.path.isdir(args.image_dir):
      raise UsageError(f'--image_dir {args.image_dir} is not a folder')
    if args.image_dir_layout == image_dir.LAYOUT_SPLIT_LABEL:
      if split.fractions:
        raise UsageError('--image_dir_layout split/label takes the split from the '
                         'first folder: drop --split')
      image_dir_splits(args.image_dir, split.names)
  known_splits = tuple(dict.fromkeys((*split.split_names(), *split_names)))
  extensions = parse_name_list(args.image_extensions, '--image_extensions', lower=True)
  if not args.allow_empty:  # no row to convert: exit 2 now, OUT untouched
    require_input(manifests, args.image_dir, extensions)
  split_from_folders = (args.image_dir and
                        args.image_dir_layout == image_dir.LAYOUT_SPLIT_LABEL)
  if not split.fractions and not split_from_folders and not may_have_split_column(
      manifests):
    # Every row goes to the default split: build one writer, not one per name.
    split = dataclasses.replace(split, names=(splits.DEFAULT_SPLIT,))
    manifests = tuple(dataclasses.replace(m, split=split) for m in manifests)
  if extras and args.image_dir:
    raise UsageError('--extra_features needs a manifest with those columns')
  manifests, given_map = source_label_map(manifests, args.label_map, label_normalize,
                                          extensions)
  previous = args.previous_dataset and check_previous(
      args.previous_dataset, args.previous_dataset_missing, args.output_dir, args.schema,
      args.sink)
  return ConvertConfig(
      output_dir=args.output_dir.rstrip('/') or '/', overwrite=args.overwrite,
      manifests=manifests, image_dir=args.image_dir,
      label_map=given_map, image=image,
      example=ExampleSpec(args.schema, extras, args.multi_label), split=split,
      num_shards=args.num_shards, shard_size_mb=args.shard_size_mb,
      compression=args.compression, max_error_rate=args.max_error_rate,
      progress=args.progress, image_threads=args.image_threads,
      image_processes=args.image_processes, label_map_path=args.label_map,
      image_dir_layout=args.image_dir_layout, image_timeout_s=args.image_timeout_s,
      image_extensions=extensions,
      options=options, config_file=recorded_config_file(parsed.config_file), sink=args.sink,
      write_index=args.write_index,
      ordering=Ordering(shuffle=args.shuffle == 'on', seed=args.seed),
      dedupe=args.dedupe, split_by=args.split_by, label_normalize=label_normalize,
      allow_empty=args.allow_empty, known_splits=known_splits,
      job_endpoint_connect_timeout=args.job_endpoint_connect_timeout,
      previous=previous or None, change_detection=args.change_detection,
      http=http_config(args))


def recorded_config_file(path: Optional[str]) -> Optional[str]:
  """--config FILE as dataset_info.json records it: a local path absolute (the
  path as typed was relative to a folder the record does not name), a URL as
  given, any credential in it redacted."""
  if not path:
    return None
  return redact.redact_text(path) if paths.is_remote(path) else os.path.abspath(path)
