"""The flags of convert and validate: the one source of the flags, which the
parser (pipeline/configuration/command_line.py), --help and --config files all read, with
their defaults and the small value parsers of their types."""

from __future__ import annotations

import argparse

from pipeline.errors import UsageError
from transforms.core import image_dir
from transforms.core import labels
from transforms.core import manifest
from transforms.core import splits
from transforms.core.annotations import ANNOTATION_FORMATS
from transforms.core.annotations import ON_BAD_BOX
from transforms.core.annotations import ON_SIZE_MISMATCH
from transforms.core.boxes import ANNOTATION_ORIENTATIONS
from transforms.core.boxes import DEFAULT_MIN_BOX_VISIBILITY
from transforms.core.feature_tables import SCHEMAS
from transforms.core.shuffle import SHUFFLE_MODES
from transforms.core.spec import CHANGE_DETECTIONS
from transforms.core.spec import COMPRESSIONS
from transforms.core.spec import DEFAULT_FORMATS
from transforms.core.spec import ENCODINGS
from transforms.core.spec import RESIZE_FILTERS
from transforms.core.spec import RESIZE_MODES
from transforms.core.spec import SINKS
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.workers.http_fetch import MAX_TIMEOUT_S
from transforms.workers.http_fetch import HttpConfig

DEFAULT_SHARD_SIZE_MB = 128
DEFAULT_IMAGE_TIMEOUT_S = 60.0
DEFAULT_JOB_ENDPOINT_CONNECT_TIMEOUT_S = 30.0


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


def _recompute_amount(text):
  """--recompute N: an integer, that many records; with a decimal point, that
  fraction of them (0 < N <= 1.0)."""
  try:
    value = float(text) if '.' in text else int(text)
  except ValueError:
    value = None
  if value is None or not (0.0 < value <= 1.0 if isinstance(value, float) else value > 0):
    # argparse prints this one's message (a ValueError's it replaces by the type's name)
    raise argparse.ArgumentTypeError(
        f'{text!r} is neither a number of records (a positive integer: 100) nor a '
        f'fraction of them (with a decimal point, above 0 and at most 1.0: 0.1, 1.0)')
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


def _rate(text):
  value = float(text)
  if not 0.0 <= value <= 1.0:
    # argparse prints this one's message (a ValueError's it replaces)
    raise argparse.ArgumentTypeError(f'{text} is not in 0..1')
  return value


# argparse names the type in its message: "invalid positive integer value: 'abc'"
_positive_int.__name__ = 'positive integer'
_non_negative_int.__name__ = 'non-negative integer'
_non_negative_float.__name__ = 'non-negative number'
_quality.__name__ = 'JPEG quality (1..100)'
_rate.__name__ = 'rate (0..1)'

# What each value type accepts, as a regex for forms that cannot run a parser
# (the Flex Template's parameter checks, pipeline/flex_template.py): the plain
# decimal spellings the type's parser accepts, nothing it refuses (Python's
# int() also takes '1_000' and float() '1e3': left out, never wrongly let in).
VALUE_REGEXES = {
    int: r'^[+-]?[0-9]+$',
    _positive_int: r'^\+?0*[1-9][0-9]*$',
    _non_negative_int: r'^\+?[0-9]+$',
    _non_negative_float: r'^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)$',
    _quality: r'^\+?0*([1-9][0-9]?|100)$',
    _rate: r'^\+?(0+(\.[0-9]*)?|\.[0-9]+|0*1(\.0*)?)$',
}


def _add_runner_args(parser) -> None:
  """Flags of ours about the runner, for convert and validate."""
  runner = parser.add_argument_group('runner')
  runner.add_argument('--job_endpoint_connect_timeout', type=_non_negative_float,
                      default=DEFAULT_JOB_ENDPOINT_CONNECT_TIMEOUT_S, metavar='SECONDS',
                      help='with --job_endpoint (PortableRunner, Flink, Spark): exit 2 '
                      'before anything is written unless the job service answers within '
                      'this many seconds (0: no check)')


def _add_detection_args(parser) -> None:
  """--schema detection's input: boxes and masks per image (docs/detection.md)."""
  found = parser.add_argument_group('detection')
  found.add_argument('--annotations', metavar='PATH',
                     help='object annotations (--schema detection): a COCO instances '
                     'JSON, a Pascal VOC folder (Annotations/*.xml), or a YOLO dataset '
                     '(data.yaml or its folder); images from --image_dir')
  found.add_argument('--annotation_format', choices=ANNOTATION_FORMATS,
                     help='the format of --annotations')
  found.add_argument('--include_masks', action='store_true',
                     help='store image/object/mask: one 0/1 PNG per object at the output size')
  found.add_argument('--min_box_visibility', type=_rate, default=DEFAULT_MIN_BOX_VISIBILITY,
                     help='with --resize_mode crop, a box keeping less of its area is '
                     'dropped (counted)')
  found.add_argument('--annotation_orientation', choices=ANNOTATION_ORIENTATIONS,
                     help='which pixels boxes refer to when the recorded image size '
                     'cannot tell: stored, or exif (the EXIF-rotated image); default exif for '
                     'yolo (as Ultralytics trains), stored for coco and voc')
  found.add_argument('--on_bad_box', choices=ON_BAD_BOX, default=ON_BAD_BOX[0],
                     help='drop: a bad annotation drops itself (counted); reject_row: its '
                     'whole image')
  found.add_argument('--on_size_mismatch', choices=ON_SIZE_MISMATCH,
                     default=ON_SIZE_MISMATCH[0],
                     help='an image whose file is not the size its annotation records '
                     '(either way round after EXIF orientation): reject its row '
                     "(annotation/size_mismatch), or scale: scale the annotation's "
                     'coordinates by actual/recorded')
  found.add_argument('--skip_empty', action='store_true',
                     help='leave out images without objects (counted); default: kept, '
                     'as negative examples')


class ConvertOptions:
  """Options of `python -m pipeline.convert`."""

  COMMAND = 'convert'  # its name in the console script
  # The flags naming a file or folder (configuration/locations.py checks them).
  LOCATIONS = ('manifest', 'label_manifest', 'image_dir', 'label_map', 'annotations',
               'output_dir', 'previous_dataset')
  # The inputs among them: given twice on the line, the first was dropped
  # without a word (`--manifest a.csv --manifest b.csv` converted b.csv alone).
  INPUTS = ('manifest', 'label_manifest', 'image_dir', 'label_map', 'annotations')

  @classmethod
  def _add_argparse_args(cls, parser):
    source = parser.add_argument_group('input')
    source.add_argument('--manifest', help='CSV/TSV/JSONL manifest with columns image, '
                        'label[, key, split, ...], or a TXT manifest of "path label" '
                        'lines (optionally .gz), or Parquet (image: a path, bytes or a '
                        'Hugging Face Image), or WebDataset .tar/.tar.gz shards; a pattern '
                        '(parts/*.csv.gz, data/train-*.parquet, '
                        "'shards/train-{000000..000099}.tar') reads its files as one manifest")
    source.add_argument('--label_manifest', help='second manifest key,label, '
                        'joined on key with --manifest key,image (a pattern too)')
    source.add_argument('--image_dir', help='folder-per-class layout DIR/<label>/<image> '
                        'instead of --manifest')
    source.add_argument('--label_map', help='file with one class name per line; '
                        'line i is id i. Default: sorted distinct labels')
    source.add_argument('--manifest_format', choices=manifest.FORMATS,
                        help='format of the manifests (default: from the file name; '
                        'txt: "path label" per line; parquet: read by row group; '
                        'webdataset: .tar/.tar.gz shards of samples)')
    for column in manifest.COLUMNS:
      source.add_argument(f'--{column}_column', metavar='NAME',
                          help=f'the manifest column holding the {column} '
                          f'(default {column})')
    source.add_argument('--image_dir_layout', default=image_dir.LAYOUT_LABEL,
                        choices=image_dir.IMAGE_DIR_LAYOUTS,
                        help='label: DIR/<label>/<image>; split/label: '
                        'DIR/<split>/<label>/<image>')
    source.add_argument('--image_extensions', default=','.join(image_dir.DEFAULT_IMAGE_EXTENSIONS),
                        help='with --image_dir, files with other extensions are skipped '
                        '(all: keep every file); in WebDataset tars, the suffixes of a '
                        "sample's image member")
    source.add_argument('--multi_label', action='store_true',
                        help='a label cell or JSON list holds several labels')
    source.add_argument('--label_separator', default=manifest.DEFAULT_LABEL_SEPARATOR,
                        help='separates the labels of a cell with --multi_label (refused without it)')
    _add_detection_args(parser)
    out = parser.add_argument_group('output')
    out.add_argument('--output_dir', help='folder for shards and dataset_info.json')
    out.add_argument('--overwrite', action='store_true',
                     help='replace a previous dataset in --output_dir')
    out.add_argument('--schema', default=ExampleSpec.schema, choices=SCHEMAS,
                     help='feature layout. default: image/* features, key and class text; '
                     "seed: img_raw and label only (the seed tutorial's); detection: boxes "
                     'and masks (docs/detection.md)')
    out.add_argument('--num_shards', type=_non_negative_int, default=0,
                     help='shards per split (0: per worker bundle, rolled over at '
                     '--shard_size_mb, or with --sink tfrecordio as the runner chooses; '
                     'N forces exactly N through a shuffle)')
    out.add_argument('--shard_size_mb', type=_positive_int, default=DEFAULT_SHARD_SIZE_MB,
                     help='target shard size when --num_shards is 0 (not with '
                     '--num_shards N or --sink tfrecordio)')
    out.add_argument('--sink', default=SINKS[0], choices=SINKS,
                     help='shard writer. ordered: the same bytes on every run and '
                     'runner, in the --shuffle order, index files possible; tfrecordio: '
                     "Beam's WriteToTFRecord, records in arrival order, not the same "
                     'bytes from run to run, no index files')
    out.add_argument('--compression', default='none', choices=COMPRESSIONS,
                     help='gzip shards are named *.tfrecord.gz')
    out.add_argument('--write_index', action='store_true',
                     help='write <shard>.index (one "offset length" line per record, as the '
                     'tfrecord package and DALI read) beside each uncompressed shard')
    out.add_argument('--split', help='hash split, e.g. train=0.8,validation=0.1,test=0.1')
    out.add_argument('--split_names', default=','.join(splits.DEFAULT_SPLIT_NAMES),
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
    out.add_argument('--label_normalize', default=labels.NFC,
                     help='Unicode NFC always (one class for one text however it is '
                     'encoded); merge label spellings on purpose: lower, strip, or both '
                     '(also lower,strip); the normalized text is stored. none: labels '
                     'exactly as written (no NFC)')
    out.add_argument('--extra_features',
                     help='manifest columns to copy, each with a shape: name:type a '
                     'scalar, name:type[N] N values, name:type[] a list, name:type[][N] a '
                     'list of N-tuples; type bytes|float|int64, e.g. '
                     'weight:float,boxes:float[][4]')
    reuse = parser.add_argument_group('nightly runs')
    reuse.add_argument('--previous_dataset', metavar='DIR',
                       help='an earlier run\'s output (a folder, or a "latest" pointer file '
                       'naming one): rows whose key, label, split, features, source '
                       'fingerprint and image options are unchanged have their records '
                       'copied from it, not encoded; the output is the same bytes as a '
                       'full run. A successful run then writes OUT/../latest naming OUT')
    reuse.add_argument('--previous_dataset_missing', default='error', choices=('full', 'error'),
                       help='when --previous_dataset does not exist (the first night): '
                       'error exits 2; full converts everything, with a warning')
    reuse.add_argument('--change_detection', default=CHANGE_DETECTIONS[0],
                       choices=CHANGE_DETECTIONS,
                       help='what tells a source changed: metadata (local size, mtime, '
                       'ctime, inode; s3 ETag and size; gs CRC32C and generation: no '
                       'image read) or content (SHA-256 of the bytes: the file is read, '
                       'not decoded; also catches rewrites that restore every timestamp)')
    image = parser.add_argument_group('image')
    image.add_argument('--height', type=_positive_int, default=ImageSpec.height,
                       help='output height in pixels (not with --resize_mode none)')
    image.add_argument('--width', type=_positive_int, default=ImageSpec.width,
                       help='output width in pixels (not with --resize_mode none)')
    image.add_argument('--channels', type=int, default=ImageSpec.channels, choices=(1, 3),
                       help='3: RGB; 1: grey')
    image.add_argument('--encoding', default=ImageSpec.encoding, choices=ENCODINGS,
                       help='raw: row-major HxWxC uint8 pixels; jpeg or png: the encoded image')
    image.add_argument('--jpeg_quality', type=_quality, default=ImageSpec.jpeg_quality,
                       metavar='1..100', help='with --encoding jpeg (only)')
    image.add_argument('--resize_mode', default=ImageSpec.resize_mode, choices=RESIZE_MODES,
                       help='stretch to --height x --width; pad: keep the aspect, letterbox '
                       'with 0; crop: keep the aspect, centre crop; none: keep each '
                       "image's own size")
    image.add_argument('--resize_filter', default=ImageSpec.resize_filter,
                       choices=RESIZE_FILTERS, help='the resampling filter')
    image.add_argument('--background', default=','.join(map(str, ImageSpec.background)),
                       help='R,G,B colour that transparent pixels are composited over')
    image.add_argument('--image_threads', type=_non_negative_int, default=0,
                       help='threads converting images in a worker (0: cores + 1 '
                       'on a local run, 1 on distributed runners)')
    image.add_argument('--image_processes', type=_non_negative_int, default=0,
                       help='child processes converting images in a worker (0: one per '
                       'core on a single local worker, one per worker on distributed '
                       'runners, for every encoding, unless --image_threads is given; '
                       'with --image_timeout_s 0, one per core for JPEG/PNG output on a '
                       'single local worker, else none)')
    image.add_argument('--max_pixels', type=_positive_int, default=ImageSpec.max_pixels,
                       help='images with more pixels are rejected, never decoded')
    image.add_argument('--max_image_bytes', type=_positive_int,
                       default=ImageSpec.max_image_bytes,
                       help='source files larger than this are rejected as read/too_large, '
                       'never read')
    image.add_argument('--image_timeout_s', type=_non_negative_float,
                       default=DEFAULT_IMAGE_TIMEOUT_S,
                       help='an image taking longer to read (from any filesystem), decode, '
                       'resize and encode (or read and hash, with --dedupe content or '
                       '--split_by content) is rejected as decode/timeout (0: no limit; '
                       'none with --image_threads: threads cannot be stopped)')
    image.add_argument('--formats', default=','.join(DEFAULT_FORMATS),
                       help='Pillow formats decoded, by content (all: every format '
                       'Pillow has); others are rejected')
    web = parser.add_argument_group('images over HTTP(S)')
    web.add_argument('--http_timeout_s', type=_non_negative_float,
                     default=HttpConfig.timeout_s,
                     help='an http(s):// image whose connection, any read, or whole '
                     'response takes longer is a try that timed out (read/timeout)')
    web.add_argument('--http_retries', type=_non_negative_int, default=HttpConfig.retries,
                     help='tries after the first on connection errors, timeouts, 429 and '
                     '5xx: exponential backoff with jitter, or the Retry-After asked for')
    web.add_argument('--http_max_per_host', type=_positive_int,
                     default=HttpConfig.max_per_host,
                     help='requests at once to one host, per worker process')
    web.add_argument('--http_user_agent', default=HttpConfig.user_agent,
                     help='the User-Agent header of every request')
    web.add_argument('--http_user_agent_token', default='',
                     help='the agent name X-Robots-Tag directives may address '
                     '("somebot: noai" applies when this is somebot)')
    web.add_argument('--http_ignore_robots_tag', action='store_true',
                     help='read images whose X-Robots-Tag says noai, noimageai, noindex '
                     'or noimageindex (default: rejected as read/robots_opt_out)')
    budget = parser.add_argument_group('errors')
    budget.add_argument('--max_error_rate', type=_rate, default=0.0,
                        help='rejected/rows (0..1) above this exits 3 (default 0: strict)')
    budget.add_argument('--allow_empty', action='store_true',
                        help='publish an empty dataset when the input has no rows (exit '
                        '0) or every row is rejected (--max_error_rate decides as for any '
                        'run: exit 3 unless it is 1), or a YOLO dataset of which no image '
                        'has a label file; default: exit 2, nothing published')
    budget.add_argument('--progress', default='auto', choices=('auto', 'on', 'off'),
                        help='live progress line on local runs (auto: when stderr is a terminal)')
    _add_runner_args(parser)


class ValidateOptions:
  """Options of `python -m pipeline.validate`."""

  COMMAND = 'validate'  # its name in the console script
  LOCATIONS = ('input_dir', 'report', 'manifest')  # as ConvertOptions.LOCATIONS
  INPUTS = ('input_dir', 'manifest')  # as ConvertOptions.INPUTS

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
                        help='exit 1 on warnings too (the same image in two splits, a '
                        'feature the dataset does not declare)')
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
    parser.add_argument('--recompute', type=_recompute_amount, metavar='N',
                        help='convert a deterministic sample of records again from their '
                        'sources, with the options dataset_info.json records, and compare '
                        'the bytes: N records, or with a decimal point that fraction of '
                        'them (1.0: all)')
    parser.add_argument('--manifest', metavar='PATH',
                        help="with --recompute: where the run's manifest lives now (its "
                        'relative image paths resolve against its folder)')
    _add_runner_args(parser)


def http_config(args) -> HttpConfig:
  """The --http_* flags as the image step's HttpConfig; UsageError for a
  User-Agent no request can carry (http.client refused it on every request:
  each http(s) row rejected as read/unexpected_error, the run exit 2 or 3),
  and for a --http_timeout_s of 0 or past MAX_TIMEOUT_S, which urllib3 and
  sockets refused so on every request (ValueError; OverflowError)."""
  if not 0 < args.http_timeout_s <= MAX_TIMEOUT_S:
    raise UsageError(f'--http_timeout_s {args.http_timeout_s:g} must be above 0 and at most '
                     f'{MAX_TIMEOUT_S:,.0f} s')
  agent = args.http_user_agent
  bad = next((c for c in agent if c in '\r\n' or ord(c) > 0xFF), None)
  if bad is not None:
    raise UsageError(f'--http_user_agent {agent!r} holds {bad!r}, which no HTTP header can '
                     'carry (Latin-1 text on one line; a YAML > or | value ends with a '
                     'line break: use >- or one line)')
  return HttpConfig(timeout_s=args.http_timeout_s, retries=args.http_retries,
                    max_per_host=args.http_max_per_host, user_agent=args.http_user_agent,
                    user_agent_token=args.http_user_agent_token,
                    ignore_robots_tag=args.http_ignore_robots_tag)
