"""Training-ready output: records shuffled on disk by a salted hash of the key,
shard sizes, the same bytes on every run and through either write path."""

from __future__ import annotations

import json
import pathlib

import apache_beam as beam
import pytest

from pipeline import convert
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.runs import summary
from tests.conftest import feature
from tests.conftest import local_pipeline
from tests.conftest import read_info
from tests.conftest import write_image
from transforms.batches import chunks
from transforms.core import shuffle
from transforms.core.example import BuiltExample
from transforms.core.example_proto import parse_example
from transforms.core.tfrecord import read_records
from transforms.core.tfrecord import record_spans
from transforms.write_shards import WriteShards

# One worker builds its converted datasets (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('training')

NUM_CLASSES = 12
PER_CLASS = 8


@pytest.fixture(scope='module')
def class_folders(tmp_path_factory) -> pathlib.Path:
  """A folder per class, 12 classes of 8 tiny PNGs (one extra in the last),
  listed class by class as a folder listing is."""
  root = tmp_path_factory.mktemp('classes')
  for c in range(NUM_CLASSES):
    for i in range(PER_CLASS + (c == NUM_CLASSES - 1)):
      write_image(root / f'class{c:02d}' / f'{i}.png', (c * 20, i * 30, 0), size=(3, 2))
  return root


def shard_records(out: pathlib.Path) -> list:
  """[[parsed Example, ...] per shard] in listing order."""
  info = read_info(out)
  shards = []
  for split in info['splits'].values():
    for shard in split['shards']:
      with open(out / shard, 'rb') as stream:
        shards.append([parse_example(data) for _, data in read_records(stream)])
  return shards


def keys(records: list) -> list:
  return [feature(r, 'image/key').decode() for r in records]


def same_label_share(records: list) -> float:
  labels = [feature(r, 'image/class/label') for r in records]
  pairs = list(zip(labels, labels[1:]))
  return sum(a == b for a, b in pairs) / len(pairs)


@pytest.fixture(scope='module')
def three_shards(class_folders, tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp('three') / 'out'
  assert convert.main(['--image_dir', str(class_folders), '--output_dir', str(out),
                       '--num_shards', '3', '--height', '2', '--width', '2']) == EXIT_OK
  return out


def test_shards_mix_the_classes_like_a_random_order(three_shards):
  shards = shard_records(three_shards)
  assert [len(s) for s in shards] == [33, 32, 32]  # 97 records: sizes differ by one at most
  for records in shards:
    assert len({feature(r, 'image/class/label') for r in records}) >= NUM_CLASSES - 2
    # a random order has 1/12 adjacent pairs of one label; manifest order had 7/8
    assert same_label_share(records) <= 2 / NUM_CLASSES


def test_write_order_is_the_salted_hash_of_the_key_round_robin(three_shards):
  shards = shard_records(three_shards)
  every = sorted((k for s in shards for k in keys(s)),
                 key=lambda k: shuffle.Ordering(seed=0).key(k, 0))
  assert [keys(s) for s in shards] == [every[0::3], every[1::3], every[2::3]]


def test_the_same_bytes_on_every_run(three_shards, class_folders, tmp_path):
  out = tmp_path / 'again'
  assert convert.main(['--image_dir', str(class_folders), '--output_dir', str(out),
                       '--num_shards', '3', '--height', '2', '--width', '2']) == EXIT_OK
  for name in read_info(three_shards)['splits']['train']['shards']:
    assert (out / name).read_bytes() == (three_shards / name).read_bytes()


def test_in_memory_with_two_workers_writes_every_record_once(three_shards, class_folders,
                                                             tmp_path):
  """--direct_num_workers 2 splits the input even in_memory: the distributed
  write path, and the same shards as the single local worker."""
  out = tmp_path / 'two'
  assert convert.main(['--image_dir', str(class_folders), '--output_dir', str(out),
                       '--num_shards', '3', '--height', '2', '--width', '2',
                       '--direct_running_mode', 'in_memory',
                       '--direct_num_workers', '2']) == EXIT_OK
  names = read_info(three_shards)['splits']['train']['shards']
  assert read_info(out)['splits']['train']['shards'] == names
  for name in names:
    assert (out / name).read_bytes() == (three_shards / name).read_bytes()


@pytest.mark.slow
def test_size_capped_shards_are_the_same_on_every_run(class_folders, tmp_path):
  """The default --num_shards 0: shards roll over at --shard_size_mb, named in
  write order (Beam's sink named them by random temp names)."""
  outs = []
  for run in ('a', 'b'):
    out = tmp_path / run
    assert convert.main(['--image_dir', str(class_folders), '--output_dir', str(out),
                         '--shard_size_mb', '1', '--height', '128', '--width', '128',
                         '--write_index']) == EXIT_OK
    outs.append(out)
  names = read_info(outs[0])['splits']['train']['shards']
  # 97 raw records of 49,152 pixel bytes: 22 fill a MiB, so 5 shards
  assert len(names) == 5 and read_info(outs[1])['splits']['train']['shards'] == names
  for name in names + [f'{n}.index' for n in names]:
    assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()
  # consecutive runs of the write order
  all_keys = [k for records in shard_records(outs[0]) for k in keys(records)]
  assert all_keys == sorted(all_keys, key=lambda k: shuffle.Ordering().key(k, 0))
  assert not list(outs[0].glob('beam-temp-*'))


@pytest.mark.slow
def test_another_seed_another_order_and_shuffle_off_keeps_the_listing(
    three_shards, class_folders, tmp_path):
  seeded, off = tmp_path / 'seeded', tmp_path / 'off'
  common = ['--image_dir', str(class_folders), '--height', '2', '--width', '2']
  assert convert.main(common + ['--output_dir', str(seeded), '--seed', '5']) == EXIT_OK
  assert convert.main(common + ['--output_dir', str(off), '--shuffle', 'off']) == EXIT_OK
  [seeded_records] = shard_records(seeded)
  expected = sorted(keys(seeded_records), key=lambda k: shuffle.Ordering(seed=5).key(k, 0))
  assert keys(seeded_records) == expected
  assert expected != sorted(expected, key=lambda k: shuffle.Ordering(seed=0).key(k, 0))
  [off_records] = shard_records(off)
  assert keys(off_records) == sorted(keys(off_records))  # the folder listing's order
  assert same_label_share(off_records) > 0.8
  assert read_info(off)['config']['shuffle'] == 'off'


def _examples(count: int) -> list:
  ordering = shuffle.Ordering(seed=3)
  return [BuiltExample('train', ordering.key(f'k{i}', i), 0, f'k{i}', i, '',
                       f'record {i}'.encode() * (i % 5 + 1)) for i in range(count)]


def _write(examples: list, out: pathlib.Path, in_order: bool, num_shards: int,
           max_bytes=None) -> list:
  if in_order:
    examples = sorted(examples, key=lambda e: e.order)
  with local_pipeline() as p:
    _ = (p | beam.Create(list(chunks(examples, 3)), reshuffle=False)
         | WriteShards(str(out / 'train'), '.tfrecord', 'none', num_shards, max_bytes,
                       in_order))
  return sorted(out.glob('train-*'))


@pytest.mark.parametrize('count', [10, 2])
def test_both_write_paths_write_the_same_shards(tmp_path, count):
  """A single local worker writes as records come (in order); other runners
  shuffle them to their shard: the files must be the same."""
  examples = _examples(count)
  local = _write(examples, tmp_path / 'local', True, 4)
  shuffled = _write(list(reversed(examples)), tmp_path / 'shuffled', False, 4)
  assert [p.name for p in local] == [f'train-{i:05d}-of-00004.tfrecord' for i in range(4)]
  assert [p.name for p in shuffled] == [p.name for p in local]
  assert [p.read_bytes() for p in shuffled] == [p.read_bytes() for p in local]
  in_order = [e.data for e in sorted(examples, key=lambda e: e.order)]
  for i, path in enumerate(local):
    with open(path, 'rb') as stream:
      assert [data for _, data in read_records(stream)] == in_order[i::4]


@pytest.mark.parametrize('in_order,num_shards', [(True, 4), (False, 4), (True, 0), (False, 0)])
def test_every_write_path_honours_write_index(tmp_path, in_order, num_shards):
  """--write_index: the round robin, the shuffled per-shard and the size-capped
  writers each leave `<shard>.index`, one `offset length` line per record
  (an empty shard: an empty index)."""
  examples = _examples(3)
  if in_order:
    examples = sorted(examples, key=lambda e: e.order)
  with local_pipeline() as p:
    _ = (p | beam.Create(list(chunks(examples, 3)), reshuffle=False)
         | WriteShards(str(tmp_path / 'train'), '.tfrecord', 'none', num_shards, 10 ** 6,
                       in_order, write_index=True))
  shards = sorted(tmp_path.glob('train-*.tfrecord'))
  assert len(shards) == (num_shards or 1)
  assert sorted(tmp_path.glob('*.index')) == [pathlib.Path(f'{s}.index') for s in shards]
  spans = []
  for shard in shards:
    with open(shard, 'rb') as stream:
      expected = [f'{offset} {length}' for offset, length in record_spans(stream)]
    assert pathlib.Path(f'{shard}.index').read_text().splitlines() == expected
    spans.extend(expected)
  assert len(spans) == 3
  if num_shards:
    assert pathlib.Path(f'{shards[3]}.index').read_text() == ''  # 3 records, 4 shards
  with pytest.raises(ValueError, match='gzip'):
    WriteShards('x', '.tfrecord.gz', 'gzip', 2, None, in_order, write_index=True)


@pytest.mark.parametrize('count,divisor', [(12, 3), (12, 1000), (1, 3)])
def test_both_write_paths_cut_the_same_size_capped_shards(tmp_path, count, divisor):
  """num_shards=0: consecutive runs of the write order, each closed once it
  holds >= max_bytes; written as they come locally, placed by the combined
  split points elsewhere: the same files."""
  examples = _examples(count)
  max_bytes = sum(shuffle.framed_size(len(e.data)) for e in examples) // divisor + 1
  local = _write(examples, tmp_path / 'local', True, 0, max_bytes)
  shuffled = _write(list(reversed(examples)), tmp_path / 'shuffled', False, 0, max_bytes)
  assert [p.name for p in shuffled] == [p.name for p in local]
  assert [p.read_bytes() for p in shuffled] == [p.read_bytes() for p in local]
  in_order = [e.data for e in sorted(examples, key=lambda e: e.order)]
  shards = []
  for path in local:
    with open(path, 'rb') as stream:
      shards.append([data for _, data in read_records(stream)])
  assert [data for shard in shards for data in shard] == in_order
  for shard in shards[:-1]:  # full, and it was not yet full before its last record
    sizes = [shuffle.framed_size(len(data)) for data in shard]
    assert sum(sizes) >= max_bytes > sum(sizes[:-1])
  assert [p.name for p in local] == [
      f'train-{i:05d}-of-{len(local):05d}.tfrecord' for i in range(len(local))]
  assert _write([], tmp_path / 'empty', False, 0, max_bytes=100) == []
  assert _write([], tmp_path / 'empty_local', True, 0, max_bytes=100) == []


@pytest.mark.parametrize('num_shards', [2, 0])
def test_records_out_of_write_order_fail_the_job(tmp_path, num_shards):
  examples = sorted(_examples(5), key=lambda e: e.order)
  examples[1], examples[3] = examples[3], examples[1]
  with pytest.raises(Exception, match='out of write order'):
    with local_pipeline() as p:
      _ = (p | beam.Create(list(chunks(examples, 3)), reshuffle=False)
           | WriteShards(str(tmp_path / 'train'), '.tfrecord', 'none', num_shards, 100, True))


def test_ordering_units():
  on, off = shuffle.Ordering(seed=0), shuffle.Ordering(shuffle=False)
  assert on.key('a.png', 7) == shuffle.Ordering(seed=0).key('a.png', 99)
  assert on.key('a.png', 7) != shuffle.Ordering(seed=1).key('a.png', 7)
  assert 0 <= on.key('a.png', 7) < 2**64
  assert off.key('a.png', 7) == 7
  assert [shuffle.shard_of(r, 3) for r in range(7)] == [0, 1, 2, 0, 1, 2, 0]
  assert shuffle.rank_of(30, [10, 20, 30, 40]) == 2
  capped = shuffle.SizeCappedShards(100)
  assert [capped.add(size) for size in (60, 40, 1, 99, 100, 5, 200, 1)] == [0, 0, 1, 1, 2, 3, 3, 4]
  starts = shuffle.size_capped_starts([(30, 99), (10, 60), (20, 40), (40, 1)], 100)
  assert starts == [10, 30]  # 60 + 40 fill shard 0; 99 + 1 shard 1
  assert [shuffle.shard_of_order(o, starts) for o in (10, 20, 30, 40)] == [0, 0, 1, 1]
  assert shuffle.size_capped_starts([], 100) == []
  assert shuffle.framed_size(0) == 16


# ---------------------------------------------------------------- duplicates by content

SPLIT = (('train', 0.5), ('test', 0.5))


def _leaky_seed() -> int:
  """A seed whose key-based split puts a.png and its copy apart, and b.png
  and ./b.png together."""
  from transforms.core.splits import hash_split
  for seed in range(500):
    where = {k: hash_split(k, SPLIT, seed) for k in ('a.png', 'copy/a.png', 'b.png', './b.png')}
    if where['a.png'] != where['copy/a.png'] and where['b.png'] == where['./b.png']:
      return seed
  raise AssertionError('no such seed')


@pytest.fixture(scope='module')
def copies(tmp_path_factory) -> pathlib.Path:
  """a.png copied to copy/a.png; b.png listed twice (b.png, ./b.png); labels
  that differ in case (Natural/natural) or in spaces (' cat'/'cat')."""
  root = tmp_path_factory.mktemp('copies')
  write_image(root / 'a.png', (255, 0, 0), size=(3, 2))
  (root / 'copy').mkdir()
  (root / 'copy' / 'a.png').write_bytes((root / 'a.png').read_bytes())
  write_image(root / 'b.png', (0, 255, 0), size=(3, 2))
  write_image(root / 'c.png', (0, 0, 255), size=(3, 2))
  write_image(root / 'd.png', (9, 9, 9), size=(3, 2))
  (root / 'm.csv').write_text('image,label\na.png,Natural\nb.png,natural\nc.png, cat\n'
                              'd.png,cat\ncopy/a.png,Natural\n./b.png,natural\n')
  return root


def _convert(copies, out, *flags) -> int:
  return convert.main(['--manifest', str(copies / 'm.csv'), '--output_dir', str(out),
                       '--height', '2', '--width', '2', *flags])


@pytest.fixture(scope='module')
def leaky(copies, tmp_path_factory):
  out = tmp_path_factory.mktemp('leaky') / 'out'
  seed = _leaky_seed()
  assert _convert(copies, out, '--split', 'train=0.5,test=0.5', '--seed', str(seed)) == EXIT_OK
  return out, seed


def test_content_duplicates_within_and_across_splits(leaky, copies):
  from transforms.core.splits import hash_split
  out, seed = leaky
  report = read_info(out)['content_duplicates']
  a_split, copy_split = (hash_split(k, SPLIT, seed) for k in ('a.png', 'copy/a.png'))
  b_split = hash_split('b.png', SPLIT, seed)
  assert report['num_within_split'] == 1 and report['num_across_splits'] == 1
  assert report['num_contents'] == 2
  import hashlib
  sha_a = hashlib.sha256((copies / 'a.png').read_bytes()).hexdigest()
  sha_b = hashlib.sha256((copies / 'b.png').read_bytes()).hexdigest()
  assert report['pairs'] == [  # the leak first
      {'sha256': sha_a, 'across': True,
       'first': {'line': 2, 'key': 'a.png', 'split': a_split},
       'duplicate': {'line': 6, 'key': 'copy/a.png', 'split': copy_split}},
      {'sha256': sha_b, 'across': False,
       'first': {'line': 3, 'key': 'b.png', 'split': b_split},
       'duplicate': {'line': 7, 'key': './b.png', 'split': b_split}}]
  assert summary.warning_lines(read_info(out))[-1].startswith(
      'Warning: 2 image(s) repeat the bytes of another row under another key: '
      '1 within a split, 1 across splits')


def test_validate_warns_of_cross_split_copies_and_strict_fails(leaky, capsys):
  from pipeline import validate
  out, seed = leaky
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK
  report = json.loads((out / 'validation_report.json').read_text())
  assert report['valid'] is True and report['num_problems'] == 0
  assert report['num_warnings'] == 1
  assert report['warnings_by_kind'] == {'cross_split_duplicate': 1}
  from transforms.core.splits import hash_split
  in_train = [k for k in ('a.png', 'copy/a.png') if hash_split(k, SPLIT, seed) == 'train']
  in_test = [k for k in ('a.png', 'copy/a.png') if hash_split(k, SPLIT, seed) == 'test']
  [warning] = report['warnings']
  assert warning['kind'] == 'cross_split_duplicate'
  assert warning['file'].startswith('train-')  # warned: the copy outside the first split
  assert warning['detail'].startswith(f'key {in_train[0]!r} (train) has the same bytes')
  assert f'first: key {in_test[0]!r} (test)' in warning['detail']
  assert 'WARNING: 1 warning(s)' in capsys.readouterr().out
  assert validate.main(['--input_dir', str(out), '--strict']) == 1
  assert '--strict: exit 1' in capsys.readouterr().out


def test_dedupe_content_keeps_the_first_line_and_rejects_the_copies(copies, tmp_path):
  from tests.conftest import rejected_lines
  out = tmp_path / 'out'
  assert _convert(copies, out, '--dedupe', 'content', '--max_error_rate', '0.5') == EXIT_OK
  info = read_info(out)
  assert info['num_examples'] == 4 and info['num_rejected'] == 2
  assert info['rejected_by_reason'] == {'duplicate/duplicate_content': 2}
  rejected = sorted((r['line'], r['stage'], r['code']) for r in rejected_lines(out))
  assert rejected == [(6, 'duplicate', 'duplicate_content'),
                      (7, 'duplicate', 'duplicate_content')]
  assert info['content_duplicates']['num_within_split'] == 0
  [records] = shard_records(out)
  assert sorted(keys(records)) == ['a.png', 'b.png', 'c.png', 'd.png']


@pytest.mark.parametrize('direct_flags', [[], pytest.param(
    ['--direct_num_workers', '2'], marks=[pytest.mark.slow, pytest.mark.integration])])
# (Beam worker processes: a long system test, make test stays within 6 minutes)
def test_dedupe_content_keeps_the_first_copy_whose_label_resolves(tmp_path, direct_flags):
  """The first copy by line has no label (or one outside --label_map): the
  next copy is kept, not lost with it. A class whose only row is a copy keeps
  its id in the label map and is warned about as empty."""
  from tests.conftest import rejected_lines
  write_image(tmp_path / 'a.png', (255, 0, 0), size=(3, 2))
  for name in ('copy_a.png', 'copy2_a.png'):
    (tmp_path / name).write_bytes((tmp_path / 'a.png').read_bytes())
  write_image(tmp_path / 'b.png', (0, 255, 0), size=(3, 2))
  write_image(tmp_path / 'c.png', (0, 0, 255), size=(3, 2))
  (tmp_path / 'c_copy.png').write_bytes((tmp_path / 'c.png').read_bytes())
  (tmp_path / 'm.csv').write_text('image,label\na.png,\ncopy_a.png,ant\ncopy2_a.png,ant\n'
                                  'b.png,bee\nc.png,bee\nc_copy.png,cat\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--height', '2', '--width', '2', '--dedupe', 'content',
                       '--max_error_rate', '1', *direct_flags]) == EXIT_OK
  info = read_info(out)
  rejected = sorted((r['line'], r['code'], r['reason'].split('...) as ')[-1])
                    for r in rejected_lines(out))
  assert rejected == [(2, 'duplicate_content', "line 3, key 'copy_a.png', labelled 'ant' "
                                               "where this line says '' (conflicting labels): "
                                               "kept that line"),
                      (4, 'duplicate_content', "line 3, key 'copy_a.png': kept that line"),
                      (7, 'duplicate_content', "line 6, key 'c.png', labelled 'bee' where this "
                                               "line says 'cat' (conflicting labels): kept "
                                               "that line")]
  [records] = shard_records(out)
  assert sorted(keys(records)) == ['b.png', 'c.png', 'copy_a.png']
  assert info['label_map'] == ['ant', 'bee', 'cat']
  assert info['label_warnings']['empty_classes'] == ['cat']
  # a --label_map without the first copy's label: the same choice
  (tmp_path / 'map.txt').write_text('ant\nbee\n')
  (tmp_path / 'm2.csv').write_text('image,label\na.png,wasp\ncopy_a.png,ant\nb.png,bee\n')
  out2 = tmp_path / 'out2'
  assert convert.main(['--manifest', str(tmp_path / 'm2.csv'), '--output_dir', str(out2),
                       '--height', '2', '--width', '2', '--dedupe', 'content',
                       '--label_map', str(tmp_path / 'map.txt'), '--max_error_rate', '1',
                       *direct_flags]) == EXIT_OK
  assert [(r['line'], r['code']) for r in rejected_lines(out2)] == [(2, 'duplicate_content')]
  [records2] = shard_records(out2)
  assert sorted(keys(records2)) == ['b.png', 'copy_a.png']


@pytest.mark.slow
def test_split_by_content_keeps_copies_together(copies, tmp_path):
  for seed in range(4):
    out = tmp_path / f'out{seed}'
    assert _convert(copies, out, '--split', 'train=0.5,test=0.5', '--seed', str(seed),
                    '--split_by', 'content') == EXIT_OK
    info = read_info(out)
    assert info['content_duplicates']['num_across_splits'] == 0
    assert info['content_duplicates']['num_within_split'] == 2


def test_split_by_content_needs_split(copies, tmp_path, capsys):
  assert _convert(copies, tmp_path / 'o', '--split_by', 'content') == 2
  assert '--split_by content' in capsys.readouterr().err


def _report_of_every_pair(sha256: str, copies: list) -> dict:
  """The content report as it was first built, the reference: a pair for
  every copy, each compared with every earlier copy, then the first pairs kept."""
  from transforms.core import duplicates
  copies = sorted(copies, key=lambda c: (c.place, c.line, c.key, c.split))
  report = duplicates.empty_report()
  pairs = []
  for i, copy in enumerate(copies[1:], 1):
    same_split = [c for c in copies[:i] if c.split == copy.split]
    first = same_split[0] if same_split else copies[0]
    pairs.append({'sha256': sha256,
                  'first': {'line': first.line, 'key': first.key, 'split': first.split},
                  'duplicate': {'line': copy.line, 'key': copy.key, 'split': copy.split},
                  'across': not same_split})
    report['num_across_splits' if not same_split else 'num_within_split'] += 1
  report['num_contents'] = int(bool(pairs))
  report['pairs'] = sorted(pairs, key=lambda p: (
      not p['across'], p['duplicate']['line'], p['duplicate']['key']))[:duplicates.MAX_PAIRS]
  return report


def test_content_report_matches_comparing_every_copy_with_every_earlier_one():
  """Random groups (1 to 40 copies over 1 to 3 splits, lines shared by two
  manifests now and then, in any order): the one-pass report is the
  pair-per-copy one, counts, pairs and their order; and so is their merge."""
  import random

  from transforms.core import duplicates
  rng = random.Random(7)
  merged, expected = duplicates.empty_report(), duplicates.empty_report()
  for trial in range(400):
    splits = rng.sample(['train', 'test', 'validation'], rng.randint(1, 3))
    lines = [rng.randint(2, 60) for _ in range(rng.randint(1, 40))]
    copies = list({duplicates.Copy(line, f'{rng.choice("ab")}{line}.png', rng.choice(splits))
                   for line in lines})
    rng.shuffle(copies)
    sha = f'{trial:064x}'
    report, every_pair = duplicates.content_report(sha, iter(copies)), _report_of_every_pair(
        sha, copies)
    assert report == every_pair
    duplicates.add_report(merged, report)
    for name in ('num_within_split', 'num_across_splits', 'num_contents'):
      expected[name] += every_pair[name]
    expected['pairs'] = sorted(expected['pairs'] + every_pair['pairs'], key=lambda p: (
        not p['across'], p['duplicate']['line'], p['duplicate']['key']))[:duplicates.MAX_PAIRS]
  assert merged == expected and merged['num_contents'] > 300
  assert merged['num_across_splits'] > duplicates.MAX_PAIRS  # the leaks crowd out the rest
  assert all(pair['across'] for pair in merged['pairs'])


def test_content_report_of_100000_copies_is_one_pass(monkeypatch):
  """One placeholder image on 100,000 rows (lines 2-100001, read backwards):
  all in train but lines 50000-50001 (test) and 99999 (validation). Counts
  exact; each copy read once; only the MAX_PAIRS pairs listed are ever built."""
  from transforms.core import duplicates
  Copy = duplicates.Copy
  split_of = {50_000: 'test', 50_001: 'test', 99_999: 'validation'}
  read = []

  def copies():
    for line in range(100_001, 1, -1):
      read.append(line)
      yield Copy(line, f'img/{line}.png', split_of.get(line, 'train'))

  built = []
  make_pair = duplicates._pair
  monkeypatch.setattr(duplicates, '_pair', lambda *args: built.append(args) or make_pair(*args))
  report = duplicates.content_report('ab' * 32, copies())
  assert len(read) == 100_000 and len(built) == duplicates.MAX_PAIRS
  assert (report['num_within_split'], report['num_across_splits'], report['num_contents']) == (
      99_997, 2, 1)
  assert [(p['first']['line'], p['duplicate']['line'], p['duplicate']['split'], p['across'])
          for p in report['pairs']] == [
      (2, 50_000, 'test', True), (2, 99_999, 'validation', True),
      *((2, line, 'train', False) for line in range(3, 11))]
  assert report['pairs'][0]['first'] == {'line': 2, 'key': 'img/2.png', 'split': 'train'}


# ---------------------------------------------------------------- labels


def test_case_variants_and_spaces_are_warned_not_merged(leaky, capsys):
  out, _ = leaky
  info = read_info(out)
  assert info['label_map'] == ['Natural', 'cat', 'natural']
  warnings = info['label_warnings']
  assert warnings['case_variants'] == [{'Natural': 2, 'natural': 2}]
  assert warnings['num_case_variant_groups'] == 1
  assert warnings['surrounding_spaces'] == {'cat': 1}  # ' cat' was stripped, as ever
  assert warnings['empty_classes'] == [] and warnings['num_empty_classes'] == 0
  lines = summary.warning_lines(info)
  assert lines[0].startswith('Warning: 1 group(s) of labels differ only in case, kept apart: '
                             'Natural/natural')
  assert lines[1].startswith('Warning: 1 label(s) had surrounding spaces in some rows')


@pytest.mark.parametrize('modes', ['lower', 'both', 'lower,strip'])
def test_label_normalize_merges_on_purpose(copies, tmp_path, modes):
  out = tmp_path / 'out'
  assert _convert(copies, out, '--label_normalize', modes) == EXIT_OK
  info = read_info(out)
  assert info['label_map'] == ['cat', 'natural']
  assert info['label_warnings']['case_variants'] == []
  assert info['label_warnings']['surrounding_spaces'] == (
      {} if modes != 'lower' else {'cat': 1})
  assert info['splits']['train']['examples_per_class'] == {'cat': 2, 'natural': 4}
  [records] = shard_records(out)
  texts = {feature(r, 'image/key').decode(): feature(r, 'image/class/text').decode()
           for r in records}
  assert texts['a.png'] == 'natural' and texts['c.png'] == 'cat'


def test_label_normalize_bad_value_is_a_usage_error(copies, tmp_path, capsys):
  assert _convert(copies, tmp_path / 'o', '--label_normalize', 'upper') == 2
  assert "--label_normalize: 'upper' is not one of lower, strip, both" in \
      capsys.readouterr().err


def test_empty_classes_are_listed_and_keep_their_ids(copies, tmp_path):
  out = tmp_path / 'out'
  (tmp_path / 'map.txt').write_text('zebra\nNatural\nnatural\ncat\nyak\n')
  assert _convert(copies, out, '--label_map', str(tmp_path / 'map.txt')) == EXIT_OK
  info = read_info(out)
  assert info['label_map'] == ['zebra', 'Natural', 'natural', 'cat', 'yak']
  assert info['label_warnings']['empty_classes'] == ['zebra', 'yak']
  assert info['splits']['train']['examples_per_class'] == {
      'zebra': 0, 'Natural': 2, 'natural': 2, 'cat': 2, 'yak': 0}
  assert info['splits']['train']['imbalance_ratio'] == 1.0
  [records] = shard_records(out)
  ids = {feature(r, 'image/class/text').decode(): feature(r, 'image/class/label')
         for r in records}
  assert ids == {'Natural': 1, 'natural': 2, 'cat': 3}


def test_summary_lists_every_class_up_to_20_then_the_extremes():
  few = {'examples_per_class': {'a': 5, 'b': 1}, 'imbalance_ratio': 5.0}
  assert summary._class_lines(few) == ['    per class: a 5, b 1; imbalance 5.0x']
  many = {'examples_per_class': {f'c{i:02d}': i + 1 for i in range(25)},
          'imbalance_ratio': 25.0}
  assert summary._class_lines(many) == [
      '    per class: largest c24 25, c23 24, c22 23; smallest c02 3, c01 2, c00 1; '
      'imbalance 25.0x']



def test_summary_writes_out_control_and_bidi_characters_of_class_names():
  # printed raw, ESC recoloured the terminal and U+202E turned the line around
  split = {'examples_per_class': {'bell\x07x\x08y': 2, 'rtl\u202eexe.txt': 1,
                                  '\x1b[31mred': 1}, 'imbalance_ratio': 2.0}
  assert summary._class_lines(split) == [
      '    per class: bell<U+0007>x<U+0008>y 2, <U+001B>[31mred 1, rtl<U+202E>exe.txt 1; '
      'imbalance 2.0x']
  info = {'label_warnings': {'num_case_variant_groups': 1,
                             'case_variants': [['Cat\x1b', 'cat\x1b']]}}
  assert summary.warning_lines(info)[0].startswith(
      'Warning: 1 group(s) of labels differ only in case, kept apart: '
      'Cat<U+001B>/cat<U+001B> (')

def test_content_duplicate_units():
  from transforms.core import duplicates
  Copy = duplicates.Copy
  report = duplicates.content_report('ff', [Copy(9, 'c', 'test'), Copy(2, 'a', 'train'),
                                            Copy(5, 'b', 'test')])
  assert [(p['first']['key'], p['duplicate']['key'], p['across']) for p in report['pairs']] == [
      ('a', 'b', True), ('b', 'c', False)]
  assert (report['num_within_split'], report['num_across_splits'], report['num_contents']) == (
      1, 1, 1)
  merged = duplicates.merge_reports([report, duplicates.empty_report(), report])
  assert merged['num_across_splits'] == 2 and len(merged['pairs']) == 4
  assert duplicates.content_report('ff', [Copy(1, 'a', 'train')]) == duplicates.empty_report()
  # keep_first_copy: the first by line whose label resolves, else the first
  from transforms.core.labels import LabelMap
  from transforms.core.manifest import ManifestRow
  label_map = LabelMap(('ant', 'bee'), fixed=True)
  rows = [ManifestRow({}, 'm', line, key=f'k{line}', label=label, content_sha256='ab' * 32)
          for line, label in ((7, 'bee'), (3, ''), (5, 'wasp'), (9, ('ant',)))]
  kept, rejected = duplicates.keep_first_copy(rows, lambda r: label_map.resolves(r.label))
  assert kept.line == 7 and sorted(r.line for r in rejected) == [3, 5, 9]
  assert {r.code for r in rejected} == {'duplicate_content'}
  # one image under two labels: the rejection says so (it named only the kept line)
  assert {r.line: r.reason.split(': ', 1)[0].split("key 'k7'", 1)[1] for r in rejected} == {
      3: ", labelled 'bee' where this line says '' (conflicting labels)",
      5: ", labelled 'bee' where this line says 'wasp' (conflicting labels)",
      9: ", labelled 'bee' where this line says ('ant',) (conflicting labels)"}
  same = [ManifestRow({}, 'm', line, key=f'k{line}', label='bee', content_sha256='ab' * 32)
          for line in (1, 2)]
  assert duplicates.keep_first_copy(same)[1][0].reason == (
      "same bytes (SHA-256 abababababab...) as line 1, key 'k1': kept that line")
  # a copy in another split than the kept one says so: that split loses the image
  spread = [ManifestRow({}, 'm', line, key=f'k{line}', label=label, split=split,
                        content_sha256='ab' * 32)
            for line, label, split in ((1, 'bee', 'train'), (2, 'bee', 'test'),
                                       (3, 'ant', 'validation'), (4, 'bee', 'train'))]
  assert {r.line: r.reason for r in duplicates.keep_first_copy(spread)[1]} == {
      2: "same bytes (SHA-256 abababababab...) as line 1, key 'k1', in split 'train' where "
         "this line's is 'test' (not written to 'test'): kept that line",
      3: "same bytes (SHA-256 abababababab...) as line 1, key 'k1', labelled 'bee' where this "
         "line says 'ant' (conflicting labels), in split 'train' where this line's is "
         "'validation' (not written to 'validation'): kept that line",
      4: "same bytes (SHA-256 abababababab...) as line 1, key 'k1': kept that line"}
  kept, _ = duplicates.keep_first_copy(rows[1:3], lambda r: label_map.resolves(r.label))
  assert kept.line == 3  # none resolves: the first by line
  assert duplicates.keep_first_copy(rows)[0].line == 3
  assert [label_map.resolves(label) for label in ('ant', ' bee ', '', 'wasp', ('ant', 'bee'),
                                                  ())] == [True, True, False, False, True, False]


def test_a_duplicate_key_in_another_split_says_both_splits():
  """a.png listed under train, then under test: rejected as 'duplicate key
  'a.png': kept line 2', naming neither split (test lost the row)."""
  from transforms.core import manifest_keys
  from transforms.core.manifest import ManifestRow
  rows = [ManifestRow({}, 'm.csv', line, image=f'{line}.png', key='a.png', label='cat',
                      split=split)
          for line, split in ((3, 'test'), (2, 'train'), (4, 'train'))]
  kept, rejected = manifest_keys.resolve_key('a.png', rows, [], joined=False)
  assert kept.line == 2
  assert {r.line: r.reason for r in rejected} == {
      3: "duplicate key 'a.png': kept line 2, in split 'train' where this line's is 'test' "
         "(not written to 'test')",
      4: "duplicate key 'a.png': kept line 2"}


# ---------------------------------------------------------------- extra-feature shapes


def test_declarations_and_their_shapes():
  from transforms.core.spec import parse_extra_feature
  shapes = {text: parse_extra_feature(text).shape
            for text in ('w:float', 'w:float[3]', 'w:bytes[]', 'boxes:float[][4]')}
  assert shapes == {'w:float': (), 'w:float[3]': (3,), 'w:bytes[]': (None,),
                    'boxes:float[][4]': (None, 4)}
  assert parse_extra_feature('boxes:float[][4]').declaration() == 'boxes:float[][4]'
  for bad in ('w:double', 'w:float[0]', 'w:float[2][3]', 'w:float[][]', 'w', 'w:float[x]'):
    with pytest.raises(ValueError):
      parse_extra_feature(bad)


def test_cells_against_declared_shapes():
  from transforms.core.extra_values import ABSENT
  from transforms.core.extra_values import parse_extra
  from transforms.core.rejects import RowError
  assert parse_extra('0.5', 'float', 'w', 'csv', ()) == [0.5]
  assert parse_extra('two words', 'bytes', 's', 'csv', ()) == ['two words']
  assert parse_extra('1 2 3', 'int64', 'n', 'csv', (3,)) == [1, 2, 3]
  assert parse_extra('', 'int64', 'n', 'csv', (None,)) == []
  assert parse_extra([[1, 2, 3, 4], [5, 6, 7, 8]], 'float', 'b', 'jsonl', (None, 4)) == [
      1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
  assert parse_extra([], 'float', 'b', 'jsonl', (None, 4)) == []
  assert parse_extra('1 2 3 4', 'float', 'b', 'csv', (None, 4)) == [1.0, 2.0, 3.0, 4.0]
  cases = [('', 'float', 'csv', (), 'missing_feature', 'holds one value'),
           (None, 'float', 'jsonl', (), 'missing_feature', "column 'c' is empty; it holds "
            'one value (a scalar)'),  # null, NaN
           (None, 'int64', 'jsonl', (None,), 'missing_feature', "column 'c' is empty (null); "
            '[] holds no values'),
           (ABSENT, 'float', 'jsonl', (), 'missing_feature', "column 'c' is missing"),
           ('0.5 1', 'float', 'csv', (), 'bad_feature', 'a scalar holds exactly 1'),
           ('1 2', 'int64', 'csv', (3,), 'bad_feature', 'has 2 values, expected 3'),
           ([[1, 2, 3, 4], [5, 6]], 'float', 'jsonl', (None, 4), 'bad_feature', '4-lists'),
           ('1 2 3', 'float', 'csv', (None, 4), 'bad_feature', 'whole number of 4-tuples'),
           ([[1, 2]], 'float', 'jsonl', (None,), 'bad_feature', 'nested deeper than its shape'),
           ([['p']], 'bytes', 'jsonl', (None,), 'bad_feature', 'nested deeper than its shape'),
           ([[1, 2], 3], 'int64', 'jsonl', (None, 2), 'bad_feature', 'nested deeper'),
           (['x', ['y']], 'bytes', 'jsonl', (2,), 'bad_feature', 'nested deeper'),
           # a null in a bytes list had been the text 'null' (NaN: 'NaN'), where
           # float and int64 lists refuse it
           (['a', None], 'bytes', 'jsonl', (None,), 'bad_feature', 'None is no value (a null '
            'in the list)'),
           (['a', float('nan')], 'bytes', 'jsonl', (2,), 'bad_feature', 'nan is no value'),
           # a JSON line's NaN is an empty cell, as null (it had been the text 'NaN',
           # or a float32 that is not finite)
           (float('nan'), 'bytes', 'jsonl', (), 'missing_feature', "column 'c' is empty; it "
            'holds one value (a scalar)'),
           (float('nan'), 'float', 'jsonl', (None,), 'missing_feature', "column 'c' is empty "
            '(null); [] holds no values')]
  # an object in a bytes list is kept as its JSON text
  assert parse_extra([{'a': 1}, 2], 'bytes', 't', 'jsonl', (None,)) == ['{"a": 1}', '2']
  for value, kind, fmt, shape, code, reason in cases:
    with pytest.raises(RowError) as error:
      parse_extra(value, kind, 'c', fmt, shape)
    assert (error.value.stage, error.value.code) == ('manifest', code), value
    assert reason in error.value.reason, (value, error.value.reason)


def test_validate_checks_every_declared_shape():
  from transforms.core.validation import check_features
  spec = {'s': {'dtype': 'float32', 'shape': []}, 'f': {'dtype': 'int64', 'shape': [3]},
          'v': {'dtype': 'int64', 'shape': [None]}, 'b': {'dtype': 'float32', 'shape': [None, 4]}}
  good = {'s': ('float_list', [1.0]), 'f': ('int64_list', [1, 2, 3]), 'v': ('int64_list', []),
          'b': ('float_list', [0.0] * 8)}
  assert check_features(good, spec) == []
  bad = {'s': ('float_list', [1.0, 2.0]), 'f': ('int64_list', [1]), 'v': ('int64_list', [1]),
         'b': ('float_list', [0.0] * 6)}
  assert check_features(bad, spec) == [
      ('wrong_shape', "feature 's' has 2 values, a scalar holds exactly 1"),
      ('wrong_shape', "feature 'f' has 1 values, expected 3"),
      ('wrong_shape', "feature 'b' has 6 values, not a whole number of 4-tuples")]


@pytest.fixture(scope='module')
def shaped(tmp_path_factory) -> pathlib.Path:
  root = tmp_path_factory.mktemp('shaped')
  for name in ('a', 'b', 'c'):
    write_image(root / f'{name}.png', (1, 2, 3), size=(3, 2))
  rows = [{'image': 'a.png', 'label': 'x', 'weight': 0.5, 'rgb': [1, 2, 3], 'tags': ['p', 'q'],
           'boxes': [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]]},
          {'image': 'b.png', 'label': 'x', 'weight': 2, 'rgb': [4, 5, 6], 'tags': [],
           'boxes': []},
          {'image': 'c.png', 'label': 'x', 'weight': '', 'rgb': [7, 8, 9], 'tags': ['r'],
           'boxes': [[1, 1, 1, 1]]}]
  (root / 'm.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
  out = root / 'out'
  assert convert.main(['--manifest', str(root / 'm.jsonl'), '--output_dir', str(out),
                       '--height', '2', '--width', '2', '--max_error_rate', '0.5',
                       '--extra_features',
                       'weight:float,rgb:int64[3],tags:bytes[],boxes:float[][4]']) == EXIT_OK
  return out


def test_shapes_in_feature_spec_records_and_rejections(shaped):
  from tests.conftest import rejected_lines
  info = read_info(shaped)
  assert info['format_version'] == 2
  assert {n: f['shape'] for n, f in info['feature_spec'].items() if '/' not in n} == {
      'weight': [], 'rgb': [3], 'tags': [None], 'boxes': [None, 4]}
  assert info['config']['extra_features'] == {'weight': 'float', 'rgb': 'int64[3]',
                                              'tags': 'bytes[]', 'boxes': 'float[][4]'}
  [rejected] = rejected_lines(shaped)
  assert (rejected['line'], rejected['stage'], rejected['code']) == (
      3, 'manifest', 'missing_feature')
  [records] = shard_records(shaped)
  by_key = {feature(r, 'image/key').decode(): r for r in records}
  assert by_key['a.png']['boxes'] == ('float_list', pytest.approx(
      [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]))
  assert by_key['b.png']['boxes'] == ('float_list', [])
  assert by_key['b.png']['weight'] == ('float_list', [2.0])
  assert by_key['a.png']['rgb'] == ('int64_list', [1, 2, 3])
  assert by_key['a.png']['tags'] == ('bytes_list', [b'p', b'q'])
  from pipeline import validate
  assert validate.main(['--input_dir', str(shaped)]) == EXIT_OK



@pytest.mark.parametrize('value', [float('nan'), float('inf'), float('-inf')])
def test_a_float_that_is_not_finite_is_a_problem_convert_never_writes(shaped, tmp_path, value):
  """convert rejects a NaN or infinite float cell (manifest/bad_feature): a
  record holding one, its CRCs, sidecar and counts intact, is a problem."""
  from tests.conftest import copy_dataset
  from tests.test_validate_cli import rewrite_first_record
  from tests.test_validate_cli import run_validate
  out = copy_dataset(shaped, tmp_path)
  shard = rewrite_first_record(
      out, lambda features: features.update(boxes=('float', [0.1, value, 0.3, 0.4])))
  code, report = run_validate(out)
  assert code == EXIT_FAILED
  assert report['problems_by_kind'] == {'non_finite_value': 1}
  [problem] = report['problems']
  assert (problem['file'], problem['record']) == (shard, 0)
  assert problem['detail'] == (f"feature 'boxes' holds 1 value(s) that are not finite "
                               f'numbers (first: {value!r})')

@pytest.mark.slow
def test_tf_data_reads_each_shape_from_feature_spec(shaped):
  """docs/reading.md's recipe: FixedLenFeature for [] and [N], RaggedFeature for
  [null] and [null, N]."""
  from tests.test_tf_readers import read_with_tensorflow
  found = read_with_tensorflow('extras', shaped)
  assert found['a.png']['weight'] == 0.5 and found['b.png']['weight'] == 2.0
  assert found['a.png']['rgb'] == [1, 2, 3]
  assert found['a.png']['tags'] == ['p', 'q'] and found['b.png']['tags'] == []
  boxes = found['a.png']['boxes']
  assert [len(box) for box in boxes] == [4, 4]  # a [2, 4] ragged tensor: two 4-tuples
  assert [v for box in boxes for v in box] == pytest.approx(
      [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
  assert found['b.png']['boxes'] == []
