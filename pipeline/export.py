"""Make a converted dataset loadable by other readers, without touching it.

  python -m pipeline.export --format tfds --input_dir OUT [--output_dir OUT/tfds] [--overwrite]

`--format tfds` writes TensorFlow Datasets' own metadata (its dataset_info.json,
features.json, label files) into a folder of its own, OUT/tfds by default, with
the shards reached from there: relative symlinks where the filesystem has
them, copies where it does not; gzip shards decompressed (TFDS reads only
uncompressed TFRecords). OUT itself, its dataset_info.json (our contract) and
validate are untouched. Then:

  tfds.builder_from_directory('OUT/tfds').as_dataset(split='train')

The export is built in `.NAME.partial-export-XXXXXXXX` beside --output_dir and
renamed into place once complete: an export that fails, is interrupted or
killed leaves no half --output_dir (the next export removes such a folder).
Needs tensorflow-datasets (4.9.x) where it runs. Exit codes: 0 done, 1 failed
(one line naming the error, no traceback), 2 bad input; interrupted by
SIGINT, SIGTERM or SIGHUP, one line and the end by the signal (130, 143, 129).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import re
import shutil
import sys
import tempfile
import zlib

from pipeline.runs import interrupts
from pipeline.runs import utf8_mode

if __name__ == '__main__':
  utf8_mode.in_utf8_mode()  # first: it may start the command again
  interrupts.before_run(interrupts.EXPORT_LINES[0])

from pipeline import errors
from pipeline.configuration.locations import check_inputs_given_once
from pipeline.configuration.locations import check_location
from pipeline.errors import UsageError
from pipeline.reading import dataset
from pipeline.runs import exits
from pipeline.runs.export_target import DESCRIPTION_PREFIX
from pipeline.runs.export_target import TFDS_DIR
from pipeline.runs.export_target import check_output_dir
from pipeline.runs.export_target import staging_beside
from transforms.core import paths
from transforms.core import records
from transforms.core.dataset_info import InfoError
from transforms.core.dataset_info import how_changed
from transforms.core.pointers import pointer_given
from transforms.core.spec import DATASET_INFO
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import record_spans

FORMATS = ('tfds',)
# The split name TFDS reads as every split together (tfds.Split.ALL).
TFDS_ALL = 'all'
# Our shard names, in TFDS's template language: the shards keep their names.
TFDS_TEMPLATE = '{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}'


def parse_args(argv: list) -> argparse.Namespace:
  parser = errors.UsageParser(prog=errors.command_prog('export'),
                              description=__doc__.strip().splitlines()[0],
                              allow_abbrev=False)
  parser.add_argument('--format', required=True, choices=FORMATS)
  parser.add_argument('--input_dir', required=True, help='a folder written by convert')
  parser.add_argument('--output_dir', help=f'default: INPUT_DIR/{TFDS_DIR}')
  parser.add_argument('--overwrite', action='store_true',
                      help='replace a previous export in --output_dir')
  unknown = errors.unknown_flag(parser, argv)
  if unknown:
    raise UsageError(unknown)
  check_inputs_given_once(argv, ('input_dir',))  # argparse would read the last alone
  args = parser.parse_args(argv)
  check_location('--input_dir', args.input_dir)
  # An empty --output_dir ("$DIR" unset) was the current folder: the export
  # replaced its whole content, without --overwrite, exit 0.
  check_location('--output_dir', args.output_dir)
  pointer = pointer_given(args.input_dir)  # named by its flag, as validate and inspect do
  if pointer:
    raise UsageError(f'--input_dir {pointer}')
  return args


def check_exportable(info: dict) -> None:
  """UsageError for a dataset TFDS cannot describe, before TensorFlow loads."""
  tfds_class_names(info['label_map'])
  image = info['image']
  if image['encoding'] == 'raw' and None in (image['height'], image['width']):
    raise UsageError('raw pixels of per-record size (--resize_mode none) cannot be a '
                      'TFDS feature: TFDS needs their fixed shape')


def tfds_class_names(label_map: list) -> list:
  """TFDS's ClassLabel names for label_map, index for index, so every id keeps
  its number: an id without a class ('' in label_map, as a detection
  dataset's gaps and its 0 are) is named `unused_ID`, with `_` put in front
  until no class has that name (ClassLabel needs unique names). UsageError
  when two classes share a name (COCO allows it; ClassLabel does not)."""
  real = [name for name in label_map if name]
  repeated = sorted({name for name in real if real.count(name) > 1})
  if repeated:
    ids = [i for i, name in enumerate(label_map) if name == repeated[0]]
    raise UsageError(f'class name {repeated[0]!r} is given to ids '
                     f'{", ".join(map(str, ids))}: a TFDS ClassLabel needs unique names')
  taken = set(real)
  names = []
  for i, name in enumerate(label_map):
    if not name:
      name = f'unused_{i}'
      while name in taken:
        name = '_' + name
      taken.add(name)
    names.append(name)
  return names


def tfds_features(info: dict, tfds, tf):
  """The FeaturesDict matching our records: a TFDS feature per feature of the
  table (feature_tables.py) by its field and kind, and a Tensor per extra feature.
  Feature names with '/' become nested dicts (`image/class/label` ->
  ex['image']['class']['label']); a feature named below another
  (`image/key/sha256`) is left out, as TFDS cannot have `image/key` both a
  value and a folder; raw pixels are a fixed-shape uint8 Tensor stored as bytes."""
  image = info['image']
  shape = (image['height'], image['width'], image['channels'])
  class_names = tfds_class_names(info['label_map'])
  if image['encoding'] == 'raw':
    check_exportable(info)
    pixels = tfds.features.Tensor(shape=shape, dtype=tf.uint8, encoding='bytes')
  else:
    pixels = tfds.features.Image(shape=shape, encoding_format=image['encoding'])
  dtypes = {'bytes': tf.string, 'int64': tf.int64, 'float': tf.float32}
  by_field = {'image': lambda: pixels,
              'label': lambda: tfds.features.ClassLabel(names=class_names)}
  by_kind = {'bytes': tfds.features.Text,
             'int64': lambda: tfds.features.Scalar(dtype=tf.int64),
             'float': lambda: tfds.features.Scalar(dtype=tf.float32)}
  spec = records.example_spec(info)
  table = spec.table().features
  nested = {}
  for feature in table:
    if any(feature.name.startswith(other.name + '/') for other in table):
      continue
    connector = by_field.get(feature.field, by_kind[feature.kind])()
    if feature.shape == (None,):  # --multi_label's label ids and texts
      connector = tfds.features.Sequence(connector)
    *folders, leaf = feature.name.split('/')
    place = nested
    for folder in folders:
      place = place.setdefault(folder, {})
    place[leaf] = connector
  for extra in spec.extra_features:  # shape [], [N], [null] or [null, N]
    nested[extra.name] = tfds.features.Tensor(shape=extra.shape,
                                              dtype=dtypes[extra.kind])
  return tfds.features.FeaturesDict(nested)


def _link_or_copy(source: str, target: str) -> str:
  """-> 'linked', 'copied' or 'decompressed'; UsageError naming a gzip shard
  that does not decompress."""
  if source.endswith('.gz'):
    try:
      with dataset.open_binary(source) as stream, open(target, 'wb') as out:
        shutil.copyfileobj(stream, out, 1 << 20)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
      raise UsageError(f'shard {source} does not decompress: {exits.failure_reason(error)}')
    return 'decompressed'
  if not paths.is_remote(source):
    try:
      os.symlink(os.path.relpath(source, os.path.dirname(target)), target)
      return 'linked'
    except OSError:  # no symlinks here (e.g. Windows without the privilege): copy
      pass
  with dataset.open_binary(source) as stream, open(target, 'wb') as out:
    shutil.copyfileobj(stream, out, 1 << 20)
  return 'copied'


def count_records(path: str, source: str) -> int:
  """The records of the shard at `path` (exported from `source`); UsageError
  naming `source` when a record is cut off."""
  with open(path, 'rb') as stream:
    try:
      return sum(1 for _ in record_spans(stream))
    except ShardError as error:
      raise UsageError(f'shard {source} cannot be exported: {error.detail}')


def check_count(input_dir: str, split: str, found: int, declared) -> None:
  """UsageError when a split's shards hold another number of records than
  dataset_info.json says: a shard cut at a record's end reads as a whole
  shard of fewer records, and TFDS would serve that count as the split's."""
  if declared is not None and found != declared:
    raise UsageError(f'split {split!r} of {input_dir} holds {found} record(s); its '
                     f'{DATASET_INFO} says {declared}: a shard was cut short or replaced '
                     f'(validate names it)')


def check_shards_present(input_dir: str, info: dict) -> None:
  """UsageError naming the first shard dataset_info.json lists that is not in
  a local input_dir (a symlink to it would dangle). Remote shards are found
  missing when read."""
  if paths.is_remote(input_dir):
    return
  for declared in info['splits'].values():
    for shard in declared['shards']:
      if not os.path.isfile(paths.join(input_dir, shard)):
        raise UsageError(f'shard {paths.join(input_dir, shard)} listed in '
                         f'{DATASET_INFO} is missing')


# What TensorFlow and TFDS print on stderr while starting, whatever
# TF_CPP_MIN_LOG_LEVEL says: absl's lines from before its logging is set up
# (INFO, e.g. oneDNN's notice), their continuation, and TFDS's own deprecation
# notice about its code, and matplotlib's two lines when it cannot write its
# config folder (HOME read-only: it uses a temporary one, removed at exit;
# lettering.quiet_matplotlib). Any other line is shown.
_CHATTER = re.compile(r'(WARNING: All log messages before absl::InitializeLog\(\) is called '
                      r'are written to STDERR|I\d{4} [\d:.]+ +\d+ \S+:\d+\] '
                      r'.*|To enable the following instructions: .*|'
                      r'mkdir -p failed for path .*matplotlib.*|'
                      r'Matplotlib created a temporary cache directory at .*|'
                      r'WARNING:absl:`FeatureConnector\.dtype` is deprecated\..*)')


@contextlib.contextmanager
def quiet_tensorflow():
  """TensorFlow's start-up chatter off stderr: 6 lines of C++ logging before
  export's own line. TF_CPP_MIN_LOG_LEVEL (set here unless the user set it)
  stops what TensorFlow logs once its logging is set up, not what it logs
  while loading (those go straight to file descriptor 2): stderr goes to a
  file meanwhile, and what is not _CHATTER is written out after."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  sys.stderr.flush()
  saved = os.dup(2)
  try:
    with tempfile.TemporaryFile() as sink:
      os.dup2(sink.fileno(), 2)
      try:
        yield
      finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        sink.seek(0)
        lines = sink.read().decode('utf-8', 'replace').splitlines()
        kept = [line for line in lines if not _CHATTER.fullmatch(line)]
        if kept:
          print('\n'.join(kept), file=sys.stderr)
  finally:
    os.close(saved)


def export_tfds(input_dir: str, output_dir: str, overwrite: bool) -> list:
  """Writes the TFDS folder; -> lines for the terminal."""
  try:
    info = dataset.read_info(input_dir)
  except InfoError as error:
    raise UsageError(str(error))
  if paths.is_remote(output_dir):
    raise UsageError('--output_dir must be a local folder (TFDS metadata is written '
                      'with local files here)')
  # Every check before TensorFlow is imported: a usage error is one line, at once.
  if not info['splits']:  # TFDS's write_metadata: "ValueError: Could not find data files", exit 1
    raise UsageError(f'{DATASET_INFO} lists no split (no row became an example: an '
                     f'--allow_empty dataset): TFDS cannot describe a dataset without one')
  if TFDS_ALL in info['splits']:
    raise UsageError(f'split {TFDS_ALL!r} cannot be exported: TFDS reads split={TFDS_ALL!r} as '
                     f'the union of every split (on a split of that name it fails with a '
                     f'RecursionError); convert again with another name in --split_names')
  check_exportable(info)
  check_shards_present(input_dir, info)
  check_output_dir(output_dir, overwrite, input_dir)
  with quiet_tensorflow():
    return _write_tfds(info, input_dir, output_dir, overwrite)


def _write_tfds(info: dict, input_dir: str, output_dir: str, overwrite: bool) -> list:
  try:
    import tensorflow as tf
    import tensorflow_datasets as tfds
  except ImportError as error:
    raise UsageError(f'--format tfds needs tensorflow-datasets ({error}): '
                      f'pip install tensorflow-datasets==4.9.10')
  features = tfds_features(info, tfds, tf)
  # Built beside --output_dir and renamed into place once complete: a run
  # killed while writing (SIGKILL too) left a folder of shard links without
  # features.json, which the rerun refused with --overwrite as without.
  with staging_beside(output_dir) as staging:
    done = _write_tfds_folder(info, input_dir, staging.path, features, tfds)
    interrupts.raise_if_interrupted()  # a signal swallowed in TensorFlow's code: not complete
    check_output_dir(output_dir, overwrite, input_dir)  # written meanwhile by another export?
    _check_still_the_dataset(input_dir, info)
    staging.put_in_place(interrupts.EXPORT_PLACED_LINE)
  try:
    # A convert --overwrite of --input_dir that began between the check and
    # the rename: its shards are new, this metadata the old dataset's.
    _check_still_the_dataset(input_dir, info)
  except UsageError:
    shutil.rmtree(os.path.realpath(output_dir), ignore_errors=True)  # best effort: the news is the change
    raise
  shards = ', '.join(f'{n} {how}' for how, n in sorted(done.items()))
  return [f'TFDS metadata in {output_dir} (shards: {shards}); load it with '
          f'tfds.builder_from_directory({output_dir!r}).as_dataset(split=...)']


def _check_still_the_dataset(input_dir: str, info: dict) -> None:
  """UsageError unless input_dir still holds the dataset_info.json `info` was
  read from. A convert --overwrite of input_dir while the export ran left
  an export whose metadata (split lengths, features) was the old dataset's,
  its shard links the new dataset's records: TFDS read them by the old
  lengths without a word."""
  try:
    now = dataset.read_info(input_dir)
  except InfoError:
    now = None
  why = how_changed(info, now)
  if why:
    raise UsageError(f'--input_dir {input_dir} changed while the export read it ({why}: a '
                     f'convert wrote it again); nothing was exported: export it again once '
                     f'that convert has ended')


def _write_tfds_folder(info: dict, input_dir: str, output_dir: str, features, tfds) -> dict:
  """Writes the export into output_dir; -> {'linked'/'copied'/'decompressed': shards}."""
  split_infos, done = [], {}
  for split, declared in info['splits'].items():
    lengths = []
    for shard in declared['shards']:
      target = os.path.join(output_dir, shard[:-3] if shard.endswith('.gz') else shard)
      source = paths.join(input_dir, shard)
      how = _link_or_copy(source, target)
      done[how] = done.get(how, 0) + 1
      lengths.append(count_records(target, source))
    check_count(input_dir, split, sum(lengths), declared.get('num_examples'))
    num_bytes = sum(os.path.getsize(os.path.join(output_dir, os.path.basename(s)))
                    for s in (t[:-3] if t.endswith('.gz') else t for t in declared['shards']))
    split_infos.append(tfds.core.SplitInfo(
        name=split, shard_lengths=lengths, num_bytes=num_bytes,
        filename_template=tfds.core.ShardedFileTemplate(
            data_dir=output_dir, template=TFDS_TEMPLATE, dataset_name='img2tfrecord',
            split=split, filetype_suffix='tfrecord')))
  tfds.folder_dataset.write_metadata(
      data_dir=output_dir, features=features, split_infos=split_infos,
      filename_template=TFDS_TEMPLATE, check_data=True,
      description=f'{DESCRIPTION_PREFIX}{input_dir} (schema {info["schema"]})')
  return done


def tfds_output_dir(input_dir: str, output_dir) -> str:
  """--output_dir, or its default INPUT_DIR/tfds; UsageError when that is not
  local. An --input_dir on gs:// or s3:// has no local default: without
  --output_dir, its s3://.../tfds was refused as "--output_dir must be a
  local folder", a flag never given."""
  if output_dir is None and paths.is_remote(input_dir):
    raise UsageError(f'--input_dir {input_dir} is not local, so its default --output_dir '
                     f'(INPUT_DIR/{TFDS_DIR}) cannot be written: give --output_dir, a local '
                     f'folder (the shards are copied there)')
  return output_dir if output_dir is not None else os.path.join(input_dir, TFDS_DIR)


def run(argv: list) -> int:
  args = parse_args(argv)
  output_dir = tfds_output_dir(args.input_dir, args.output_dir)
  print('\n'.join(export_tfds(args.input_dir, output_dir, args.overwrite)))
  return errors.EXIT_OK


def main(argv=None) -> int:
  """The command line: run(argv) with one-line errors, and SIGINT, SIGTERM and
  SIGHUP handled (exits.handling_signals): interrupted, the folder being built
  is removed, a previous export is left as it was, and the process ends by the
  signal after one line."""
  return exits.handling_signals(
      lambda handlers: exits.main_with_one_line_errors(run, argv, 'export', handlers),
      interrupts.EXPORT_LINES)


if __name__ == '__main__':
  # fast: TensorFlow's teardown took 1.5 s after the summary, the signals'
  # default actions back, and a Ctrl-C then ended a complete export silently.
  exits.exit_with(main, fast=True)
