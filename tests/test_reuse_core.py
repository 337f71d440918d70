"""The plain functions of --previous_dataset, without Beam: fingerprints,
option digests, the reuse decision, sidecar lines, reading a record back."""

import io
import os

import pytest

from transforms.core import fingerprints
from transforms.core import reuse
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import frame


def test_a_local_fingerprint_changes_with_a_rewrite_even_if_mtime_is_restored(tmp_path):
  path = tmp_path / 'a.png'
  path.write_bytes(b'one')
  before = fingerprints.local_fingerprint(str(path))
  stat = os.stat(path)
  assert before == (f'local:3:{stat.st_mtime_ns}:{stat.st_ctime_ns}:{stat.st_ino}')
  path.write_bytes(b'two')  # same size
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as cp -p or rsync -t would
  assert fingerprints.local_fingerprint(str(path)) != before  # ctime moved
  assert fingerprints.local_fingerprint(str(tmp_path / 'gone.png')) == ''


def test_a_remote_fingerprint_is_what_the_store_reports():
  def lookup(path):
    return {'s3://b/k.jpg': {'etag': '"abc"', 'size': 10},
            'gs://b/k.jpg': {'crc32c': 'AAAA==', 'generation': 7, 'size': 10}}[path]
  assert fingerprints.remote_fingerprint('s3://b/k.jpg', lookup) == 's3:etag="abc":size=10'
  assert fingerprints.remote_fingerprint('gs://b/k.jpg', lookup) == (
      'gs:crc32c=AAAA==:generation=7:size=10')
  assert fingerprints.remote_fingerprint('gs://b/missing.jpg', lookup) == ''


def test_the_option_digest_follows_options_that_change_bytes_and_the_extras():
  base = fingerprints.options_digest(ImageSpec(), ExampleSpec())
  assert base == fingerprints.options_digest(ImageSpec(), ExampleSpec())
  assert base != fingerprints.options_digest(ImageSpec(jpeg_quality=50), ExampleSpec())
  assert base != fingerprints.options_digest(ImageSpec(), ExampleSpec(multi_label=True))
  one = fingerprints.record_digest(base, (('w', 'float', [1.0]),))
  assert one.startswith(base + '-')
  assert one != fingerprints.record_digest(base, (('w', 'float', [2.0]),))
  assert fingerprints.record_digest(base, (('b', 'bytes', [b'\xff']),)) != (
      fingerprints.record_digest(base, (('b', 'bytes', [b'\xfe']),)))


def _previous(**changes) -> reuse.PreviousRecord:
  fields = dict(split='train', shard_path='s', compressed=False, ordinal=0, offset=0,
                length=20, fingerprint='local:1', source_sha256='ab', label_id=1,
                label_text='cat', option_digest='opts-extras')
  fields.update(changes)
  return reuse.PreviousRecord(**fields)


@pytest.mark.parametrize('row, reason', [
    (dict(), None),
    (dict(previous=None), reuse.NEW),
    (dict(digest='other-extras'), reuse.CHANGED_OPTIONS),
    (dict(fingerprint='local:2'), reuse.CHANGED_SOURCE),
    (dict(fingerprint=''), reuse.CHANGED_SOURCE),
    (dict(split='test'), reuse.CHANGED_SPLIT),
    (dict(label=(2, 'cat')), reuse.CHANGED_LABEL),
    (dict(label=(1, 'Cat')), reuse.CHANGED_LABEL),
    (dict(label=None), reuse.CHANGED_LABEL),
    (dict(digest='opts-other'), reuse.CHANGED_FEATURES),
])
def test_each_change_has_its_reason(row, reason):
  values = dict(previous=_previous(), split='train', fingerprint='local:1', label=(1, 'cat'),
                digest='opts-extras')
  values.update(row)
  assert reuse.decide(values['previous'], values['split'], values['fingerprint'],
                      values['label'], values['digest']) == reason


def test_multi_label_tuples_compare_with_the_lists_json_reads_back():
  previous = _previous(label_id=[0, 2], label_text=['a', 'c'])
  assert reuse.decide(previous, 'train', 'local:1', ((0, 2), ('a', 'c')), 'opts-extras') is None


def test_a_sidecar_line_reads_back():
  line = reuse.sidecar_line('k', 1, 3, 40, 20, 'local:1', 'ab', (0, 2), ('a', 'c'), 'o-e')
  key, record = reuse.parse_line(line, 'train', ['s0', 's1'], True)
  assert (key, record) == ('k', reuse.PreviousRecord(
      'train', 's1', True, 3, 40, 20, 'local:1', 'ab', [0, 2], ['a', 'c'], 'o-e'))
  with pytest.raises(ValueError):
    reuse.parse_line(line, 'train', ['s0'], True)  # shard 1 is not listed


def test_a_record_is_read_by_offset_with_its_crcs_checked():
  shard = frame(b'first') + frame(b'second!')
  stream = io.BytesIO(shard)
  assert reuse.read_at(stream, 21, 23) == b'second!'
  damaged = bytearray(shard)
  damaged[21 + 12] ^= 1
  with pytest.raises(ShardError, match='data CRC'):
    reuse.read_at(io.BytesIO(bytes(damaged)), 21, 23)
  with pytest.raises(ShardError, match='shard ends'):
    reuse.read_at(io.BytesIO(shard[:30]), 21, 23)
  with pytest.raises(ShardError, match='no record of 22 bytes'):
    reuse.read_at(io.BytesIO(shard), 21, 22)  # a length that is not the record's
  with pytest.raises(ShardError, match='no record of 24 bytes'):
    reuse.read_at(io.BytesIO(shard + b'x'), 21, 24)


def test_records_are_picked_by_ordinal_streaming_and_damage_is_reported():
  shard = b''.join(frame(f'r{i}'.encode()) for i in range(5))
  assert list(reuse.pick_ordinals(io.BytesIO(shard), [3, 1])) == [(1, b'r1'), (3, b'r3')]
  damaged = bytearray(shard)
  damaged[18 * 2 + 12] ^= 1  # record 2's data
  picked = dict(reuse.pick_ordinals(io.BytesIO(bytes(damaged)), [2, 4, 9]))
  assert picked[4] == b'r4'
  assert isinstance(picked[2], ShardError) and isinstance(picked[9], ShardError)


def test_a_stalled_lookup_gives_no_fingerprint_within_the_timeout(tmp_path):
  import threading
  import time
  release = threading.Event()

  def lookup(path):
    if 'stall' in path:
      release.wait(30)
    return {'etag': '"e"', 'size': 1}

  (tmp_path / 'a.png').write_bytes(b'a')
  started = time.monotonic()
  found = fingerprints.fingerprint_all(
      ['s3://b/ok.png', 's3://b/stall.png', str(tmp_path / 'a.png'), ''], lookup, 0.5)
  release.set()
  assert time.monotonic() - started < 5
  assert found[0] == 's3:etag="e":size=1'
  assert found[1:] == ['', fingerprints.local_fingerprint(str(tmp_path / 'a.png')), '']


def test_a_row_without_extras_has_the_digest_of_an_empty_list():
  import hashlib
  assert fingerprints.record_digest('opts', ()) == (
      'opts-' + hashlib.sha256(b'[]').hexdigest()[:16])
  assert fingerprints.record_digest('opts', ()) != fingerprints.record_digest(
      'opts', (('w', 'float', [1.0]),))


def _shard_file(tmp_path, records, compressed=False):
  import gzip
  data = b''.join(frame(r) for r in records)
  path = tmp_path / ('s.tfrecord.gz' if compressed else 's.tfrecord')
  path.write_bytes(gzip.compress(data, mtime=0) if compressed else data)
  return str(path)


def _source(path, ordinal, offset, length, compressed=False):
  return reuse.CopySource('img.png', path, compressed, ordinal, offset, length)


def test_a_reader_reads_plain_records_by_offset_and_keeps_one_descriptor(tmp_path):
  path = _shard_file(tmp_path, [b'first', b'second!'])
  reader = reuse.ShardReader()
  before = len(os.listdir('/proc/self/fd'))
  assert reader.read(_source(path, 1, 21, 23)) == b'second!'
  assert reader.read(_source(path, 0, 0, 21)) == b'first'
  assert len(os.listdir('/proc/self/fd')) == before + 1  # one shard, one descriptor
  with pytest.raises(ShardError, match='shard ends before byte 45'):
    reader.read(_source(path, 2, 21, 24))
  with pytest.raises(ShardError, match='no record of 20 bytes at byte 21'):
    reader.read(_source(path, 1, 21, 20))
  reader.close()
  assert len(os.listdir('/proc/self/fd')) == before


def test_a_reader_sees_a_damaged_plain_record_and_an_empty_shard(tmp_path):
  path = _shard_file(tmp_path, [b'first', b'second!'])
  damaged = bytearray(open(path, 'rb').read())
  damaged[21 + 12] ^= 1
  open(path, 'wb').write(bytes(damaged))
  empty = tmp_path / 'empty.tfrecord'
  empty.write_bytes(b'')
  reader = reuse.ShardReader()
  assert reader.read(_source(path, 0, 0, 21)) == b'first'
  with pytest.raises(ShardError, match='data CRC mismatch in the record at byte 21'):
    reader.read(_source(path, 1, 21, 23))
  with pytest.raises(ShardError, match='shard ends'):
    reader.read(_source(str(empty), 0, 0, 21))
  reader.close()


def test_a_reader_picks_gzip_records_by_ordinal_going_back_when_asked(tmp_path):
  path = _shard_file(tmp_path, [f'r{i}'.encode() for i in range(4)], compressed=True)
  reader = reuse.ShardReader()
  assert [reader.read(_source(path, i, 0, 0, True)) for i in (1, 3, 0)] == [b'r1', b'r3', b'r0']
  with pytest.raises(ShardError, match='record 9 cannot be read'):
    reader.read(_source(path, 9, 0, 0, True))
  reader.close()


def test_read_record_without_a_reader_leaves_no_descriptor_open(tmp_path):
  path = _shard_file(tmp_path, [b'only'])
  before = len(os.listdir('/proc/self/fd'))
  assert reuse.read_record(_source(path, 0, 0, 20)) == b'only'
  assert len(os.listdir('/proc/self/fd')) == before
