"""The plain functions of --previous_dataset, without Beam: fingerprints,
option digests, the reuse decision, sidecar lines, reading a record back."""

import io
import json
import os
import random
import re

import PIL
from PIL import features
import pytest

from transforms.core import copies
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


@pytest.mark.parametrize('library', ['Pillow', 'libjpeg_turbo', 'zlib'])
def test_the_option_digest_follows_the_image_libraries_versions(monkeypatch, library):
  """A nightly run after a Pillow or codec upgrade encodes every row again
  (changed_options): copying last night's records would mix the old
  library's bytes with the new one's, which a full run never writes."""
  base = fingerprints.options_digest(ImageSpec(), ExampleSpec())
  versions = fingerprints.codec_versions()
  assert versions['Pillow'] == PIL.__version__
  assert versions['libjpeg_turbo'] == features.version('libjpeg_turbo')
  monkeypatch.setattr(fingerprints, 'codec_versions',
                      lambda: {**versions, library: f'{versions[library]}.1'})
  assert fingerprints.options_digest(ImageSpec(), ExampleSpec()) != base


def test_the_option_digest_follows_the_pixels_version(monkeypatch):
  """PIXELS_VERSION is raised when the same options give other pixels: the
  first night after it encodes every row again (changed_options)."""
  base = fingerprints.options_digest(ImageSpec(), ExampleSpec())
  monkeypatch.setattr(fingerprints, 'PIXELS_VERSION', fingerprints.PIXELS_VERSION + 1)
  assert fingerprints.options_digest(ImageSpec(), ExampleSpec()) != base


def test_a_part_of_a_file_of_unknown_fingerprint_has_none():
  """A Parquet cell's fingerprint is its file's and its place; a file whose
  lookup failed (''), on both nights, must not give two equal ones ('#3'):
  its cell would be copied though nothing shows the file unchanged."""
  assert fingerprints.part_fingerprint('s3:etag=e:size=9', 'row 3') == 's3:etag=e:size=9#row 3'
  assert fingerprints.part_fingerprint('local:1', 'row 3', 'local:2') == 'local:1#row 3#local:2'
  assert fingerprints.part_fingerprint('', 'row 3') == ''
  assert fingerprints.part_fingerprint('', 'row 3', 'local:2') == ''


def test_the_option_digest_follows_options_that_change_bytes_and_the_extras():
  base = fingerprints.options_digest(ImageSpec(), ExampleSpec())
  assert base == fingerprints.options_digest(ImageSpec(), ExampleSpec())
  jpeg = fingerprints.options_digest(ImageSpec(encoding='jpeg'), ExampleSpec())
  assert jpeg != fingerprints.options_digest(ImageSpec(encoding='jpeg', jpeg_quality=50),
                                             ExampleSpec())
  # the quality of JPEG output only: PNG and raw bytes are the same at any
  png, raw = ImageSpec(encoding='png'), ImageSpec(encoding='raw')
  assert fingerprints.options_digest(png, ExampleSpec()) == fingerprints.options_digest(
      ImageSpec(encoding='png', jpeg_quality=50), ExampleSpec())
  assert fingerprints.options_digest(raw, ExampleSpec()) == fingerprints.options_digest(
      ImageSpec(encoding='raw', jpeg_quality=50), ExampleSpec())
  assert fingerprints.options_digest(png, ExampleSpec()) != fingerprints.options_digest(
      raw, ExampleSpec())
  assert base != fingerprints.options_digest(ImageSpec(), ExampleSpec(multi_label=True))
  one = fingerprints.record_digest(base, (('w', 'float', [1.0]),))
  assert one.startswith(base + '-')
  assert one != fingerprints.record_digest(base, (('w', 'float', [2.0]),))
  assert fingerprints.record_digest(base, (('b', 'bytes', [b'\xff']),)) != (
      fingerprints.record_digest(base, (('b', 'bytes', [b'\xfe']),)))


def _previous(**changes) -> reuse.PreviousRecord:
  fields = dict(split='train', shard_path='s', compressed=False, ordinal=0, offset=0,
                length=20, fingerprint='local:1', source_sha256='ab', label_id=1,
                label_text='cat', option_digest='opts-extras', data_crc=7, image='imgs/a.png')
  fields.update(changes)
  return reuse.PreviousRecord(**fields)


# One case per thing that went into the record: each must be unchanged.
@pytest.mark.parametrize('row, reason', [
    (dict(), None),
    (dict(previous=None), reuse.NEW),
    (dict(previous=_previous(data_crc=None, image=None)), reuse.SIDECAR_UPGRADE),
    (dict(digest='other-extras'), reuse.CHANGED_OPTIONS),
    (dict(fingerprint='local:2'), reuse.CHANGED_SOURCE),
    (dict(fingerprint=''), reuse.CHANGED_SOURCE),
    # no fingerprint now (a file gone, a lookup stalled) and none on the line
    # (an edited sidecar): two unknowns prove nothing unchanged
    (dict(previous=_previous(fingerprint=''), fingerprint=''), reuse.CHANGED_SOURCE),
    (dict(split='test'), reuse.CHANGED_SPLIT),
    (dict(label=(2, 'cat')), reuse.CHANGED_LABEL),
    (dict(label=(1, 'Cat')), reuse.CHANGED_LABEL),
    (dict(label=None), reuse.CHANGED_LABEL),
    (dict(digest='opts-other'), reuse.CHANGED_FEATURES),
    (dict(image='./imgs/a.png'), reuse.CHANGED_PATH),
])
def test_each_change_has_its_reason(row, reason):
  values = dict(previous=_previous(), split='train', fingerprint='local:1', label=(1, 'cat'),
                digest='opts-extras', image='imgs/a.png')
  values.update(row)
  assert reuse.decide(values['previous'], values['split'], values['fingerprint'],
                      values['label'], values['digest'], values['image']) == reason


def test_multi_label_tuples_compare_with_the_lists_json_reads_back():
  previous = _previous(label_id=[0, 2], label_text=['a', 'c'])
  assert reuse.decide(previous, 'train', 'local:1', ((0, 2), ('a', 'c')), 'opts-extras',
                      'imgs/a.png') is None


def test_a_sidecar_line_reads_back_in_both_versions():
  line = reuse.sidecar_line('k', 1, 3, 40, 20, 99, 'local:1', 'ab', 'a.png', (0, 2),
                            ('a', 'c'), 'o-e')
  assert list(json.loads(line)) == ['key', 'shard', 'ordinal', 'offset', 'length', 'data_crc',
                                    'fingerprint', 'source_sha256', 'image', 'label',
                                    'option_digest']
  key, record = reuse.parse_line(line, 'train', ['s0', 's1'], True)
  assert (key, record) == ('k', reuse.PreviousRecord(
      'train', 's1', True, 3, 40, 20, 'local:1', 'ab', [0, 2], ['a', 'c'], 'o-e', 99, 'a.png'))
  with pytest.raises(ValueError):
    reuse.parse_line(line, 'train', ['s0'], True)  # shard 1 is not listed
  v1 = json.dumps({'key': 'k', 'shard': 0, 'ordinal': 3, 'offset': 40, 'length': 20,
                   'fingerprint': 'f', 'source_sha256': 'ab', 'label': {'id': 1, 'text': 'a'},
                   'option_digest': 'o-e'}).encode()
  assert reuse.parse_line(v1, 'train', ['s0'], False, version=1)[1].data_crc is None
  with pytest.raises(ValueError, match='data_crc'):
    reuse.parse_line(v1, 'train', ['s0'], False)  # a version-2 line needs its CRC


@pytest.mark.parametrize('key, label_id, label_text', [
    ('k', 0, ''), ('é"\\\n\x00\u2028ü/日本 ', (1, 2), ('a', 'b"')), ('k', None, None),
    ('k', -3, 'Ünïcode\t'), ('k', 1.5, ['x']), ('k', True, 'x')])
def test_a_sidecar_line_is_the_text_of_its_columns_as_json(key, label_id, label_text):
  columns = {'key': key, 'shard': 3, 'ordinal': 4, 'offset': 2 ** 40, 'length': 16,
             'data_crc': 2 ** 32 - 1, 'fingerprint': 'local:1:2', 'source_sha256': 'ab' * 32,
             'image': f'im/{key}.png', 'label': {'id': label_id, 'text': label_text},
             'option_digest': 'o\x7f'}
  expected = json.dumps(columns, ensure_ascii=False) + '\n'
  line = reuse.sidecar_line(*list(columns.values())[:9], label_id, label_text,
                            columns['option_digest'])
  assert line == expected.encode('utf-8')  # a tuple: a JSON list, as read back


@pytest.mark.parametrize('change', [
    {'key': ['k']}, {'key': None}, {'offset': '40'}, {'length': -1}, {'shard': True},
    {'ordinal': 1.5}, {'data_crc': 'x'}, {'image': 3}, {'label': []}, {'fingerprint': None},
    # a bool is no count, though Python's int takes it: shard 1 was refused
    # only for being past the one shard listed, shard 0 was read as a shard
    {'shard': False}, {'offset': True}, {'data_crc': False}])
def test_a_sidecar_line_of_other_types_is_no_record(change):
  data = json.loads(reuse.sidecar_line('k', 0, 3, 40, 20, 99, 'f', 'ab', 'a.png', 1, 'a',
                                       'o-e'))
  data.update(change)
  with pytest.raises(ValueError):
    reuse.parse_line(json.dumps(data).encode(), 'train', ['s0'], False)
  with pytest.raises(ValueError):
    reuse.parse_line(b'[1, 2]', 'train', ['s0'], False)
  with pytest.raises(ValueError, match='nested too deeply'):  # was a RecursionError traceback
    reuse.parse_line(b'[' * 100_000, 'train', ['s0'], False)


_PLAIN = dict(key='imgs/a.png', shard=1, ordinal=3, offset=40, length=20, data_crc=99,
              fingerprint='local:1:2', source_sha256='ab' * 32, image='imgs/a.png',
              label_id=7, label_text='cat', option_digest='o-e')


@pytest.mark.parametrize('line, fast', [
    (reuse.sidecar_line(**_PLAIN), True),
    (reuse.sidecar_line(**_PLAIN).rstrip(b'\n'), True),  # a last line without its newline
    (reuse.sidecar_line(**{**_PLAIN, 'key': 'Ünï/日本 \x7f.png', 'label_text': ''}), True),
    (reuse.sidecar_line(**{**_PLAIN, 'offset': 2 ** 70, 'label_id': 0}), True),
    (reuse.sidecar_line(**{**_PLAIN, 'key': 'a"b.png'}), False),  # escaped: json.loads
    (reuse.sidecar_line(**{**_PLAIN, 'key': 'a\\b.png'}), False),
    (reuse.sidecar_line(**{**_PLAIN, 'label_text': 'tab\t'}), False),
    (reuse.sidecar_line(**{**_PLAIN, 'label_id': (1, 2), 'label_text': ('a', 'b')}), False),
    (reuse.sidecar_line(**{**_PLAIN, 'label_id': -1}), False),
    (reuse.sidecar_line(**_PLAIN).replace(b'"ordinal": 3', b'"ordinal": 03'), False),
    (reuse.sidecar_line(**_PLAIN).replace(b'"ordinal": 3', b'"ordinal": 3.0'), False),
    (reuse.sidecar_line(**_PLAIN).replace(b'imgs/a.png', b'imgs/\xff.png'), False),
    (reuse.sidecar_line(**_PLAIN).replace(b'imgs/a.png', b'imgs/\xed\xa0\x80.png'), True),
    (reuse.sidecar_line(**_PLAIN).replace(b'"offset": 40', b'"offset": ' + b'9' * 5000), False),
    (reuse.sidecar_line(**{**_PLAIN, 'shard': 2}), False),  # not listed: json.loads says so
    (reuse.sidecar_line(**_PLAIN).replace(b'\n', b' \r\n'), False),
    (reuse.sidecar_line(**_PLAIN).replace(b'"image"', b'"extra": 1, "image"'), False),
    (b'\xef\xbb\xbf' + reuse.sidecar_line(**_PLAIN), False),  # json.loads skips a BOM
    (reuse.sidecar_line(**{**_PLAIN, 'key': '\x85\u2028\ufeff\uffff\U0010ffff'}), True),
    (reuse.sidecar_line(**{**_PLAIN, 'key': 'nul\x00'}), False),  # written \u0000
    (reuse.sidecar_line(**_PLAIN).replace(b'"offset": 40', b'"offset": ' + b'9' * 4300), True),
    (reuse.sidecar_line(**_PLAIN).replace(b'"ordinal": 3', b'"ordinal": -0'), False),
])
def test_a_plain_sidecar_line_reads_as_json_loads_reads_it(line, fast):
  shards = ['s0', 's1']
  assert (reuse._plain_line(line, 'train', shards, False) is not None) == fast
  try:
    expected = reuse.json_line(line, 'train', shards, False)
  except ValueError as error:  # the same error, from the same reader
    with pytest.raises(ValueError, match=re.escape(str(error))):
      reuse.parse_line(line, 'train', shards, False)
    return
  assert reuse.parse_line(line, 'train', shards, False) == expected
  _, record = expected
  assert type(record.offset) is int and record.data_crc == 99 and record.shard_path == 's1'
  if fast:
    assert type(record.label_id) is int and type(record.label_text) is str


def test_mutated_sidecar_lines_read_the_same_by_the_regex_and_by_json_loads():
  """Lines convert writes, their bytes then flipped, inserted or cut at random
  (seeded): whatever the fast path takes, json.loads takes as the same values
  of the same types; whatever it leaves, json.loads reads or refuses alike."""
  shards, rng, fast = ['s0', 's1'], random.Random(5), 0
  texts = ['a', ' ', '"', '\\', '\x00', '\x1f', '\x7f', '\x85', '\u2028', 'é', 'e\u0301',
           '\U0001f600', '\ufeff', '/', '\uffff']
  inserts = [b'\xed\xa0\x80', b'\xc0\x80', b'\xf4\x90\x80\x80', b'\xef\xbb\xbf', b'0' * 4301,
             b'\r', b' ', b'"', b'\\', b'\\u00e9', b'-']
  unescaped = [t for t in texts if json.dumps(t, ensure_ascii=False)[1:-1] == t]

  def text(alphabet):
    return ''.join(rng.choice(alphabet) for _ in range(rng.randint(0, 4)))
  for _ in range(3000):
    alphabet = rng.choice([texts, unescaped])  # half the lines without an escape
    line = bytearray(reuse.sidecar_line(**{
        **_PLAIN, 'key': text(alphabet), 'image': text(alphabet), 'label_text': text(alphabet),
        'shard': rng.choice([0, 1, 1, 2]), 'offset': rng.choice([0, 2 ** 64, 10 ** 80]),
        'label_id': rng.choice([0, 7, 7, -1, 10 ** 30])}))
    mutation = rng.random()
    if mutation < 0.3:
      for _ in range(rng.randint(1, 3)):
        line[rng.randrange(len(line))] = rng.randrange(256)
    elif mutation < 0.6:
      at = rng.randrange(len(line))
      line[at:at + rng.randint(0, 2)] = rng.choice(inserts)
    line = bytes(line)
    fast += reuse._plain_line(line, 'train', shards, False) is not None
    try:
      expected = reuse.json_line(line, 'train', shards, False)
    except ValueError:
      with pytest.raises(ValueError):
        reuse.parse_line(line, 'train', shards, False)
      continue
    got = reuse.parse_line(line, 'train', shards, False)
    assert got == expected, line
    assert [type(v) for v in got[1]] == [type(v) for v in expected[1]], line
  assert 300 < fast < 1500  # both paths taken often


def test_sidecar_lines_are_read_with_bounded_memory(monkeypatch):
  monkeypatch.setattr(reuse, 'MAX_LINE_BYTES', 100)
  lines = reuse.read_lines(io.BytesIO(b'short\n' + b'x' * 1000 + b'\nafter\n'))
  assert next(lines) == b'short\n'
  with pytest.raises(ValueError, match='longer than 100 bytes'):
    next(lines)


KEY = copies.CopyCheck('image/key')  # the key alone (the label: test_a_copy_holds_the_sidecars_label)


def _example(key: str, payload: bytes = b'pixels') -> bytes:
  from transforms.core.example_proto import serialize_example
  return serialize_example({'image/encoded': ('bytes', payload), 'image/key': ('bytes', key),
                            'image/class/label': ('int64', 1),  # _previous's label
                            'image/class/text': ('bytes', 'cat')})


def _at(records: list, index: int, key: str, **changes) -> tuple:
  """(PreviousRecord of records[index] in a plain shard named s, key)."""
  offset = sum(len(frame(r)) for r in records[:index])
  framed = frame(records[index])
  fields = dict(ordinal=index, offset=offset, length=len(framed),
                data_crc=int.from_bytes(framed[-4:], 'little'))
  fields.update(changes)
  return _previous(**fields), key


def test_a_record_is_read_by_offset_with_its_crcs_checked():
  records = [_example('a'), _example('b', b'second!')]
  shard = b''.join(frame(r) for r in records)
  record, key = _at(records, 1, 'b')
  assert copies.read_at(io.BytesIO(shard), len(shard), record, key, KEY) == records[1]
  damaged = bytearray(shard)
  damaged[record.offset + 12] ^= 1
  with pytest.raises(ShardError, match='data CRC'):
    copies.read_at(io.BytesIO(bytes(damaged)), len(shard), record, key, KEY)
  with pytest.raises(ShardError, match='shard ends'):
    copies.read_at(io.BytesIO(shard[:30]), 30, record, key, KEY)
  shorter = record._replace(length=record.length - 1)
  with pytest.raises(ShardError, match=f'no record of {shorter.length} bytes'):
    copies.read_at(io.BytesIO(shard), len(shard), shorter, key, KEY)


class _Counting(io.BytesIO):
  """A stream that remembers the largest read asked of it."""
  largest = 0

  def read(self, size=-1):
    self.largest = max(self.largest, size)
    return super().read(size)


@pytest.mark.parametrize('change', [{'length': 10 ** 12}, {'offset': 2 ** 63},
                                    {'offset': 2 ** 64 + 5, 'length': 2 ** 70}])
def test_a_damaged_offset_or_length_is_refused_before_any_read(change):
  records = [_example('a')]
  shard = b''.join(frame(r) for r in records)
  record, key = _at(records, 0, 'a', **change)
  stream = _Counting(shard)
  with pytest.raises(ShardError, match='shard ends before byte'):
    copies.read_at(stream, len(shard), record, key, KEY)
  assert stream.largest == 0


def test_a_copy_is_refused_unless_its_crc_and_key_are_the_sidecars():
  """Two intact records swapped (each CRC still valid), or a sidecar line
  pointing at another record: the record found is not the one named."""
  records = [_example('a', b'1234'), _example('b', b'5678')]  # the same length
  swapped = frame(records[1]) + frame(records[0])
  record, key = _at(records, 0, 'a')
  with pytest.raises(ShardError, match='has CRC') as crc:
    copies.read_at(io.BytesIO(swapped), len(swapped), record, key, KEY)
  assert crc.value.kind == copies.NOT_THE_RECORD
  # the sidecar's CRC forged to the record found: its key still gives it away
  forged = record._replace(data_crc=int.from_bytes(frame(records[1])[-4:], 'little'))
  with pytest.raises(ShardError, match="holds the key b'b', not 'a'"):
    copies.read_at(io.BytesIO(swapped), len(swapped), forged, key, KEY)
  # --schema seed has no key feature: the CRC alone is compared
  assert copies.read_at(io.BytesIO(swapped), len(swapped), forged, key, copies.NO_CHECK) == records[1]


@pytest.mark.parametrize('said, holds', [
    (dict(), None),
    (dict(label_id=2), 'holds the image/class/label 1; the sidecar says 2'),
    # a falsy label is a label all the same: id 0, no text, no labels at all
    (dict(label_id=0), 'holds the image/class/label 1; the sidecar says 0'),
    (dict(label_text=''), "holds the image/class/text b'cat'; the sidecar says ''"),
    (dict(label_id=[], label_text=[]), 'holds the image/class/label 1; the sidecar says []'),
    (dict(label_text='dog'), "holds the image/class/text b'cat'; the sidecar says 'dog'"),
    (dict(label_id=[1, 3], label_text=['cat', 'x']), 'holds the image/class/label 1'),
    (dict(label_id=None, label_text=None), None),  # a sidecar without a label: not compared
    (dict(label_id=1.0), 'the sidecar says the image/class/label 1.0, no int64 value'),
    (dict(label_id=2 ** 70), 'the sidecar says the image/class/label 1180591620717411303424')])
def test_a_copy_holds_the_sidecars_label(said, holds):
  """The run decides to copy a record by its sidecar line's label: a line
  whose label is not its record's (a sidecar edited, two lines' labels
  swapped) would copy a record whose label the manifest changed."""
  from transforms.core.example_proto import serialize_example
  data = serialize_example({'image/class/label': ('int64', 1), 'image/class/text': ('bytes', 'cat'),
                            'image/encoded': ('bytes', b'px'), 'image/key': ('bytes', 'a')})
  record, key = _at([data], 0, 'a', **said)
  check = copies.CopyCheck('image/key', 'image/class/label', 'image/class/text')
  _read_back_or_refused(data, record, key, check, holds)


def _read_back_or_refused(data: bytes, record, key: str, check, holds) -> None:
  """The record framed alone is read back as `data` (holds None), or refused
  as not the record with a message holding `holds`."""
  shard = frame(data)
  if holds is None:
    assert copies.read_at(io.BytesIO(shard), len(shard), record, key, check) == data
    return
  with pytest.raises(ShardError, match=re.escape(holds)) as refused:
    copies.read_at(io.BytesIO(shard), len(shard), record, key, check)
  assert refused.value.kind == copies.NOT_THE_RECORD


def _entry(name: str, kind: str, value) -> bytes:
  """One map entry of Features, as serialize_example writes it."""
  from transforms.core.example_proto import feature_bytes
  from transforms.core.example_proto import one_bytes_feature
  from transforms.core.example_proto import serialize_example
  assert one_bytes_feature(b'k' * 200) == feature_bytes('bytes', b'k' * 200)  # by hand = proto
  whole = serialize_example({name: (kind, value)})
  return whole[2 if whole[1] < 0x80 else 3:]


@pytest.mark.parametrize('entries', [
    # the key three times, a label the sidecar does not say: protobuf reads the last
    [('image/key', 'bytes', 'a')] * 3 + [('image/class/label', 'int64', 7)],
    # the label twice: protobuf keeps the second, 7
    [('image/class/label', 'int64', 1), ('image/class/text', 'bytes', 'cat'),
     ('image/key', 'bytes', 'a'), ('image/class/label', 'int64', 7)],
])
def test_a_copy_giving_a_feature_twice_is_refused(entries):
  """Counting matches let three copies of the key stand for key, label and
  text: the label was never compared."""
  body = b''.join(_entry(*entry) for entry in entries)
  data = b'\x0a' + bytes([len(body)]) + body
  record, key = _at([data], 0, 'a')
  check = copies.CopyCheck('image/key', 'image/class/label', 'image/class/text')
  with pytest.raises(ShardError) as refused:
    copies.read_at(io.BytesIO(frame(data)), len(frame(data)), record, key, check)
  assert refused.value.kind == copies.NOT_THE_RECORD


def test_a_copy_checked_by_nothing_is_the_crc_alone():
  data = _example('a')
  record, key = _at([data], 0, 'a', label_id=None, label_text=None)
  check = copies.CopyCheck(None, 'image/class/label', 'image/class/text')  # --schema seed-like
  assert copies.read_at(io.BytesIO(frame(data)), len(frame(data)), record, key, check) == data


def test_a_multi_label_copy_holds_the_sidecars_lists():
  from transforms.core.example_proto import serialize_example
  data = serialize_example({'image/class/label': ('int64', [0, 2]),
                            'image/class/text': ('bytes', ['a', 'c'])})
  check = copies.CopyCheck(None, 'image/class/label', 'image/class/text')
  shard = frame(data)
  record, key = _at([data], 0, 'k', label_id=[0, 2], label_text=['a', 'c'])
  assert copies.read_at(io.BytesIO(shard), len(shard), record, key, check) == data
  record, key = _at([data], 0, 'k', label_id=[2, 0], label_text=['c', 'a'])  # another order
  with pytest.raises(ShardError, match=re.escape('holds the image/class/label [0, 2]')):
    copies.read_at(io.BytesIO(shard), len(shard), record, key, check)


def _wanted(*pairs) -> dict:
  """{offset: [(record, key), ...]} of (record, key) pairs, as CopyShardFn asks."""
  wanted = {}
  for record, key in pairs:
    wanted.setdefault(record.offset, []).append((record, key))
  return wanted


def test_gzip_records_are_picked_by_offset_streaming_and_checked():
  records = [_example(f'k{i}', f'r{i}'.encode()) for i in range(5)]
  shard = b''.join(frame(r) for r in records)
  at = [_at(records, i, f'k{i}') for i in range(5)]
  offsets = [record.offset for record, _ in at]
  assert list(copies.pick_places(io.BytesIO(shard), _wanted(at[3], at[1]), KEY)) == [
      (offsets[1], records[1]), (offsets[3], records[3])]
  damaged = bytearray(shard)
  damaged[len(frame(records[0])) * 2 + 12] ^= 1  # record 2's data
  past = _at(records, 4, 'k4', offset=len(shard) + 5)
  inside = _at(records, 4, 'k4', offset=offsets[4] + 3)  # no record starts there
  wanted = _wanted(at[2], at[4], _at(records, 0, 'k4'), past, inside)  # k4 at 0: another key
  picked = dict(copies.pick_places(io.BytesIO(bytes(damaged)), wanted, KEY))
  assert picked[offsets[4]] == records[4]
  assert picked[0].kind == copies.NOT_THE_RECORD
  assert all(isinstance(picked[offset], ShardError)
             for offset in (offsets[2], past[0].offset, inside[0].offset))
  # two lines naming record 1 (an edited sidecar): each gets its own answer;
  # a line of another length than the record at its offset is not that record
  longer = _at(records, 1, 'k1', length=len(frame(records[1])) + 1)
  wanted = _wanted(_at(records, 1, 'k3'), at[1], longer)
  wanted[99] = [at[1]] * 2
  picked = list(copies.pick_places(io.BytesIO(shard), wanted, KEY))
  assert [(offset, type(data)) for offset, data in picked] == [
      (offsets[1], ShardError), (offsets[1], bytes), (offsets[1], ShardError),
      (99, ShardError), (99, ShardError)]
  assert picked[0][1].kind == copies.NOT_THE_RECORD and picked[1][1] == records[1]
  assert 'its line says' in str(picked[2][1])


def test_picking_places_stops_after_the_last_one_wanted():
  """A gzip shard is streamed (inflated) from its start: no byte past the
  last record wanted is read."""
  records = [_example(f'k{i}', f'r{i}'.encode()) for i in range(4)]
  stream = io.BytesIO(b''.join(frame(r) for r in records))
  wanted = _wanted(*(_at(records, i, f'k{i}') for i in (0, 1)))
  assert list(copies.pick_places(stream, wanted, KEY)) == [
      (0, records[0]), (len(frame(records[0])), records[1])]
  assert stream.tell() == len(frame(records[0])) + len(frame(records[1]))


@pytest.mark.parametrize('compressed', [False, True], ids=['plain', 'gzip'])
@pytest.mark.parametrize('first', ['repointed', 'owner'])
def test_two_sidecar_lines_naming_one_record_each_end_as_a_copy_or_a_fallback(
    tmp_path, compressed, first):
  """k0's line re-pointed at k1's record (an edited or damaged sidecar): on
  the by-shard copy path k1's row is copied and k0's encoded instead
  (FALLBACK_ROWS), whichever comes first. A gzip shard's records were picked by
  ordinal through a dict: one of the two rows was neither, lost."""
  from transforms.core.example import BuiltExample
  from transforms.core.manifest import ManifestRow
  from transforms.core.shuffle import Ordering
  from transforms.reuse import FALLBACK_ROWS
  from transforms.reuse import CopyShardFn
  from transforms.reuse import Reusable
  records = [_example(f'k{i}', f'r{i}'.encode()) for i in range(3)]
  path = _shard_file(tmp_path, records, compressed)
  reusables = [Reusable(ManifestRow({}, 'm', line, image=f'{key}.png', key=key, label='cat',
                                    previous=_in(path, records, 1, compressed)[0]),
                        1, 'cat', 'd') for line, key in ((2, 'k0'), (3, 'k1'))]
  if first == 'owner':
    reusables.reverse()
  fn = CopyShardFn('metadata', Ordering(), KEY)
  fn.setup()
  out = list(fn.process((path, reusables)))
  copied = [(o.key, o.data) for o in out if isinstance(o, BuiltExample)]
  fallen = [(o.tag, o.value.key, o.value.reuse) for o in out if not isinstance(o, BuiltExample)]
  assert copied == [('k1', records[1])]
  assert fallen == [(FALLBACK_ROWS, 'k0', reuse.FALLBACK)]


def test_a_gzip_shard_cut_short_mid_read_copies_each_record_before_the_cut_once(tmp_path):
  """A previous gzip shard whose compressed bytes end early (gzip's EOFError
  after some records were read): on the by-shard copy path the records
  before the cut are copied and the others encoded (FALLBACK_ROWS), each row once.
  A row answered before the error and again after it is written twice."""
  from transforms.core.example import BuiltExample
  from transforms.core.manifest import ManifestRow
  from transforms.core.shuffle import Ordering
  from transforms.reuse import FALLBACK_ROWS
  from transforms.reuse import CopyShardFn
  from transforms.reuse import Reusable
  rng = random.Random(3)  # incompressible: the cut falls inside record 2
  records = [_example(f'k{i}', rng.randbytes(4096)) for i in range(6)]
  path = _shard_file(tmp_path, records, compressed=True)
  with open(path, 'rb') as f:
    whole = f.read()
  with open(path, 'wb') as f:
    f.write(whole[:len(whole) * 2 // 5])
  reusables = [Reusable(ManifestRow({}, 'm', i, image=f'k{i}.png', key=f'k{i}', label='cat',
                                    previous=_in(path, records, i, True)[0]), 1, 'cat', 'd')
               for i in range(6)]
  fn = CopyShardFn('metadata', Ordering(), KEY)
  fn.setup()
  out = list(fn.process((path, reusables)))
  assert [(o.key, o.data) for o in out if isinstance(o, BuiltExample)] == [
      ('k0', records[0]), ('k1', records[1])]
  assert [(o.tag, o.value.key, o.value.reuse) for o in out if not isinstance(o, BuiltExample)] == [
      (FALLBACK_ROWS, f'k{i}', reuse.FALLBACK) for i in range(2, 6)]


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


def _in(path, records, index, compressed=False, **changes):
  record, key = _at(records, index, f'k{index}', **changes)
  return record._replace(shard_path=path, compressed=compressed), key


def test_a_reader_reads_plain_records_by_offset_and_keeps_one_descriptor(tmp_path):
  records = [_example('k0'), _example('k1', b'second!')]
  path = _shard_file(tmp_path, records)
  reader = copies.ShardReader(KEY)
  before = len(os.listdir('/proc/self/fd'))
  assert reader.copy(*_in(path, records, 1)).data == records[1]
  assert reader.copy(*_in(path, records, 0)).data == records[0]
  assert len(os.listdir('/proc/self/fd')) == before + 1  # one shard, one descriptor
  record, key = _in(path, records, 1)
  end = record.offset + record.length
  with pytest.raises(ShardError, match=f'shard ends before byte {end + 1}'):
    reader.copy(record._replace(length=record.length + 1), key)
  with pytest.raises(ShardError, match=f'no record of 20 bytes at byte {record.offset}'):
    reader.copy(record._replace(length=20), key)
  with pytest.raises(ShardError, match='holds the key'):
    reader.copy(record, 'k0')
  reader.close()
  assert len(os.listdir('/proc/self/fd')) == before


@pytest.mark.parametrize('compressed', [False, True], ids=['plain', 'gzip'])
def test_a_previous_shard_that_is_a_fifo_is_a_shard_error_unopened(tmp_path, compressed):
  """os.open or gzip.open of a FIFO waited for a writer: the run hung."""
  from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
  records = [_example('k0')]
  path = _shard_file(tmp_path, records, compressed)
  os.unlink(path)
  reader = copies.ShardReader(KEY)
  with fifo_writer_that_unblocks_readers(path) as unblocked:
    with pytest.raises(ShardError) as error:
      reader.copy(*_in(path, records, 0, compressed))
  assert (error.value.kind, error.value.detail) == (
      'unreadable_shard', f'{path} is a FIFO (named pipe), not a regular file: not read')
  assert not unblocked
  reader.close()


@pytest.mark.parametrize('compressed', [False, True], ids=['plain', 'gzip'])
def test_a_copy_keeps_the_framed_record_as_read_for_the_writer(tmp_path, compressed):
  records = [_example('k0'), _example('k1', b'second!')]
  path = _shard_file(tmp_path, records, compressed)
  reader = copies.ShardReader(KEY)
  copied = reader.copy(*_in(path, records, 1, compressed))
  assert copied.data == records[1]
  assert copied.data.obj is copied.framed  # a view into the framed bytes: no copy held apart
  assert copied.framed == frame(records[1])  # what the writer would frame again
  with pytest.raises(ShardError, match='holds the key'):
    reader.copy(_in(path, records, 1, compressed)[0], 'k0')
  reader.close()


def _counting_preads(monkeypatch) -> list:
  """The (offset, size) of every os.pread from now on."""
  reads, real = [], os.pread
  monkeypatch.setattr(os, 'pread', lambda fd, size, offset: reads.append(
      (offset, size)) or real(fd, size, offset))
  return reads


def test_records_asked_in_a_run_are_read_ahead_together(tmp_path, monkeypatch):
  records = [_example(f'k{i}', f'record {i}'.encode() * 40) for i in range(6)]
  path = _shard_file(tmp_path, records)
  spans = [_in(path, records, i)[0] for i in range(6)]
  # a chunk holds records 1 and 2 and part of 3: 3 starts a chunk of its own
  monkeypatch.setattr(copies, 'READ_AHEAD', spans[3].offset + 100 - spans[1].offset)
  reads = _counting_preads(monkeypatch)
  reader = copies.ShardReader(KEY)
  copied = [reader.copy(*_in(path, records, i)) for i in range(6)]
  assert [c.data for c in copied] == records
  assert all(type(c.framed) is bytes and c.data.obj is c.framed for c in copied)
  size = os.path.getsize(path)
  assert reads == [  # the first alone (nothing read before it), then runs
      (0, spans[0].length),
      (spans[1].offset, copies.READ_AHEAD),
      (spans[3].offset, copies.READ_AHEAD),
      (spans[5].offset, size - spans[5].offset)]  # never past the shard's end
  reader.close()


@pytest.mark.parametrize('short', [1, 0], ids=['one_byte_short', 'exact'])
def test_a_record_a_chunk_holds_all_but_its_last_byte_starts_the_next_chunk(
    tmp_path, monkeypatch, short):
  """The chunk read at record 1 ends `short` bytes before record 2 does:
  record 2 is copied whole either way (from a chunk of its own when one
  byte is missing, from the chunk when it is all there), never cut at the
  chunk's end (that copy fails its CRC: a good record encoded again)."""
  records = [_example(f'k{i}', f'record {i}'.encode() * 30) for i in range(4)]
  path = _shard_file(tmp_path, records)
  spans = [_in(path, records, i)[0] for i in range(4)]
  end_2 = spans[2].offset + spans[2].length
  monkeypatch.setattr(copies, 'READ_AHEAD', end_2 - short - spans[1].offset)
  reads = _counting_preads(monkeypatch)
  reader = copies.ShardReader(KEY)
  copied = [reader.copy(*_in(path, records, i)) for i in range(4)]
  assert [c.data for c in copied] == records
  assert [c.framed for c in copied] == [frame(r) for r in records]
  size = os.path.getsize(path)
  # one byte short: record 2 starts a chunk of its own (record 3 is past it)
  ahead = [(spans[2].offset, min(copies.READ_AHEAD, size - spans[2].offset))] if short else []
  assert reads == [(0, spans[0].length), (spans[1].offset, copies.READ_AHEAD), *ahead,
                   (spans[3].offset, size - spans[3].offset)]
  reader.close()


def test_a_run_that_crosses_into_the_next_shard_reads_each_shard_apart(tmp_path, monkeypatch):
  first = [_example(f'k{i}', f'a{i}'.encode() * 20) for i in range(3)]
  second = [_example(f'k{i}', f'b{i}'.encode() * 20) for i in range(3, 6)]
  (tmp_path / 'a').mkdir()
  (tmp_path / 'b').mkdir()
  path_a, path_b = _shard_file(tmp_path / 'a', first), _shard_file(tmp_path / 'b', second)
  asked = [_in(path_a, first, i) for i in range(3)] + [
      (_in(path_b, second, i)[0], f'k{i + 3}') for i in range(3)]
  reads = _counting_preads(monkeypatch)
  reader = copies.ShardReader(KEY)
  assert [reader.copy(record, key).data for record, key in asked] == first + second
  size_a, size_b = os.path.getsize(path_a), os.path.getsize(path_b)
  a1, b1 = asked[1][0].offset, asked[4][0].offset
  assert reads == [(0, asked[0][0].length), (a1, size_a - a1),  # shard a: alone, then ahead
                   (0, asked[3][0].length), (b1, size_b - b1)]  # shard b: the same again
  reader.close()


def test_records_asked_out_of_order_are_each_read_alone(tmp_path, monkeypatch):
  records = [_example(f'k{i}', f'r{i}'.encode()) for i in range(6)]
  path = _shard_file(tmp_path, records)
  reads = _counting_preads(monkeypatch)
  reader = copies.ShardReader(KEY)
  order = (4, 1, 0, 3, 5)  # never the record after the one read before
  assert [reader.copy(*_in(path, records, i)).data for i in order] == [
      records[i] for i in order]
  assert reads == [(_in(path, records, i)[0].offset, _in(path, records, i)[0].length)
                   for i in order]
  reader.close()


def test_a_damaged_record_inside_a_chunk_read_ahead_is_refused_alone(tmp_path, monkeypatch):
  records = [_example(f'k{i}', f'r{i}'.encode()) for i in range(4)]
  path = _shard_file(tmp_path, records)
  spans = [_in(path, records, i)[0] for i in range(4)]
  damaged = bytearray(open(path, 'rb').read())
  damaged[spans[2].offset + 14] ^= 1
  open(path, 'wb').write(bytes(damaged))
  reads = _counting_preads(monkeypatch)
  reader = copies.ShardReader(KEY)
  assert reader.copy(*_in(path, records, 0)).data == records[0]
  assert reader.copy(*_in(path, records, 1)).data == records[1]  # reads 1 to 3 at once
  with pytest.raises(ShardError, match=f'data CRC mismatch in the record at byte '
                     f'{spans[2].offset}'):
    reader.copy(*_in(path, records, 2))
  assert reader.copy(*_in(path, records, 3)).data == records[3]
  assert len(reads) == 2
  reader.close()


def test_a_shard_cut_short_after_it_was_opened_is_a_shard_error(tmp_path):
  records = [_example(f'k{i}', f'r{i}'.encode() * 30) for i in range(3)]
  path = _shard_file(tmp_path, records)
  spans = [_in(path, records, i)[0] for i in range(3)]
  reader = copies.ShardReader(KEY)
  assert reader.copy(*_in(path, records, 0)).data == records[0]
  os.truncate(path, spans[2].offset + 5)  # record 2 cut short while the run goes on
  assert reader.copy(*_in(path, records, 1)).data == records[1]
  end = spans[2].offset + spans[2].length
  with pytest.raises(ShardError, match=f'shard ends before byte {end}'):
    reader.copy(*_in(path, records, 2))
  reader.close()


def test_the_shard_writer_writes_a_framed_record_as_given(tmp_path):
  from transforms.shard_file import ShardFile
  path = tmp_path / 'out.tfrecord'
  with ShardFile(str(path), 'none', write_index=True) as shard:
    first = shard.write_record(b'abc')
    given = frame(b'DEFG')  # not frame(data): proves the writer did not frame again
    second = shard.write_record(b'defg', given)
  assert path.read_bytes() == frame(b'abc') + given
  assert first == (0, 19, int.from_bytes(frame(b'abc')[-4:], 'little'))
  assert second == (19, 20, int.from_bytes(given[-4:], 'little'))
  assert (tmp_path / 'out.tfrecord.index').read_text() == '0 19\n19 20\n'


def test_a_reader_sees_a_damaged_plain_record_and_an_empty_shard(tmp_path):
  records = [_example('k0'), _example('k1', b'second!')]
  path = _shard_file(tmp_path, records)
  record, key = _in(path, records, 1)
  damaged = bytearray(open(path, 'rb').read())
  damaged[record.offset + 12] ^= 1
  open(path, 'wb').write(bytes(damaged))
  empty = tmp_path / 'empty.tfrecord'
  empty.write_bytes(b'')
  reader = copies.ShardReader(KEY)
  assert reader.copy(*_in(path, records, 0)).data == records[0]
  with pytest.raises(ShardError, match=f'data CRC mismatch in the record at byte {record.offset}'):
    reader.copy(record, key)
  with pytest.raises(ShardError, match='shard ends'):
    reader.copy(*_in(str(empty), records, 0))
  reader.close()


def test_a_reader_inflates_a_gzip_shard_once_whatever_the_order(tmp_path, monkeypatch):
  import gzip
  records = [_example(f'k{i}', f'r{i}'.encode()) for i in range(6)]
  path = _shard_file(tmp_path, records, compressed=True)
  opened = []
  real_open = gzip.open
  monkeypatch.setattr(gzip, 'open', lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
  reader = copies.ShardReader(KEY)
  order = (1, 5, 0, 3, 2, 4, 0)
  assert [reader.copy(*_in(path, records, i, True)).data for i in order] == [
      records[i] for i in order]
  assert opened == [path]  # streamed once, though ordinals went back four times
  with pytest.raises(ShardError, match='shard ends before byte'):
    reader.copy(*_in(path, records, 5, True, offset=10 ** 6))
  reader.close()
  assert opened == [path]


def test_a_gzip_shard_larger_than_an_inflated_chunk_is_read_chunk_by_chunk(tmp_path,
                                                                          monkeypatch):
  """A gzip shard inflates _INFLATE_CHUNK bytes at a time (1 MiB; here 50
  bytes, a record ~70): each record is found however many chunks lie
  before it, and one past the shard's end is still refused."""
  records = [_example(f'k{i}', f'r{i}'.encode()) for i in range(6)]
  path = _shard_file(tmp_path, records, compressed=True)
  monkeypatch.setattr(copies, '_INFLATE_CHUNK', 50)
  reader = copies.ShardReader(KEY)
  order = (2, 0, 5, 1, 4, 3)
  assert [reader.copy(*_in(path, records, i, True)).data for i in order] == [
      records[i] for i in order]
  with pytest.raises(ShardError, match='shard ends before byte'):
    reader.copy(*_in(path, records, 5, True, offset=10 ** 4))
  reader.close()


def test_a_sidecar_is_plain_gzip_at_the_fastest_level(tmp_path):
  import gzip

  from transforms import filesystem
  from transforms.write_sources import SidecarFile
  path = str(tmp_path / 'train.sources.jsonl.gz')
  sidecar = SidecarFile(path, filesystem.FileAccess())
  lines = [reuse.sidecar_line(f'k{i}', 0, i, i * 40, 40, 7, 'local:1:2:3:4', 'ab' * 32, f'k{i}',
                              1, 'cat', 'digest') for i in range(300)]
  for line in lines:
    sidecar.add(line)
  sidecar.close()
  written = open(path, 'rb').read()
  assert written[:4] == b'\x1f\x8b\x08\x00' and written[4:8] == b'\x00' * 4  # no name, no mtime
  assert written[8] == 4  # XFL: the fastest level (SIDECAR_LEVEL 1)
  assert gzip.decompress(written) == b''.join(lines)
  # compressed 64 lines at a time: the bytes of one line at a time, as before
  import zlib
  one_by_one = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS | 16)
  assert written == b''.join(one_by_one.compress(line) for line in lines) + one_by_one.flush()


def _copied_and_converted_rows(tmp_path, count: int, converted: set) -> tuple:
  """(rows, keys, records): `count` labelled rows k0, k1, ...; those numbered
  in `converted` have an image to convert, the others a record to copy from
  a previous shard (`records`, in order)."""
  from tests.conftest import write_image
  from transforms.core.example import LabelledRow
  from transforms.core.example_proto import serialize_example
  from transforms.core.manifest import ManifestRow
  keys = [f'k{i}' for i in range(count)]
  # each record holds what its line says: the copy check compares them all
  records = [serialize_example({
      'image/class/label': ('int64', 1), 'image/class/text': ('bytes', 'cat'),
      'image/encoded': ('bytes', b'pixels'), 'image/filename': ('bytes', f'{key}.png'),
      'image/key': ('bytes', key), 'image/key/sha256': ('bytes', f'sha-{key}')})
      for i, key in enumerate(keys) if i not in converted]
  shard = _shard_file(tmp_path, records)
  rows, copies = [], iter(range(len(records)))
  for i, key in enumerate(keys):
    path = tmp_path / f'{key}.png'
    if i in converted:
      write_image(path, (i, 0, 0), size=(2, 2))
      previous = None
    else:
      previous = _in(shard, records, next(copies))[0]._replace(source_sha256=f'sha-{key}',
                                                               image=path.name)
    rows.append(LabelledRow(ManifestRow({'image': path.name}, 'm', i, image=path.name,
                                        path=str(path), key=key, label='red',
                                        previous=previous), 0, 'red'))
  return rows, keys, records


def test_a_previous_shard_gone_mid_run_has_its_rows_converted_as_fallbacks(tmp_path):
  """A reused row whose previous shard cannot be opened (removed, or EIO:
  an OSError, not a ShardError) is converted from its image instead and
  counted as a fallback: the copy's failure is the row's, never the job's."""
  from tests.conftest import write_image
  from transforms.core.example import LoadedImage
  from transforms.encode import LoadImageFn
  rows, _, _ = _copied_and_converted_rows(tmp_path, 3, {0})
  for i, row in enumerate(rows[1:], 1):
    write_image(tmp_path / row.row.image, (i, 0, 0), size=(2, 2))
  os.remove(rows[1].row.previous.shard_path)
  fn = LoadImageFn(ImageSpec(height=1, width=1), example_spec=ExampleSpec())
  fn.setup()
  try:
    fn.start_bundle()
    out = [o for row in rows for o in fn.process(row)]
    out += [value.value for value in fn.finish_bundle()]
  finally:
    fn.teardown()
  assert [type(o) for o in out] == [LoadedImage] * 3
  assert [(o.labelled.row.key, o.reuse) for o in out] == [
      ('k0', ''), ('k1', reuse.FALLBACK), ('k2', reuse.FALLBACK)]
  assert [o.image.data for o in out] == [bytes([i, 0, 0]) for i in range(3)]


def test_copies_waiting_behind_a_converted_row_go_out_before_the_bundle_ends(
    tmp_path, monkeypatch):
  """Copies leave the image step in arrival order, behind rows the pool still
  converts; once more than MAX_COPIES_WAITING wait, the pool is waited for,
  so a bundle of mostly copies never holds them all until its end."""
  from transforms.core.example import LoadedCopy
  from transforms.core.example import LoadedImage
  from transforms.encode import LoadImageFn
  converted = {0, 10, 20, 30}  # the rest are copied from the previous shard
  rows, keys, records = _copied_and_converted_rows(tmp_path, 40, converted)
  fn = LoadImageFn(ImageSpec(height=1, width=1), threads=2, example_spec=ExampleSpec())
  monkeypatch.setattr(fn, 'MAX_COPIES_WAITING', 3)
  fn.setup()
  try:
    fn.start_bundle()
    out = []
    for i, row in enumerate(rows):
      out += list(fn.process(row))
      # the rows not yet out are the last ones taken, in order
      waiting = [j for j in range(len(out), i + 1) if j not in converted]
      assert len(waiting) <= 3 + 1, (i, len(out))
    before_end = len(out)
    out += [value.value for value in fn.finish_bundle()]
  finally:
    fn.teardown()
  assert before_end >= 30  # without the bound: 0, every row waited for row 0
  assert [o.labelled.row.key for o in out] == keys
  assert [type(o) for o in out] == [LoadedImage if i in converted else LoadedCopy
                                    for i in range(40)]
  assert [o.data for o in out if isinstance(o, LoadedCopy)] == records
  assert [o.sha256 for o in out if isinstance(o, LoadedCopy)] == [
      f'sha-{key}' for i, key in enumerate(keys) if i not in converted]
  assert [o.image.data for o in out if isinstance(o, LoadedImage)] == [
      bytes([i, 0, 0]) for i in sorted(converted)]


def test_rows_copies_wait_behind_go_to_the_pool_before_their_batch_is_full(
    tmp_path, monkeypatch):
  """A nightly run's changed row sits among copies: its batch would fill only
  after hundreds of rows, while the copies behind it wait. Each time
  SEND_AFTER_COPIES more wait, the batch being filled goes to the pool as it
  is, so the image converts while the copies go on; once converted, the
  copies behind it leave without waiting for the bound."""
  import threading

  from transforms.encode import LoadImageFn
  from transforms.workers.source_image import convert_sources
  rows, keys, _ = _copied_and_converted_rows(tmp_path, 40, {0, 20})
  gate = threading.Event()  # the pool converts nothing until the test lets it

  def gated(*args):
    assert gate.wait(30)
    return convert_sources(*args)

  fn = LoadImageFn(ImageSpec(height=1, width=1), threads=2, example_spec=ExampleSpec(),
                   convert_on_thread=gated)
  monkeypatch.setattr(fn, 'SEND_AFTER_COPIES', 5)
  fn.setup()
  sent, out = [], []  # (rows taken so far, the keys of each pool call); what came out
  try:
    fn._step._batch_size = 8  # as image processes batch rows
    submit = fn._step._pool.submit
    monkeypatch.setattr(fn._step._pool, 'submit', lambda batch, *call: sent.append(
        (len(taken), [e.row.key for e in batch])) or submit(batch, *call))
    fn.start_bundle()
    taken = []
    for row in rows[:30]:
      taken.append(row)
      out += list(fn.process(row))
    # k0 went alone once 5 copies waited; k20 once 20 did (k21)
    assert sent == [(6, ['k0']), (22, ['k20'])]
    assert out == []  # nothing converted yet: everything waits behind k0
    gate.set()
    for future in [future for _, future in fn._step._pool._pending]:
      future.result()
    taken.append(rows[30])
    out += list(fn.process(rows[30]))  # 29 copies waiting
    assert out == []
    taken.append(rows[31])
    out += list(fn.process(rows[31]))  # 30 waiting: what has finished is taken
    assert len(out) == 32
    for row in rows[32:]:  # nothing left to wait behind: each copy leaves at once
      taken.append(row)
      out += list(fn.process(row))
      assert len(out) == len(taken)
    assert list(fn.finish_bundle()) == []
  finally:
    gate.set()
    fn.teardown()
  assert sent == [(6, ['k0']), (22, ['k20'])]
  assert [o.labelled.row.key for o in out] == keys


def test_the_default_schema_copy_check_holds_the_lines_path_and_sha256():
  """Every field of a line the run writes again or decides by (the next
  night's sidecar repeats its path and SHA-256) is compared with the record;
  --schema seed's records hold the label alone."""
  from transforms.core.feature_tables import FEATURE_TABLES
  assert copies.copy_check(FEATURE_TABLES['default']) == copies.CopyCheck(
      'image/key', 'image/class/label', 'image/class/text', 'image/filename', 'image/key/sha256')
  assert copies.copy_check(FEATURE_TABLES['seed']) == copies.CopyCheck(None, 'label')


@pytest.mark.parametrize('said, holds', [
    (dict(), None),
    (dict(source_sha256='cd'), "holds the image/key/sha256 b'ab'; the sidecar says 'cd'"),
    (dict(image='./imgs/a.png'), "holds the image/filename b'imgs/a.png'; the sidecar says"),
    # a line's lone surrogate (JSON may escape one) is no record's value, never a crash
    (dict(source_sha256='\udc80'), "holds the image/key/sha256 b'ab'"),
])
def test_a_copy_holds_the_sidecars_path_and_sha256(said, holds):
  from transforms.core.example_proto import serialize_example
  data = serialize_example({'image/class/label': ('int64', 1), 'image/class/text': ('bytes', 'cat'),
                            'image/encoded': ('bytes', b'px'), 'image/filename': ('bytes', 'imgs/a.png'),
                            'image/key': ('bytes', 'a'), 'image/key/sha256': ('bytes', 'ab')})
  record, key = _at([data], 0, 'a', **said)
  check = copies.CopyCheck('image/key', 'image/class/label', 'image/class/text', 'image/filename',
                           'image/key/sha256')
  _read_back_or_refused(data, record, key, check, holds)
