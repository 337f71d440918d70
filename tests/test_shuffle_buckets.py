"""Shuffles by bucket (transforms/buckets.py): rows cross each convert shuffle
in lists per (bundle, bucket), and every per-key step still sees one real key
at a time. Each transform is compared with what its per-row shuffle gave (the
per-key function over each key's rows), with keys forced to collide (2
buckets), over several bundles (two workers, a Reshuffle; or the DoFns driven
bundle by bundle), and on an empty input."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import gzip
import os
import pathlib
import subprocess
import sys

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms.window import GlobalWindow
import pytest

from tests.conftest import local_pipeline
from transforms.batches import Unbatch
from transforms.batches import chunks
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.buckets import OBJECT_BYTES
from transforms.buckets import ROW_BYTES
from transforms.buckets import BufferByBucketFn
from transforms.buckets import ExactKeyFn
from transforms.buckets import PerKeyFn
from transforms.buckets import bucket_of
from transforms.buckets import buffer_by_key
from transforms.buckets import row_bytes
from transforms.core import copies
from transforms.core import duplicates
from transforms.core import manifest
from transforms.core import manifest_keys
from transforms.core import reuse as core_reuse
from transforms.core.example import BuiltExample
from transforms.core.labels import LabelMap
from transforms.core.shuffle import Ordering
from transforms.dedupe import ContentDuplicates
from transforms.dedupe import DedupeContent
from transforms.reuse import FALLBACK_ROWS
from transforms.reuse import CopyRecords
from transforms.reuse import CopyShardFn
from transforms.reuse import Reusable
from transforms.reuse_join import JoinPrevious
from transforms.reuse_join import _AttachFn
from transforms.sidecars import Sidecar
from transforms.sidecars import read_sidecar
from transforms.sources import ResolveKeyFn
from transforms.sources import ResolveKeys
from transforms.write_shards import WriteShards

# Two workers: the input is split into several bundles (the distributed path's
# own runner mode, runners.single_local_worker).
TWO_WORKERS = ('--direct_num_workers=2', '--direct_running_mode=multi_threading')
ORDERING = Ordering(seed=3)


def _values(outputs) -> list:
  return [getattr(output, 'value', output) for output in outputs or ()]


def _buffered(buffer: BufferByBucketFn, bundles: list) -> dict:
  """The buffer over each bundle in turn -> {bucket: [its lists]}: what a
  GroupByKey of its output gives."""
  grouped = collections.defaultdict(list)
  for bundle in bundles:
    buffer.start_bundle()
    for element in bundle:
      for bucket, values in buffer.process(element):
        grouped[bucket].append(values)
    for bucket, values in _values(buffer.finish_bundle()):
      grouped[bucket].append(values)
  return grouped


def _through_shuffle(buffer: BufferByBucketFn, bundles: list, consumer) -> list:
  """The buffer over each bundle, its lists grouped by bucket, then the
  consumer over each bucket (buckets in reverse order): its outputs."""
  grouped = _buffered(buffer, bundles)
  consumer.setup()
  consumer.start_bundle()
  made = [output for bucket in sorted(grouped, key=repr, reverse=True)
          for output in consumer.process((bucket, grouped[bucket]))]
  return made + _values(consumer.finish_bundle())


# --- the mechanism ---

def test_buckets_are_stable_across_processes_and_spread():
  """crc32, not hash(): the same bucket under another PYTHONHASHSEED."""
  assert [bucket_of(key, 1024) for key in ('cats/1.png', 'k0', '')] == [868, 63, 0]
  assert bucket_of('\udcff', 8) == 7  # a lone surrogate (an undecodable name) has one too
  code = "from transforms.buckets import bucket_of; print(bucket_of('cats/1.png', 1024))"
  # one other process, under a seed this one does not have (pytest's is random or unset)
  seed = '1' if os.environ.get('PYTHONHASHSEED') != '1' else '2'
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       env={**os.environ, 'PYTHONHASHSEED': seed}, check=True,
                       cwd=pathlib.Path(__file__).parent.parent)
  assert out.stdout.strip() == '868'
  sizes = collections.Counter(bucket_of(f'images/{i:07d}.png', 1024) for i in range(20480))
  assert len(sizes) == 1024 and max(sizes.values()) < 2 * 20  # mean 20 a bucket


def test_buffer_lists_a_bucket_when_full_everything_past_the_bytes_and_at_the_end():
  fn = BufferByBucketFn(lambda n: [(n % 3, n)], size_of=lambda n: 10, max_values=3,
                        max_bytes=10 ** 6)
  fn.start_bundle()
  early = [out for n in range(8) for out in fn.process(n)]
  assert early == [(0, [0, 3, 6]), (1, [1, 4, 7])]  # full at 3 values
  assert _values(fn.finish_bundle()) == [(2, [2, 5])]
  assert _values(fn.finish_bundle()) == []  # nothing held twice
  fn = BufferByBucketFn(lambda n: [(n % 3, n)], size_of=lambda n: 10, max_values=100,
                        max_bytes=25)
  fn.start_bundle()
  assert [out for n in range(4) for out in fn.process(n)] == [(0, [0]), (1, [1]), (2, [2])]
  assert _values(fn.finish_bundle()) == [(0, [3])]  # 30 bytes held > 25: all left
  fn.start_bundle()
  assert _values(fn.finish_bundle()) == []  # an empty bundle sends nothing
  fn = BufferByBucketFn(lambda n: [(None, n)])
  fn.start_bundle()
  assert [out for n in range(100) for out in fn.process(n)] == []  # held till the end
  [windowed] = fn.finish_bundle()
  assert (windowed.value, windowed.windows) == ((None, list(range(100))), [GlobalWindow()])


def test_a_list_leaves_once_it_holds_list_bytes():
  """Records of one shard never cross as one element of tens of MB."""
  fn = BufferByBucketFn(lambda n: [(n % 2, n)], size_of=lambda n: 400, max_values=100,
                        max_bytes=10 ** 6, list_bytes=1000)
  fn.start_bundle()
  early = [out for n in range(8) for out in fn.process(n)]
  assert early == [(0, [0, 2, 4]), (1, [1, 3, 5])]  # 1,200 bytes >= 1,000
  assert _values(fn.finish_bundle()) == [(0, [6]), (1, [7])]


def test_a_row_counts_its_detection_objects_toward_the_bytes_held():
  from transforms.core.annotations import ImageAnnotation
  from transforms.core.annotations import ObjectAnnotation
  row = manifest.ManifestRow({}, 'm.csv', 2, key='a')
  boxes = ImageAnnotation(1, None, tuple(ObjectAnnotation(0, (0, 0, 1, 1)) for _ in range(3)))
  assert (row_bytes(row), row_bytes(dataclasses.replace(row, annotation=boxes))) == (
      ROW_BYTES, ROW_BYTES + 3 * OBJECT_BYTES)


class _Record(beam.DoFn):
  """(key, values) -> (key, sorted values, side input); counts its bundles."""

  def setup(self):
    self.calls = ['setup']

  def start_bundle(self):
    self.calls.append('start')

  def process(self, grouped, side=''):
    key, values = grouped
    if isinstance(values, dict):
      yield key, {tag: sorted(v) for tag, v in values.items()}, side
    else:
      yield key, sorted(values), side

  def finish_bundle(self):
    self.calls.append('finish')


def test_per_key_fn_runs_each_key_of_a_bucket_alone_in_key_order():
  record = _Record()
  fn = PerKeyFn(record)
  fn.setup()
  fn.start_bundle()
  made = list(fn.process((1, [[('b', 2), ('a', 1)], [('b', 3), ('c', 0)]]), 'side'))
  assert made == [('a', [1], 'side'), ('b', [2, 3], 'side'), ('c', [0], 'side')]
  cogrouped = (1, {'images': [[('k', 'i1')], [('j', 'i2')]], 'labels': [[('k', 'l1')]]})
  assert list(fn.process(cogrouped)) == [('j', {'images': ['i2'], 'labels': []}, ''),
                                         ('k', {'images': ['i1'], 'labels': ['l1']}, '')]
  fn.finish_bundle()
  assert record.calls == ['setup', 'start', 'finish']


def test_exact_key_fn_reads_the_lists_one_after_another():
  fn = ExactKeyFn(_Record())
  assert list(fn.process(('shard', [[3, 1], [2]]), 's')) == [('shard', [1, 2, 3], 's')]


def test_buffered_per_key_over_bundles_equals_the_per_row_shuffle():
  """Keys colliding in 2 buckets over 3 bundles: each key's values, whole."""
  pairs = [(f'k{i % 7}', i) for i in range(40)]
  made = _through_shuffle(buffer_by_key(lambda pair: [pair], buckets=2), list(chunks(pairs, 15)),
                          PerKeyFn(_Record()))
  expected = collections.defaultdict(list)
  for key, value in pairs:
    expected[key].append(value)
  assert sorted(made) == [(key, sorted(values), '') for key, values in sorted(expected.items())]
  assert len(made) == 7


# --- ResolveKeys ---

def _image_rows() -> list:
  keys = ['a', 'b', 'a', 'c', 'd', 'e', 'b', 'f', 'a', 'g']
  return [manifest.ManifestRow({'key': k, 'image': f'{n}.png'}, 'img.csv', n, image=f'{n}.png',
                               path=f'{n}.png', key=k) for n, k in enumerate(keys, 2)]


def _label_rows() -> list:
  pairs = [('a', 'cat'), ('b', 'dog'), ('b', 'cat'), ('c', 'dog'), ('z', 'cat'), ('g', 'ant')]
  return [manifest.ManifestRow({'key': k, 'label': lab}, 'lab.csv', n, key=k, label=lab)
          for n, (k, lab) in enumerate(pairs, 2)]


def _resolved_per_key(images: list, labels: list, joined: bool) -> tuple:
  """What ResolveKeyFn made of each key's CoGroupByKey group: (rows, rejections)."""
  by_key = collections.defaultdict(lambda: ([], []))
  for row in images:
    by_key[row.key][0].append(row)
  for row in labels:
    by_key[row.key][1].append(row)
  rows, rejections = [], []
  for key, (key_images, key_labels) in by_key.items():
    row, rejected = manifest_keys.resolve_key(key, key_images, key_labels, joined)
    rows += [row] if row else []
    rejections += rejected
  return rows, rejections


@pytest.mark.parametrize('joined', [True, False])
def test_resolve_keys_in_buckets_gives_the_per_key_result(joined):
  images, labels = _image_rows(), _label_rows()
  rows, rejections = _resolved_per_key(images, labels if joined else [], joined)
  assert len(rows) == (4 if joined else 7) and len(rejections) == (8 if joined else 3)
  with local_pipeline(*TWO_WORKERS) as p:
    image_rows = (p | 'Images' >> beam.Create(list(chunks(images, 3)))
                  | 'SpreadImages' >> beam.Reshuffle())
    label_rows = (p | 'Labels' >> beam.Create(list(chunks(labels, 2)))
                  | 'SpreadLabels' >> beam.Reshuffle() if joined else None)
    resolved = image_rows | ResolveKeys(label_rows, buckets=2)
    assert_that(resolved[ROWS] | Unbatch(), equal_to(rows), label='Rows')
    assert_that(resolved[REJECTED], equal_to(rejections), label='Rejected')


def test_resolve_keys_in_buckets_over_bundles_and_empty():
  images, labels = _image_rows(), _label_rows()
  rows, rejections = _resolved_per_key(images, labels, True)
  buffer = buffer_by_key(lambda rows: [(r.key, r) for r in rows], buckets=2)
  # bundles of one batch each, as ResolveKeys gets them
  sides = {'images': _buffered(buffer, [[batch] for batch in chunks(images, 3)]),
           'labels': _buffered(buffer, [[batch] for batch in chunks(labels, 4)])}
  # 4 bundles, each sending a list to each bucket it has a key of; a, b, c share bucket 1
  assert {bucket: len(lists) for bucket, lists in sides['images'].items()} == {0: 3, 1: 3}
  assert {key for values in sides['images'][1] for key, _ in values} == {'a', 'b', 'c'}
  fn = PerKeyFn(ResolveKeyFn(True))
  made = [out for bucket in (1, 0)
          for out in fn.process((bucket, {tag: side[bucket] for tag, side in sides.items()}))]
  assert [m for m in made if isinstance(m, manifest.ManifestRow)] == sorted(
      rows, key=lambda r: (-bucket_of(r.key, 2), r.key))
  assert sorted((m.value for m in made if isinstance(m, beam.pvalue.TaggedOutput)),
                key=repr) == sorted(rejections, key=repr)
  with local_pipeline() as p:
    resolved = p | 'Images' >> beam.Create([]) | ResolveKeys(
        p | 'Labels' >> beam.Create([]), buckets=2)
    assert_that(resolved[ROWS], equal_to([]), label='NoRows')
    assert_that(resolved[REJECTED], equal_to([]), label='NoRejections')


# --- DedupeContent, ContentDuplicates ---

def _hashed_rows() -> list:
  """Rows whose files repeat (contents x, y, z), one unread, one label unknown."""
  contents = ['x', 'y', 'x', 'z', 'y', 'x', '', 'w']
  labels = ['dog', 'cat', 'cat', 'cat', 'ant', 'cat', 'cat', 'dog']
  return [manifest.ManifestRow({'image': f'{n}.png'}, 'm.csv', n, image=f'{n}.png', key=f'{n}',
                               label=label, content_sha256=content * 64 if content else '')
          for n, (content, label) in enumerate(zip(contents, labels), 2)]


def _kept_per_content(rows: list, label_map: LabelMap) -> tuple:
  """What _DedupeGroupFn made of each content's group: (kept rows, rejections)."""
  from transforms.dedupe import _content_key
  by_content = collections.defaultdict(list)
  for row in rows:
    by_content[_content_key(row)].append(row)
  kept, rejections = [], []
  for group in by_content.values():
    first, rejected = duplicates.keep_first_copy(group, lambda r: label_map.resolves(r.label))
    kept.append(first)
    rejections += rejected
  return kept, rejections


@pytest.mark.parametrize('flags', [TWO_WORKERS, ()])
def test_dedupe_content_in_buckets_gives_the_per_content_result(flags):
  rows, label_map = _hashed_rows(), LabelMap(('cat', 'dog'), fixed=True)
  kept, rejections = _kept_per_content(rows, label_map)
  # y: line 3 (cat) kept over 6 (ant, unknown); x: line 2, its copies 4 and 7 rejected
  assert sorted(r.line for r in kept) == [2, 3, 5, 8, 9]
  assert sorted(r.line for r in rejections) == [4, 6, 7]
  with local_pipeline(*flags) as p:
    labels = p | 'LabelMap' >> beam.Create([label_map])
    batches = p | 'Rows' >> beam.Create(list(chunks(rows, 3))) | beam.Reshuffle()
    deduped = batches | DedupeContent(ORDERING, False, labels, buckets=2)
    assert_that(deduped[ROWS] | Unbatch(), equal_to(kept), label='Kept')
    assert_that(deduped[REJECTED], equal_to(rejections), label='Rejected')
    empty = (p | 'NoRows' >> beam.Create([])
             | 'DedupeNone' >> DedupeContent(ORDERING, False, labels, buckets=2))
    assert_that(empty[ROWS], equal_to([]), label='NoneKept')
    assert_that(empty[REJECTED], equal_to([]), label='NoneRejected')


def _examples(count: int, splits=('train', 'test')) -> list:
  """Examples whose sources repeat every 3rd, across and within splits."""
  return [BuiltExample(splits[i % len(splits)], ORDERING.key(f'k{i}', i), 0, f'k{i}', i + 2,
                       f'{i % 3}' * 64, f'record {i}'.encode() * (i % 4 + 1), f'f{i}', 'cat',
                       'd', '', f'{i}.png') for i in range(count)]


def test_content_duplicates_in_buckets_give_the_per_content_report():
  examples = _examples(11)
  by_content = collections.defaultdict(list)
  for e in examples:
    by_content[e.sha256].append(duplicates.Copy(e.line, e.key, e.split))
  expected = duplicates.merge_reports(
      [duplicates.content_report(sha, copies) for sha, copies in by_content.items()])
  assert (expected['num_contents'], expected['num_within_split'],
          expected['num_across_splits']) == (3, 5, 3)
  with local_pipeline(*TWO_WORKERS) as p:
    batches = p | 'Examples' >> beam.Create(list(chunks(examples, 2))) | beam.Reshuffle()
    assert_that(batches | ContentDuplicates(buckets=2), equal_to([expected]), label='Report')
    empty = p | 'None' >> beam.Create([]) | 'NoReport' >> ContentDuplicates(buckets=2)
    assert_that(empty, equal_to([]), label='Empty')


# --- WriteShards (and its sidecar), JoinPrevious, CopyRecords ---

def _write(examples: list, out: pathlib.Path, in_order: bool, num_shards: int,
           flags=TWO_WORKERS) -> list:
  if in_order:
    examples, flags = sorted(examples, key=lambda e: e.order), ()
  out.mkdir(parents=True)
  with local_pipeline(*flags) as p:
    batches = p | beam.Create(list(chunks(examples, 2)), reshuffle=False)
    if not in_order:
      batches = batches | beam.Reshuffle()
    _ = batches | WriteShards(str(out / 'train'), '.tfrecord', 'none', num_shards,
                              200, in_order, sources=True)
  return sorted(out.iterdir())


@pytest.mark.parametrize('num_shards', [3, 0])
def test_shards_and_sidecar_through_buckets_are_the_local_bytes(tmp_path, num_shards):
  examples = _examples(13, ('train',))
  local = _write(examples, tmp_path / 'local', True, num_shards)
  shuffled = _write(list(reversed(examples)), tmp_path / 'shuffled', False, num_shards)
  assert [p.name for p in shuffled] == [p.name for p in local]
  assert len(local) == (num_shards or 3) + 1 and local[-1].name == 'train.sources.jsonl.gz'
  assert [p.read_bytes() for p in shuffled] == [p.read_bytes() for p in local]
  lines = gzip.decompress(local[-1].read_bytes()).splitlines()
  assert len(lines) == 13  # one a record, in write order
  assert _write([], tmp_path / 'empty', False, num_shards) == []


def _previous_dataset(tmp_path: pathlib.Path, examples: list) -> Sidecar:
  paths = _write(examples, tmp_path / 'previous', True, 3)
  return Sidecar('train', str(paths[-1]), tuple(str(p) for p in paths[:-1]), False)


def _rows_of(examples: list, extra: int) -> list:
  """The rows that made `examples` (but the first two), plus `extra` new ones."""
  rows = [manifest.ManifestRow({}, 'm.csv', e.line, image=e.image, key=e.key, label='cat',
                               fingerprint=e.fingerprint) for e in examples[2:]]
  return rows + [manifest.ManifestRow({}, 'm.csv', 100 + i, image=f'n{i}.png', key=f'n{i}',
                                      label='cat', fingerprint='new') for i in range(extra)]


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_join_previous_in_buckets_gives_the_per_key_join(tmp_path):
  examples = _examples(9, ('train',))
  sidecar = _previous_dataset(tmp_path, examples)
  previous = dict(read_sidecar(sidecar))
  rows = _rows_of(examples, 3)
  # what _JoinFn made of each key's group: its row with its record (the SHA-256 taken
  # from it: the fingerprint is unchanged), None for a new key; 2 keys dropped
  joined = [r if r.key not in previous else dataclasses.replace(
      r, previous=previous[r.key], content_sha256=previous[r.key].source_sha256) for r in rows]
  assert sum(r.previous is not None for r in joined) == 7
  assert joined[0].content_sha256 == examples[2].sha256
  for flags, in_order in ((TWO_WORKERS, False), ((), True)):
    with local_pipeline(*flags) as p:
      batches = p | beam.Create(list(chunks(rows, 4))) | beam.Reshuffle()
      out = batches | JoinPrevious((sidecar,), 'metadata', None, in_order, buckets=2)
      assert_that(out[ROWS] | Unbatch(), equal_to(joined), label='Joined')
      if not in_order:
        assert_that(out[TALLIES], equal_to([((core_reuse.TALLY, core_reuse.DROPPED), 1)] * 2),
                    label='Dropped')
  with local_pipeline(*TWO_WORKERS) as p:
    out = p | beam.Create([]) | JoinPrevious((sidecar,), 'metadata', None, buckets=2)
    assert_that(out[ROWS], equal_to([]), label='NoRows')
    assert_that(out[TALLIES], equal_to([((core_reuse.TALLY, core_reuse.DROPPED), 1)] * 9),
                label='AllDropped')


def test_the_in_order_join_counts_each_previous_record_once_over_bundles(tmp_path):
  """A single local worker's join (_AttachFn), driven bundle by bundle,
  counts the rows that found a record in each bundle and the previous
  records once: the keys dropped are the records less the rows that found
  one (2), however many bundles it sees."""
  examples = _examples(9, ('train',))
  sidecar = _previous_dataset(tmp_path, examples)
  rows = _rows_of(examples, 3)  # 7 of the 9 records found, 3 new keys
  attach = _AttachFn('metadata', None, (sidecar,))
  attach.setup()
  sums, attached = collections.Counter(), []
  for bundle in (rows[:4], rows[4:8], rows[8:]):
    attach.start_bundle()
    for row in bundle:
      attached += attach.process(row)
    for tagged in attach.finish_bundle():
      (_, name), count = tagged.value.value
      sums[name] += count
  assert [row.key for row in attached] == [row.key for row in rows]
  assert sum(row.previous is not None for row in attached) == 7
  assert (sums[core_reuse.MATCHED], sums[core_reuse.PREVIOUS]) == (7, 9)
  assert core_reuse.section(sums, 'p', 'r')['dropped'] == 2


def test_copy_records_by_shard_through_buckets_copies_every_record(tmp_path):
  examples = _examples(9, ('train',))
  sidecar = _previous_dataset(tmp_path, examples)
  previous = dict(read_sidecar(sidecar))
  rows = [dataclasses.replace(r, previous=previous[r.key]) for r in _rows_of(examples, 0)]
  reusables = [(r.previous.shard_path, Reusable(r, 0, 'cat', 'd')) for r in rows]
  by_shard = collections.defaultdict(list)
  for path, reusable in reusables:
    by_shard[path].append(reusable)
  copy = CopyShardFn('metadata', ORDERING, copies.NO_CHECK)
  copy.setup()
  expected = [e for path, group in by_shard.items() for e in copy.process((path, group))]
  assert len(by_shard) == 3 and sorted(e.data for e in expected) == sorted(
      e.data for e in examples[2:])
  with local_pipeline(*TWO_WORKERS) as p:
    copied = (p | beam.Create(list(chunks(reusables, 2))) | beam.Reshuffle()
              | beam.FlatMap(lambda pairs: pairs)
              | CopyRecords('metadata', ORDERING, copies.NO_CHECK))
    assert_that(copied['examples'], equal_to(expected), label='Copied')
    empty = p | 'None' >> beam.Create([]) | 'CopyNone' >> CopyRecords('metadata', ORDERING, copies.NO_CHECK)
    assert_that(empty['examples'], equal_to([]), label='NoneCopied')


class _FailingAfter:
  """A shard's stream whose reads fail (EIO) after the first `reads`."""

  def __init__(self, stream, reads: int):
    self._stream, self._reads = stream, reads

  def seek(self, *args):
    return self._stream.seek(*args)

  def read(self, size: int = -1) -> bytes:
    if self._reads <= 0:
      raise OSError(errno.EIO, 'Input/output error')
    self._reads -= 1
    return self._stream.read(size)


def _copy_failing_after_one_read(monkeypatch) -> CopyShardFn:
  """A set-up CopyShardFn whose shard reads fail (EIO) after the first."""
  copy = CopyShardFn('metadata', ORDERING, copies.NO_CHECK)
  copy.setup()
  opened = copy._files.open_checked

  @contextlib.contextmanager
  def failing_after_one_read(shard):
    with opened(shard) as stream:
      yield _FailingAfter(stream, reads=1)

  monkeypatch.setattr(copy._files, 'open_checked', failing_after_one_read)
  return copy


def test_a_shard_failing_mid_read_copies_each_row_or_encodes_it_never_both(tmp_path,
                                                                           monkeypatch):
  """A previous shard whose reads fail part-way (EIO, a disk going bad under
  the run): the record read before the failure is a copy, every other row of
  the shard goes out under FALLBACK_ROWS to be encoded, and no row goes out both
  ways (that would write two records of one row)."""
  examples = _examples(9, ('train',))
  previous = dict(read_sidecar(_previous_dataset(tmp_path, examples)))
  rows = [dataclasses.replace(r, previous=previous[r.key]) for r in _rows_of(examples, 0)]
  (path, _), = collections.Counter(r.previous.shard_path for r in rows).most_common(1)
  group = [Reusable(r, 0, 'cat', 'd') for r in rows if r.previous.shard_path == path]
  assert len(group) == 3
  first = min(group, key=lambda r: r.row.previous.ordinal).row.key
  copy = _copy_failing_after_one_read(monkeypatch)
  out = list(copy.process((path, list(reversed(group)))))
  copied = [o for o in out if isinstance(o, BuiltExample)]
  fallen = [o for o in out if not isinstance(o, BuiltExample)]
  assert [(e.key, e.data, e.reuse) for e in copied] == [
      (first, next(e.data for e in examples if e.key == first), core_reuse.REUSED)]
  assert sorted(o.value.key for o in fallen) == sorted(
      r.row.key for r in group if r.row.key != first)
  assert all((o.tag, o.value.reuse, o.value.previous) == (FALLBACK_ROWS, core_reuse.FALLBACK, None)
             for o in fallen)


def test_two_rows_naming_one_record_each_end_once_when_the_shard_fails_between_them(
    tmp_path, monkeypatch):
  """Two rows whose lines name one record (an edited sidecar): the shard's
  read fails after the first row's copy, and the second row still goes out
  under FALLBACK_ROWS (answered rows were told apart by ordinal: it was lost)."""
  examples = _examples(9, ('train',))
  previous = dict(read_sidecar(_previous_dataset(tmp_path, examples)))
  row = dataclasses.replace(_rows_of(examples, 0)[0], previous=previous['k2'])
  twin = dataclasses.replace(row, key='k2-twin', line=99)
  path = row.previous.shard_path
  copy = _copy_failing_after_one_read(monkeypatch)
  out = list(copy.process((path, [Reusable(r, 0, 'cat', 'd') for r in (row, twin)])))
  assert [(o.key, o.data) for o in out if isinstance(o, BuiltExample)] == [
      ('k2', examples[2].data)]
  assert [(o.tag, o.value.key) for o in out if not isinstance(o, BuiltExample)] == [
      (FALLBACK_ROWS, 'k2-twin')]
