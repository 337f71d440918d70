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
