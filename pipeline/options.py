"""Command-line options of convert and validate, and their checked, typed configs.

The option definitions below are the one source of the flags: the parser
(pipeline/command_line.py), --help and --config files all read them.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from typing import Optional

from pipeline import command_line
from pipeline.launch import UsageError
from transforms import filesystem
from transforms.core import manifest
from transforms.core.dataset_info import InfoSettings
from transforms.core.labels import LabelMap
from transforms.core.labels import normalized_map
from transforms.core.labels import parse_normalize
from transforms.core.shuffle import DEFAULT_ORDERING
from transforms.core.shuffle import SHUFFLE_MODES
from transforms.core.shuffle import Ordering
from transforms.core.spec import COMPRESSIONS
from transforms.core.spec import DEFAULT_FORMATS
from transforms.core.spec import ENCODINGS
from transforms.core.spec import RESIZE_FILTERS
from transforms.core.spec import RESIZE_MODES
from transforms.core.spec import SCHEMAS
from transforms.core.spec import VALIDATION_REPORT
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.core.spec import parse_extra_feature

DEFAULT_SHARD_SIZE_MB = 128
DEFAULT_IMAGE_TIMEOUT_S = 60.0
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


def _non_negative_float(text):
  value = float(text)
  if not value >= 0 or value == float('inf'):
    raise ValueError(f'{text} is not a non-negative number')
  return value


def _quality(text):
  value = int(text)
  if not 1 <= value <= 100:
    raise ValueError(f'{text} is not in 1..100')
  return value


# argparse names the type in its message: "invalid positive integer value: 'abc'"
_positive_int.__name__ = 'positive integer'
_non_negative_int.__name__ = 'non-negative integer'
_non_negative_float.__name__ = 'non-negative number'
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
    source.add_argument('--manifest_format', choices=manifest.FORMATS,
                        help='format of the manifests (default: from the file name; '
                        'txt: "path label" per line)')
    for column in manifest.COLUMNS:
      source.add_argument(f'--{column}_column', metavar='NAME',
                          help=f'the manifest column holding the {column} '
                          f'(default {column})')
    source.add_argument('--image_dir_layout', default=manifest.LAYOUT_LABEL,
                        choices=manifest.IMAGE_DIR_LAYOUTS,
                        help='label: DIR/<label>/<image>; split/label: '
                        'DIR/<split>/<label>/<image>')
    source.add_argument('--image_extensions', default=','.join(manifest.DEFAULT_IMAGE_EXTENSIONS),
                        help='with --image_dir, files with other extensions are skipped '
                        '(all: keep every file)')
    source.add_argument('--multi_label', action='store_true',
                        help='a label cell or JSON list holds several labels')
    source.add_argument('--label_separator', default=manifest.DEFAULT_LABEL_SEPARATOR,
                        help='separates the labels of a cell with --multi_label')
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
    out.add_argument('--seed', type=int, default=0,
                     help='salt of the --split hash and of the --shuffle order')
    out.add_argument('--shuffle', default='on', choices=SHUFFLE_MODES,
                     help='on: records in a pseudo-random order fixed by a salted hash '
                     'of the key (--seed); off: in manifest order')
    out.add_argument('--dedupe', default='key', choices=('key', 'content'),
                     help='key: one row per key (always); content: also one row per '
                     'identical image (the first by line), others rejected as '
                     'duplicate/duplicate_content')
    out.add_argument('--split_by', default='key', choices=('key', 'content'),
                     help='what --split hashes: the key, or the image bytes (copies '
                     'then always land in one split)')
    out.add_argument('--label_normalize',
                     help='merge label spellings on purpose: lower, strip, or both '
                     '(also lower,strip); the normalized text is stored')
    out.add_argument('--extra_features',
                     help='manifest columns to copy, each with a shape: name:type a '
                     'scalar, name:type[N] N values, name:type[] a list, name:type[][N] a '
                     'list of N-tuples; type bytes|float|int64, e.g. '
                     'weight:float,boxes:float[][4]')
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
    image.add_argument('--max_image_bytes', type=_positive_int,
                       default=ImageSpec.max_image_bytes,
                       help='source files larger than this are rejected as read/too_large, '
                       'never read')
    image.add_argument('--image_timeout_s', type=_non_negative_float,
                       default=DEFAULT_IMAGE_TIMEOUT_S,
                       help='an image taking longer to read, decode, resize and encode '
                       'is rejected as decode/timeout (0: no limit)')
    image.add_argument('--formats', default=','.join(DEFAULT_FORMATS),
                       help='Pillow formats decoded, by content (all: every format '
                       'Pillow has); others are rejected')
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
                        help='problems (and warnings) listed in the report (all are counted)')
    parser.add_argument('--strict', action='store_true',
                        help='exit 1 on warnings too (e.g. the same image in two splits)')
    parser.add_argument('--check_threads', type=_non_negative_int, default=0,
                        help='threads checking records in a worker (0: cores + 1 '
                        'for JPEG/PNG records on a local run; 1 for raw records '
                        'and on distributed runners)')
    parser.add_argument('--check_processes', type=_non_negative_int, default=0,
                        help='child processes checking records in a worker; they '
                        'read local uncompressed shards themselves, in 8 MiB spans '
                        '(0: one per core on a single local worker for 32 MiB of such '
                        'shards or more, and for other JPEG/PNG records, unless '
                        '--check_threads is given; none for small raw datasets and on '
                        'distributed runners)')


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
  image_dir_layout: str = manifest.LAYOUT_LABEL
  image_extensions: Optional[tuple] = manifest.DEFAULT_IMAGE_EXTENSIONS  # None: all
  image_timeout_s: float = DEFAULT_IMAGE_TIMEOUT_S  # 0: no limit
  ordering: Ordering = DEFAULT_ORDERING
  dedupe: str = 'key'
  split_by: str = 'key'
  label_normalize: frozenset = frozenset()
  options: dict = dataclasses.field(default_factory=dict)  # every option in effect
  config_file: Optional[str] = None  # --config FILE, if the options came from one

  def info_settings(self) -> InfoSettings:
    """What dataset_info.json records from these options."""
    return InfoSettings(image=self.image, example=self.example,
                        max_error_rate=self.max_error_rate, config=self.to_json(),
                        options=self.options, config_file=self.config_file,
                        label_normalize=self.label_normalize)

  def to_json(self) -> dict:
    indexed = {'write_index': True} if self.write_index else {}  # absent: as before
    data = {
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
        'shuffle': 'on' if self.ordering.shuffle else 'off',
        'dedupe': self.dedupe,
        'split_by': self.split_by,
        'label_normalize': sorted(self.label_normalize),
        'extra_features': {f.name: f.declaration().split(':', 1)[1]
                           for f in self.example.extra_features},
        **indexed,
    }
    # Options of #11, recorded only where they apply or differ from their
    # default: a dataset converted as before gets the same dataset_info.json.
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


def _first_line(path: str, skip_blank: bool = False) -> bytes:
  """The first (non-blank) line of a manifest, read on the launcher."""
  try:
    with filesystem.FileAccess().open_checked(path) as stream:
      first = stream.readline()
      while skip_blank and first and not first.strip():
        first = stream.readline()
      return first
  except filesystem.read_errors() as error:
    raise UsageError(f'cannot read manifest {path}: {type(error).__name__}: {error}')


def read_manifest_header(path: str, fmt: str) -> tuple:
  """The header of a CSV/TSV manifest, read on the launcher to check columns."""
  if not manifest.has_header(fmt):
    return ()
  first = _first_line(path)
  try:
    return manifest.parse_header(first.decode('utf-8'), fmt)
  except (UnicodeDecodeError, csv.Error, manifest.ManifestFormatError) as error:
    raise UsageError(f'manifest {path} has an unusable header line: {error}')


def _jsonl_columns(path: str) -> Optional[tuple]:
  """The keys of a JSONL manifest's first object (None if it does not parse:
  that line is then rejected on its own)."""
  try:
    first = json.loads(_first_line(path, skip_blank=True).decode('utf-8').lstrip('\ufeff'))
  except (UnicodeDecodeError, ValueError):
    return None
  return tuple(first) if isinstance(first, dict) else None


# Which logical columns each kind of manifest reads.
_ROLE_COLUMNS = {
    manifest.ROLE_COMBINED: ('image', 'label', 'key', 'split'),
    manifest.ROLE_IMAGES: ('image', 'key', 'split'),
    manifest.ROLE_LABELS: ('key', 'label'),
}


def manifest_config(path: str, role: str, split: manifest.SplitConfig, extras: tuple,
                    fmt: Optional[str] = None, columns: Optional[dict] = None,
                    multi_label: bool = False,
                    label_separator: str = manifest.DEFAULT_LABEL_SEPARATOR,
                    label_normalize: frozenset = frozenset()
                    ) -> manifest.ManifestConfig:
  """Checks one manifest on the launcher. `columns`: {logical column: the
  file's name} as given by --image_column etc. A named column the file lacks
  is a usage error that lists the columns it has."""
  try:
    fmt = fmt or manifest.manifest_format(path)
  except manifest.ManifestFormatError as error:
    raise UsageError(str(error))
  if '://' not in path and not os.path.isfile(path):
    raise UsageError(f'manifest {path} does not exist or is not a file')
  named = {c: n for c, n in (columns or {}).items() if c in _ROLE_COLUMNS[role]}
  if named and fmt == 'txt':
    raise UsageError(f'manifest {path} is a txt list ("path label" per line), which has no '
                     f'column names: drop --{next(iter(named))}_column')
  header = read_manifest_header(path, fmt)
  config = manifest.ManifestConfig(
      path=path, fmt=fmt, header=header, role=role, split=split, extra_features=extras,
      columns=tuple(sorted(named.items())), multi_label=multi_label,
      label_separator=label_separator, label_normalize=label_normalize)
  if manifest.has_header(fmt):
    needed = [config.column(c) for c in manifest.REQUIRED_COLUMNS[role]]
    needed += [n for n in named.values() if n not in needed]
    if role != manifest.ROLE_LABELS:
      needed += [f.name for f in extras]
    _check_columns(path, needed, header)
  elif fmt == 'jsonl' and named:
    found = _jsonl_columns(path)
    if found is not None:
      _check_columns(path, list(named.values()), found)
  return config


def _check_columns(path: str, needed: list, found: tuple) -> None:
  missing = [c for c in needed if c not in found]
  if missing:
    raise UsageError(f'manifest {path} has no column(s) {", ".join(missing)} '
                     f'(its columns: {", ".join(found) or "none"})')


def _read_label_map(path: Optional[str], modes: frozenset) -> Optional[LabelMap]:
  if not path:
    return None
  try:
    text = filesystem.read_text(path)
  except filesystem.read_errors() as error:
    raise UsageError(f'--label_map {path} cannot be read: {type(error).__name__}: {error}')
  except UnicodeDecodeError as error:
    raise UsageError(f'--label_map {path} is not UTF-8 text: {error}')
  try:
    return normalized_map(LabelMap.from_text(text), modes)
  except ValueError as error:  # empty, blank or repeated lines
    raise UsageError(f'--label_map {path}: {error}')


def _may_have_split_column(manifests: tuple) -> bool:
  return bool(manifests) and (manifests[0].fmt == 'jsonl' or
                              manifests[0].column('split') in manifests[0].header)


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
  from PIL import Image  # pylint: disable=import-outside-toplevel
  Image.init()
  unknown = [f for f in formats if f not in Image.OPEN]
  if unknown:
    raise UsageError(f'--formats: Pillow reads no format {", ".join(unknown)} '
                     f'(it reads {", ".join(sorted(Image.OPEN))})')
  return tuple(sorted(formats))


def image_dir_splits(directory: str, names: tuple) -> None:
  """--image_dir_layout split/label: every first-level folder must be a split
  name; a usage error names the first that is not."""
  if '://' in directory:
    from transforms.read_manifest import list_files  # pylint: disable=import-outside-toplevel
    folders = {r.split('/')[0] for r in list_files(directory) if '/' in r}
  else:
    folders = {e.name for e in os.scandir(directory) if e.is_dir()}
  unknown = sorted(f for f in folders if not f.startswith('.') and f not in names)
  if unknown:
    raise UsageError(f'--image_dir {directory}: folder {unknown[0]!r} is not a split name '
                     f'({", ".join(names)}; set --split_names)')


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
      check_threads=args.check_threads, check_processes=args.check_processes,
      strict=args.strict)


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
    if '://' not in args.image_dir and not os.path.isdir(args.image_dir):
      raise UsageError(f'--image_dir {args.image_dir} is not a folder')
    if args.image_dir_layout == manifest.LAYOUT_SPLIT_LABEL:
      if split.fractions:
        raise UsageError('--image_dir_layout split/label takes the split from the '
                         'first folder: drop --split')
      image_dir_splits(args.image_dir, split.names)
  split_from_folders = (args.image_dir and
                        args.image_dir_layout == manifest.LAYOUT_SPLIT_LABEL)
  if not split.fractions and not split_from_folders and not _may_have_split_column(
      manifests):
    # Every row goes to the default split: build one writer, not one per name.
    split = dataclasses.replace(split, names=(manifest.DEFAULT_SPLIT,))
    manifests = tuple(dataclasses.replace(m, split=split) for m in manifests)
  if extras and args.image_dir:
    raise UsageError('--extra_features needs a manifest with those columns')
  return ConvertConfig(
      output_dir=args.output_dir.rstrip('/') or '/', overwrite=args.overwrite,
      manifests=manifests, image_dir=args.image_dir,
      label_map=_read_label_map(args.label_map, label_normalize), image=image,
      example=ExampleSpec(args.schema, extras, args.multi_label), split=split,
      num_shards=args.num_shards, shard_size_mb=args.shard_size_mb,
      compression=args.compression, max_error_rate=args.max_error_rate,
      progress=args.progress, image_threads=args.image_threads,
      image_processes=args.image_processes, label_map_path=args.label_map,
      image_dir_layout=args.image_dir_layout, image_timeout_s=args.image_timeout_s,
      image_extensions=parse_name_list(args.image_extensions, '--image_extensions',
                                       lower=True),
      options=parsed.effective, config_file=parsed.config_file,
      write_index=args.write_index,
      ordering=Ordering(shuffle=args.shuffle == 'on', seed=args.seed),
      dedupe=args.dedupe, split_by=args.split_by, label_normalize=label_normalize)
