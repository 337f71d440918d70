"""pipeline.read: read.examples (no TensorFlow) and read.load (tf.data) on real output."""

from __future__ import annotations

import json
import pathlib
import pickle
import shutil
import struct
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline import read
from pipeline import validate
from tests.conftest import read_info
from transforms.core.dataset_info import InfoError
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import masked_crc
from transforms.core.tfrecord import read_records

# One worker builds the datasets fixture (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('read')

READERS = pathlib.Path(__file__).with_name('tf_readers.py')
ROOT = READERS.parent.parent
CLASSES = ('ant', 'bee', 'cat')
HEIGHT, WIDTH = 12, 16


def pattern(i: int, channels: int = 3) -> np.ndarray:
  """A smooth, different image per i, no wrap-around edges (JPEG keeps it
  within a few levels)."""
  y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
  planes = [x * 8 + y * 2 + 5 * i, y * 10 + 7 * i, x * 4 + 3 * i + 60]  # all < 256
  image = np.stack(planes[:channels], axis=-1).astype(np.uint8)
  return image


@pytest.fixture(scope='module')
def source(tmp_path_factory):
  """12 PNGs of exactly the output size (no resize: pixels survive exactly),
  labels cycling through CLASSES, a weight column for --extra_features."""
  root = tmp_path_factory.mktemp('read_source')
  (root / 'images').mkdir()
  rows = ['image,label,weight']
  for i in range(12):
    Image.fromarray(pattern(i)).save(root / 'images' / f'img_{i:02d}.png')
    rows.append(f'images/img_{i:02d}.png,{CLASSES[i % 3]},{i} {i + 0.5}')
  (root / 'manifest.csv').write_text('\n'.join(rows) + '\n')
  return root


VARIANTS = {
    'raw': ['--num_shards', '2'],
    'seed': ['--schema', 'seed'],
    'jpeg': ['--encoding', 'jpeg'],
    'png_gzip': ['--encoding', 'png', '--compression', 'gzip', '--extra_features',
                 'weight:float[]'],
    'none_png_split': ['--resize_mode', 'none', '--encoding', 'png',
                       '--split', 'train=0.5,test=0.5'],
    # Beam's WriteToTFRecord: other shards, records in arrival order
    'tfrecordio_gzip_split': ['--sink', 'tfrecordio', '--compression', 'gzip',
                              '--num_shards', '2', '--split', 'train=0.5,test=0.5'],
}


class _Converted(dict):
  """VARIANTS name -> its converted folder, converted on first use (a run
  that deselects some tests converts only what the rest read)."""

  def __init__(self, source, tmp_path_factory):
    super().__init__()
    self._source, self._tmp = source, tmp_path_factory

  def __missing__(self, name):
    out = self._tmp.mktemp(f'read_{name}') / 'out'
    flags = VARIANTS[name]
    size = [] if 'none' in flags else ['--height', str(HEIGHT), '--width', str(WIDTH)]
    assert convert.main(['--manifest', str(self._source / 'manifest.csv'), '--output_dir',
                         str(out), *size, *flags]) == 0
    self[name] = out
    return out


@pytest.fixture(scope='module')
def datasets(source, tmp_path_factory):
  """One converted dataset per VARIANTS entry (converted once for the module)."""
  return _Converted(source, tmp_path_factory)


def expected_by_index(key: str) -> int:
  return int(key.rsplit('_', 1)[1].split('.', maxsplit=1)[0])


@pytest.mark.parametrize('variant', ['raw', 'png_gzip', 'none_png_split',
                                     'tfrecordio_gzip_split'])
def test_examples_give_the_source_pixels_and_labels(datasets, variant):
  out = datasets[variant]
  info = read_info(out)
  seen = []
  for split in info['splits']:
    for example in read.examples(str(out), split):
      i = expected_by_index(example['key'])
      assert example['image'].dtype == np.uint8
      np.testing.assert_array_equal(example['image'], pattern(i))
      assert example['label'] == i % 3
      assert type(example['label']) is int  # docs/reading.md "Types"
      assert example['class_text'] == CLASSES[i % 3]
      if variant == 'png_gzip':
        np.testing.assert_array_equal(example['weight'], np.float32([i, i + 0.5]))
        assert example['weight'].dtype == np.float32
      seen.append(i)
  assert sorted(seen) == list(range(12))


def test_examples_of_jpeg_output_are_within_jpeg_tolerance(datasets):
  examples = list(read.examples(str(datasets['jpeg'])))
  assert len(examples) == 12
  for example in examples:
    diff = np.abs(example['image'].astype(int) - pattern(expected_by_index(example['key'])))
    assert diff.mean() < 2 and diff.max() < 16, (diff.mean(), diff.max())


def test_examples_of_seed_schema_have_no_key_and_the_class_text_of_the_map(datasets):
  examples = list(read.examples(str(datasets['seed'])))
  assert [e['key'] for e in examples] == [''] * 12
  assert sorted(e['label'] for e in examples) == sorted(i % 3 for i in range(12))
  assert all(e['class_text'] == CLASSES[e['label']] for e in examples)
  # images are the sources (each matched by its pixels, labels agree)
  for example in examples:
    matches = [i for i in range(12) if np.array_equal(example['image'], pattern(i))]
    assert len(matches) == 1 and matches[0] % 3 == example['label']


def test_examples_without_decode_keep_the_stored_bytes(datasets):
  example = next(read.examples(str(datasets['jpeg']), decode=False))
  assert example['image'][:3] == b'\xff\xd8\xff'


def test_examples_follow_shard_order(datasets):
  out = datasets['raw']
  info = read_info(out)
  assert len(info['splits']['train']['shards']) == 2
  keys = [e['key'] for e in read.examples(str(out))]
  per_shard = []
  for shard in info['splits']['train']['shards']:
    per_shard += [e['key'] for e in read.examples(
        str(out), info={**info, 'splits': {'train': {'shards': [shard]}}})]
  assert keys == per_shard and len(keys) == 12


def test_unknown_split_and_missing_dataset_are_info_errors(datasets, tmp_path):
  with pytest.raises(InfoError, match=r"no split 'validation'.*it has train"):
    next(read.examples(str(datasets['raw']), 'validation'))
  with pytest.raises(InfoError, match='missing or unreadable'):
    next(read.examples(str(tmp_path / 'nothing')))


def test_a_dataset_info_of_another_shape_is_an_info_error_naming_the_field(datasets, tmp_path):
  """It was an AttributeError from inside the reader."""
  out = pathlib.Path(shutil.copytree(datasets['raw'], tmp_path / 'out'))
  info = read_info(out)
  info['image'] = None
  (out / 'dataset_info.json').write_text(json.dumps(info))
  with pytest.raises(InfoError, match=r'dataset_info.json: image None is not an object of the '
                                      r'image spec$'):
    next(read.examples(str(out)))


def test_a_dataset_info_that_is_no_json_text_is_an_info_error(datasets, tmp_path):
  """Were a UnicodeDecodeError and a RecursionError from inside the reader."""
  out = pathlib.Path(shutil.copytree(datasets['raw'], tmp_path / 'out'))
  (out / 'dataset_info.json').write_bytes(b'\xff{}')
  with pytest.raises(InfoError, match=r'dataset_info.json is not UTF-8 text: '):
    next(read.examples(str(out)))
  (out / 'dataset_info.json').write_bytes(b'[' * 100_000 + b']' * 100_000)
  with pytest.raises(InfoError, match=r'dataset_info.json is not valid JSON: nested too deeply$'):
    next(read.examples(str(out)))


def test_examples_of_a_shard_declaring_a_huge_record_raise_a_shard_error(datasets, tmp_path):
  """read.examples on a record header declaring 2^40 bytes: the ShardError
  validate reports (truncated_shard), not a MemoryError."""
  out = pathlib.Path(shutil.copytree(datasets['seed'], tmp_path / 'out'))
  shard = out / read_info(out)['splits']['train']['shards'][0]
  header = struct.pack('<Q', 1 << 40)
  shard.write_bytes(shard.read_bytes() + header + struct.pack('<I', masked_crc(header)))
  with pytest.raises(ShardError) as error:
    list(read.examples(str(out)))
  assert (error.value.kind, error.value.detail) == (
      'truncated_shard', f'{shard}: file ends inside record 12 (0 of its {1 << 40} data bytes)')


def test_examples_of_a_damaged_shard_name_it_in_the_shard_error(datasets, tmp_path):
  """A damaged frame in one of a split's shards: the ShardError's one line
  names the shard, as a missing or cut-off gzip one's does (it was `data CRC
  mismatch at record 1` alone: which of the shards, the message did not say)."""
  out = pathlib.Path(shutil.copytree(datasets['raw'], tmp_path / 'out'))
  shard = out / read_info(out)['splits']['train']['shards'][1]
  with open(shard, 'rb') as stream:
    sizes = [len(data) + 16 for _, data in read_records(stream)]
  data = shard.read_bytes()
  damaged = bytearray(data)
  damaged[sizes[0] + 12 + 5] ^= 1  # a byte of record 1's data
  shard.write_bytes(bytes(damaged))
  got = []
  with pytest.raises(ShardError) as error:
    for example in read.examples(str(out)):
      got.append(example)
  first_shard = read_info(out)['splits']['train']['num_examples'] - len(sizes)
  assert len(got) == first_shard + 1  # the first shard whole, then record 0 of this one
  assert (error.value.kind, error.value.index, str(error.value)) == (
      'corrupt_shard', 1, f'{shard}: data CRC mismatch at record 1')
  shard.write_bytes(data[:sizes[0] + 100])  # cut inside record 1
  with pytest.raises(ShardError) as error:
    list(read.examples(str(out)))
  assert (error.value.kind, error.value.index, str(error.value)) == (
      'truncated_shard', 1,
      f'{shard}: file ends inside record 1 (88 of its {sizes[1] - 16} data bytes)')


def test_examples_of_a_shard_that_is_a_fifo_raise_a_shard_error_unopened(datasets, tmp_path):
  from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
  out = pathlib.Path(shutil.copytree(datasets['seed'], tmp_path / 'out'))
  shard = out / read_info(out)['splits']['train']['shards'][0]
  shard.unlink()
  with fifo_writer_that_unblocks_readers(shard) as unblocked:
    with pytest.raises(ShardError) as error:
      list(read.examples(str(out)))
  assert (error.value.kind, error.value.detail) == (
      'missing_shard', f'{shard} is a FIFO (named pipe), not a regular file: not read')
  assert not unblocked


def test_load_of_a_shard_that_is_a_fifo_raises_a_shard_error_unopened(datasets, tmp_path):
  """read.load handed a FIFO in a shard's place to tf.data, whose reader
  waited for a writer for ever (read.examples and validate refuse it): the
  same ShardError now, before TensorFlow is imported or the FIFO opened. In
  a subprocess: TensorFlow stays out of the test process."""
  from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
  out = pathlib.Path(shutil.copytree(datasets['raw'], tmp_path / 'out'))
  shard = out / read_info(out)['splits']['train']['shards'][1]
  shard.unlink()
  script = ('import json, sys\nfrom pipeline import read\n'
            'from transforms.core.tfrecord import ShardError\ntry:\n'
            '  print(json.dumps(["read", sum(1 for _ in read.load(sys.argv[1]))]))\n'
            'except ShardError as e:\n'
            '  print(json.dumps([e.kind, str(e), "tensorflow" in sys.modules]))\n')
  with fifo_writer_that_unblocks_readers(shard) as unblocked:
    done = subprocess.run([sys.executable, '-c', script, str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
  assert done.stdout.strip(), done.stderr[-3000:]
  assert json.loads(done.stdout.strip().splitlines()[-1]) == [
      'missing_shard', f'{shard} is a FIFO (named pipe), not a regular file: not read', False]
  assert not unblocked


def test_examples_of_a_missing_or_damaged_gzip_shard_raise_a_shard_error(datasets, tmp_path):
  """The docstring's ShardError on a damaged shard: a missing shard was a
  FileNotFoundError, a gzip shard cut short an EOFError and one whose gzip
  CRC fails a BadGzipFile, past `except ShardError`."""
  out = pathlib.Path(shutil.copytree(datasets['png_gzip'], tmp_path / 'out'))
  shard = out / read_info(out)['splits']['train']['shards'][0]
  data = shard.read_bytes()
  whole = sum(1 for _ in read.examples(str(out)))
  shard.unlink()
  with pytest.raises(ShardError) as error:
    next(read.examples(str(out)))
  assert (error.value.kind, error.value.index, str(error.value)) == (
      'missing_shard', 0, f'{shard} is listed in dataset_info.json but missing')
  shard.write_bytes(data[:-40])  # the gzip stream cut inside its last records
  got = []
  with pytest.raises(ShardError) as error:
    for example in read.examples(str(out)):
      got.append(example)
  assert error.value.kind == 'truncated_shard' and error.value.index == len(got) < whole
  assert str(error.value).startswith(f'{shard}: compressed file ends early, inside record '
                                     f'{len(got)} ({len(got)} read whole): ')
  damaged = bytearray(data)
  damaged[-8] ^= 1  # the gzip trailer's CRC32 of the uncompressed bytes
  shard.write_bytes(bytes(damaged))
  got = []
  with pytest.raises(ShardError) as error:
    for example in read.examples(str(out)):
      got.append(example)
  assert error.value.kind == 'corrupt_shard' and len(got) == whole  # every record was whole
  assert str(error.value) == (f'{shard}: cannot read the file from record {whole} ({whole} '
                              f'read whole): BadGzipFile: {error.value.__cause__}')


def test_examples_of_records_of_another_size_than_dataset_info_raise_a_record_error(
    datasets, tmp_path):
  """dataset_info.json's image height edited (or records from another run):
  read.load refuses them (its static shape), read.examples gave the records'
  own 12x16 images quietly, where the model was built for dataset_info.json's."""
  from transforms.core.decoders import RecordError
  for variant in ('raw', 'jpeg'):
    out = pathlib.Path(shutil.copytree(datasets[variant], tmp_path / variant))
    info = read_info(out)
    info['image']['height'] = HEIGHT + 1
    (out / 'dataset_info.json').write_text(json.dumps(info))
    for decode in (True, False):
      with pytest.raises(RecordError) as error:
        next(read.examples(str(out), decode=decode))
      assert str(error.value) == (f'image is {HEIGHT}x{WIDTH}x3, dataset_info.json says '
                                  f'{HEIGHT + 1}x{WIDTH}x3')


def test_examples_of_an_encoded_image_of_another_size_than_its_record_raise(tmp_path):
  """A PNG whose record declares another size: read.examples gave the PNG's."""
  import io

  from transforms.core import decoders
  png = io.BytesIO()
  Image.fromarray(pattern(0)).save(png, 'PNG')
  reading = decoders.Reading('png', None, None, 3, ('ant',),
                             ('image/height', 'image/width', 'image/channels'))
  record = {'image/height': HEIGHT + 2, 'image/width': WIDTH, 'image/channels': 3}
  with pytest.raises(decoders.RecordError) as error:
    decoders.image(png.getvalue(), record, reading)
  assert str(error.value) == f'png image is {HEIGHT}x{WIDTH}, expected {HEIGHT + 2}x{WIDTH}'
  record['image/height'] = HEIGHT
  assert (decoders.image(png.getvalue(), record, reading) == pattern(0)).all()
  # a --schema detection --resize_mode none record: no size features, none in
  # dataset_info.json either: each image its own size
  own_size = decoders.Reading('png', None, None, 3, ('ant',), None)
  assert (decoders.image(png.getvalue(), {}, own_size) == pattern(0)).all()
  fixed = decoders.Reading('png', HEIGHT, WIDTH + 1, 3, ('ant',), None)
  with pytest.raises(decoders.RecordError) as error:
    decoders.image(png.getvalue(), {}, fixed)
  assert str(error.value) == f'png image is {HEIGHT}x{WIDTH}, expected {HEIGHT}x{WIDTH + 1}'


def _cut_at_a_record_end(out: pathlib.Path, keep: int) -> None:
  """The first shard cut right after its record `keep` - 1: a whole shard of fewer records."""
  shard = out / read_info(out)['splits']['train']['shards'][0]
  with open(shard, 'rb') as stream:
    sizes = [len(data) + 16 for _, data in read_records(stream)]  # length, CRC, data, CRC
  assert len(sizes) > keep
  with open(shard, 'r+b') as stream:
    stream.truncate(sum(sizes[:keep]))


def test_examples_of_a_shard_cut_at_a_record_end_raise_a_shard_error_at_the_end(
    datasets, tmp_path):
  """Every record read is whole: only the count tells (it gave 6 of 12 quietly)."""
  out = pathlib.Path(shutil.copytree(datasets['seed'], tmp_path / 'out'))
  total = read_info(out)['splits']['train']['num_examples']
  _cut_at_a_record_end(out, 6)
  got = []
  with pytest.raises(ShardError) as error:
    for example in read.examples(str(out)):
      got.append(example)
  assert len(got) == 6 and error.value.kind == 'count_mismatch'
  assert str(error.value) == (
      f"split 'train' of {out} holds 6 record(s); its dataset_info.json says {total}: a "
      'shard was cut short or replaced (validate names it)')


@pytest.mark.slow  # TensorFlow in a subprocess
def test_load_of_a_shard_cut_at_a_record_end_raises_at_the_end(datasets, tmp_path):
  out = pathlib.Path(shutil.copytree(datasets['seed'], tmp_path / 'out'))
  total = read_info(out)['splits']['train']['num_examples']
  _cut_at_a_record_end(out, 6)
  script = ('import sys, json\nimport tensorflow as tf\nfrom pipeline import read\n'
            'ds = read.load(sys.argv[1])\nn = 0\ntry:\n  for _ in ds: n += 1\n'
            'except tf.errors.FailedPreconditionError as e: print(json.dumps([len(ds), n, '
            'e.message]))\n')
  done = subprocess.run([sys.executable, '-c', script, str(out)], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert done.stdout.strip(), done.stderr[-3000:]
  length, read_before, message = json.loads(done.stdout.strip().splitlines()[-1])
  assert (length, read_before) == (total, 6)
  assert f'expected to contain {total} elements but contained only 6' in message


def _relabelled(out: pathlib.Path, label_feature: str, label: int) -> int:
  """The first shard's record 1 given the label id `label`, framed with good
  CRCs (as a tool rewriting labels would); -> the records before it."""
  from transforms.core.example_proto import parse_example
  from transforms.core.example_proto import serialize_example
  shard = out / read_info(out)['splits']['train']['shards'][0]
  with open(shard, 'rb') as stream:
    records = [data for _, data in read_records(stream)]
  features = {name: (kind.split('_')[0], values)
              for name, (kind, values) in parse_example(records[1]).items()}
  features[label_feature] = ('int64', [label])
  records[1] = serialize_example(features)
  shard.write_bytes(b''.join(frame(data) for data in records))
  return 1


@pytest.mark.slow  # TensorFlow in a subprocess
@pytest.mark.parametrize('variant,label_feature', [('raw', 'image/class/label'),
                                                   ('seed', 'label')])
def test_a_label_outside_the_label_map_is_refused_by_both_readers(datasets, tmp_path,
                                                                  variant, label_feature):
  """A record's id outside dataset_info.json's label_map: read.examples gave
  it with class_text '' and read.load (default schema) gave it to training
  quietly, where validate reports label_out_of_range."""
  from transforms.core.decoders import RecordError
  out = pathlib.Path(shutil.copytree(datasets[variant], tmp_path / 'out'))
  before = _relabelled(out, label_feature, len(CLASSES))
  got = []
  with pytest.raises(RecordError) as error:
    for example in read.examples(str(out)):
      got.append(example)
  assert len(got) == before
  assert str(error.value) == (f'label {len(CLASSES)} is outside 0..{len(CLASSES) - 1}, the '
                              "ids of dataset_info.json's label_map")
  script = ('import sys, json\nimport tensorflow as tf\nfrom pipeline import read\n'
            'try:\n  print(json.dumps(sorted(int(e["label"]) for e in read.load(sys.argv[1]))))\n'
            'except tf.errors.InvalidArgumentError as e: print(json.dumps(e.message))\n')
  done = subprocess.run([sys.executable, '-c', script, str(out)], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert done.stdout.strip(), done.stderr[-3000:]
  message = json.loads(done.stdout.strip().splitlines()[-1])
  assert isinstance(message, str), message  # the labels read, 3 among them
  assert (f'a label is outside 0..{len(CLASSES) - 1}, the ids of the label_map in '
          'dataset_info.json') in message
  assert validate.main(['--input_dir', str(out)]) == 1


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_examples_and_load_take_a_pathlib_path(datasets):
  """api.convert takes output_dir as a pathlib.Path; read.examples and
  read.load raised `TypeError: argument of type 'PosixPath' is not iterable`."""
  out = datasets['png_gzip']
  assert isinstance(out, pathlib.Path)
  assert [e['key'] for e in read.examples(out)] == [e['key'] for e in read.examples(str(out))]
  assert len([e['key'] for e in read.examples(out)]) == 12
  with pytest.raises(InfoError, match="no split 'test'"):
    next(read.examples(out, 'test'))
  script = ('import pathlib, sys\nfrom pipeline import read\n'
            'ds = read.load(pathlib.Path(sys.argv[1]))\n'
            'print(len(ds), sum(1 for _ in ds))\n')
  done = subprocess.run([sys.executable, '-c', script, str(out)], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert done.stdout.split() == ['12', '12'], done.stderr[-3000:]


@pytest.mark.slow  # TensorFlow in a subprocess
def test_load_refuses_tuples_that_do_not_fit_the_declared_length(source, tmp_path):
  """A [null, N] extra whose records hold no whole number of N-tuples (its
  feature_spec edited from [null, 2] to [null, 3]): RaggedFeature's
  UniformRowLength cut the parse batch's values into 3-tuples across records
  (records with none, records with [[0.5, 8.0, 8.5]]: another record's
  values) without a word, where read.examples raises."""
  from transforms.core.decoders import RecordError
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(source / 'manifest.csv'), '--output_dir', str(out),
                       '--height', str(HEIGHT), '--width', str(WIDTH), '--extra_features',
                       'weight:float[][2]']) == 0
  script = ('import sys, json\nimport tensorflow as tf\nfrom pipeline import read\n'
            'try:\n  print(json.dumps(sorted(e["weight"].numpy().tolist() '
            'for e in read.load(sys.argv[1]))))\n'
            'except tf.errors.InvalidArgumentError as e: print(json.dumps(e.message))\n')

  def loaded():
    done = subprocess.run([sys.executable, '-c', script, str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])

  assert loaded() == sorted([[i, i + 0.5]] for i in range(12))
  info = read_info(out)
  info['feature_spec']['weight']['shape'] = [None, 3]
  (out / 'dataset_info.json').write_text(json.dumps(info))
  with pytest.raises(RecordError, match=r'weight has 2 values, its shape is \[None, 3\]'):
    next(read.examples(str(out)))
  message = loaded()
  assert isinstance(message, str), message
  assert ('weight holds values that are no whole number of 3-tuples, the shape in '
          'dataset_info.json') in message


def test_examples_import_neither_tensorflow_nor_beam(datasets):
  script = ('import sys, json\nfrom pipeline import read\n'
            'n = sum(1 for _ in read.examples(sys.argv[1]))\n'
            'print(json.dumps([n, [m for m in ("tensorflow", "apache_beam") '
            'if m in sys.modules]]))')
  done = subprocess.run([sys.executable, '-c', script, str(datasets['png_gzip'])], cwd=ROOT,
                        capture_output=True, text=True, check=True)
  assert json.loads(done.stdout) == [12, []]


def _tf_reader(*args) -> str:
  done = subprocess.run([sys.executable, str(READERS), *map(str, args)], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  return done.stdout.strip().splitlines()[-1]


def _load_pairs(datasets) -> list:
  return [(name, split) for name in VARIANTS for split in read_info(datasets[name])['splits']]


def options_job(out, split: str = 'train', **options) -> str:
  """The key of read.load(out, split, **options)'s elements in eager_tf['options']."""
  return json.dumps([str(out), split, options])


@pytest.fixture(scope='module')
def eager_tf(datasets, multi_labelled, varied_sizes, mixed_detection, tmp_path_factory):
  """read.load of every dataset and split, with the options batching needs,
  and the Keras run, in ONE TensorFlow process (its import costs ~5 s):
  {'load': {'DIR:SPLIT': records}, 'keras': the training history, 'options':
  {options_job(...): elements}}. The seed recipe needs a process of its own
  (it turns eager execution off)."""
  result = tmp_path_factory.mktemp('eager_tf') / 'eager.pickle'
  options = [
      [multi_labelled, {'multi_hot': True}], [multi_labelled, {'batch_size': 5}],
      [multi_labelled, {'multi_hot': True, 'batch_size': 5}],
      [datasets['raw'], {'multi_hot': True}], [datasets['raw'], {'resize_to': [HEIGHT, WIDTH]}],
      [varied_sizes, {'batch_size': 2}], [varied_sizes, {'resize_to': [6, 10], 'batch_size': 2}],
      *[[mixed_detection[mode], DETECTION_BATCH] for mode in mixed_detection],
  ]
  jobs = {'load': [f'{datasets[name]}:{split}' for name, split in _load_pairs(datasets)] + [
      f'{multi_labelled}:train'], 'keras': str(datasets['raw']),
      'options': [[str(out), 'train', kwargs] for out, kwargs in options]}
  _tf_reader('eager', result, json.dumps(jobs))
  return pickle.loads(result.read_bytes())


@pytest.mark.slow
def test_load_matches_examples_record_for_record(datasets, eager_tf):
  """read.load and read.examples: the same records, pixel for pixel (JPEG too:
  both decode with the accurate integer DCT), each shard in its own order."""
  pairs = _load_pairs(datasets)
  loaded = [eager_tf['load'][f'{datasets[name]}:{split}'] for name, split in pairs]
  for (name, split), from_tf in zip(pairs, loaded):
    out = datasets[name]
    plain = list(read.examples(str(out), split))
    assert len(from_tf) == len(plain) > 0
    if name != 'seed':  # keys are unique: compare each shard's order
      info = read_info(out)
      for shard in info['splits'][split]['shards']:
        one = {**info, 'splits': {split: {'shards': [shard]}}}
        shard_keys = [e['key'] for e in read.examples(str(out), split, info=one)]
        assert [e['key'] for e in from_tf if e['key'] in shard_keys] == shard_keys
      plain_by_key = {e['key']: e for e in plain}
      pairs_here = [(e, plain_by_key[e['key']]) for e in from_tf]
    else:  # one shard: the same order
      assert len(read_info(out)['splits'][split]['shards']) == 1
      pairs_here = list(zip(from_tf, plain))
    for tf_example, example in pairs_here:
      assert set(tf_example) == set(example)
      np.testing.assert_array_equal(tf_example['image'], example['image'])
      assert (tf_example['label'], tf_example['key'], tf_example['class_text']) == (
          example['label'], example['key'], example['class_text'])
      for extra in set(example) - {'image', 'label', 'key', 'class_text'}:
        np.testing.assert_array_equal(tf_example[extra], example[extra])


@pytest.mark.slow
@pytest.mark.integration  # a TensorFlow 1 process of its own (~10 s); test_tf_readers runs the recipe too
def test_seed_recipe_load_and_examples_agree_pixel_for_pixel(datasets, eager_tf, tmp_path):
  out = datasets['seed']
  result = tmp_path / 'seed.pickle'
  _tf_reader('seed_pickle', out, HEIGHT, WIDTH, result)
  from_seed = pickle.loads(result.read_bytes())
  from_load = eager_tf['load'][f'{out}:train']
  plain = list(read.examples(str(out)))

  def as_set(examples):
    return sorted((e['label'], e['image'].tobytes()) for e in examples)

  assert len(from_seed) == len(from_load) == len(plain) == 12
  assert as_set(from_seed) == as_set(from_load) == as_set(plain)
  # read.load keeps the shard's order (the seed recipe's shuffle_batch does not)
  assert [e['image'].tobytes() for e in from_load] == [e['image'].tobytes() for e in plain]


@pytest.mark.slow
def test_a_keras_model_trains_one_epoch_on_load(eager_tf):
  result = eager_tf['keras']
  assert result['steps'] == 3  # 12 examples, batches of 4
  assert len(result['history']['loss']) == 1 and np.isfinite(result['history']['loss'][0])


@pytest.fixture(scope='module')
def multi_labelled(source, tmp_path_factory):
  """The source images with label lists (--multi_label): img_i has CLASSES[i % 3]
  and, for even i, also CLASSES[(i + 1) % 3]."""
  rows = ['image,label']
  for i in range(12):
    labels = [CLASSES[i % 3]] + ([CLASSES[(i + 1) % 3]] if i % 2 == 0 else [])
    rows.append(f'{source}/images/img_{i:02d}.png,{";".join(labels)}')
  root = tmp_path_factory.mktemp('read_multi')
  (root / 'manifest.csv').write_text('\n'.join(rows) + '\n')
  out = root / 'out'
  assert convert.main(['--manifest', str(root / 'manifest.csv'), '--output_dir', str(out),
                       '--height', str(HEIGHT), '--width', str(WIDTH), '--multi_label',
                       '--num_shards', '2']) == 0
  return out


def multi_labels_of(i: int) -> list:
  labels = [CLASSES[i % 3]] + ([CLASSES[(i + 1) % 3]] if i % 2 == 0 else [])
  return labels


def test_examples_of_multi_label_output_give_label_lists(multi_labelled):
  found = list(read.examples(str(multi_labelled)))
  assert len(found) == 12
  for example in found:
    i = expected_by_index(example['key'])
    # ids in the row's order; the label map is sorted, so an id is its CLASSES index
    assert example['label'].dtype == np.int64
    assert example['label'].tolist() == [CLASSES.index(c) for c in multi_labels_of(i)]
    assert example['class_text'] == multi_labels_of(i)
    np.testing.assert_array_equal(example['image'], pattern(i))


@pytest.mark.slow
def test_load_of_multi_label_output_matches_examples(multi_labelled, eager_tf):
  from_tf = eager_tf['load'][f'{multi_labelled}:train']
  plain = {e['key']: e for e in read.examples(str(multi_labelled))}
  assert sorted(e['key'] for e in from_tf) == sorted(plain)
  for example in from_tf:
    expected = plain[example['key']]
    assert example['label'] == expected['label'].tolist()
    assert example['class_text'] == expected['class_text']
    np.testing.assert_array_equal(example['image'], expected['image'])


# --- batching: multi_hot, batch_size, resize_to -------------------------------------


def colour_of(i: int) -> tuple:
  return (40 * i + 10, 200 - 30 * i, 7 * i + 1)


def size_of(i: int) -> tuple:
  """(height, width): every image its own size, never square."""
  return 4 + i, 6 + 3 * i


@pytest.fixture(scope='module')
def varied_sizes(tmp_path_factory):
  """5 solid-colour PNGs of 5 sizes, kept at their size (--resize_mode none, raw)."""
  root = tmp_path_factory.mktemp('read_varied')
  rows = ['image,label']
  for i in range(5):
    height, width = size_of(i)
    Image.new('RGB', (width, height), colour_of(i)).save(root / f'v_{i}.png')
    rows.append(f'v_{i}.png,{CLASSES[i % 3]}')
  (root / 'manifest.csv').write_text('\n'.join(rows) + '\n')
  out = root / 'out'
  assert convert.main(['--manifest', str(root / 'manifest.csv'), '--output_dir', str(out),
                       '--resize_mode', 'none']) == 0
  return out


def solid(i: int, size: tuple) -> np.ndarray:
  return np.broadcast_to(np.uint8(colour_of(i)), (*size, 3))


@pytest.mark.slow
def test_load_multi_hot_gives_one_slot_per_class_of_the_label_map(multi_labelled, datasets,
                                                                  eager_tf):
  assert (multi_labelled / 'label_map.txt').read_text().split() == list(CLASSES)
  found = eager_tf['options'][options_job(multi_labelled, multi_hot=True)]
  assert len(found) == 12
  by_index = {}
  for example in found:
    assert isinstance(example['key'], bytes)  # tf.string; read.examples gives str
    assert example['label'].dtype == np.float32 and example['label'].shape == (3,)
    by_index[expected_by_index(example['key'].decode())] = example
  # img_00: ant and bee; img_01: bee alone; img_02: cat and ant
  np.testing.assert_array_equal(by_index[0]['label'], np.float32([1, 1, 0]))
  np.testing.assert_array_equal(by_index[1]['label'], np.float32([0, 1, 0]))
  np.testing.assert_array_equal(by_index[2]['label'], np.float32([1, 0, 1]))
  for i, example in by_index.items():
    expected = np.float32([c in multi_labels_of(i) for c in CLASSES])
    np.testing.assert_array_equal(example['label'], expected)
    assert example['class_text'].tolist() == [c.encode() for c in multi_labels_of(i)]
  # one label per record: a one-hot vector
  single = eager_tf['options'][options_job(datasets['raw'], multi_hot=True)]
  assert len(single) == 12
  for example in single:
    expected = np.zeros(3, np.float32)
    expected[expected_by_index(example['key'].decode()) % 3] = 1
    np.testing.assert_array_equal(example['label'], expected)


@pytest.mark.slow
def test_load_batches_label_lists_as_ragged_tensors(multi_labelled, eager_tf):
  batches = eager_tf['options'][options_job(multi_labelled, batch_size=5)]
  assert [len(b['key']) for b in batches] == [5, 5, 2]
  seen = []
  for batch in batches:
    n = len(batch['key'])
    assert batch['image'].shape == (n, HEIGHT, WIDTH, 3)  # one shape: a dense tensor
    assert batch['label']['ragged'] == [n, None]
    assert batch['class_text']['ragged'] == [n, None]
    for row, key in enumerate(batch['key']):
      i = expected_by_index(key.decode())
      assert batch['label']['values'][row] == [CLASSES.index(c) for c in multi_labels_of(i)]
      assert batch['class_text']['values'][row] == [c.encode() for c in multi_labels_of(i)]
      np.testing.assert_array_equal(batch['image'][row], pattern(i))
      seen.append(i)
  assert sorted(seen) == list(range(12))
  hot = eager_tf['options'][options_job(multi_labelled, multi_hot=True, batch_size=5)]
  assert [b['label'].shape for b in hot] == [(5, 3), (5, 3), (2, 3)]
  first = hot[0]
  for row, key in enumerate(first['key']):
    i = expected_by_index(key.decode())
    np.testing.assert_array_equal(
        first['label'][row], np.float32([c in multi_labels_of(i) for c in CLASSES]))


@pytest.mark.slow
def test_load_batches_images_of_their_own_size_as_ragged_or_resizes_them(varied_sizes,
                                                                         eager_tf):
  batches = eager_tf['options'][options_job(varied_sizes, batch_size=2)]
  assert [len(b['key']) for b in batches] == [2, 2, 1]
  seen = []
  for batch in batches:
    n = len(batch['key'])
    assert batch['image']['ragged'] == [n, None, None, 3]
    assert batch['label'].shape == (n,)
    for row, key in enumerate(batch['key']):
      i = int(key.decode()[2])  # v_I.png
      image = np.uint8(batch['image']['values'][row])
      assert image.shape == (*size_of(i), 3)
      np.testing.assert_array_equal(image, solid(i, size_of(i)))
      seen.append(i)
  assert sorted(seen) == list(range(5))
  resized = eager_tf['options'][options_job(varied_sizes, resize_to=[6, 10], batch_size=2)]
  assert [b['image'].shape for b in resized] == [(2, 6, 10, 3), (2, 6, 10, 3), (1, 6, 10, 3)]
  for batch in resized:
    assert batch['image'].dtype == np.uint8
    for row, key in enumerate(batch['key']):
      np.testing.assert_array_equal(batch['image'][row], solid(int(key.decode()[2]), (6, 10)))


@pytest.mark.slow
def test_load_resized_to_the_stored_size_keeps_every_pixel(datasets, eager_tf):
  found = eager_tf['options'][options_job(datasets['raw'], resize_to=[HEIGHT, WIDTH])]
  assert len(found) == 12
  for example in found:
    np.testing.assert_array_equal(example['image'],
                                  pattern(expected_by_index(example['key'].decode())))


@pytest.mark.parametrize('options,message', [
    ({'resize_to': (8, 8), 'decode': False}, 'resize_to needs decode=True'),
    ({'resize_to': (8,)}, r'resize_to=\(8,\): give \(height, width\), two positive ints'),
    ({'resize_to': (0, 8)}, 'two positive ints'),
    ({'resize_to': (8.5, 8)}, 'two positive ints'),
    ({'resize_to': '8x8'}, 'two positive ints'),
    ({'batch_size': 0}, 'batch_size=0: give a positive int'),
    ({'batch_size': 2.0}, 'batch_size=2.0: give a positive int'),
    ({'batch_size': True}, 'give a positive int'),
])
def test_load_options_that_cannot_work_are_refused_before_tensorflow(tmp_path, options,
                                                                     message):
  with pytest.raises(ValueError, match=message):
    read.load(str(tmp_path), **options)


# --- detection: batch_size with images of their own size --------------------------

# file -> (height, width), [(category id, COCO bbox [x, y, w, h])]: three sizes,
# 2, 1 and 3 objects, boxes on the right and bottom edges (where zero-padding
# to the batch's largest image would move them).
DETECTION_IMAGES = {
    'a.png': ((24, 32), [(1, [20, 14, 12, 10]), (2, [2, 3, 8, 6])]),
    'b.png': ((40, 56), [(2, [30, 5, 20, 30])]),
    'c.png': ((18, 44), [(1, [0, 0, 5, 4]), (1, [10, 9, 34, 9]), (2, [25, 2, 6, 5])]),
}
DETECTION_BATCH = {'schema': 'detection', 'batch_size': 3}


def object_colour(j: int) -> tuple:
  """Object j's fill: red >= 250, which no background pixel has."""
  return (250 + j, 30 * j, 200 - 30 * j)


def detection_image(name: str) -> np.ndarray:
  """A smooth background (every channel < 200) of its own size, each object's
  box filled with object_colour."""
  (height, width), objects = DETECTION_IMAGES[name]
  y, x = np.mgrid[0:height, 0:width]
  i = sorted(DETECTION_IMAGES).index(name)
  image = np.stack([y * 2 + x + 20 * i, 150 - y - 20 * i, x * 3 + 10], axis=-1).astype(np.uint8)
  for j, (_, (left, top, w, h)) in enumerate(objects):
    image[top:top + h, left:left + w] = object_colour(j)
  return image


@pytest.fixture(scope='module')
def mixed_detection(tmp_path_factory) -> dict:
  """DETECTION_IMAGES as a COCO set with polygon masks (a polygon of integer
  corners rasterises to exactly its box's pixels), converted with --resize_mode
  none (each image its own size) and with stretch to a.png's size: {mode: out}."""
  root = tmp_path_factory.mktemp('read_detection')
  images, annotations = [], []
  for image_id, (name, ((height, width), objects)) in enumerate(DETECTION_IMAGES.items(), 1):
    Image.fromarray(detection_image(name)).save(root / name)
    images.append({'id': image_id, 'file_name': name, 'width': width, 'height': height})
    for category, (x, y, w, h) in objects:
      annotations.append({'id': len(annotations) + 1, 'image_id': image_id,
                          'category_id': category, 'bbox': [x, y, w, h], 'area': w * h,
                          'iscrowd': 0,
                          'segmentation': [[x, y, x + w, y, x + w, y + h, x, y + h]]})
  document = {'images': images, 'annotations': annotations,
              'categories': [{'id': 1, 'name': 'box'}, {'id': 2, 'name': 'bar'}]}
  (root / 'instances.json').write_text(json.dumps(document))
  outs = {}
  for mode, flags in {'none': [], 'stretch': ['--height', '24', '--width', '32']}.items():
    outs[mode] = root / f'out_{mode}'
    assert convert.main(['--annotations', str(root / 'instances.json'), '--annotation_format',
                         'coco', '--image_dir', str(root), '--include_masks', '--encoding',
                         'png', '--resize_mode', mode, *flags, '--output_dir',
                         str(outs[mode]), '--progress', 'off']) == 0
  return outs


@pytest.mark.parametrize('options,message', [
    # (found in a new-user trial: both were ignored, the images kept their own
    # size and the records had no label at all, without a word)
    ({'resize_to': (8, 8)}, r'resize_to=\(8, 8\) does not go with a --schema detection '
                            r'dataset .*: convert it with --height and --width'),
    ({'resize_to': (8, 8), 'batch_size': 3}, 'resize_to=.* does not go with'),
    ({'multi_hot': True}, 'multi_hot does not go with a --schema detection dataset .*: '
                          'its records hold object lists'),
])
def test_load_refuses_options_a_detection_dataset_cannot_take(mixed_detection, options,
                                                              message):
  with pytest.raises(ValueError, match=message):
    read.load(str(mixed_detection['none']), **options)


def batch_row(value, row: int) -> np.ndarray:
  """Row `row` of a batched value as numpy: a ragged one's own row, a dense one's slice."""
  if isinstance(value, dict):
    return np.array(value['values'][row])
  return value[row]


def box_pixels(box: np.ndarray, image: np.ndarray) -> tuple:
  """A normalised (ymin, xmin, ymax, xmax) box in pixels of `image`, the image
  its row of the batch holds: (top, left, bottom, right), bottom and right
  exclusive."""
  height, width = image.shape[:2]
  return tuple(int(v) for v in np.rint(box * [height, width, height, width]))


@pytest.mark.slow
def test_load_batches_detection_images_of_their_own_size_with_boxes_on_their_pixels(
    mixed_detection, eager_tf):
  batches = eager_tf['options'][options_job(mixed_detection['none'], **DETECTION_BATCH)]
  assert len(batches) == 1
  batch = batches[0]
  # the object lists are padded to the longest (3): boxes with 0, classes with -1
  assert batch['boxes'].shape == (3, 3, 4) and batch['classes'].shape == (3, 3)
  assert sorted(key.decode() for key in batch['key']) == sorted(DETECTION_IMAGES)
  for row, key in enumerate(batch['key']):
    (height, width), objects = DETECTION_IMAGES[key.decode()]
    image = np.uint8(batch_row(batch['image'], row))
    masks = np.uint8(batch_row(batch['masks'], row))
    n = len(objects)
    assert batch['num_objects'][row] == n
    for j, (category, (x, y, w, h)) in enumerate(objects):
      top, left, bottom, right = box_pixels(batch['boxes'][row][j], image)
      # the box covers exactly its filled rectangle in the image the batch holds
      assert (top, left, bottom, right) == (y, x, y + h, x + w), (key, j)
      assert (image[top:bottom, left:right] == object_colour(j)).all(), (key, j)
      assert (image == object_colour(j)).all(axis=-1).sum() == w * h, (key, j)
      # and its mask is 1 on exactly those pixels
      expected_mask = np.zeros((height, width), np.uint8)
      expected_mask[top:bottom, left:right] = 1
      np.testing.assert_array_equal(masks[j], expected_mask)
      assert batch['classes'][row][j] == category
    assert masks.shape == (n, height, width)
    np.testing.assert_array_equal(image, detection_image(key.decode()))
    assert batch['classes'][row][n:].tolist() == [-1] * (3 - n)
    assert not batch['boxes'][row][n:].any()
    assert batch['class_text'][row][n:].tolist() == [b''] * (3 - n)
  # images and masks of their own size are ragged, as read.load batches any images
  assert isinstance(batch['image'], dict) and batch['image']['ragged'] == [3, None, None, 3]
  assert batch['masks']['ragged'] == [3, None, None, None]


@pytest.mark.slow
def test_load_keeps_fixed_size_detection_batches_dense(mixed_detection, eager_tf):
  batches = eager_tf['options'][options_job(mixed_detection['stretch'], **DETECTION_BATCH)]
  assert len(batches) == 1
  batch = batches[0]
  assert batch['image'].shape == (3, 24, 32, 3) and batch['image'].dtype == np.uint8
  assert batch['masks'].shape == (3, 3, 24, 32) and batch['boxes'].shape == (3, 3, 4)
  for row, key in enumerate(batch['key']):
    _, objects = DETECTION_IMAGES[key.decode()]
    n = len(objects)
    assert batch['classes'][row].tolist() == [c for c, _ in objects] + [-1] * (3 - n)
    assert not batch['masks'][row][n:].any() and not batch['boxes'][row][n:].any()
    for j in range(n):
      # stretched: the box's centre is still on its (blended) rectangle and its mask
      top, left, bottom, right = box_pixels(batch['boxes'][row][j], batch['image'][row])
      centre = ((top + bottom) // 2, (left + right) // 2)
      assert batch['image'][row][centre][0] >= 240, (key, j)
      assert batch['masks'][row][j][centre] == 1, (key, j)
  a = next(row for row, key in enumerate(batch['key']) if key == b'a.png')
  np.testing.assert_array_equal(batch['image'][a], detection_image('a.png'))  # its own size
