"""Load a converted dataset for training, driven only by its dataset_info.json.

  from pipeline import read
  ds = read.load('out', 'train').shuffle(1000).batch(32)    # tf.data.Dataset of dicts
  for example in read.examples('out', 'train'):               # numpy, no TensorFlow
    example['image'], example['label'], example['key'], example['class_text']

Both give each record as {image: uint8 H x W x C, label: int64, key, class_text,
every extra feature}, from raw, JPEG or PNG output, either schema, gzip or not;
records of one shard in the shard's order. `examples` gives key and class_text
as str, `load` as tf.string tensors (bytes once .numpy()'d: tf.data has no str).
`--schema seed` records carry no key: it is ''. Local paths need neither Beam
nor TensorFlow for `examples`; gs:// and s3:// paths go through Beam's
filesystems.

For batching `load`'s records: multi_hot=True makes labels one fixed-length
vector (--multi_label lists differ in length), resize_to=(H, W) gives every
image one size (--resize_mode none images differ), batch_size=N batches
whatever still differs as tf.RaggedTensors.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import gzip
import os
from typing import Optional
import zlib

from transforms.core import file_kinds
from transforms.core import paths
from transforms.core import records
from transforms.core.dataset_info import MAX_INFO_BYTES
from transforms.core.dataset_info import InfoError
from transforms.core.dataset_info import parse_info
from transforms.core.pointers import pointer_given
from transforms.core.spec import DATASET_INFO
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import read_records

# Records parsed per vectorised tf.io.parse_example call (then unbatched).
PARSE_BATCH = 64


@contextlib.contextmanager
def open_binary(path: str):
  """A readable binary stream of `path`; `.gz` decompressed. Local files with
  Python's own open (no Beam import), remote ones through Beam's filesystems."""
  if paths.is_remote(path):
    from transforms import filesystem  # imports Beam: only for gs://, s3://
    with filesystem.FileAccess().open_checked(path) as stream:
      yield stream
    return
  kind = file_kinds.not_regular(path)
  if kind:  # a FIFO would wait for a writer, a device never end
    raise ShardError(0, 'missing_shard', f'{path} is a {kind}, not a regular file: not read')
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rb') as stream:
    yield stream


def read_info(input_dir: str) -> dict:
  """dataset_info.json of `input_dir`; InfoError if it is missing or unusable."""
  path = paths.join(input_dir, DATASET_INFO)
  if paths.is_remote(path):
    from transforms import filesystem  # imports Beam: only for gs://, s3://
    return filesystem.read_info(input_dir)
  pointer = pointer_given(input_dir)  # export and read.load: was "dataset_info.json is missing"
  if pointer:
    raise InfoError(pointer)
  file_kinds.require_regular(path, InfoError)  # a FIFO: open() would wait for a writer
  try:
    with open(path, 'rb') as handle:  # parse_info tells bytes not UTF-8
      text = handle.read(MAX_INFO_BYTES + 1)  # parse_info refuses more
  except OSError as error:
    raise InfoError(f'{path} is missing or unreadable ({type(error).__name__}): '
                    f'the dataset is incomplete or was never written')
  return parse_info(text, path)


def shard_paths(input_dir: str, info: dict, split: str) -> list:
  """The split's shards as dataset_info.json lists them; InfoError for an unknown split."""
  if split not in info['splits']:
    raise InfoError(f'no split {split!r} in {paths.join(input_dir, DATASET_INFO)}; it has '
                    f'{", ".join(info["splits"]) or "none"}')
  return [paths.join(input_dir, shard) for shard in info['splits'][split]['shards']]


def examples(input_dir: str, split: str = 'train', *, decode: bool = True,
             info: Optional[dict] = None) -> Iterator[dict]:
  """Every record of `split` as a dict of numpy values, shard by shard, without
  TensorFlow (the project's own TFRecord reader, both CRCs checked, and Example
  parser): `key` and `class_text` are str (class_text a list of str with
  --multi_label), where read.load gives bytes. Raises ShardError on a damaged
  shard, or at the end when the split holds another number of records than
  dataset_info.json says (count_mismatch), RecordError on a record that does
  not match dataset_info.json."""
  input_dir = os.fspath(input_dir)  # a pathlib.Path too, as api.convert takes it
  info = info or read_info(input_dir)
  to_example = records.ExampleDecoder(info, decode)
  read = 0
  for path in shard_paths(input_dir, info, split):
    for data in _shard_records(path):
      read += 1
      yield to_example(data)
  expected = info['splits'][split].get('num_examples')  # None: a caller's info= without it
  if expected is not None and read != expected:
    # A shard cut at a record's end (a copy or a sync stopped short) reads
    # as a whole shard of fewer records: the count is the only sign of it.
    raise ShardError(read, 'count_mismatch', f'split {split!r} of {input_dir} holds {read} '
                     f'record(s); its dataset_info.json says {expected}: a shard was cut '
                     'short or replaced (validate names it)')


def _shard_records(path: str) -> Iterator[bytes]:
  """The data of each record of one shard, both CRCs checked. Every way the
  shard fails to read is a ShardError of the kind validate reports: a missing
  file and a damaged gzip stream were a FileNotFoundError, an EOFError or a
  BadGzipFile, past a caller catching ShardError."""
  read = 0  # records read whole: the index of the first one not read
  try:
    with open_binary(path) as stream:
      for data in _named_records(stream, path):
        read += 1
        yield data
  except FileNotFoundError:
    raise ShardError(0, 'missing_shard', f'{path} is listed in {DATASET_INFO} but missing') from None
  except EOFError as error:  # a .gz cut short
    raise ShardError(read, 'truncated_shard', f'{path}: compressed file ends early, inside '
                     f'record {read} ({read} read whole): {error}') from error
  except (zlib.error, OSError) as error:  # BadGzipFile, bad deflate data, unreadable
    raise ShardError(read, 'corrupt_shard', f'{path}: cannot read the file from record {read} '
                     f'({read} read whole): {type(error).__name__}: {error}') from error


def _named_records(stream, path: str) -> Iterator[bytes]:
  """read_records' data; its ShardError (a damaged frame) with a message that
  names the shard, as the other kinds' do: it was `data CRC mismatch at
  record 5` alone, no file named among a split's shards."""
  try:
    for _, data in read_records(stream):
      yield data
  except ShardError as error:
    raise ShardError(error.index, error.kind, f'{path}: {error.detail}') from error


def _parse_spec(info: dict, tf):
  """Each feature_spec shape as docs/reading.md ("Plain tf.data: reading each
  shape") reads it: [] and [N] fixed, [null] a ragged list; [null, N] a
  ragged list too, made [k, N] by _tuples: RaggedFeature's UniformRowLength,
  on records that hold no whole number of N-tuples, cut a parse batch's
  values into N-tuples across records, without a word."""
  dtypes = {'string': tf.string, 'int64': tf.int64, 'float32': tf.float32}

  def parse(f):
    dtype, shape = dtypes[f['dtype']], f['shape']
    if None not in shape:
      return tf.io.FixedLenFeature(shape, dtype)
    return tf.io.RaggedFeature(dtype)
  return {name: parse(f) for name, f in info['feature_spec'].items()}


def _tuples(values, name: str, size: int, tf):
  """A [null, N] feature's flat values -> [k, N]; InvalidArgumentError when
  they are no whole number of N-tuples (a feature_spec that is not the
  records': read.examples raises RecordError, validate reports it)."""
  check = tf.debugging.assert_equal(
      tf.math.floormod(tf.size(values), size), 0,
      message=f'{name} holds values that are no whole number of {size}-tuples, the shape '
              f'in dataset_info.json')
  with tf.control_dependencies([check]):
    return tf.reshape(values, [-1, size])


def _known_label(label, num_classes: int, tf):
  """`label` (an id, or a list of them), checked to be ids of the label map:
  InvalidArgumentError for one outside it, which went into training quietly
  (read.examples raises RecordError, validate label_out_of_range)."""
  check = tf.debugging.assert_equal(
      tf.reduce_all((label >= 0) & (label < num_classes)), True,
      # no quote in it: TensorFlow's message would show it as \'
      message=f'a label is outside 0..{num_classes - 1}, the ids of the label_map in '
              f'dataset_info.json')
  with tf.control_dependencies([check]):
    return tf.identity(label)


def _multi_hot(label, num_classes: int, tf):
  """Label ids (one, or a list of any length) -> float32 [num_classes]: 1 at
  each id, 0 elsewhere (a list without ids: all 0)."""
  ids = tf.reshape(label, [-1])
  return tf.minimum(tf.reduce_sum(tf.one_hot(ids, num_classes, dtype=tf.float32), axis=0), 1.0)


def _resized(image, size: tuple, tf):
  """uint8 H x W x C -> uint8 size[0] x size[1] x C, stretched: bilinear with
  antialiasing (tf.image.resize), rounded back to uint8."""
  pixels = tf.image.resize(image, size, method='bilinear', antialias=True)
  return tf.cast(tf.clip_by_value(tf.round(pixels), 0, 255), tf.uint8)


def _image_shape(info: dict) -> list:
  """[H, W, C] of every decoded image of the dataset; H and W None where
  --resize_mode none kept each image's own size. Both schemas' decoders pin
  it in the static shape, which is what batch_size's ragged_batch goes by:
  dense where it is known, ragged where it is None."""
  image_info = info['image']
  return [image_info['height'], image_info['width'], image_info['channels']]


def _decoder(info: dict, decode: bool, tf, multi_hot: bool = False,
             resize_to: Optional[tuple] = None):
  """Parsed features -> the example dict of read.examples' fields, each from
  the feature the table names for it (records.ExampleDecoder decodes the same
  features without TensorFlow); the image decoded per dataset_info.json."""
  spec = records.example_spec(info)
  table = spec.table()
  image_info = info['image']
  channels, encoding = image_info['channels'], image_info['encoding']
  fixed = _image_shape(info)
  label_map = tf.constant(info['label_map'] or [''])
  num_classes = len(info['label_map'])  # the lines of label_map.txt

  def to_example(features):
    encoded, label = features[table.by_field('image')], _known_label(
        features[table.label], num_classes, tf)
    shape = tf.stack([features[name] for name in table.size]) if table.size else fixed
    key = features[table.key] if table.key else tf.constant('')
    # the stored class name; a schema without one: the label map's
    class_text = features[table.text] if table.text else tf.gather(label_map, label)
    if not decode:
      image = encoded
    elif encoding == 'raw':
      image = tf.reshape(tf.io.decode_raw(encoded, tf.uint8), shape)
    elif encoding == 'jpeg':
      # INTEGER_ACCURATE: the DCT Pillow (convert, validate, read.examples) uses.
      image = tf.io.decode_jpeg(encoded, channels=channels, dct_method='INTEGER_ACCURATE')
    elif encoding == 'png':
      image = tf.io.decode_png(encoded, channels=channels)
    else:
      raise ValueError(f'no decoder for the encoding {encoding!r}')
    if decode:  # what is fixed (--resize_mode none: the channels) in the static shape
      image = tf.ensure_shape(image, fixed)
    if resize_to:
      image = tf.ensure_shape(_resized(image, resize_to, tf), [*resize_to, channels])
    if multi_hot:
      label = _multi_hot(label, num_classes, tf)
    example = {'image': image, 'label': label, 'key': key, 'class_text': class_text}
    # any other field the table names, as parsed (read.examples gives it too):
    # a feature added to the table reaches both readers
    example.update({f.field: features[f.name] for f in table.features
                    if f.field and f.field not in example})
    example.update({f.name: _tuples(features[f.name], f.name, f.shape[1], tf)
                    if len(f.shape) == 2 else features[f.name] for f in spec.extra_features})
    return example

  return to_example


def _checked_load_options(decode: bool, resize_to, batch_size) -> Optional[tuple]:
  """ValueError for options that cannot work, before TensorFlow is imported."""
  if resize_to is not None:
    if not decode:
      raise ValueError('resize_to needs decode=True: stored bytes cannot be resized')
    if (not isinstance(resize_to, (tuple, list)) or len(resize_to) != 2 or not all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in resize_to)):
      raise ValueError(f'resize_to={resize_to!r}: give (height, width), two positive ints')
    resize_to = tuple(resize_to)
  if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(
      batch_size, int) or batch_size <= 0):
    raise ValueError(f'batch_size={batch_size!r}: give a positive int')
  return resize_to


def _refuse_classification_options(input_dir: str, multi_hot: bool, resize_to) -> None:
  """ValueError for the options only a classification dataset takes: the
  detection decoder would leave them out without a word (found in a trial:
  resize_to=(8, 8) gave each image its own size, multi_hot no label at all)."""
  if resize_to is not None:
    raise ValueError(f'resize_to={resize_to!r} does not go with a --schema detection '
                     f'dataset ({input_dir}): convert it with --height and --width, or '
                     f'resize each image and its masks yourself (normalised boxes stay '
                     f'right under a stretch)')
  if multi_hot:
    raise ValueError(f'multi_hot does not go with a --schema detection dataset '
                     f'({input_dir}): its records hold object lists (`classes`), not '
                     f'one label')


def load(input_dir: str, split: str = 'train', *, decode: bool = True,
         shuffle_files: bool = False, multi_hot: bool = False,
         resize_to: Optional[tuple] = None, batch_size: Optional[int] = None,
         info: Optional[dict] = None, schema: Optional[str] = None):
  """A tf.data.Dataset of the split's records as dicts: `image` (uint8 H x W x C,
  or the stored bytes with decode=False), `label` (int64; a 1-D list of ids
  with --multi_label), `key` and `class_text` (tf.string: bytes, where
  read.examples gives str), any other field the feature table names (as
  parsed) and every extra feature. Shards are read in
  parallel (interleaved, one record of each in turn; each shard in its own
  order), records parsed in vectorised batches. shuffle_files: a new shard
  order every epoch. len() is the split's count in dataset_info.json; an
  iteration that ends with another (a shard cut short) raises
  tf.errors.FailedPreconditionError.

  multi_hot: `label` becomes a float32 vector of one slot per class (the
  lines of label_map.txt), 1 at the record's ids: fixed-length, so labels of
  --multi_label records batch. resize_to=(H, W): every image stretched to H x W
  (bilinear, antialiased, rounded to uint8), e.g. --resize_mode none output.
  batch_size=N: records batched N at a time (the last batch may be smaller):
  what has one shape in every record is a dense [N, ...] tensor, what does
  not (label and class_text lists, --resize_mode none images, list extras) a
  tf.RaggedTensor [N, None, ...]. To shuffle records, not batches, leave it
  out and call .shuffle(k).ragged_batch(N) yourself.

  schema='detection' (or any dataset convert wrote with it): `image`,
  `boxes` [N, 4], `classes` [N], `class_text`, `key`, `masks` [N, H, W] with
  --include_masks, `num_objects`; batch_size=N batches them as above, then
  pads the object lists to the batch's longest: images and masks of their own
  size stay ragged, each box normalised to its own image
  (pipeline/reading/read_detection.py); multi_hot and resize_to are refused
  (ValueError). schema: ValueError when the dataset's differs. A listed
  shard that is no regular file (a FIFO, a device, a folder): ShardError
  (missing_shard), as read.examples raises, before any record is read."""
  resize_to = _checked_load_options(decode, resize_to, batch_size)
  input_dir = os.fspath(input_dir)  # a pathlib.Path too, as api.convert takes it
  info = info or read_info(input_dir)
  if schema is not None and schema != info['schema']:
    raise ValueError(f'schema={schema!r}: {input_dir} was written with --schema '
                     f'{info["schema"]}')
  detection = info['schema'] == 'detection'
  if detection:
    _refuse_classification_options(input_dir, multi_hot, resize_to)
  files = shard_paths(input_dir, info, split)
  for path in files:  # as read.examples: tf.data waited on a FIFO for ever
    if not paths.is_remote(path):
      file_kinds.require_regular(path, ShardError, 0, 'missing_shard')
  import tensorflow as tf
  compression = 'GZIP' if info['compression'] == 'gzip' else ''
  dataset = tf.data.Dataset.from_tensor_slices(files)
  if shuffle_files:
    dataset = dataset.shuffle(len(files), reshuffle_each_iteration=True)
  dataset = dataset.interleave(
      lambda path: tf.data.TFRecordDataset(path, compression_type=compression),
      cycle_length=max(1, min(len(files), 16)), num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True)
  spec = _parse_spec(info, tf)
  if detection:
    from pipeline.reading import read_detection
    to_example = read_detection.decoder(info, decode, tf, _image_shape(info))
  else:
    to_example = _decoder(info, decode, tf, multi_hot, resize_to)
  dataset = (dataset.batch(PARSE_BATCH)
             .map(lambda batch: tf.io.parse_example(batch, spec),
                  num_parallel_calls=tf.data.AUTOTUNE)
             .unbatch()
             .map(to_example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True))
  count = info['splits'][split].get('num_examples')  # None: a caller's info= without it
  if count is not None:
    # As read.examples: a shard cut at a record's end ends the split quietly
    # in tf.data; an iteration that ends with another count raises
    # FailedPreconditionError, and len() is the split's count.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
  if batch_size is None:
    return dataset
  # One batching for both schemas: zero-padding images of different sizes
  # would move every normalised box and mask off its pixels.
  batches = dataset.ragged_batch(batch_size)
  if detection:
    return batches.map(lambda batch: read_detection.padded_objects(batch, tf))
  return batches
