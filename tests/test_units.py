"""Plain per-element functions, without Beam."""

from __future__ import annotations

import io
import os
import pathlib
import struct
import sys
import time

import pytest

from tests.conftest import parse_line
from transforms.core import line_caps
from transforms.core import manifest
from transforms.core import splits
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import serialize_example
from transforms.core.labels import LabelMap
from transforms.core.rejects import RowError
from transforms.core.spec import ExtraFeature
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import read_records

ROOT = str(pathlib.Path(__file__).resolve().parent.parent)


def config(fmt='csv', header=('image', 'label'), **kwargs):
  return manifest.ManifestConfig(path='data/m.' + fmt, fmt=fmt, header=header, **kwargs)


@pytest.mark.parametrize('path,fmt', [('a.csv', 'csv'), ('a.TSV', 'tsv'),
                                      ('gs://b/a.jsonl.gz', 'jsonl'), ('a.csv.gz', 'csv')])
def test_manifest_format_by_extension(path, fmt):
  assert manifest.manifest_format(path) == fmt


def test_parse_csv_line_resolves_relative_paths_and_keeps_absolute_ones():
  row = parse_line(b'img/a.png,cat', 2, config())
  assert (row.image, row.path, row.key, row.label, row.split) == (
      'img/a.png', 'data/img/a.png', 'img/a.png', 'cat', 'train')
  assert parse_line(b'/abs/a.png,cat', 2, config()).path == '/abs/a.png'
  assert parse_line(b's3://b/a.png,cat', 2, config()).path == 's3://b/a.png'
  # a manifest at the filesystem's root: its folder is /, not the working folder
  at_root = manifest.ManifestConfig(path='/m.csv', fmt='csv', header=('image', 'label'))
  assert parse_line(b'img/a.png,cat', 2, at_root).path == '/img/a.png'
  assert parse_line(b'img/a.png,cat', 2, config(relative_to='data/')).path == 'data/img/a.png'


@pytest.mark.parametrize('raw,fmt,code', [
    (b'a.png', 'csv', 'wrong_field_count'),
    (b'"a.png,cat', 'csv', 'bad_quoting'),
    (b'a' * 131_073 + b'.png,cat', 'csv', 'field_too_long'),
    (b'"' + b'a' * 131_073 + b'.png",cat', 'csv', 'field_too_long'),
    (b'{"image": "a.png"', 'jsonl', 'bad_json'),
    (b'[1, 2]', 'jsonl', 'bad_json'),
    (b'\xff\xfe,cat', 'csv', 'bad_encoding'),
    (b',cat', 'csv', 'empty_image'),
    (b'{"image": ["a", "b"], "label": "x"}', 'jsonl', 'bad_value'),
])
def test_malformed_lines_are_that_lines_problem(raw, fmt, code):
  with pytest.raises(RowError) as error:
    parse_line(raw, 3, config(fmt, header=() if fmt == 'jsonl' else ('image', 'label')))
  assert error.value.code == code and error.value.stage == 'manifest'


def test_a_csv_line_splits_as_csv_reader_splits_it():
  """Lines without a quote, CR, LF or NUL are split on commas without
  csv.reader: the same fields, and csv.reader's errors for the others."""
  import csv
  import random
  rng = random.Random(31)
  alphabet = 'ab ,,\t"\'é\\\r\n\x00'
  plain = 0
  for _ in range(4000):
    text = ''.join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
    try:
      expected = next(csv.reader([text], strict=True))
    except csv.Error:
      with pytest.raises(RowError) as error:
        manifest.split_fields(text, config())
      assert error.value.code == 'bad_quoting', text
      continue
    header = tuple(f'c{i}' for i in range(len(expected)))
    if expected:
      assert list(manifest.split_fields(text, config(header=header)).values()) == expected, text
      plain += not any(c in text for c in '"\r\n\x00')
  assert plain > 500  # the commas-only path was taken


def test_iter_lines_skips_header_and_blank_lines_and_numbers_them():
  stream = io.BytesIO(b'image,label\r\na,b\r\n\r\n   \nc,d')
  assert list(manifest.iter_lines(stream, 'csv')) == [(2, b'a,b'), (5, b'c,d')]


def test_extra_features_from_csv_cells_and_json_lists():
  extras = (ExtraFeature('w', 'float'), ExtraFeature('n', 'int64'), ExtraFeature('s', 'bytes'))
  csv_config = config(header=('image', 'label', 'w', 'n', 's'), extra_features=extras)
  row = parse_line(b'a,cat,0.5 1,3,x y', 2, csv_config)
  assert row.extras == (('w', 'float', [0.5, 1.0]), ('n', 'int64', [3]),
                        ('s', 'bytes', ['x', 'y']))
  json_config = config('jsonl', header=(), extra_features=extras)
  row = parse_line(
      b'{"image": "a", "label": 1, "w": [1, 2], "n": 4, "s": "x y"}', 2, json_config)
  assert row.label == '1'
  assert row.extras == (('w', 'float', [1.0, 2.0]), ('n', 'int64', [4]), ('s', 'bytes', ['x y']))
  with pytest.raises(RowError, match='not int64'):
    parse_line(b'a,cat,1,1.5,x', 2, csv_config)


def test_hash_split_is_stable_and_follows_fractions():
  fractions = (('train', 0.8), ('test', 0.2))
  names = [splits.hash_split(f'key{i}', fractions, 0) for i in range(2000)]
  assert names == [splits.hash_split(f'key{i}', fractions, 0) for i in range(2000)]
  assert 0.75 < names.count('train') / 2000 < 0.85
  assert names != [splits.hash_split(f'key{i}', fractions, 1) for i in range(2000)]


def test_split_column_values_must_be_known():
  split = splits.SplitConfig(names=('train', 'test'))
  assert split.assign('k', ' test ') == 'test'
  with pytest.raises(RowError, match='not one of train, test'):
    split.assign('k', 'dev')
  # an empty cell: its own reason (it once said "split '' is not one of
  # train, test (set --split_names)", and no name can be empty)
  with pytest.raises(RowError, match=r'^the split cell is empty; give one of train, test$'):
    split.assign('k', ' ')


def test_an_unknown_split_says_what_keeps_it_from_a_name():
  """'tr<U+0430>in' (a Cyrillic 'a') was rejected as "split 'tr<U+0430>in' is
  not one of train, validation, test (set --split_names)", the cell printed
  as a name it is not."""
  split = splits.SplitConfig()

  def reason(value):
    with pytest.raises(RowError) as error:
      split.assign('k', value)
    assert error.value.code == 'unknown_split'
    return error.value.reason

  assert reason('tr\u0430in') == (
      "split 'tr\u0430in' is not one of train, validation, test: it holds U+0430 CYRILLIC SMALL "
      "LETTER A (a split name is ASCII letters, digits and _)")
  assert reason('train\u200b').endswith(': it holds U+200B ZERO WIDTH SPACE (a split name is '
                                         'ASCII letters, digits and _)')
  assert reason(' TRAIN ') == ("split 'TRAIN' is not one of train, validation, test: did you "
                               "mean 'train'? (names are matched exactly; or set --split_names)")
  assert [reason(v).split('did you mean ')[1][:12] for v in ('val', 'Dev', 'valid')] == [
      "'validation'"] * 3
  assert reason('holdout') == ("split 'holdout' is not one of train, validation, test "
                               '(set --split_names)')


def test_label_map_lookup_and_integers():
  names = LabelMap.from_labels(['dog', 'cat', 'dog'])
  assert names.names == ('cat', 'dog') and names.lookup('dog') == (1, 'dog')
  ints = LabelMap.from_labels(['2', '0'])
  assert ints.names == ('0', '1', '2') and ints.lookup('2') == (2, '2')
  fixed = LabelMap.from_text('b\na\n')
  assert fixed.lookup('a') == (1, 'a')
  numbered = LabelMap.from_text('10\n20\n30\n')
  assert numbered.lookup('20') == (1, '20')
  for label_map, label, code in [
      (fixed, '', 'empty_label'), (fixed, None, 'empty_label'),
      (fixed, 'zebra', 'unknown_label'), (fixed, '0', 'unknown_label'),
      (numbered, '2', 'unknown_label'), (numbered, '9' * 5000, 'unknown_label')]:
    with pytest.raises(RowError) as error:
      label_map.lookup(label)
    assert error.value.code == code
  with pytest.raises(ValueError, match='repeats'):
    LabelMap.from_text('a\nb\na\n')


@pytest.mark.slow  # imports TensorFlow (~5 s)
@pytest.mark.integration  # make test decodes with TensorFlow in test_read and test_training
def test_example_serialization_round_trips_through_tensorflow():
  tf = pytest.importorskip('tensorflow')
  data = serialize_example({'img_raw': ('bytes', b'\x00\x01'), 'label': ('int64', 7),
                            'w': ('float', [0.5, 2.0]), 's': ('bytes', ['é'])})
  example = tf.train.Example.FromString(data)
  assert example.features.feature['label'].int64_list.value == [7]
  assert example.features.feature['img_raw'].bytes_list.value == [b'\x00\x01']
  assert list(example.features.feature['w'].float_list.value) == [0.5, 2.0]
  assert example.features.feature['s'].bytes_list.value == ['é'.encode()]
  assert parse_example(example.SerializeToString())['label'] == ('int64_list', [7])
  assert example.SerializeToString(deterministic=True) == data  # byte for byte


def test_tfrecord_framing_matches_tensorflow_and_detects_damage(tmp_path):
  tf = pytest.importorskip('tensorflow')
  path = str(tmp_path / 'x.tfrecord')
  with tf.io.TFRecordWriter(path) as writer:
    for payload in (b'one', b'', b'three' * 100):
      writer.write(payload)
  data = open(path, 'rb').read()
  assert data == frame(b'one') + frame(b'') + frame(b'three' * 100)
  assert [r for _, r in read_records(io.BytesIO(data))] == [b'one', b'', b'three' * 100]
  flipped = bytearray(data)
  flipped[-5] ^= 1
  with pytest.raises(ShardError) as error:
    list(read_records(io.BytesIO(bytes(flipped))))
  assert (error.value.kind, error.value.index) == ('corrupt_shard', 2)
  with pytest.raises(ShardError) as error:
    list(read_records(io.BytesIO(data[:-3])))
  assert (error.value.kind, error.value.index) == ('truncated_shard', 2)


@pytest.mark.parametrize('cut, reason', [
    (3, 'file ends inside the data CRC of record 1 (its 500 data bytes are all there, '
        "1 of the CRC's 4)"),
    (4, 'file ends inside the data CRC of record 1 (its 500 data bytes are all there, '
        "0 of the CRC's 4)"),
    (10, 'file ends inside record 1 (494 of its 500 data bytes)')])
def test_a_shard_cut_inside_a_record_says_which_bytes_it_lacks(cut, reason):
  from transforms.core.tfrecord import read_records_skipping
  data = frame(b'one') + frame(b'x' * 500)
  with pytest.raises(ShardError) as error:
    list(read_records(io.BytesIO(data[:-cut])))
  assert (error.value.kind, error.value.index, error.value.detail) == (
      'truncated_shard', 1, reason)
  *good, (index, last) = read_records_skipping(io.BytesIO(data[:-cut]))
  assert good == [(0, b'one')]
  assert (index, last.kind, last.detail) == (1, 'truncated_shard', reason)


class _ReadSizes(io.BytesIO):
  """A shard in memory that records the size of every read asked of it."""

  def __init__(self, data: bytes, seekable: bool = True):
    super().__init__(data)
    self.sizes, self._seekable = [], seekable

  def read(self, size=-1):
    self.sizes.append(size)
    return super().read(size)

  def seekable(self):
    return self._seekable


def _huge_length_header(length: int) -> bytes:
  from transforms.core.tfrecord import masked_crc
  header = struct.pack('<Q', length)
  return header + struct.pack('<I', masked_crc(header))


@pytest.mark.parametrize('length', [1 << 40, (1 << 64) - 1])
def test_a_huge_declared_length_is_a_truncated_shard_without_asking_for_it(length):
  """A length with a valid CRC and no data behind it (2^40 was a MemoryError
  traceback in validate): truncated_shard, as a 3 GB one already was, and no
  read asks for more than READ_CHUNK bytes."""
  from transforms.core.tfrecord import READ_CHUNK
  from transforms.core.tfrecord import read_records_skipping
  data = frame(b'one') + _huge_length_header(length) + b'\0' * 64
  reason = f'file ends inside record 1 (64 of its {length} data bytes)'
  stream = _ReadSizes(data)
  with pytest.raises(ShardError) as error:
    list(read_records(stream))
  assert (error.value.kind, error.value.index, error.value.detail) == (
      'truncated_shard', 1, reason)
  assert max(stream.sizes) <= READ_CHUNK
  stream = _ReadSizes(data)
  *good, (index, last) = read_records_skipping(stream)
  assert good == [(0, b'one')] and (index, last.kind, last.detail) == (
      1, 'truncated_shard', reason)
  assert max(stream.sizes) <= READ_CHUNK


def test_record_spans_of_a_stream_that_cannot_seek_skip_in_chunks():
  from transforms.core.tfrecord import READ_CHUNK
  from transforms.core.tfrecord import record_spans
  stream = _ReadSizes(frame(b'one') + _huge_length_header(1 << 40) + b'\0' * 64,
                      seekable=False)
  spans = record_spans(stream)
  assert next(spans) == (0, 19)
  with pytest.raises(ShardError) as error:  # 64 of its 2^40 bytes: cut off
    next(spans)
  assert (error.value.kind, error.value.index) == ('truncated_shard', 1)
  assert error.value.detail == f'file ends inside record 1 (64 of its {1 << 40} data bytes)'
  assert max(stream.sizes) <= READ_CHUNK


@pytest.mark.parametrize('seekable', [True, False])
def test_record_spans_refuse_a_shard_cut_inside_a_record(seekable):
  """export counts a shard's records with record_spans: seeking past the end
  of a file does not fail, so a shard cut inside its last record counted it
  as whole (export exit 0, then TFDS's DataLossError mid-epoch)."""
  from transforms.core.tfrecord import record_spans
  whole = frame(b'one') + frame(b'two!')
  assert list(record_spans(_ReadSizes(whole, seekable=seekable))) == [(0, 19), (19, 20)]
  for cut, detail in [(len(whole) - 1, "file ends inside the data CRC of record 1 (its 4 "
                       "data bytes are all there, 3 of the CRC's 4)"),
                      (19 + 12 + 2, 'file ends inside record 1 (2 of its 4 data bytes)'),
                      (19 + 5, 'file ends inside a header at byte 19')]:
    spans = record_spans(_ReadSizes(whole[:cut], seekable=seekable))
    assert next(spans) == (0, 19)
    with pytest.raises(ShardError) as error:
      next(spans)
    assert (error.value.kind, error.value.index, error.value.detail) == (
        'truncated_shard', 1, detail)
  damaged = bytearray(whole)
  damaged[19] ^= 1  # record 1's length: its CRC fails
  with pytest.raises(ShardError) as error:
    list(record_spans(_ReadSizes(bytes(damaged), seekable=seekable)))
  assert (error.value.kind, error.value.index) == ('corrupt_shard', 1)


def test_a_record_longer_than_a_chunk_is_read_whole():
  from transforms.core.tfrecord import READ_CHUNK
  data = bytes(range(256)) * (READ_CHUNK // 256 * 2 + 3)
  stream = _ReadSizes(frame(b'one') + frame(data))
  assert [r for _, r in read_records(stream)] == [b'one', data]
  assert max(stream.sizes) <= READ_CHUNK


@pytest.mark.parametrize('threads', [1, 3])
def test_ordered_pool_keeps_order_bounds_work_and_hands_back_errors(threads):
  import threading

  from transforms.workers.ordered_pool import OrderedPool
  pool = OrderedPool(threads)
  in_flight, most = [0], [0]
  lock = threading.Lock()

  def work(i):
    with lock:
      in_flight[0] += 1
      most[0] = max(most[0], in_flight[0])
    try:
      if i % 5 == 4:
        raise ValueError(f'bad {i}')
      return i * i
    finally:
      with lock:
        in_flight[0] -= 1

  done = []
  for i in range(30):
    due = pool.submit(i, work, i)
    assert len(pool._pending) <= 2 * threads
    done += due
  done += list(pool.drain())
  pool.shutdown()
  assert [tag for tag, _ in done] == list(range(30))
  for tag, future in done:
    if tag % 5 == 4:
      with pytest.raises(ValueError, match=f'bad {tag}'):
        future.result()
    else:
      assert future.result() == tag * tag
  assert most[0] <= max(threads, 1)


@pytest.mark.parametrize('raw,code', [
    (b'{"image": "a.png", "label": "x", "key": "bad\\ud800key"}', 'bad_encoding'),
    (b'{"image": "a.png", "label": true}', 'bad_value'),
])
def test_jsonl_values_that_cannot_be_rows(raw, code):
  with pytest.raises(RowError) as error:
    parse_line(raw, 2, config('jsonl', header=()))
  assert error.value.code == code


def test_jsonl_numbers_bom_and_long_lines():
  jsonl = config('jsonl', header=())
  assert parse_line(b'{"image": "a", "label": 1.0}', 2, jsonl).label == '1'
  bom = '\ufeff{"image": "a", "label": "cat"}'.encode('utf-8')
  assert parse_line(bom, 1, jsonl).label == 'cat'
  shown = line_caps.shown_line(b'x' * 20_000)
  assert len(shown) < 10_100 and shown.endswith('(20000 characters)')


def test_float_features_must_fit_float32():
  extras = (ExtraFeature('w', 'float'),)
  csv_config = config(header=('image', 'label', 'w'), extra_features=extras)
  for value in (b'1e39', b'nan', b'inf'):
    with pytest.raises(RowError, match='finite float32'):
      parse_line(b'a,cat,' + value, 2, csv_config)


def test_labels_that_would_break_the_label_map():
  names = LabelMap.from_labels(['cat', 'zeta\nalpha', 'dog\u2028x'])
  assert names.names == ('cat',)
  with pytest.raises(RowError) as error:
    names.lookup('zeta\nalpha')
  assert error.value.code == 'bad_label'
  assert LabelMap.from_text('\ufeffcat\r\ndog\r\n').names == ('cat', 'dog')


def test_huge_integer_labels_are_rejected_not_mapped():
  from transforms.core.labels import MAX_INTEGER_LABEL
  label_map = LabelMap.from_labels(['7', str(MAX_INTEGER_LABEL + 1)])
  assert len(label_map.names) == 8
  with pytest.raises(RowError, match='--label_map'):
    label_map.lookup(str(MAX_INTEGER_LABEL + 1))


def test_max_pixels_above_pillows_limit_raises_it(monkeypatch):
  from PIL import Image

  from transforms.core.image import prepare_pillow
  monkeypatch.setattr(Image, 'MAX_IMAGE_PIXELS', 1000)
  prepare_pillow(500)
  assert Image.MAX_IMAGE_PIXELS == 1000
  prepare_pillow(300_000_000)
  assert Image.MAX_IMAGE_PIXELS == 300_000_000


@pytest.mark.parametrize('raw', [b'{"image": "a", "label": ' + b'9' * 5000 + b'}',
                                 b'[' * 100_000 + b']' * 100_000])
def test_json_too_large_or_too_deep_is_a_bad_line(raw):
  with pytest.raises(RowError) as error:
    parse_line(raw, 2, config('jsonl', header=()))
  assert error.value.code == 'bad_json'


def test_a_missing_split_value_is_train_only_when_train_is_allowed():
  assert splits.SplitConfig().assign('k', None) == 'train'
  with pytest.raises(RowError, match="'train' is not one of dev, eval"):
    splits.SplitConfig(names=('dev', 'eval')).assign('k', None)


def test_tally_sums_read_back_by_name():
  from transforms.core import tally
  from transforms.core.rejects import Rejection
  bad_image = Rejection('x.png', 'decode', 'corrupt', 'broken')
  bad_label_row = Rejection('k,?', 'label_manifest', 'bad_label', 'no',
                            counts_as_row=False)
  sums = {tally.lines_key(False): 7, tally.lines_key(True): 3,
          tally.example_key('train'): 4, tally.example_key('test'): 2,
          tally.rejection_key(bad_image): 1, tally.rejection_key(bad_label_row): 2}
  counts = tally.read_counts(sums)
  assert counts == tally.Counts(7, 3, {'train': 4, 'test': 2}, {'decode/corrupt': 1},
                                {'label_manifest/bad_label': 2})
  assert tally.read_counts({}) == tally.Counts(0, 0, {}, {}, {})


def test_example_bytes_are_the_same_in_every_process():
  import subprocess
  import sys
  code = ('import hashlib; from transforms.core.example_proto import serialize_example; '
          "print(hashlib.sha256(serialize_example({f'f/{i}': ('int64', i) "
          'for i in range(12)})).hexdigest())')
  digests = {subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            check=True).stdout for _ in range(4)}
  assert len(digests) == 1, digests


def _exit_now(code):
  import os
  os._exit(code)


def _raise_row_error():
  from transforms.core.rejects import RowError
  raise RowError('decode', 'corrupt', 'bad bytes')


class _Unpicklable(Exception):

  def __reduce__(self):
    raise TypeError('no pickling')


def _raise_unpicklable():
  raise _Unpicklable('weird')


def test_process_pool_runs_calls_in_children_and_survives_a_dead_one():
  import os

  from transforms.core.rejects import RowError
  from transforms.workers.child_process import WorkerDied
  from transforms.workers.process_pool import ProcessPool
  pool = ProcessPool(1)
  try:
    child_pid = pool.submit(os.getpid).result()
    assert child_pid != os.getpid()
    error = pool.submit(_raise_row_error).exception()
    assert isinstance(error, RowError)
    assert (error.stage, error.code, error.reason) == ('decode', 'corrupt', 'bad bytes')
    error = pool.submit(_raise_unpicklable).exception()
    assert type(error) is RuntimeError and '_Unpicklable' in str(error)
    died = pool.submit(_exit_now, 7).exception()
    assert isinstance(died, WorkerDied) and 'exit code 7' in str(died)
    assert pool.submit(os.getpid).result() not in (child_pid, os.getpid())
  finally:
    pool.shutdown()


def _crash_on(items, crash):
  from transforms.workers.child_process import WorkerDied
  if crash in items:
    raise WorkerDied('image worker process ended (exit code -11)')
  return [item * 10 for item in items]


def test_a_worker_crash_fails_only_the_item_that_caused_it():
  """A batch whose worker died is rerun item by item: only the culprit fails."""
  from transforms.workers.child_process import WorkerDied
  from transforms.workers.ordered_pool import OrderedPool
  pool = OrderedPool(1)
  items = [1, 2, 3, 4]
  batch = pool.call_alone(_crash_on, items, 3)
  results = pool.batch_results(batch, len(items), lambda i: (_crash_on, items[i:i + 1], 3))
  assert results[:2] + results[3:] == [10, 20, 40]
  assert isinstance(results[2], WorkerDied) and 'exit code -11' in str(results[2])
  good = pool.call_alone(_crash_on, [5, 6], 3)
  assert pool.batch_results(good, 2, lambda i: pytest.fail('no rerun needed')) == [50, 60]
  failing = pool.call_alone(_raise_row_error)
  with pytest.raises(Exception, match='bad bytes'):  # not a dead worker: raised
    pool.batch_results(failing, 1, lambda i: pytest.fail('no rerun'))


@pytest.mark.parametrize('encoding,processes,threads,flags,timeout,expected', [
    ('jpeg', 0, 0, [], 0, 'cores'), ('png', 0, 0, [], 0, 'cores'), ('raw', 0, 0, [], 0, 0),
    ('jpeg', 0, 3, [], 0, 0), ('raw', 2, 0, [], 0, 2),
    ('jpeg', 0, 0, ['--direct_num_workers', '2'], 0, 0),
    ('jpeg', 0, 0, ['--runner', 'DataflowRunner'], 0, 0),
    # a time limit needs processes (a thread cannot be stopped), raw output too
    ('raw', 0, 0, [], 60, 'cores'), ('raw', 0, 0, ['--runner', 'DataflowRunner'], 60, 1),
    ('raw', 0, 3, [], 60, 0), ('raw', 2, 0, [], 60, 2)])
def test_image_processes_default(encoding, processes, threads, flags, timeout, expected):
  import os

  from pipeline.configuration import command_line
  from pipeline.configuration.flags import ValidateOptions
  from pipeline.engines import runners
  from transforms.workers.pooled_step import pool_size
  options = command_line.parse(flags, ValidateOptions, '').pipeline_options
  found = pool_size(threads, processes, encoding, runners.single_local_worker(options),
                    os.cpu_count(), timeout_s=timeout).processes
  assert found == (os.cpu_count() if expected == 'cores' else expected)


def test_a_call_over_its_time_limit_kills_the_child_and_the_next_gets_a_new_one():
  import os
  import time

  from transforms.workers.child_process import WorkerTimedOut
  from transforms.workers.process_pool import ProcessPool
  pool = ProcessPool(1, timeout_s=1)
  try:
    stuck_pid = pool.submit(os.getpid).result()
    started = time.monotonic()
    error = pool.submit(time.sleep, 600).exception()
    assert isinstance(error, WorkerTimedOut) and 'after 1 s' in str(error)
    assert time.monotonic() - started < 60
    with pytest.raises(ProcessLookupError):
      os.kill(stuck_pid, 0)  # killed and reaped
    assert pool.submit(os.getpid).result() not in (stuck_pid, os.getpid())
    assert pool.submit(time.sleep, 0.01).result() is None  # quick calls are unaffected
  finally:
    pool.shutdown()


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_the_time_limit_is_each_row_s_not_the_whole_batch_s():
  """A call of several rows gets the limit per row, from the previous row's
  end (the child ticks after each): 5 rows of 0.6 s under a limit of 2 s
  finish in the child that started them (timed as a whole, the batch was
  killed at 2 s and every row redone alone). A row that itself overruns still
  stops its call, and a pool without a limit gets no ticks. Each row has 1.4
  s to spare: a loaded machine that slows a 0.6 s sleep does not fail it."""
  import os

  from tests.process_helpers import sleep_each
  from transforms.workers.child_process import WorkerTimedOut
  from transforms.workers.process_pool import ProcessPool
  pool = ProcessPool(1, timeout_s=2)
  try:
    pid = pool.submit(os.getpid).result()
    assert pool.submit(sleep_each, [0.6] * 5).result() == [0.6] * 5
    assert pool.submit(os.getpid).result() == pid  # not killed
    error = pool.submit(sleep_each, [0.05, 0.05, 600]).exception()
    assert isinstance(error, WorkerTimedOut) and 'after 2 s' in str(error)
    assert pool.submit(sleep_each, [0.01, 0.01]).result() == [0.01, 0.01]
  finally:
    pool.shutdown()
  unlimited = ProcessPool(1)
  try:
    assert unlimited.submit(os.getenv, 'IMG2TFRECORD_WORKER_TICKS').result() is None
    assert unlimited.submit(sleep_each, [0.01] * 3).result() == [0.01] * 3
  finally:
    unlimited.shutdown()


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_new_child_s_imports_do_not_count_against_the_time_limit():
  """A new child imports the called function's module before the timed call:
  the first call after a start (or after a child killed at the limit) gets
  the whole limit for its work (with --image_timeout_s 0.25 a 30 ms JPEG was
  rejected as decode/timeout when it came first to a new child)."""
  from tests.slow_import_helper import answer
  from transforms.workers.process_pool import ProcessPool
  pool = ProcessPool(1, timeout_s=1)
  try:
    assert pool.submit(answer, [1, 2]).result() == [2, 4]
    assert pool.submit(answer, [3]).result() == [6]
  finally:
    pool.shutdown()


def test_a_call_s_time_limit_covers_its_prepare():
  """prepare (the parent's read of remote files) counts against the limit: a
  prepare that never returns is left behind at the limit, and its time is
  taken from what the child gets."""
  import threading
  import time

  from transforms.workers.child_process import WorkerTimedOut
  from transforms.workers.process_pool import ProcessPool
  released = threading.Event()

  def prepare(args):  # (seconds to read, what the child gets)
    released.wait(args[0])
    return args[1:]

  pool = ProcessPool(1, prepare=prepare, timeout_s=1)
  try:
    started = time.monotonic()
    error = pool.submit(time.sleep, 20, 0.0).exception()  # released at the end
    assert isinstance(error, WorkerTimedOut)
    assert str(error) == 'reading the files of a sleep call took longer than 1 s: left behind'
    assert time.monotonic() - started < 10
    # 0.6 s reading + 0.6 s in the child: each under the limit, together over it
    error = pool.submit(time.sleep, 0.6, 0.6).exception()
    assert isinstance(error, WorkerTimedOut)
    assert pool.submit(time.sleep, 0.01, 0.01).result() is None  # a new reader thread
    assert len(pool._preparers) == 1
  finally:
    released.set()
    pool.shutdown()


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_prepare_s_time_limit_is_each_source_s():
  """A prepare reading a batch's remote files one after another gets the
  limit per file, from the last one read (read_remote_sources shows
  progress after each): 5 reads of 0.6 s under 2 s are not left behind, and
  the child then gets the limit from the last read (1.4 s to spare a read,
  for a loaded machine)."""
  import time

  from transforms.workers import progress_ticks
  from transforms.workers.child_process import WorkerTimedOut
  from transforms.workers.process_pool import ProcessPool

  def prepare(args):  # (seconds to read each, what the child gets)
    for each in args[0]:
      time.sleep(each)
      progress_ticks.row_done()
    return args[1:]

  pool = ProcessPool(1, prepare=prepare, timeout_s=2)
  try:
    assert pool.submit(time.sleep, [0.6] * 5, 0.5).result() is None
    error = pool.submit(time.sleep, [0.1, 20], 0.0).exception()
    assert isinstance(error, WorkerTimedOut) and 'left behind' in str(error)
  finally:
    pool.shutdown()
  progress_ticks.row_done()  # on a thread without a hook: nothing


def test_process_pool_replies_survive_stdout_noise_from_the_child():
  from tests.process_helpers import print_to_stdout
  from transforms.workers.process_pool import ProcessPool
  pool = ProcessPool(1)
  try:
    assert pool.submit(print_to_stdout, 'GS> some ghostscript chatter\n').result() == (
        'GS> some ghostscript chatter\n')
    assert pool.submit(print_to_stdout, 'again').result() == 'again'
  finally:
    pool.shutdown()


def test_a_worker_that_cannot_start_fails_the_call_not_a_row():
  import os

  from transforms.workers import child_process
  from transforms.workers import process_pool
  pool = process_pool.ProcessPool(1, worker_module='transforms.no_such_module')
  try:
    error = pool.submit(os.getpid).exception()
    assert isinstance(error, child_process.WorkerFailedToStart)
  finally:
    pool.shutdown()


def test_a_worker_killed_while_starting_says_so():
  """A child killed from outside before it is ready printed no error of its
  own: the job's error line says which signal, not 'its error is printed
  above'."""
  import os

  from transforms.workers import child_process
  from transforms.workers import process_pool
  pool = process_pool.ProcessPool(1, worker_module='tests.killed_at_start_worker')
  try:
    error = pool.submit(os.getpid).exception()
    assert isinstance(error, child_process.WorkerFailedToStart)
    assert str(error) == 'an image worker process was killed by SIGKILL while starting'
  finally:
    pool.shutdown()
  pool = process_pool.ProcessPool(1, worker_module='transforms.no_such_module')
  try:
    assert str(pool.submit(os.getpid).exception()) == (
        'an image worker process failed to start (exit code 1); its error is printed above')
  finally:
    pool.shutdown()


def test_dead_children_release_their_pipes():
  import os

  from transforms.workers.child_process import WorkerDied
  from transforms.workers.process_pool import ProcessPool
  pool = ProcessPool(1)
  try:
    for _ in range(3):
      assert isinstance(pool.submit(_exit_now, 5).exception(), WorkerDied)
    pool.submit(os.getpid).result()
    assert len(pool._children) == 1
  finally:
    pool.shutdown()


def test_a_child_started_while_its_pool_shuts_down_is_stopped(monkeypatch):
  """An interrupt during the first calls: a pool thread still starting its
  child when shutdown() runs. The child it gets is killed, not left idle
  (an interrupted api.convert left two image processes running)."""
  import os
  import threading

  from transforms.workers import process_pool
  starting, go_on, started = threading.Event(), threading.Event(), []

  class SlowChild:
    alive = True

    def __init__(self, worker_module, timeout_s=None):
      del worker_module, timeout_s
      self.killed = False
      started.append(self)
      starting.set()
      go_on.wait(10)  # as a child importing its modules

    def kill(self):
      self.killed = True

  monkeypatch.setattr(process_pool, 'Child', SlowChild)
  pool = process_pool.ProcessPool(1)
  call = pool.submit(os.getpid)
  assert starting.wait(10)
  stopping = threading.Thread(target=pool.shutdown)
  stopping.start()
  while not pool._shut_down:
    threading.Event().wait(0.01)
  go_on.set()
  stopping.join(10)
  assert isinstance(call.exception(), process_pool.PoolShutDown)
  assert [child.killed for child in started] == [True] and pool._children == []


# A convert stand-in: one pool child, given a call that blocks opening a FIFO.
_POOL_PARENT = """
import os, sys, time
from tests.process_helpers import block_opening
from transforms.workers.process_pool import ProcessPool
pool = ProcessPool(1, worker_module=sys.argv[3])
print(pool.submit(os.getpid).result(), flush=True)
pool.submit(block_opening, sys.argv[1], sys.argv[2])
time.sleep(600)
"""


def _running(pid: int) -> bool:
  """Whether process `pid` exists and is not a zombie (an orphan's adopter may
  not reap it)."""
  try:
    stat = pathlib.Path(f'/proc/{pid}/stat').read_text()
  except FileNotFoundError:
    return False
  return stat.rsplit(')', 1)[1].split()[0] != 'Z'


def _wait_until(condition, timeout_s: float) -> bool:
  deadline = time.monotonic() + timeout_s
  while not condition():
    if time.monotonic() > deadline:
      return False
    time.sleep(0.05)
  return True


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
@pytest.mark.parametrize('worker_module', [
    'transforms.workers.process_worker',
    'tests.watchdog_only_worker'])  # no parent-death signal (as on macOS): the watchdog
def test_a_worker_dies_with_its_parent_killed_mid_call(tmp_path, worker_module):
  """The parent is SIGKILLed while its child is blocked opening a FIFO (a
  closed stdin is never read): the child ends within seconds."""
  import signal
  import subprocess
  fifo, marker = tmp_path / 'x.jpg', tmp_path / 'started'
  os.mkfifo(fifo)
  parent = subprocess.Popen(
      [sys.executable, '-c', _POOL_PARENT, str(fifo), str(marker), worker_module],
      stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=ROOT))
  child_pid = None
  try:
    child_pid = int(parent.stdout.readline())
    assert _wait_until(marker.exists, 60) and _running(child_pid)
    time.sleep(0.2)  # into open()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert _wait_until(lambda: not _running(child_pid), 5)
  finally:
    if parent.poll() is None:
      parent.kill()
      parent.wait()
    parent.stdout.close()
    if child_pid is not None and _running(child_pid):
      os.kill(child_pid, signal.SIGKILL)  # an orphan left by a failing run


def test_a_worker_outlives_the_thread_that_started_it():
  """Pools start children from their threads, which may end before their
  children (a pool used from a short-lived thread): only the parent
  process's end ends a child."""
  import threading

  from transforms.workers import child_process
  from transforms.workers import process_pool
  started = []
  thread = threading.Thread(
      target=lambda: started.append(child_process.Child(process_pool.WORKER_MODULE)))
  thread.start()
  thread.join()
  [child] = started
  try:
    time.sleep(0.5)  # a signal sent as the thread ended would have landed
    assert child.alive
    assert child.call(os.getppid, ()) == os.getpid()
  finally:
    child.close()


def test_a_worker_whose_parent_is_already_gone_exits_at_once():
  """The parent ended before the child could set the parent-death signal:
  the child finds another parent than the one it was told and exits."""
  import subprocess
  done = subprocess.run(
      [sys.executable, '-c', 'import time; from transforms.workers import process_worker; '
       'process_worker.die_with_parent(1); time.sleep(60)'],
      env=dict(os.environ, PYTHONPATH=ROOT), timeout=60, check=False)
  assert done.returncode == 1


def test_validate_tallies_split_back_into_shard_label_and_kind_counts():
  from transforms.core import record_facts
  from transforms.core import validation
  summaries = [validation.RecordSummary('train', 's0', 0, 1, 'a'),
               validation.RecordSummary('train', 's0', 1, None, None),
               validation.RecordSummary('test', 's1', 0, 1, 'b')]
  sums = {}
  for summary in summaries:
    for key, one in record_facts.summary_tallies(summary):
      sums[key] = sums.get(key, 0) + one
  key, one = record_facts.problem_tally(validation.Problem('corrupt_shard', 's0', 2, 'x'))
  sums[key] = one
  key, one = record_facts.warning_tally(
      validation.Problem('cross_split_duplicate', 's1', 0, 'x'))
  sums[key] = one
  assert record_facts.split_tallies(sums) == (
      {('train', 's0'): 2, ('test', 's1'): 1}, {('train', 1): 1, ('train', None): 1,
                                                ('test', 1): 1}, {'corrupt_shard': 1},
      {'cross_split_duplicate': 1})


def test_record_facts_merged_from_parts_equal_the_facts_of_the_whole():
  from transforms.core import record_facts
  from transforms.core import validation
  summaries = [validation.RecordSummary('train', 's0', 0, 1, 'a', 'sha-x'),
               validation.RecordSummary('train', 's0', 1, (0, 2), 'b', 'sha-y'),
               validation.RecordSummary('train', 's1', 0, 1, 'a', None),
               validation.RecordSummary('test', 's2', 0, 0, 'c', 'sha-x'),
               validation.RecordSummary('test', 's2', 1, None, None, None)]
  whole, first, second = (record_facts.RecordFacts() for _ in range(3))
  for i, summary in enumerate(summaries):
    whole.add(summary)
    (first if i % 2 else second).add(summary)
  merged = record_facts.RecordFacts().merge(second).merge(first)
  assert merged.tallies == whole.tallies == {
      ('shard', ('train', 's0')): 2, ('shard', ('train', 's1')): 1,
      ('shard', ('test', 's2')): 2, ('label', ('train', 1)): 2, ('label', ('train', 0)): 1,
      ('label', ('train', 2)): 1, ('label', ('test', 0)): 1, ('label', ('test', None)): 1}
  for facts in (merged, whole):
    assert facts.duplicate_key_problems() == [validation.Problem(
        'duplicate_key', 's1', 0, "key 'a' appears 2 times; first at s0#0")]
    [warning] = facts.cross_split_warnings()
    assert (warning.kind, warning.file, warning.record) == ('cross_split_duplicate', 's0', 0)
    assert warning.detail.startswith("key 'a' (train) has the same bytes (SHA-256 sha-x...)")
    assert "first: key 'c' (test) at s2#0" in warning.detail


def test_record_facts_find_a_repeated_unique_value_as_a_repeated_key():
  """detection's image/source_id (FeatureTable.unique): its own problem kind,
  beside the key's; other records' keys differ."""
  from transforms.core import record_facts
  from transforms.core import validation
  source = ('duplicate_source_id', 'image/source_id')
  facts = record_facts.RecordFacts()
  for record, (key, source_id) in enumerate([('a.jpg', '7'), ('b.jpg', '8'), ('c.jpg', '7'),
                                             ('a.jpg', '9')]):
    facts.add(validation.RecordSummary('train', 's0', record, 1, key, None,
                                       ((*source, source_id),)))
  assert sorted(facts.duplicate_key_problems(), key=validation.Problem.sort_key) == [
      validation.Problem('duplicate_source_id', 's0', 2,
                         "image/source_id '7' appears 2 times; first at s0#0"),
      validation.Problem('duplicate_key', 's0', 3, "key 'a.jpg' appears 2 times; first at s0#0")]


def test_record_facts_count_every_problem_and_keep_the_first_in_flat_memory():
  from transforms.core import record_facts
  from transforms.core import validation
  problems = [validation.Problem('wrong_size', f's{i % 3}', i, f'd{i}') for i in range(50)]
  whole, first, second = (record_facts.RecordFacts(max_problems=4) for _ in range(3))
  for i, problem in enumerate(reversed(problems)):
    whole.add_problem(problem)
    (first if i % 2 else second).add_problem(problem)
    assert len(whole.problems) <= 8  # at most 2 x max_problems held, whatever comes
  undeclared = [validation.Problem('undeclared_feature', 's8', i, 'x') for i in range(20)]
  for i, warning in enumerate(undeclared):  # a record's own warnings, likewise
    whole.add_warning(warning)
    (first if i % 2 else second).add_warning(warning)
    assert len(whole.warnings) <= 8
  whole.add(validation.RecordSummary('train', 's9', 0, 1, 'a', 'sha-x'))
  whole.add(validation.RecordSummary('test', 's9', 1, 1, 'a', 'sha-x'))
  second.add(validation.RecordSummary('train', 's9', 0, 1, 'a', 'sha-x'))
  first.add(validation.RecordSummary('test', 's9', 1, 1, 'a', 'sha-x'))
  merged = record_facts.RecordFacts(max_problems=4).merge(first).merge(second)
  expected_first = sorted(problems, key=validation.Problem.sort_key)[:4]
  assert [p.record for p in expected_first] == [0, 3, 6, 9]  # file s0 first, by record
  for facts in (whole, merged):
    sums, first_problems, first_warnings = facts.report_inputs()
    assert first_problems == expected_first
    assert first_warnings == undeclared[:4]  # file s8 before s9
    # the copy in test comes first (splits by name): the train one is warned about
    [warning] = facts.cross_split_warnings()
    assert (warning.kind, warning.file, warning.record) == ('cross_split_duplicate', 's9', 0)
    assert record_facts.split_tallies(sums) == (
        {('train', 's9'): 1, ('test', 's9'): 1}, {('train', 1): 1, ('test', 1): 1},
        {'wrong_size': 50, 'duplicate_key': 1},
        {'cross_split_duplicate': 1, 'undeclared_feature': 20})


def test_report_inputs_put_duplicate_keys_among_the_first_problems():
  from transforms.core import record_facts
  from transforms.core import validation
  facts = record_facts.RecordFacts(max_problems=2)
  facts.add_problem(validation.Problem('wrong_size', 'b', 0, 'x'))
  facts.add_problem(validation.Problem('wrong_size', 'b', 1, 'y'))
  facts.add(validation.RecordSummary('train', 'a', 0, 1, 'k'))
  facts.add(validation.RecordSummary('train', 'a', 1, 1, 'k'))
  _, first_problems, first_warnings = facts.report_inputs()
  assert [(p.kind, p.file, p.record) for p in first_problems] == [
      ('duplicate_key', 'a', 1), ('wrong_size', 'b', 0)]
  assert first_warnings == []


@pytest.mark.parametrize('run_lines', [1000, 3])  # in memory; in sorted runs on temp files
def test_rejected_lines_come_out_by_source_then_line(run_lines, tmp_path, monkeypatch):
  """Whatever order a runner delivers rejections in, rejected.jsonl's bytes
  are one: by source, then line (as a number: 10 after 9), then the text."""
  import json
  import random

  from transforms.core.rejects import Rejection
  from transforms.core.rejects import sorted_lines
  monkeypatch.setenv('TMPDIR', str(tmp_path))
  made = [Rejection({'image': f'{i}.png'}, 'read', 'missing_file', f'gone {i}', 'b.csv', i)
          for i in (2, 9, 10)]
  made += [Rejection({'image': 'z.png'}, 'decode', 'truncated', 'cut', 'a.csv', 7),
           Rejection({'key': 'k'}, 'label_manifest', 'bad_label', 'no label', 'labels.csv', 1),
           Rejection({'image': 'x.png'}, 'label', 'unknown_label', 'later', 'a.csv', 3),
           Rejection({'image': 'x.png'}, 'duplicate', 'duplicate', 'earlier', 'a.csv', 3)]
  shuffled = made[:]
  random.Random(5).shuffle(shuffled)
  lines = list(sorted_lines(shuffled, run_lines=run_lines))
  assert all(line.endswith(b'\n') for line in lines)
  got = [(r['source'], r['line'], r['reason']) for r in map(json.loads, lines)]
  assert got == [('a.csv', 3, 'earlier'), ('a.csv', 3, 'later'), ('a.csv', 7, 'cut'),
                 ('b.csv', 2, 'gone 2'), ('b.csv', 9, 'gone 9'), ('b.csv', 10, 'gone 10'),
                 ('labels.csv', 1, 'no label')]
  assert lines == list(sorted_lines(reversed(made), run_lines=run_lines))
  assert list(sorted_lines([])) == []
  assert list(tmp_path.iterdir()) == []  # the runs on disk are gone


def test_a_child_whose_pipes_are_numbered_from_1024_up_keeps_its_time_limit():
  """A child started while the process holds over 1,024 files open (a local
  run's --num_shards 1100 writes every shard at once) gets pipes numbered from
  1024 up, which select() refuses (ValueError): each call under a time limit
  failed as WorkerDied, and its rows were rejected as decode/unexpected_error."""
  import os
  import resource

  from tests.process_helpers import sleep_each
  from transforms.workers.process_pool import ProcessPool
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  if hard != resource.RLIM_INFINITY and hard < 1200:
    pytest.skip(f'this process may open {hard} files at most')
  resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
  held = []
  try:
    while not held or held[-1] < 1030:
      held.append(os.open(os.devnull, os.O_RDONLY))
    pool = ProcessPool(1, timeout_s=30)
    try:
      assert pool.submit(sleep_each, [0.01, 0.02]).result() == [0.01, 0.02]
      assert pool.submit(os.getpid).result() != os.getpid()
    finally:
      pool.shutdown()
  finally:
    for number in held:
      os.close(number)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
