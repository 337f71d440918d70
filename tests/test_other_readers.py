"""Readers people already have: --write_index + the `tfrecord` package (PyTorch
users' reader), and TensorFlow Datasets through `export --format tfds`."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

from pipeline import cli
from pipeline import convert
from pipeline import export
from pipeline import read
from pipeline import validate
from tests.conftest import read_info
from transforms.core.tfrecord import record_spans

# One worker builds the source and indexed fixtures (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('other_readers')

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLASSES = ('ant', 'bee', 'cat')
HEIGHT, WIDTH = 12, 16


def pattern(i: int) -> np.ndarray:
  y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
  return np.stack([x * 8 + y * 2 + 5 * i, y * 10 + 7 * i, x * 4 + 3 * i + 60],
                  axis=-1).astype(np.uint8)


@pytest.fixture(scope='module')
def source(tmp_path_factory):
  root = tmp_path_factory.mktemp('others')
  (root / 'images').mkdir()
  rows = ['image,label,weight']
  for i in range(20):
    Image.fromarray(pattern(i)).save(root / 'images' / f'img_{i:02d}.png')
    rows.append(f'images/img_{i:02d}.png,{CLASSES[i % 3]},{i} 0.5')
  (root / 'manifest.csv').write_text('\n'.join(rows) + '\n')
  return root


def converted(source, out, *flags):
  size = [] if 'none' in flags else ['--height', str(HEIGHT), '--width', str(WIDTH)]
  assert convert.main(['--manifest', str(source / 'manifest.csv'), '--output_dir', str(out),
                       *size, *flags]) == 0
  return out


@pytest.fixture(scope='module')
def indexed(source, tmp_path_factory):
  """Raw output in 3 shards, indexed."""
  return converted(source, tmp_path_factory.mktemp('indexed') / 'out', '--write_index',
                   '--extra_features', 'weight:float[]', '--num_shards', '3',
                   '--split', 'train=0.7,test=0.3')


def index_lines(path) -> list:
  return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]


def test_write_index_writes_offsets_and_lengths_of_every_record(indexed):
  info = read_info(indexed)
  assert info['config']['write_index'] is True
  shards = [s for split in info['splits'].values() for s in split['shards']]
  assert len(shards) == 6
  for shard in shards:
    path = indexed / shard
    with open(path, 'rb') as stream:
      spans = list(record_spans(stream))
    assert index_lines(pathlib.Path(f'{path}.index')) == spans
    assert spans[-1][0] + spans[-1][1] == path.stat().st_size and spans[0][0] == 0
  assert sorted(p.name for p in indexed.glob('*.index')) == sorted(f'{s}.index' for s in shards)


@pytest.mark.slow
def test_indexed_output_still_validates_and_overwrite_removes_the_index(indexed, source,
                                                                         tmp_path):
  assert validate.main(['--input_dir', str(indexed), '--report',
                        str(tmp_path / 'report.json')]) == 0
  copy = tmp_path / 'out'
  converted(source, copy, '--write_index', '--num_shards', '2')
  assert len(list(copy.glob('*.index'))) == 2
  converted(source, copy, '--overwrite', '--num_shards', '1')
  assert list(copy.glob('*.index')) == []
  assert 'write_index' not in read_info(copy)['config']


def test_write_index_with_gzip_is_a_usage_error(source, tmp_path, capsys):
  assert convert.main(['--manifest', str(source / 'manifest.csv'), '--output_dir',
                       str(tmp_path / 'out'), '--write_index', '--compression', 'gzip']) == 2
  assert 'gzip stream cannot be used for random access' in capsys.readouterr().err
  assert not (tmp_path / 'out').exists()


# The tfrecord package registers tensorflow.Example in protobuf's default pool,
# as TensorFlow does: the two cannot share a process, so it runs in its own.
TFRECORD_SCRIPT = """
import hashlib, json, sys
import tfrecord
found = []
for path, index, shard, compression in json.loads(sys.argv[1]):
  description = {'image/encoded': 'byte', 'image/class/label': 'int', 'image/key': 'byte'}
  if index:
    description['weight'] = 'float'
  rows = []
  for r in tfrecord.tfrecord_loader(path, index, description, shard=shard and tuple(shard),
                                    compression_type=compression):
    rows.append([bytes(r['image/key']).decode(), int(r['image/class/label'][0]),
                 hashlib.sha256(bytes(r['image/encoded'])).hexdigest(),
                 r['weight'].tolist() if 'weight' in r else None])
  found.append(rows)
print(json.dumps(found))
"""


def tfrecord_package_reads(reads: list) -> list:
  """[(path, index, shard, compression), ...] -> the rows of each read, all in
  one process (its start and import cost ~0.4 s)."""
  if importlib.util.find_spec('tfrecord') is None:  # not imported here: see above
    pytest.skip('needs the tfrecord package')
  jobs = [[str(path), index and str(index), shard, compression]
          for path, index, shard, compression in reads]
  done = subprocess.run([sys.executable, '-c', TFRECORD_SCRIPT, json.dumps(jobs)],
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  found = json.loads(done.stdout)
  assert len(found) == len(reads)
  return found


def tfrecord_package(path, index=None, shard=None, compression=None) -> list:
  [rows] = tfrecord_package_reads([(path, index, shard, compression)])
  return rows


def _digest(example) -> str:
  data = example['image'] if isinstance(example['image'], bytes) else example['image'].tobytes()
  return hashlib.sha256(data).hexdigest()


@pytest.mark.slow
def test_the_tfrecord_package_reads_the_output_with_the_index(indexed):
  info = read_info(indexed)
  # each shard whole, then in two halves found through its index (two workers),
  # then whole through its index as shard=(0, 1): reading.md's way to the shard's
  # order (with an index and no shard= the package starts at a random record)
  shards = [indexed / shard for declared in info['splits'].values()
            for shard in declared['shards']]
  reads = [job for path in shards for job in [
      (path, None, None, None), *[(path, f'{path}.index', (n, 2), None) for n in range(2)],
      (path, f'{path}.index', (0, 1), None)]]
  found = iter(tfrecord_package_reads(reads))
  for split, declared in info['splits'].items():
    expected = {e['key']: e for e in read.examples(str(indexed), split)}
    seen = []
    for _ in declared['shards']:
      whole = next(found)
      keys = [r[0] for r in whole]
      halves = [next(found), next(found)]
      assert [r[0] for r in halves[0] + halves[1]] == keys
      assert next(found) == halves[0] + halves[1]
      assert len(halves[0]) == len(keys) // 2
      for key, label, digest, weight in halves[0] + halves[1]:
        assert (label, digest) == (expected[key]['label'], _digest(expected[key]))
        assert weight == expected[key]['weight'].tolist()
      seen += keys
    assert sorted(seen) == sorted(expected)


@pytest.mark.slow
def test_the_tfrecord_package_reads_gzip_output_without_an_index(source, tmp_path):
  out = converted(source, tmp_path / 'out', '--compression', 'gzip', '--encoding', 'png')
  info = read_info(out)
  rows = tfrecord_package(out / info['splits']['train']['shards'][0], compression='gzip')
  plain = list(read.examples(str(out), decode=False))
  assert [(r[0], r[1], r[2]) for r in rows] == [(e['key'], e['label'], _digest(e))
                                                  for e in plain]


# Each index through the package, its failure kept: [error name, keys] per path.
TFRECORD_INDEX_SCRIPT = """
import json, sys
import tfrecord
found = []
for path in json.loads(sys.argv[1]):
  try:
    found.append([None, [bytes(r['image/key']).decode() for r in tfrecord.tfrecord_loader(
        path, path + '.index', {'image/key': 'byte'}, shard=(0, 1))]])
  except Exception as error:
    found.append([type(error).__name__, []])
print(json.dumps(found))
"""


@pytest.mark.slow
def test_the_tfrecord_package_cannot_load_the_index_of_a_shard_of_one_record(source,
                                                                            tmp_path):
  """reading.md's note: the package's np.loadtxt gives a one-line (or empty)
  index one dimension and fails; such a shard reads without its index."""
  if importlib.util.find_spec('tfrecord') is None:  # not imported here: see above
    pytest.skip('needs the tfrecord package')
  # 20 rows: test gets 1 (its 3 shards hold 1, 0, 0), train 19 (6 or 7 a shard)
  out = converted(source, tmp_path / 'out', '--write_index', '--num_shards', '3',
                  '--split', 'train=0.9,test=0.1')
  splits = read_info(out)['splits']
  shards = [out / shard for split in splits.values() for shard in split['shards']]
  lines = [len(pathlib.Path(f'{shard}.index').read_text().splitlines()) for shard in shards]
  assert min(lines) == 0 and 1 in lines and max(lines) >= 2
  done = subprocess.run([sys.executable, '-c', TFRECORD_INDEX_SCRIPT,
                         json.dumps([str(shard) for shard in shards])],
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  by_index = json.loads(done.stdout)
  assert [error for error, _ in by_index] == [
      'IndexError' if n < 2 else None for n in lines]
  # the documented way round: index_path=None for those shards, in one worker
  without = iter(tfrecord_package_reads(
      [(shard, None, None, None) for shard, n in zip(shards, lines) if n < 2]))
  keys = [key for (_, indexed_keys), n in zip(by_index, lines)
          for key in (indexed_keys if n >= 2 else [row[0] for row in next(without)])]
  assert sorted(keys) == sorted(e['key'] for split in splits
                                for e in read.examples(str(out), split, decode=False))
  assert len(keys) == 20


@pytest.mark.slow
def test_export_bad_input_is_exit_2(source, tmp_path, capsys):
  assert export.main(['--format', 'tfds', '--input_dir', str(tmp_path / 'none')]) == 2
  assert 'dataset_info.json is missing' in capsys.readouterr().err
  assert cli.main(['export', '--format', 'parquet', '--input_dir', str(tmp_path)]) == 2
  assert "invalid choice: 'parquet'" in capsys.readouterr().err
  out = converted(source, tmp_path / 'none_raw', '--resize_mode', 'none')
  pytest.importorskip('tensorflow_datasets')
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 2
  assert 'per-record size' in capsys.readouterr().err


def test_export_of_a_split_named_all_is_exit_2(tmp_path, capsys):
  """--split_names takes `all`, a name TFDS reserves for every split
  together: the export exited 0 and TFDS's as_dataset(split='all') raised
  RecursionError (its other splits read)."""
  (tmp_path / 'images').mkdir()
  rows = ['image,label,split']
  for i, split in enumerate(['train', 'all', 'all', 'train']):
    Image.fromarray(pattern(i)).save(tmp_path / 'images' / f'{i}.png')
    rows.append(f'images/{i}.png,{CLASSES[i % 2]},{split}')
  (tmp_path / 'manifest.csv').write_text('\n'.join(rows) + '\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'manifest.csv'), '--output_dir', str(out),
                       '--split_names', 'train,all', '--height', str(HEIGHT), '--width',
                       str(WIDTH)]) == 0
  assert sorted(read_info(out)['splits']) == ['all', 'train']
  capsys.readouterr()
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 2
  assert capsys.readouterr() == ('', "error: split 'all' cannot be exported: TFDS reads "
                                     "split='all' as the union of every split (on a split of "
                                     'that name it fails with a RecursionError); convert '
                                     'again with another name in --split_names\n')
  assert not (out / 'tfds').exists()


def test_export_of_a_dataset_without_splits_is_exit_2(tmp_path, capsys):
  """An --allow_empty dataset: TFDS's write_metadata found no data files
  (exit 1, `export failed: ValueError: Could not find data files in OUT/tfds`)."""
  (tmp_path / 'empty.csv').write_text('image,label\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'empty.csv'), '--output_dir', str(out),
                       '--allow_empty']) == 0
  capsys.readouterr()
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 2
  assert capsys.readouterr() == ('', 'error: dataset_info.json lists no split (no row became '
                                     'an example: an --allow_empty dataset): TFDS cannot '
                                     'describe a dataset without one\n')
  assert sorted(p.name for p in out.iterdir()) == ['dataset_info.json', 'label_map.txt',
                                                  'rejected.jsonl']


def test_ids_without_a_class_get_names_no_class_has():
  assert export.tfds_class_names(['', 'person', '', 'train']) == [
      'unused_0', 'person', 'unused_2', 'train']
  # a class already named so: `_` in front until the name is free
  assert export.tfds_class_names(['', 'unused_0', '_unused_0', '']) == [
      '__unused_0', 'unused_0', '_unused_0', 'unused_3']
  assert export.tfds_class_names(['ant', 'bee']) == ['ant', 'bee']
  with pytest.raises(export.UsageError) as error:
    export.tfds_class_names(['', 'a', 'b', 'a'])
  assert str(error.value) == "class name 'a' is given to ids 1, 3: a TFDS ClassLabel needs unique names"


def test_export_of_a_remote_dataset_without_output_dir_names_the_flag_to_give(
    monkeypatch, capsys):
  """Its default, s3://.../tfds, was refused as "--output_dir must be a local
  folder" though no --output_dir was given; now one line saying to give one,
  before the bucket is asked anything (an endpoint that refuses: fails fast)."""
  monkeypatch.setenv('AWS_ENDPOINT_URL', 'http://127.0.0.1:9')
  monkeypatch.setenv('AWS_EC2_METADATA_DISABLED', 'true')
  for name, value in (('AWS_ACCESS_KEY_ID', 'k'), ('AWS_SECRET_ACCESS_KEY', 's'),
                      ('AWS_DEFAULT_REGION', 'us-east-1')):
    monkeypatch.setenv(name, value)
  assert export.main(['--format', 'tfds', '--input_dir', 's3://bucket/ds']) == 2
  assert capsys.readouterr() == ('', (
      'error: --input_dir s3://bucket/ds is not local, so its default --output_dir '
      '(INPUT_DIR/tfds) cannot be written: give --output_dir, a local folder (the shards '
      'are copied there)\n'))


def test_a_failure_of_export_is_one_line_and_exit_1(monkeypatch, tmp_path, capsys):
  def broken(*_):
    raise RuntimeError('the disk went away\nsecond line')
  monkeypatch.setattr(export, 'export_tfds', broken)
  assert export.main(['--format', 'tfds', '--input_dir', str(tmp_path)]) == 1
  assert capsys.readouterr() == ('', 'error: export failed: RuntimeError: the disk went away\n')


@pytest.mark.slow  # TensorFlow imported
def test_export_bad_shards_are_one_line_and_exit_2(source, tmp_path, capsys):
  out = converted(source, tmp_path / 'raw')
  shard = out / read_info(out)['splits']['train']['shards'][0]
  data = shard.read_bytes()
  shard.unlink()
  capsys.readouterr()  # convert's summary
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 2
  assert capsys.readouterr() == ('', f'error: shard {shard} listed in dataset_info.json is '
                                     f'missing\n')
  shard.write_bytes(data)
  (tmp_path / 'file').write_text('')
  assert export.main(['--format', 'tfds', '--input_dir', str(out), '--output_dir',
                      str(tmp_path / 'file')]) == 2
  assert capsys.readouterr().err == f'error: --output_dir {tmp_path / "file"} is a file, not a folder\n'
  pytest.importorskip('tensorflow_datasets')
  assert export.main(['--format', 'tfds', '--input_dir', str(out), '--output_dir',
                      str(tmp_path / 'file' / 'tfds')]) == 2
  assert capsys.readouterr().err == (f'error: --output_dir {tmp_path / "file" / "tfds"} cannot '
                                     f'be created: Not a directory\n')
  shard.write_bytes(data + data[:5])  # a record cut off after its 5th byte
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 2
  assert capsys.readouterr().err == (f'error: shard {shard} cannot be exported: file ends '
                                     f'inside a header at byte {len(data)}\n')
  assert not (out / 'tfds').exists()  # no half export left to block the next
  # cut inside its last record's data: seeking past the end counted it whole (exit 0)
  shard.write_bytes(data[:-7])
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 2
  last = _record_lengths(data)[-1] - 16
  assert capsys.readouterr().err == (
      f'error: shard {shard} cannot be exported: file ends inside record '
      f'{len(_record_lengths(data)) - 1} ({last - 3} of its {last} data bytes)\n')
  assert not (out / 'tfds').exists()
  # cut at a record's end, or dataset_info.json's count edited: TFDS served the
  # records there as the whole split (exit 0), where read.load raises
  declared = read_info(out)['splits']['train']['num_examples']
  shard.write_bytes(data[:-_record_lengths(data)[-1]])
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 2
  assert capsys.readouterr().err == (
      f"error: split 'train' of {out} holds {declared - 1} record(s); its dataset_info.json "
      f"says {declared}: a shard was cut short or replaced (validate names it)\n")
  assert not (out / 'tfds').exists()
  shard.write_bytes(data)
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 0


def _record_lengths(data: bytes) -> list:
  """The framed length of each record of a shard's bytes."""
  return [length for _, length in record_spans(io.BytesIO(data))]


def _export(*args) -> subprocess.CompletedProcess:
  """The console's export in a process of its own: TensorFlow's C++ logging
  goes to file descriptor 2, past any capture in this process."""
  return subprocess.run([sys.executable, '-m', 'pipeline.cli', 'export', '--format', 'tfds',
                         *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                        timeout=600)


def test_export_usage_errors_are_one_line_before_tensorflow_loads(source, tmp_path):
  out = converted(source, tmp_path / 'raw')
  (out / 'tfds').mkdir()
  (out / 'tfds' / 'notes.txt').write_text('mine\n')
  done = _export('--input_dir', out)
  assert (done.returncode, done.stdout) == (2, '')
  assert done.stderr == (f'error: --output_dir {out / "tfds"} is not empty; pass --overwrite '
                         'to replace a previous export\n')
  done = _export('--input_dir', out, '--overwrite')
  assert (done.returncode, done.stdout) == (2, '')
  assert done.stderr == (f'error: --output_dir {out / "tfds"} holds no previous TFDS export '
                         '(features.json is missing): not replacing it\n')
  assert sorted(p.name for p in (out / 'tfds').iterdir()) == ['notes.txt']
  info = read_info(out)
  info['image']['height'] = info['image']['width'] = None  # as --resize_mode none records it
  (out / 'dataset_info.json').write_text(json.dumps(info))
  done = _export('--input_dir', out, '--output_dir', tmp_path / 'elsewhere')
  assert (done.returncode, done.stdout) == (2, '')
  assert done.stderr == ('error: raw pixels of per-record size (--resize_mode none) cannot '
                         'be a TFDS feature: TFDS needs their fixed shape\n')
  assert not (tmp_path / 'elsewhere').exists()


@pytest.mark.integration  # TensorFlow in a subprocess, ~7 s
def test_export_prints_its_one_line_and_no_tensorflow_logging(source, tmp_path):
  pytest.importorskip('tensorflow_datasets')
  out = converted(source, tmp_path / 'raw')
  done = _export('--input_dir', out)
  assert done.returncode == 0, done.stderr
  assert done.stderr == ''
  assert done.stdout == (f'TFDS metadata in {out / "tfds"} (shards: 1 linked); load it with '
                         f'tfds.builder_from_directory({str(out / "tfds")!r})'
                         '.as_dataset(split=...)\n')


TFDS_VARIANTS = {
    'raw': ['--num_shards', '2', '--extra_features', 'weight:float[]'],
    'jpeg': ['--encoding', 'jpeg', '--split', 'train=0.6,test=0.4'],
    'gzip_png': ['--encoding', 'png', '--compression', 'gzip'],
    'seed': ['--schema', 'seed'],
    'tfrecordio': ['--sink', 'tfrecordio', '--compression', 'gzip', '--num_shards', '3',
                   '--split', 'train=0.6,test=0.4'],
}


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
def test_tensorflow_datasets_loads_the_export(source, tmp_path):
  pytest.importorskip('tensorflow_datasets')
  outs = {name: converted(source, tmp_path / name, *flags)
          for name, flags in TFDS_VARIANTS.items()}
  for out in outs.values():
    assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 0
    # our contract is untouched: validate still passes on the folder
    assert validate.main(['--input_dir', str(out)]) == 0
  # a second export needs --overwrite
  assert export.main(['--format', 'tfds', '--input_dir', str(outs['raw'])]) == 2
  assert export.main(['--format', 'tfds', '--input_dir', str(outs['raw']), '--overwrite']) == 0
  assert os.path.islink(outs['raw'] / 'tfds' / read_info(outs['raw'])['splits']['train'][
      'shards'][0])
  script = """
import json, sys
import tensorflow_datasets as tfds

rows = {}
for name, folder in json.loads(sys.argv[1]).items():
  builder = tfds.builder_from_directory(folder)
  for split in builder.info.splits:
    for ex in tfds.as_numpy(builder.as_dataset(split=split)):
      if 'img_raw' in ex:
        row = [int(ex['label']), '', ex['img_raw'].tolist()]
      else:
        image = ex['image']
        row = [int(image['class']['label']), image['key'].decode(), image['encoded'].tolist()]
        if 'weight' in ex:
          row.append(ex['weight'].tolist())
      rows.setdefault(name + ':' + split, []).append(row)
print(json.dumps(rows))
"""
  done = subprocess.run([sys.executable, '-c', script,
                         json.dumps({n: str(o / 'tfds') for n, o in outs.items()})],
                        cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  loaded = json.loads(done.stdout.strip().splitlines()[-1])
  for name, out in outs.items():
    for split in read_info(out)['splits']:
      rows = loaded[f'{name}:{split}']
      plain = list(read.examples(str(out), split))
      assert len(rows) == len(plain) > 0
      if name == 'seed':
        assert sorted((r[0], np.uint8(r[2]).tobytes()) for r in rows) == sorted(
            (e['label'], e['image'].tobytes()) for e in plain)
        continue
      by_key = {e['key']: e for e in plain}
      for row in rows:
        example = by_key[row[1]]
        assert row[0] == example['label']
        if name == 'jpeg':  # TFDS decodes with TensorFlow's default (fast) DCT
          assert np.abs(np.int32(row[2]) - example['image']).mean() < 3
        else:
          np.testing.assert_array_equal(np.uint8(row[2]), example['image'])
        if name == 'raw':
          np.testing.assert_array_equal(np.float32(row[3]), example['weight'])


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
def test_tensorflow_datasets_reads_declared_shapes_and_label_lists(tmp_path):
  """Extra features in their feature_spec shape ([], [N], [null], [null, N]) and
  --multi_label lists come out of TFDS as they went in."""
  pytest.importorskip('tensorflow_datasets')
  rows = []
  for i in range(6):
    Image.fromarray(pattern(i)).save(tmp_path / f'{i}.png')
    rows.append(json.dumps({'image': f'{i}.png', 'label': ['ant', 'bee'][:1 + i % 2],
                            'weight': i * 0.5, 'emb': [i, i + 1, i + 2],
                            'boxes': [[i, 0, 1, 1]] * (i % 3), 'tags': ['x'] * i}))
  (tmp_path / 'm.jsonl').write_text('\n'.join(rows) + '\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.jsonl'), '--output_dir', str(out),
                       '--height', str(HEIGHT), '--width', str(WIDTH), '--multi_label',
                       '--extra_features',
                       'weight:float,emb:int64[3],tags:bytes[],boxes:float[][4]']) == 0
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 0
  script = """
import json, sys
import tensorflow_datasets as tfds
builder = tfds.builder_from_directory(sys.argv[1])
rows = {}
for ex in tfds.as_numpy(builder.as_dataset(split='train')):
  rows[ex['image']['key'].decode()] = {
      'label': ex['image']['class']['label'].tolist(),
      'text': [t.decode() for t in ex['image']['class']['text']],
      'weight': [list(ex['weight'].shape), ex['weight'].tolist()],
      'emb': [list(ex['emb'].shape), ex['emb'].tolist()],
      'tags': [t.decode() for t in ex['tags']],
      'boxes': [list(ex['boxes'].shape), ex['boxes'].tolist()]}
print(json.dumps(rows))
"""
  done = subprocess.run([sys.executable, '-c', script, str(out / 'tfds')], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  loaded = json.loads(done.stdout.strip().splitlines()[-1])
  assert loaded == {f'{i}.png': {
      'label': [0, 1][:1 + i % 2], 'text': ['ant', 'bee'][:1 + i % 2],
      'weight': [[], i * 0.5], 'emb': [[3], [i, i + 1, i + 2]], 'tags': ['x'] * i,
      'boxes': [[i % 3, 4], [[i, 0, 1, 1]] * (i % 3)]} for i in range(6)}


@pytest.mark.integration  # TensorFlow in a subprocess
@pytest.mark.slow
def test_tensorflow_datasets_loads_detection_with_gaps_in_its_ids(tmp_path):
  """COCO category ids 1, 7, 90: ids without a class get names of their own
  (TFDS's ClassLabel needs unique names), and every id keeps its number."""
  (tmp_path / 'images').mkdir()
  images, objects = [], []
  for i in range(4):
    Image.fromarray(pattern(i)).save(tmp_path / 'images' / f'{i}.png')
    images.append({'id': i + 1, 'file_name': f'{i}.png', 'width': WIDTH, 'height': HEIGHT})
    for category in (1, 7, 90)[:i]:
      objects.append({'id': len(objects) + 1, 'image_id': i + 1, 'category_id': category,
                      'bbox': [1, 1, 4, 3], 'area': 12, 'iscrowd': 0})
  (tmp_path / 'instances.json').write_text(json.dumps({
      'images': images, 'annotations': objects,
      'categories': [{'id': 1, 'name': 'person'}, {'id': 7, 'name': 'train'},
                     {'id': 90, 'name': 'unused_2'}]}))
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path / 'instances.json'),
                       '--annotation_format', 'coco', '--image_dir', str(tmp_path / 'images'),
                       '--encoding', 'png', '--output_dir', str(out)]) == 0
  assert export.main(['--format', 'tfds', '--input_dir', str(out)]) == 0
  script = """
import json, sys
import tensorflow_datasets as tfds
builder = tfds.builder_from_directory(sys.argv[1])
label = builder.info.features['image']['object']['class']['label']
rows = {}
for ex in tfds.as_numpy(builder.as_dataset(split='train')):
  ids = ex['image']['object']['class']['label'].tolist()
  rows[ex['image']['filename'].decode()] = [ids, [label.int2str(i) for i in ids]]
print(json.dumps([label.names, rows]))
"""
  done = subprocess.run([sys.executable, '-c', script, str(out / 'tfds')], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  names, rows = json.loads(done.stdout.strip().splitlines()[-1])
  assert len(names) == 91
  assert (names[0], names[1], names[2], names[7], names[8], names[90]) == (
      'unused_0', 'person', '_unused_2', 'train', 'unused_8', 'unused_2')
  assert len(set(names)) == 91
  expected = {e['key']: [e['classes'].tolist(), e['class_text']]
              for e in read.examples(str(out))}
  assert rows == expected == {'0.png': [[], []], '1.png': [[1], ['person']],
                              '2.png': [[1, 7], ['person', 'train']],
                              '3.png': [[1, 7, 90], ['person', 'train', 'unused_2']]}


def test_a_latest_pointer_given_to_a_reader_names_the_folder_to_give(tmp_path, capsys):
  """Only --previous_dataset follows a `latest` pointer (docs/incremental.md).
  validate and inspect said '--input_dir OUT/latest is not a folder', export
  and read.load 'OUT/latest/dataset_info.json is missing or unreadable
  (NotADirectoryError)': now each says it is the pointer, and which folder."""
  from pipeline import look
  (tmp_path / 'night1').mkdir()
  pointer = tmp_path / 'latest'
  pointer.write_text('night1\n')  # relative: to the pointer's folder
  said = (f'{pointer} is a `latest` pointer file (convert --previous_dataset writes it), not '
          f'a dataset folder: give the folder it names, {tmp_path / "night1"}')
  assert validate.main(['--input_dir', str(pointer)]) == 2
  assert capsys.readouterr().err == f'error: --input_dir {said}\n'
  assert look.main(['--input_dir', str(pointer)]) == 2
  assert capsys.readouterr().err == f'error: --input_dir {said}\n'
  assert export.main(['--format', 'tfds', '--input_dir', str(pointer),
                      '--output_dir', str(tmp_path / 'tfds')]) == 2
  assert capsys.readouterr().err == f'error: --input_dir {said}\n'  # was without its flag
  with pytest.raises(Exception, match='give the folder it names') as raised:
    read.load(str(pointer))
  assert str(raised.value) == said
  pointer.write_text('')
  assert validate.main(['--input_dir', str(pointer)]) == 2
  assert capsys.readouterr().err.endswith('not a dataset folder: give the dataset folder itself\n')


def test_an_empty_output_folder_flag_of_export_or_inspect_is_refused(tmp_path, monkeypatch,
                                                                      capsys):
  """`export --output_dir "$DIR"` with DIR unset exported into the current
  folder, replacing everything in it (no --overwrite asked), exit 0; inspect's
  `--export_dir ""` was no flag (exit 0, nothing written). Both now exit 2 as
  every flag naming a path does (docs/convert.md), and the folder is as it was."""
  from pipeline import look
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'mine.txt').write_text('mine')
  empty = 'is empty (a variable left unset?): give a path, or leave the flag out'
  assert export.main(['--format', 'tfds', '--input_dir', str(tmp_path / 'out'),
                      '--output_dir', '']) == 2
  assert capsys.readouterr().err == f'error: --output_dir {empty}\n'
  assert look.main(['--input_dir', str(tmp_path / 'out'), '--export_dir', '']) == 2
  assert capsys.readouterr().err == f'error: --export_dir {empty}\n'
  assert look.main(['--input_dir', '']) == 2
  assert capsys.readouterr().err == f'error: --input_dir {empty}\n'
  assert sorted(os.listdir(tmp_path)) == ['mine.txt']
