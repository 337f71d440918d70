"""Parquet manifests: files written by pyarrow as Hugging Face lays them out
(Image structs, ClassLabel metadata, Hub file names), binary and path
columns; the rows as the pipeline reads them (TestPipeline), the image step's
reads of a cell, and whole conversions against a CSV manifest listing the
same images as files (the same shards, byte for byte)."""

from __future__ import annotations

import concurrent.futures
import datetime
import decimal
import io
import json
import pathlib
import threading

from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from PIL import Image
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import convert
from pipeline.beam_runtime import startup
from pipeline.configuration import preflight
from pipeline.configuration import preflight_input
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from tests.conftest import local_pipeline
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.test_manifest_ranges import digests
from transforms.batches import Unbatch
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.core import manifest
from transforms.core import parquet
from transforms.core import paths as paths_module
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.core.splits import SplitConfig
from transforms.core.splits import keyword_splits as split_keywords
from transforms.sources import ReadManifest
from transforms.workers import source_refs

NAMES = ['zebra', 'ant', 'cat']  # ClassLabel order, not sorted: ids 0, 1, 2


def png(seed: int, size=(9, 7)) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (size[0] + seed % 5, size[1]), (seed * 40 % 256, 80, 255 - seed)).save(
      buffer, 'PNG')
  return buffer.getvalue()


def hf_metadata(names=NAMES, column='label') -> dict:
  features = {'image': {'_type': 'Image'}, column: {'_type': 'ClassLabel', 'names': names}}
  return {'huggingface': json.dumps({'info': {'features': features}})}


def write_hf(path: pathlib.Path, images: list, labels: list, row_group_size: int = 2,
             metadata=None, **columns) -> pathlib.Path:
  """A Parquet file laid out as Hugging Face writes an Image + ClassLabel
  dataset: image {bytes, path}, label int64, the names in the metadata."""
  path.parent.mkdir(parents=True, exist_ok=True)
  image_type = pa.struct([('bytes', pa.binary()), ('path', pa.string())])
  table = pa.table({'image': pa.array(images, image_type),
                    'label': pa.array(labels, pa.int64()), **columns})
  table = table.replace_schema_metadata(hf_metadata() if metadata is None else metadata)
  pq.write_table(table, path, row_group_size=row_group_size)
  return path


class HubSet:
  """Two train files and a test file under data/, with the images also
  written as files beside them (what the equivalent CSV lists)."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    data = root / 'data'
    self.csv_rows = []  # (key, image, label name, split) of every row that converts

    def rows(file: str, split: str, seeds: list, labels: list):
      images = []
      for row, (seed, label) in enumerate(zip(seeds, labels)):
        name = f'{split}_{seed}.png'
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes(png(seed))
        images.append({'bytes': png(seed), 'path': name})
        self.csv_rows.append((f'{file}:{row}', name, NAMES[label], split))
      return images

    def write(file: str, split: str, seeds: list, labels: list) -> pathlib.Path:
      return write_hf(data / file, rows(file, split, seeds, labels), labels)

    self.train0 = write('train-00000-of-00002.parquet', 'train', [0, 1, 2], [0, 1, 2])
    self.train1 = write('train-00001-of-00002.parquet', 'train', [3, 4, 5, 6, 7],
                        [2, 2, 1, 0, 0])
    self.test = write('test-00000-of-00001.parquet', 'test', [8, 9], [1, 0])

  def csv(self) -> pathlib.Path:
    path = self.root / 'data' / 'same.csv'
    path.write_text('key,image,label,split\n' + ''.join(
        f'{key},{image},{label},{split}\n' for key, image, label, split in self.csv_rows))
    return path

  def label_map(self) -> pathlib.Path:
    path = self.root / 'names.txt'
    path.write_text(''.join(f'{name}\n' for name in NAMES))
    return path


FLAGS = ('--height', '8', '--width', '8', '--progress', 'off', '--num_shards', '2',
         '--write_index')


@pytest.mark.parametrize('shuffle', ['on', 'off'])
def test_a_hub_layout_converts_to_the_bytes_of_a_csv_manifest_of_its_images(tmp_path, shuffle):
  hub = HubSet(tmp_path)
  pattern = str(tmp_path / 'data' / '*.parquet')
  out = tmp_path / 'parquet'
  assert convert.main(['--manifest', pattern, '--output_dir', str(out), '--shuffle', shuffle,
                       *FLAGS]) == EXIT_OK
  same = tmp_path / 'csv'
  assert convert.main(['--manifest', str(hub.csv()), '--output_dir', str(same),
                       '--label_map', str(hub.label_map()), '--shuffle', shuffle,
                       *FLAGS]) == EXIT_OK
  assert digests(out) == digests(same)
  assert sorted(name for name in digests(out) if name.endswith('.tfrecord')) == [
      'test-00000-of-00002.tfrecord', 'test-00001-of-00002.tfrecord',
      'train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord']
  assert (out / 'label_map.txt').read_text() == 'zebra\nant\ncat\n'
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected']) == (10, 0)
  assert {split: data['num_examples'] for split, data in info['splits'].items()} == {
      'train': 8, 'test': 2}


def test_labels_keys_and_file_names_come_from_the_hf_columns(tmp_path):
  path = write_hf(tmp_path / 'train.parquet',
                  [{'bytes': png(1), 'path': 'a/one.png'}, {'bytes': png(2), 'path': None}],
                  [2, 0], row_group_size=1)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  examples = {e['image/key'][1][0]: e for e in read_examples(out)}
  assert sorted(examples) == [b'train.parquet:0', b'train.parquet:1']
  one, other = examples[b'train.parquet:0'], examples[b'train.parquet:1']
  assert (one['image/class/label'][1], one['image/class/text'][1]) == ([2], [b'cat'])
  assert (other['image/class/label'][1], other['image/class/text'][1]) == ([0], [b'zebra'])
  assert one['image/filename'][1] == [b'a/one.png']
  assert other['image/filename'][1] == [b'train.parquet:1']  # no path: the key


def test_images_whose_paths_repeat_are_each_a_row(tmp_path):
  # datasets' push_to_hub keeps an Image's file name alone: an imagefolder's
  # cat/1.png and dog/1.png are both '1.png'. load_dataset gives 4 rows.
  images = [{'bytes': png(seed), 'path': f'{seed % 2}.png'} for seed in range(4)]
  path = write_hf(tmp_path / 'train-00000-of-00001.parquet', images, [0, 0, 2, 2])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  assert (read_info(out)['num_examples'], read_info(out)['num_rejected']) == (4, 0)
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(out)}
  assert sorted(examples) == [f'train-00000-of-00001.parquet:{row}' for row in range(4)]
  third = examples['train-00000-of-00001.parquet:3']
  assert third['image/filename'][1] == [b'1.png']
  assert third['image/class/text'][1] == [b'cat']


def test_files_of_one_name_in_split_folders_keep_their_rows_apart(tmp_path):
  # The parquet-converter's {config}/{split}/0000.parquet: bytes without a
  # path are keyed by file and row, and the two 0000.parquet are told apart.
  for split, seeds in (('train', [1, 2, 3]), ('test', [4, 5])):
    write_hf(tmp_path / 'default' / split / '0000.parquet',
             [{'bytes': png(seed), 'path': None} for seed in seeds], [seed % 3 for seed in seeds])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'default' / '*' / '0000.parquet'),
                       '--output_dir', str(out), *FLAGS]) == EXIT_OK
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected']) == (5, 0)
  assert {split: data['num_examples'] for split, data in info['splits'].items()} == {
      'train': 3, 'test': 2}
  keys = sorted(e['image/key'][1][0].decode() for e in read_examples(out))
  assert keys == ['test/0000.parquet:0', 'test/0000.parquet:1', 'train/0000.parquet:0',
                  'train/0000.parquet:1', 'train/0000.parquet:2']


@pytest.mark.parametrize('paths, pattern, names', [
    (['/d/a.parquet', '/d/b.parquet'], '/d/*.parquet', ['a.parquet', 'b.parquet']),
    (['/d/c/train/0.parquet', '/d/c/test/0.parquet'], '/d/c/*/0.parquet',
     ['train/0.parquet', 'test/0.parquet']),
    # the same names whichever of the pattern's folders exist (a new split's
    # folder on a later night changes no key)
    (['/d/c/train/0.parquet'], '/d/c/*/0.parquet', ['train/0.parquet']),
    (['d/train/0.tar', 'd/val/0.tar'], 'd/{train,val}/0.tar', ['train/0.tar', 'val/0.tar']),
    (['gs://b/x/1.tar', 'gs://b/y/z/1.tar'], 'gs://b/*', ['x/1.tar', 'y/z/1.tar']),
    (['/d/shard-000.tar', '/d/shard-001.tar'], '/d/shard-{000..001}.tar',
     ['shard-000.tar', 'shard-001.tar']),
    (['/only.parquet'], '/only.parquet', ['only.parquet']),
    (['/d/x[1]/a.parquet'], '/d/x[1]/a.parquet', ['a.parquet']),  # a file, no pattern
    (['/e/a.parquet', '/f/b.parquet'], '/g/*.parquet', ['e/a.parquet', 'f/b.parquet'])])
def test_short_names_are_paths_below_the_pattern_s_folder(paths, pattern, names):
  assert list(paths_module.short_names(paths, pattern)) == names


def test_each_bad_row_is_one_rejected_line_naming_file_and_row(tmp_path):
  (tmp_path / 'photos').mkdir()
  (tmp_path / 'photos' / 'kept.png').write_bytes(png(3))
  images = [
      {'bytes': png(1), 'path': 'ok.png'},  # row 0: converts
      {'bytes': png(2), 'path': 'nolabel.png'},  # row 1: label -1
      {'bytes': b'\xff\xd8\xff\xe0 a JPEG cut short', 'path': 'corrupt.jpg'},  # row 2
      {'bytes': None, 'path': 'photos/kept.png'},  # row 3: null bytes, a path: the file
      {'bytes': None, 'path': None},  # row 4: nothing
      {'bytes': png(4), 'path': 'big.png'},  # row 5: class id out of range
  ]
  path = write_hf(tmp_path / 'train.parquet', images, [0, -1, 1, 1, 0, 7], row_group_size=4)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--max_error_rate',
                       '1', *FLAGS]) == EXIT_OK
  rejected = {(line['source'], line['line']): (line['stage'], line['code'])
              for line in rejected_lines(out)}
  assert rejected == {(str(path), 1): ('label', 'no_label'),
                      (str(path), 2): ('decode', 'corrupt'),
                      (str(path), 4): ('manifest', 'empty_image'),
                      (str(path), 5): ('label', 'unknown_label')}
  examples = {e['image/key'][1][0]: e for e in read_examples(out)}
  assert sorted(examples) == [b'train.parquet:0', b'train.parquet:3']
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (6, 2, 4)


def test_binary_and_path_columns_with_other_names(tmp_path):
  (tmp_path / 'img').mkdir()
  (tmp_path / 'img' / 'p.png').write_bytes(png(5))
  binary = tmp_path / 'bin.parquet'
  pq.write_table(pa.table({'jpg': pa.array([png(1), png(2)], pa.binary()),
                           'cls': ['dog', 'cat'], 'id': ['k1', 'k2'],
                           'weight': [0.5, 2.0]}), binary)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(binary), '--output_dir', str(out), '--image_column',
                       'jpg', '--label_column', 'cls', '--key_column', 'id',
                       '--extra_features', 'weight:float', *FLAGS]) == EXIT_OK
  examples = {e['image/key'][1][0]: e for e in read_examples(out)}
  assert sorted(examples) == [b'k1', b'k2']
  assert examples[b'k1']['image/class/text'][1] == [b'dog']
  assert examples[b'k2']['weight'][1] == [2.0]
  assert (out / 'label_map.txt').read_text() == 'cat\ndog\n'  # strings: sorted names
  paths = tmp_path / 'paths.parquet'
  pq.write_table(pa.table({'image': ['img/p.png'], 'label': [4]}), paths)
  out = tmp_path / 'out2'
  assert convert.main(['--manifest', str(paths), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  [example] = read_examples(out)
  assert example['image/key'][1] == [b'img/p.png']  # relative to the file's folder
  assert example['image/class/label'][1] == [4]  # integers without ClassLabel: the id


@pytest.mark.parametrize('dictionary', [False, True])
def test_string_labels_with_surrounding_spaces_are_warned_as_a_csv_s(tmp_path, dictionary):
  """' dog ' is stripped to dog, as in a CSV, and listed in label_warnings
  (the summary's Warning line), as a CSV of the same rows lists it."""
  for seed in range(3):
    (tmp_path / f'{seed}.png').write_bytes(png(seed))
  labels = pa.array(['cat', ' dog ', 'dog'])
  path = tmp_path / 'm.parquet'
  pq.write_table(pa.table({'image': ['0.png', '1.png', '2.png'],
                           'label': labels.dictionary_encode() if dictionary else labels}), path)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  assert sorted((e['image/key'][1][0], e['image/class/text'][1][0])
                for e in read_examples(out)) == [
      (b'0.png', b'cat'), (b'1.png', b'dog'), (b'2.png', b'dog')]
  csv = tmp_path / 'm.csv'
  csv.write_text('image,label\n0.png,cat\n1.png, dog \n2.png,dog\n')
  same = tmp_path / 'csv'
  assert convert.main(['--manifest', str(csv), '--output_dir', str(same), *FLAGS]) == EXIT_OK
  assert read_info(same)['label_warnings']['surrounding_spaces'] == {'dog': 1}
  assert read_info(out)['label_warnings'] == read_info(same)['label_warnings']


def test_class_label_names_with_spaces_keep_their_ids(tmp_path):
  """As datasets' int2str gives them: id 1 is ' dog' (stored as 'dog', as
  label_map.txt cannot hold the spaces), not a row rejected as unknown_label."""
  path = write_hf(tmp_path / 'x.parquet', [{'bytes': png(n)} for n in range(3)], [2, 1, 0],
                  metadata=hf_metadata(['cat', ' dog', 'owl ']))
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  assert sorted((e['image/key'][1][0], e['image/class/label'][1][0],
                 e['image/class/text'][1][0]) for e in read_examples(out)) == [
      (b'x.parquet:0', 2, b'owl'), (b'x.parquet:1', 1, b'dog'), (b'x.parquet:2', 0, b'cat')]
  assert (out / 'label_map.txt').read_text() == 'cat\ndog\nowl\n'


def test_extra_features_read_numbers_decimals_booleans_and_lists_of_them(tmp_path):
  path = tmp_path / 'x.parquet'
  pq.write_table(pa.table({
      'image': [png(1)], 'label': [1], 'price': pa.array([decimal.Decimal('1.25')],
                                                       pa.decimal128(5, 2)),
      'box': pa.array([[0.5, 0.25]], pa.list_(pa.float32(), 2)),
      'ids': pa.array([[[1, 2], [3, 4]]], pa.list_(pa.list_(pa.int16()))),
      'seen': [True], 'tag': pa.array(['b']).dictionary_encode()}), path)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--extra_features',
                       'price:float,box:float[2],ids:int64[][2],seen:bytes,tag:bytes',
                       *FLAGS]) == EXIT_OK
  [example] = read_examples(out)
  assert {name: example[name][1] for name in ('price', 'box', 'ids', 'seen', 'tag')} == {
      'price': [1.25], 'box': [0.5, 0.25], 'ids': [1, 2, 3, 4], 'seen': [b'true'],
      'tag': [b'b']}


def test_dictionary_and_view_columns_read_as_their_values(tmp_path):
  # pandas writes a `category` column as dictionary<values=string>; pyarrow
  # reads it back so. It exited 2 ("column label is dictionary<...>").
  for seed in (1, 2, 3):
    (tmp_path / f'{seed}.png').write_bytes(png(seed))
  path = tmp_path / 'm.parquet'
  pq.write_table(pa.table({
      'image': pa.array(['1.png', '2.png', '3.png']).dictionary_encode(),
      'label': pa.array(['dog', 'cat', 'dog']).dictionary_encode(),
      'key': pa.array(['k1', 'k2', 'k3'], pa.string_view())}), path)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  examples = {e['image/key'][1][0]: e for e in read_examples(out)}
  assert {k: (e['image/class/text'][1], e['image/class/label'][1], e['image/filename'][1])
          for k, e in examples.items()} == {
      b'k1': ([b'dog'], [1], [b'1.png']), b'k2': ([b'cat'], [0], [b'2.png']),
      b'k3': ([b'dog'], [1], [b'3.png'])}
  assert (out / 'label_map.txt').read_text() == 'cat\ndog\n'
  pixels = {k: bytes(e['image/encoded'][1][0]) for k, e in examples.items()}
  want = Image.open(io.BytesIO(png(2))).convert('RGB').resize((8, 8), Image.BILINEAR)
  assert pixels[b'k2'] == want.tobytes()
  ints = tmp_path / 'ints.parquet'
  pq.write_table(pa.table({'image': pa.array([png(4)], pa.binary_view()),
                           'label': pa.array([2], pa.int8()).dictionary_encode()}), ints)
  out = tmp_path / 'out2'
  assert convert.main(['--manifest', str(ints), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  [example] = read_examples(out)
  assert example['image/class/label'][1] == [2]


@pytest.mark.parametrize('case, message', [
    ('float_label', 'column label is double, not a string or an integer'),
    ('list_label', 'column label is list<element: int64>, not a string or an integer '
     '(several labels a row: --multi_label reads them from a CSV, TSV, JSONL or txt manifest)'),
    ('int_image', 'column image is int64, not a path or URL (string), image bytes'),
    ('no_label', 'has no column label (its columns: image)'),
    ('not_parquet', 'is not a readable Parquet file'),
    ('split_and_path', 'gives each row its split (the paths of '),
    ('two_splits_in_a_name', 'train_test.parquet names the splits test and train (datasets '
     'reads such a file into both)'),
    ('unknown_split', "names the split 'dev' in its path, not one of train, validation, test"),
    ('label_map', "line 2 is 'cat' in --label_map, 'ant' in the file"),
    ('other_columns', 'has the columns image: binary, label: string, unlike '),
    ('struct_feature', 'column box is struct<x: double>, which --extra_features cannot read '
     'as float: it reads strings and numbers, and lists of them'),
    ('binary_feature', 'column mask is binary, which --extra_features cannot read as bytes'),
    ('date_feature', 'column day is list<element: date32[day]>, which --extra_features cannot '
     'read as int64'),
    ('struct_key', 'column id, the key column, is struct<n: int64>, not a string or a number'),
    ('binary_split', 'column split, the split column, is binary, not a string or a number'),
    ('break_in_name', 'ClassLabel names of column label are unusable: a name holds a line '
     'break, which label_map.txt cannot'),
    ('blank_name', 'ClassLabel names of column label are unusable: the label map has a blank '
     'line inside it'),
    ('other_names', "differ from those of {a}: id 1 is 'ant' there, 'dog' in {a}"),
    ('no_names', "differ from those of {a}: id 0 is no name there, 'cat' in {a}"),
])
def test_an_unusable_parquet_manifest_exits_2_with_one_line(tmp_path, capsys, case, message):
  flags = []
  path = tmp_path / 'm.parquet'
  if case == 'float_label':
    pq.write_table(pa.table({'image': [png(1)], 'label': [1.5]}), path)
  elif case == 'list_label':  # a Hugging Face Sequence(ClassLabel)
    pq.write_table(pa.table({'image': [png(1)], 'label': [[0, 2]]}), path)
  elif case == 'int_image':
    pq.write_table(pa.table({'image': [1], 'label': [1]}), path)
  elif case == 'no_label':
    pq.write_table(pa.table({'image': [png(1)]}), path)
  elif case == 'not_parquet':
    path.write_text('image,label\na.png,cat\n')
  elif case == 'split_and_path':
    write_hf(tmp_path / 'train-00000-of-00001.parquet', [{'bytes': png(1)}], [0])
    write_hf(tmp_path / 'test.parquet', [{'bytes': png(2)}], [0])
    path = tmp_path / '*.parquet'
    flags = ['--split', 'train=0.5,test=0.5']
  elif case == 'two_splits_in_a_name':
    path = write_hf(tmp_path / 'train_test.parquet', [{'bytes': png(1)}], [0])
  elif case == 'unknown_split':
    path = write_hf(tmp_path / 'dev-00000-of-00001.parquet', [{'bytes': png(1)}], [0])
  elif case == 'label_map':
    path = write_hf(path, [{'bytes': png(1)}], [0])
    (tmp_path / 'names.txt').write_text('zebra\ncat\nant\n')
    flags = ['--label_map', str(tmp_path / 'names.txt')]
  elif case == 'other_columns':
    pq.write_table(pa.table({'image': [png(1)], 'label': [1]}), tmp_path / 'a.parquet')
    pq.write_table(pa.table({'image': [png(1)], 'label': ['x']}), tmp_path / 'b.parquet')
    path = tmp_path / '*.parquet'
  elif case.endswith('_feature'):
    # Each rejected every row with a reason beside the point: a struct is read as
    # its fields (`column 'box' is missing`), bytes `not JSON serializable`.
    column, feature, values = {
        'struct_feature': ('box', 'box:float', pa.array([{'x': 1.0}])),
        'binary_feature': ('mask', 'mask:bytes', pa.array([b'\x89PNG'])),
        'date_feature': ('day', 'day:int64[]', pa.array([[datetime.date(2026, 12, 6)]])),
    }[case]
    pq.write_table(pa.table({'image': [png(1)], 'label': [1], column: values}), path)
    flags = ['--extra_features', feature]
  elif case in ('struct_key', 'binary_split'):
    # A struct is read as its fields: the column was never there, every key its
    # file and row (every row in train) without a word; a binary key was "b'k1'".
    column, values = ('id', pa.array([{'n': 1}])) if case == 'struct_key' else (
        'split', pa.array([b'test']))
    pq.write_table(pa.table({'image': [png(1)], 'label': [1], column: values}), path)
    flags = ['--key_column', 'id'] if case == 'struct_key' else []
  elif case in ('break_in_name', 'blank_name'):
    names = ['cat', 'dog\nowl'] if case == 'break_in_name' else ['cat', ' ', 'owl']
    path = write_hf(path, [{'bytes': png(1)}], [0], metadata=hf_metadata(names))
  elif case in ('other_names', 'no_names'):
    # One pattern, files naming their ids otherwise: id 1 is 'dog' in a, 'ant' in b (or
    # nothing: a plain int column), which the first file's names had read as 'dog'.
    write_hf(tmp_path / 'a.parquet', [{'bytes': png(1)}], [1], metadata=hf_metadata(
        ['cat', 'dog']))
    write_hf(tmp_path / 'b.parquet', [{'bytes': png(2)}], [1], metadata=hf_metadata(
        ['cat', 'ant']) if case == 'other_names' else {})
    path = tmp_path / '*.parquet'
    message = message.format(a=tmp_path / 'a.parquet')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *flags]) == EXIT_USAGE
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and message in err[0], err
  assert not out.exists()


def test_a_label_map_that_agrees_is_used_and_a_split_column_wins(tmp_path):
  path = write_hf(tmp_path / 'train-00000-of-00001.parquet',
                  [{'bytes': png(1), 'path': 'a.png'}, {'bytes': png(2), 'path': 'b.png'}],
                  [0, 2], split=['test', None])
  (tmp_path / 'names.txt').write_text('zebra\nant\ncat\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--label_map',
                       str(tmp_path / 'names.txt'), *FLAGS]) == EXIT_OK
  splits = {e['image/key'][1][0]: e for e in read_examples(out)}
  info = read_info(out)
  assert {s: d['num_examples'] for s, d in info['splits'].items()} == {'train': 1, 'test': 1}
  assert len(splits) == 2


@pytest.mark.parametrize('path, split', [
    ('data/train-00000-of-00003.parquet', 'train'),
    ('x/validation-00002-of-00003-a1b2c3d4e5f60718.parquet', 'validation'),
    ('data/test-anything.parquet', 'test'),
    ('gs://b/plain_text/train/0000.parquet', 'train'),
    ('s3://b/default/partial-test/0003.parquet', 'test'),
    ('data/train.parquet', None),
    ('train.parquet', None),
    ('mine/0000.parquet', 'mine'),  # any folder of numbered files: checked against --split_names
])
def test_hub_paths_name_their_split(path, split):
  assert parquet.hub_split(path) == split


@pytest.mark.parametrize('names, splits', [
    (['train.parquet', 'test.parquet'], ['train', 'test']),
    (['train_0.parquet', 'my_train.parquet', 'training.parquet'], ['train'] * 3),
    (['valid1.parquet', 'validation.parquet', 'dev.parquet', 'val-2.parquet'],
     ['validation'] * 4),
    (['evaluation.parquet', 'foo/eval-x.parquet', 'testing.parquet'], ['test'] * 3),
    # a folder's keyword wins over a file's, for every file (as datasets' patterns)
    (['val_exp/train.parquet', 'train/a.parquet', 'x.parquet'], ['validation', 'train', None]),
    # no keyword between non-words: datasets reads them as train, as a row of no split is
    (['mytrain.parquet', 'data.parquet', 'Train.parquet', 'contest.parquet'], [None] * 4),
])
def test_split_keywords_in_paths_read_as_datasets_reads_a_folder(names, splits):
  assert list(split_keywords(names)) == splits


def test_a_folder_of_train_and_test_files_gives_two_splits(tmp_path):
  # datasets' load_dataset reads such a folder as two splits; read as one
  # (every row in train), the test rows were trained on without a word.
  folder = tmp_path / 'data'
  folder.mkdir()
  write_hf(folder / 'train.parquet', [{'bytes': png(i)} for i in range(3)], [0, 1, 0])
  write_hf(folder / 'test.parquet', [{'bytes': png(i + 3)} for i in range(2)], [1, 1])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(folder / '*.parquet'), '--output_dir', str(out),
                       *FLAGS]) == EXIT_OK
  info = read_info(out)
  assert {s: d['num_examples'] for s, d in info['splits'].items()} == {'train': 3, 'test': 2}
  by_split = {split: sorted(e['image/key'][1][0] for e in read_examples(out, split))
              for split in info['splits']}
  assert by_split == {'train': [b'train.parquet:0', b'train.parquet:1', b'train.parquet:2'],
                      'test': [b'test.parquet:0', b'test.parquet:1']}
  # one file naming one split alone: --split fractions split its rows
  out = tmp_path / 'fractions'
  assert convert.main(['--manifest', str(folder / 'train.parquet'), '--output_dir', str(out),
                       '--split', 'train=0.5,validation=0.5', *FLAGS]) == EXIT_OK
  counts = {s: d['num_examples'] for s, d in read_info(out)['splits'].items()}
  assert sum(counts.values()) == 3 and set(counts) <= {'train', 'validation'}


def _layout_config(path: pathlib.Path) -> manifest.ManifestConfig:
  return preflight.manifest_config(str(path), manifest.ROLE_COMBINED, SplitConfig(), ())


def test_rows_carry_their_cells_place_not_bytes(tmp_path):
  path = write_hf(tmp_path / 'f.parquet', [{'bytes': png(i), 'path': f'{i}.png'}
                                           for i in range(5)], [0, 1, 2, 0, 1],
                  row_group_size=2)
  config = _layout_config(path)
  assert config.layout.files[0].row_groups == (2, 2, 1)
  with local_pipeline() as p:
    read = p | ReadManifest(config)
    assert_that(read[ROWS] | 'AllRows' >> Unbatch() | 'Places' >> __import__('apache_beam').Map(
        lambda r: (r.key, r.label, r.line, r.position, r.ref.row_group, r.ref.index,
                   r.ref.column, r.path)), equal_to([
        ('f.parquet:0', 'zebra', 0, 1, 0, 0, 'image.bytes', str(path)),
        ('f.parquet:1', 'ant', 1, 2, 0, 1, 'image.bytes', str(path)),
        ('f.parquet:2', 'cat', 2, 3, 1, 0, 'image.bytes', str(path)),
        ('f.parquet:3', 'zebra', 3, 4, 1, 1, 'image.bytes', str(path)),
        ('f.parquet:4', 'ant', 4, 5, 2, 0, 'image.bytes', str(path))]), label='Rows')
    assert_that(read[REJECTED], equal_to([]), label='Rejected')


def test_the_image_step_reads_a_cell_and_checks_it_as_a_file(tmp_path):
  (tmp_path / 'x.png').write_bytes(png(9))
  path = write_hf(tmp_path / 'f.parquet', [{'bytes': png(1)}, {'bytes': None, 'path': 'x.png'},
                                           {'bytes': b'GIF89a' + bytes(40)}], [0, 0, 0],
                  row_group_size=3)
  cell = parquet.ParquetCell(str(path), 0, 0, 'image.bytes', 0)
  source_refs.clear_cache()
  assert source_refs.read_ref(cell, ImageSpec()) == png(1)
  fallback = cell._replace(index=1, row=1, fallback=str(tmp_path / 'x.png'))
  assert source_refs.read_ref(fallback, ImageSpec(), read_path=lambda p, s: open(p, 'rb').read(
  )) == png(9)
  with pytest.raises(RowError) as found:
    source_refs.read_ref(cell, ImageSpec(max_image_bytes=10))
  assert (found.value.stage, found.value.code) == ('read', 'too_large')
  with pytest.raises(RowError) as found:
    source_refs.read_ref(cell._replace(index=2, row=2), ImageSpec(formats=('PNG',)))
  assert found.value.code == 'format_not_allowed'
  source_refs.clear_cache()


def test_threads_wanting_one_row_group_read_its_column_once(tmp_path):
  # A pandas or pyarrow file of images is often one row group far larger than
  # the 64 MiB cache: each image thread read and held a copy of the whole
  # column (a 372 MiB row group: 2.1 GB with --image_threads 1, 4.5 GB with 4).
  path = write_hf(tmp_path / 'f.parquet', [{'bytes': png(i)} for i in range(8)], [0] * 8,
                  row_group_size=8)
  opened = []

  def opener(name):
    opened.append(name)
    return open(name, 'rb')

  together = threading.Barrier(4)

  def read(i):
    together.wait()  # four threads, each with no column yet, want one at once
    return source_refs.read_ref(parquet.ParquetCell(str(path), 0, i, 'image.bytes', i),
                                ImageSpec(), opener)

  source_refs.clear_cache()
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    got = list(pool.map(read, range(8)))
  source_refs.clear_cache()
  assert got == [png(i) for i in range(8)]
  assert opened == [str(path)]


def test_a_file_rewritten_in_place_is_read_anew_by_a_process_that_read_it(tmp_path):
  # A process outlives a run (a notebook calling api.convert each night): its
  # cached column of the old file gave the next run the old images.
  path = tmp_path / 'f.parquet'
  source_refs.clear_cache()
  write_hf(path, [{'bytes': png(i)} for i in range(3)], [0, 1, 2], row_group_size=3)
  cell = parquet.ParquetCell(str(path), 0, 1, 'image.bytes', 1)
  assert source_refs.read_ref(cell, ImageSpec()) == png(1)
  write_hf(path, [{'bytes': png(i, size=(20, 11))} for i in range(3)], [0, 1, 2],
           row_group_size=3)
  assert source_refs.read_ref(cell, ImageSpec()) == png(1, size=(20, 11))
  source_refs.clear_cache()


def test_a_nightly_run_reuses_every_unchanged_row(tmp_path):
  path = write_hf(tmp_path / 'train.parquet', [{'bytes': png(i), 'path': f'{i}.png'}
                                               for i in range(4)], [0, 1, 2, 0])
  night1, night2 = tmp_path / 'night1', tmp_path / 'night2'
  assert convert.main(['--manifest', str(path), '--output_dir', str(night1), *FLAGS]) == EXIT_OK
  assert convert.main(['--manifest', str(path), '--output_dir', str(night2),
                       '--previous_dataset', str(night1), *FLAGS]) == EXIT_OK
  assert digests(night2) == digests(night1)
  assert read_info(night2)['reuse']['reused'] == 4


def test_a_nightly_run_encodes_a_row_whose_fallback_file_changed(tmp_path):
  """A row whose image cell is empty is read from its path (the fallback): the
  Parquet file unchanged, a rewritten fallback file is a changed source, and
  the night writes a full run's bytes (its row's fingerprint holds the
  fallback's: without it, the old image's record was copied)."""
  (tmp_path / 'x.png').write_bytes(png(9))
  path = write_hf(tmp_path / 'train.parquet', [{'bytes': png(0), 'path': '0.png'},
                                               {'bytes': None, 'path': 'x.png'}], [0, 1])
  night1 = tmp_path / 'night1'
  assert convert.main(['--manifest', str(path), '--output_dir', str(night1), *FLAGS]) == EXIT_OK
  (tmp_path / 'x.png').write_bytes(png(8))
  full, night2 = tmp_path / 'full', tmp_path / 'night2'
  assert convert.main(['--manifest', str(path), '--output_dir', str(full), *FLAGS]) == EXIT_OK
  assert convert.main(['--manifest', str(path), '--output_dir', str(night2),
                       '--previous_dataset', str(night1), *FLAGS]) == EXIT_OK
  assert digests(night2) == digests(full) != digests(night1)
  reuse = read_info(night2)['reuse']
  assert (reuse['reused'], reuse['encoded']['changed_source']) == (1, 1)


def test_no_row_at_all_is_a_usage_error(tmp_path):
  path = write_hf(tmp_path / 'train.parquet', [], [])
  with pytest.raises(UsageError, match='has no rows'):
    preflight_input.require_input((_layout_config(path),), None, None)


def test_a_parquet_run_lets_pyarrow_load():
  assert startup.names_parquet(['--manifest', 'data/train-*.parquet'])
  assert startup.names_parquet(['--manifest_format', 'parquet'])
  assert not startup.names_parquet(['--manifest', 'data.csv'])


def test_a_run_in_the_callers_process_keeps_no_row_group_column_after_it(tmp_path):
  # The column cache is the process's: image threads in the caller's process
  # (a notebook's api.convert) filled it, and a row group's column (GBs for a
  # pandas file of images) stayed after the run until the next one.
  path = write_hf(tmp_path / 'f.parquet', [{'bytes': png(i)} for i in range(4)], [0, 1, 0, 1],
                  row_group_size=4)
  source_refs.clear_cache()
  assert convert.main(['--manifest', str(path), '--output_dir', str(tmp_path / 'out'), *FLAGS,
                       '--image_threads', '2']) == EXIT_OK
  assert read_info(tmp_path / 'out')['splits']['train']['num_examples'] == 4
  assert not source_refs._COLUMNS


def test_a_null_split_cell_is_rejected_where_no_path_names_a_split(tmp_path):
  """docs/manifests.md: an empty split cell (null too) is a rejected row
  manifest/unknown_split, never train; a path's split stands in for it. A
  null cell of a file whose path names no split went to train."""
  path = write_hf(tmp_path / 'mine.parquet',
                  [{'bytes': png(1), 'path': 'a.png'}, {'bytes': png(2), 'path': 'b.png'}],
                  [0, 2], split=['test', None])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS,
                       '--max_error_rate', '1']) == EXIT_OK
  assert {s: d['num_examples'] for s, d in read_info(out)['splits'].items()} == {'test': 1}
  assert [(r['stage'], r['code'], r['line']) for r in rejected_lines(out)] == [
      ('manifest', 'unknown_split', 1)]
