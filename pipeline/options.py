"""Command-line options of convert and validate, and their checked, typed configs.

The option definitions below are the one source of the flags: the parser
(pipeline/command_line.py), --help and --config files all read them.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Optional

from apache_beam.io.filesystems import FileSystems

from pipeline import command_line
from pipeline.launch import UsageError
from transforms import filesystem
from transforms.core import manifest
from transforms.core.dataset_info import InfoSettings
from transforms.core.labels import LabelMap
from transforms.core.spec import COMPRESSIONS
from transforms.core.spec import ENCODINGS
from transforms.core.spec import FEATURE_DTYPES
from transforms.core.spec import RESIZE_FILTERS
from transforms.core.spec import RESIZE_MODES
from transforms.core.spec import SCHEMAS
from transforms.core.spec import VALIDATION_REPORT
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ExtraFeature
from transforms.core.spec import ImageSpec

DEFAULT_SHARD_SIZE_MB = 128
_RESERVED_FEATURES = ('image', 'label', 'key', 'split')


def _positive_int(text):
  value = int(text)
  if value <= 0:
    raise ValueError(f'{text} is not a positive integer')
  return value


def _non_negative_int(text):
  value = int(text)
  if value < 0:
    raise ValueError(f'{text} is negative')
  return value


def _quality(text):
  value = int(text)
  if not 1 <= value <= 100:
    raise ValueError(f'{text} is not in 1..100')
  return value


# argparse names the type in its message: "invalid positive integer value: 'abc'"
_positive_int.__name__ = 'positive integer'
_non_negative_int.__name__ = 'non-negative integer'
_quality.__name__ = 'JPEG quality (1..100)'


class ConvertOptions:
  """Options of `python -m pipeline.convert`."""

  @classmethod
  def _add_argparse_args(cls, parser):
    source = parser.add_argument_group('input')
    source.add_argument('--manifest', help='CSV/TSV/JSONL manifest (optionally .gz) '
                        'with columns image, label[, key, split, ...]')
    source.add_argument('--label_manifest', help='second manifest key,label, '
                        'joined on key with --manifest key,image')
    source.add_argument('--image_dir', help='folder-per-class layout DIR/<label>/<image> '
                        'instead of --manifest')
    source.add_argument('--label_map', help='file with one class name per line; '
                        'line i is id i. Default: sorted distinct labels')
    out = parser.add_argument_group('output')
    out.add_argument('--output_dir', help='folder for shards and dataset_info.json')
    out.add_argument('--overwrite', action='store_true',
                     help='replace a previous dataset in --output_dir')
    out.add_argument('--schema', default=ExampleSpec.schema, choices=SCHEMAS)
    out.add_argument('--num_shards', type=_non_negative_int, default=0,
                     help='shards per split (0: per worker bundle, rolled over at '
                     '--shard_size_mb; N forces exactly N through a shuffle)')
    out.add_argument('--shard_size_mb', type=_positive_int, default=DEFAULT_SHARD_SIZE_MB,
                     help='target shard size when --num_shards is 0')
    out.add_argument('--compression', default='none', choices=COMPRESSIONS)
    out.add_argument('--write_index', action='store_true',
                     help='write <shard>.index (one "offset length" line per record, as the '
                     'tfrecord package and DALI read) beside each uncompressed shard')
    out.add_argument('--split', help='hash split, e.g. train=0.8,validation=0.1,test=0.1')
    out.add_argument('--split_names', default=','.join(manifest.DEFAULT_SPLIT_NAMES),
                     help='allowed values of a split column')
    out.add_argument('--seed', type=int, default=0, help='salt of the --split hash')
    out.add_argument('--extra_features',
                     help='manifest columns to copy, e.g. weight:float,source:bytes')
    image = parser.add_argument_group('image')
    image.add_argument('--height', type=_positive_int, default=ImageSpec.height)
    image.add_argument('--width', type=_positive_int, default=ImageSpec.width)
    image.add_argument('--channels', type=int, default=ImageSpec.channels, choices=(1, 3))
    image.add_argument('--encoding', default=ImageSpec.encoding, choices=ENCODINGS)
    image.add_argument('--jpeg_quality', type=_quality, default=ImageSpec.jpeg_quality,
                       metavar='1..100')
    image.add_argument('--resize_mode', default=ImageSpec.resize_mode, choices=RESIZE_MODES)
    image.add_argument('--resize_filter', default=ImageSpec.resize_filter,
                       choices=RESIZE_FILTERS)
    image.add_argument('--background', default=','.join(map(str, ImageSpec.background)),
                       help='R,G,B colour that transparent pixels are composited over')
    image.add_argument('--image_threads', type=_non_negative_int, default=0,
                       help='threads converting images in a worker (0: cores + 1 '
                       'on a local run, 1 on distributed runners)')
    image.add_argument('--image_processes', type=_non_negative_int, default=0,
                       help='child processes converting images in a worker '
                       '(0: one per core for JPEG/PNG output on a single local '
                       'worker unless --image_threads is given; none for raw '
                       'output and on distributed runners)')
    image.add_argument('--max_pixels', type=_positive_int, default=ImageSpec.max_pixels,
                       help='images with more pixels are rejected, never decoded')
    budget = parser.add_argument_group('errors')
    budget.add_argument('--max_error_rate', type=float, default=0.0,
                        help='rejected/rows above this exits 3 (default 0: strict)')
    budget.add_argument('--progress', default='auto', choices=('auto', 'on', 'off'),
                        help='live progress line on local runs (auto: when stderr is a terminal)')


class ValidateOptions:
  """Options of `python -m pipeline.validate`."""

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument('--input_dir', help='a folder written by convert')
    parser.add_argument('--expected_count', type=_non_negative_int,
                        help='total number of examples expected')
    parser.add_argument('--report', help='where to write the JSON report '
                        '(default INPUT_DIR/validation_report.json)')
    parser.add_argument('--max_problems', type=_positive_int, default=100,
                        help='problems listed in the report (all are counted)')
    parser.add_argument('--check_threads', type=_non_negative_int, default=0,
                        help='threads checking records in a worker (0: cores + 1 '
                        'for JPEG/PNG records on a local run; 1 for raw records '
                        'and on distributed runners)')
    parser.add_argument('--check_processes', type=_non_negative_int, default=0,
                        help='child processes checking records in a worker '
                        '(0: one per core for JPEG/PNG records on a single local '
                        'worker unless --check_threads is given; none for raw records '
                        'and on distributed runners)')


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
  split: manifest.SplitConfig
  num_shards: int
  shard_size_mb: int
  compression: str
  max_error_rate: float
  progress: str
  image_threads: int = 0
  image_processes: int = 0
  label_map_path: Optional[str] = None
  write_index: bool = False
  options: dict = dataclasses.field(default_factory=dict)  # every option in effect
  config_file: Optional[str] = None  # --config FILE, if the options came from one

  def info_settings(self) -> InfoSettings:
    """What dataset_info.json records from these options."""
    return InfoSettings(image=self.image, example=self.example,
                        max_error_rate=self.max_error_rate, config=self.to_json(),
                        options=self.options, config_file=self.config_file)

  def to_json(self) -> dict:
    indexed = {'write_index': True} if self.write_index else {}  # absent: as before
    return {
        'output_dir': self.output_dir,
        'manifest': self.manifests[0].path if self.manifests else None,
        'label_manifest': self.manifests[1].path if len(self.manifests) > 1 else None,
        'image_dir': self.image_dir,
        'label_map_file': self.label_map_path,
        'schema': self.example.schema,
        'compression': self.compression,
        'num_shards': self.num_shards,
        'shard_size_mb': self.shard_size_mb,
        'split': [list(f) for f in self.split.fractions] or None,
        'seed': self.split.seed,
        'extra_features': {f.name: f.kind for f in self.example.extra_features},
        **indexed,
    }


@dataclasses.dataclass(frozen=True)
class ValidateConfig:
  """Checked validate options."""
  input_dir: str
  report_path: str
  expected_count: Optional[int] = None
  max_problems: int = 100
  check_threads: int = 0
  check_processes: int = 0


def parse_split_fractions(text: str) -> tuple:
  fractions = []
  for part in text.split(','):
    name, sep, value = part.partition('=')
    name = name.strip()
    try:
      fraction = float(value)
    except ValueError:
      fraction = -1.0
    if not sep or not manifest.SPLIT_NAME.match(name) or not 0 < fraction <= 1:
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
    name, sep, kind = part.strip().partition(':')
    if not sep or not name or kind not in FEATURE_DTYPES:
      raise UsageError(f'--extra_features: {part!r} is not COLUMN:bytes|float|int64')
    if name in _RESERVED_FEATURES or name.startswith('image/'):
      raise UsageError(f'--extra_features: {name!r} is a reserved column/feature name')
    features.append(ExtraFeature(name, kind))
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


def read_manifest_header(path: str, fmt: str) -> tuple:
  """The header of a CSV/TSV manifest, read on the launcher to check columns."""
  if fmt == 'jsonl':
    return ()
  try:
    with FileSystems.open(path) as stream:
      first = stream.readline()
  except filesystem.read_errors() as error:
    raise UsageError(f'cannot read manifest {path}: {type(error).__name__}: {error}')
  try:
    return manifest.parse_header(first.decode('utf-8'), fmt)
  except (UnicodeDecodeError, csv.Error, manifest.ManifestFormatError) as error:
    raise UsageError(f'manifest {path} has an unusable header line: {error}')


def manifest_config(path: str, role: str, split: manifest.SplitConfig,
                    extras: tuple) -> manifest.ManifestConfig:
  try:
    fmt = manifest.manifest_format(path)
  except manifest.ManifestFormatError as error:
    raise UsageError(str(error))
  if '://' not in path and not os.path.isfile(path):
    raise UsageError(f'manifest {path} does not exist or is not a file')
  header = read_manifest_header(path, fmt)
  if fmt != 'jsonl':
    needed = list(manifest.REQUIRED_COLUMNS[role])
    if role != manifest.ROLE_LABELS:
      needed += [f.name for f in extras]
    missing = [c for c in needed if c not in header]
    if missing:
      raise UsageError(f'manifest {path} has no column(s) {", ".join(missing)} '
                       f'(header: {", ".join(header) or "empty"})')
  return manifest.ManifestConfig(path=path, fmt=fmt, header=header, role=role,
                                 split=split, extra_features=extras)


def _read_label_map(path: Optional[str]) -> Optional[LabelMap]:
  if not path:
    return None
  try:
    text = filesystem.read_text(path)
  except filesystem.read_errors() as error:
    raise UsageError(f'--label_map {path} cannot be read: {type(error).__name__}: {error}')
  except UnicodeDecodeError as error:
    raise UsageError(f'--label_map {path} is not UTF-8 text: {error}')
  try:
    return LabelMap.from_text(text)
  except ValueError as error:  # empty, blank or repeated lines
    raise UsageError(f'--label_map {path}: {error}')


def _may_have_split_column(manifests: tuple) -> bool:
  return bool(manifests) and (manifests[0].fmt == 'jsonl' or 'split' in manifests[0].header)


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
  if '://' not in input_dir and not os.path.isdir(input_dir):
    raise UsageError(f'--input_dir {input_dir} is not a folder')
  return ValidateConfig(
      input_dir=input_dir,
      report_path=args.report or filesystem.join(input_dir, VALIDATION_REPORT),
      expected_count=args.expected_count, max_problems=args.max_problems,
      check_threads=args.check_threads, check_processes=args.check_processes)


def convert_config(parsed: command_line.Parsed) -> ConvertConfig:
  """Checks the parsed convert options; UsageError names the first problem."""
  args = parsed.args
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
      background=parse_background(args.background), max_pixels=args.max_pixels)
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
  if args.write_index and args.compression == 'gzip':
    raise UsageError('--write_index needs uncompressed shards: offsets in a gzip stream '
                     'cannot be used for random access (drop --compression gzip)')
  if not 0.0 <= args.max_error_rate <= 1.0:
    raise UsageError(f'--max_error_rate {args.max_error_rate} is not in 0..1')
  split_names = tuple(n.strip() for n in args.split_names.split(',') if n.strip())
  if not split_names or not all(manifest.SPLIT_NAME.match(n) for n in split_names):
    raise UsageError(f'--split_names {args.split_names!r} is not a list of names')
  split = manifest.SplitConfig(
      fractions=parse_split_fractions(args.split) if args.split else (),
      seed=args.seed, names=split_names)
  manifests = ()
  if args.manifest:
    role = manifest.ROLE_IMAGES if args.label_manifest else manifest.ROLE_COMBINED
    manifests = (manifest_config(args.manifest, role, split, extras),)
    if args.label_manifest:
      manifests += (manifest_config(args.label_manifest, manifest.ROLE_LABELS,
                                    split, ()),)
  elif '://' not in args.image_dir and not os.path.isdir(args.image_dir):
    raise UsageError(f'--image_dir {args.image_dir} is not a folder')
  if not split.fractions and not _may_have_split_column(manifests):
    # Every row goes to the default split: build one writer, not one per name.
    split = dataclasses.replace(split, names=(manifest.DEFAULT_SPLIT,))
    manifests = tuple(dataclasses.replace(m, split=split) for m in manifests)
  if extras and args.image_dir:
    raise UsageError('--extra_features needs a manifest with those columns')
  return ConvertConfig(
      output_dir=args.output_dir.rstrip('/') or '/', overwrite=args.overwrite,
      manifests=manifests, image_dir=args.image_dir,
      label_map=_read_label_map(args.label_map), image=image,
      example=ExampleSpec(args.schema, extras), split=split,
      num_shards=args.num_shards, shard_size_mb=args.shard_size_mb,
      compression=args.compression, max_error_rate=args.max_error_rate,
      progress=args.progress, image_threads=args.image_threads,
      image_processes=args.image_processes, label_map_path=args.label_map,
      options=parsed.effective, config_file=parsed.config_file,
      write_index=args.write_index)
