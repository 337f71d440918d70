"""validate checks the files beside the shards against the records it reads:
each shard's index file (--write_index), each split's sidecar
(SPLIT.sources.jsonl.gz) and each shard's compression against
dataset_info.json's. Each test damages its own copy of a dataset converted
once per session (two raw shards of the nine-image sample, indexed)."""

from __future__ import annotations

import gzip
import io
import json
import struct

import pytest

from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from tests.conftest import copy_dataset
from tests.conftest import read_info
from tests.test_validate_cli import RAW_16
from tests.test_validate_cli import records_of
from tests.test_validate_cli import run_validate
from tests.test_validate_cli import write_info
from transforms import check_shards
from transforms.core import side_files
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import masked_crc
from transforms.core.tfrecord import read_framed
from transforms.core.validation import RecordPlace

pytestmark = pytest.mark.xdist_group('converted_sample')

INDEXED = (*RAW_16, '--num_shards', '2', '--write_index')
SIDECAR = 'train.sources.jsonl.gz'


@pytest.fixture
def out(converted_sample, tmp_path):
  return copy_dataset(converted_sample(*INDEXED)[1], tmp_path)


def shards(out) -> list:
  return [out / name for name in read_info(out)['splits']['train']['shards']]


def places(shard) -> list:
  """(offset, framed length, data CRC) of each record of `shard`."""
  with open(shard, 'rb') as stream:
    return [place for _, _, place in read_framed(stream)]


def sidecar_lines(out) -> list:
  return [json.loads(line) for line in gzip.open(out / SIDECAR)]


def write_sidecar(out, lines: list) -> None:
  with gzip.open(out / SIDECAR, 'wb') as stream:
    stream.write(b''.join(json.dumps(line).encode() + b'\n' for line in lines))


def problems(out, *flags) -> list:
  """validate exits 1; -> the (kind, file, record, detail) it lists."""
  code, report = run_validate(out, *flags)
  assert code == EXIT_FAILED, report
  assert report['num_problems'] == len(report['problems'])
  return [(p['kind'], p['file'], p['record'], p['detail']) for p in report['problems']]


def test_an_indexed_dataset_validates_clean(out):
  code, report = run_validate(out, '--strict')
  assert (code, report['num_problems'], report['num_examples']) == (EXIT_OK, 0, 9)
  first = shards(out)[0]
  offset, length, _ = places(first)[0]
  assert (out / (first.name + '.index')).read_text().splitlines()[0] == f'{offset} {length}'


# --- index files ----------------------------------------------------------------------


def _index_damage(out, change) -> tuple:
  """change(index text) -> new text, on the second shard's index; -> (its
  name, the shard's places)."""
  shard = shards(out)[1]
  index = out / (shard.name + '.index')
  if change is None:
    index.unlink()
  else:
    index.write_text(change(index.read_text()))
  return index.name, places(shard)


def test_an_index_with_a_wrong_offset(out):
  name, spans = _index_damage(out, lambda text: text.replace(
      text.splitlines()[2], f'{int(text.splitlines()[2].split()[0]) + 1} '
                            f'{text.splitlines()[2].split()[1]}'))
  offset, length, _ = spans[2]
  assert problems(out) == [
      ('index_mismatch', name, 2, f"line 3 is '{offset + 1} {length}'; record 2 is at byte "
       f"{offset}, {length} bytes framed: '{offset} {length}'")]


def test_a_shortened_index(out):
  name, spans = _index_damage(out, lambda text: ''.join(text.splitlines(True)[:-1]))
  offset, length, _ = spans[-1]
  last = len(spans) - 1
  assert problems(out) == [
      ('index_mismatch', name, last, f'line {last + 1} is missing; record {last} is at byte '
       f"{offset}, {length} bytes framed: '{offset} {length}'")]


def test_an_index_of_other_text(out):
  name, spans = _index_damage(out, lambda text: 'hello world\n')
  assert problems(out) == [
      ('index_mismatch', name, 0, f"line 1 is 'hello world'; record 0 is at byte 0, "
       f"{spans[0][1]} bytes framed: '0 {spans[0][1]}'")]


def test_an_index_with_a_line_too_many(out):
  name, spans = _index_damage(out, lambda text: text + '1 2\n')
  assert problems(out) == [
      ('index_mismatch', name, len(spans), f"{len(spans) + 1} lines, for {len(spans)} "
       f"record(s) read from the shard: line {len(spans) + 1} is '1 2'")]


def test_a_deleted_index(out):
  name, _ = _index_damage(out, None)
  assert problems(out) == [
      ('index_mismatch', name, -1,
       "missing: dataset_info.json's sink.index_files says each shard has one")]



def _undeclare_indexes(out) -> None:
  info = read_info(out)
  info['sink']['index_files'] = False
  write_info(out, info)


def test_an_index_on_disk_is_checked_though_dataset_info_does_not_declare_it(out):
  """The tfrecord package and DALI seek by a shard's index whatever
  dataset_info.json says: sink.index_files edited to false does not hide a
  wrong one; an index of one shard alone is checked alone."""
  _undeclare_indexes(out)
  (out / (shards(out)[0].name + '.index')).unlink()
  name, spans = _index_damage(out, lambda text: 'hello world\n')
  assert problems(out) == [
      ('index_mismatch', name, 0, f"line 1 is 'hello world'; record 0 is at byte 0, "
       f"{spans[0][1]} bytes framed: '0 {spans[0][1]}'")]


def test_a_right_index_on_disk_that_dataset_info_does_not_declare_is_no_problem(out):
  _undeclare_indexes(out)
  (out / (shards(out)[0].name + '.index')).unlink()
  code, report = run_validate(out, '--strict')
  assert (code, report['num_problems'], report['num_examples']) == (EXIT_OK, 0, 9)

def test_side_files_are_checked_however_the_shards_are_read(out, monkeypatch):
  """Read here, in 1000-byte spans by check processes, and as whole shards by
  them: the same problems of the index and the sidecar."""
  _index_damage(out, lambda text: 'hello world\n')
  lines = sidecar_lines(out)
  lines[4]['data_crc'] += 1
  write_sidecar(out, lines)
  here = problems(out, '--check_threads', '1')
  assert [kind for kind, *_ in here] == ['index_mismatch', 'sidecar_mismatch']
  monkeypatch.setattr(check_shards, 'SPAN_BYTES', 1000)  # about one record per span
  assert problems(out, '--check_processes', '2') == here
  monkeypatch.setattr(validate, 'WHOLE_SHARDS_PER_PROCESS', 1)
  assert problems(out, '--check_processes', '1') == here


@pytest.mark.slow  # Beam worker processes
@pytest.mark.integration  # Beam's multi-process DirectRunner
def test_side_files_are_checked_where_distributed_runners_group_by_split(out):
  _index_damage(out, lambda text: 'hello world\n')
  lines = sidecar_lines(out)
  lines[4]['label']['id'] = 5
  write_sidecar(out, lines)
  gathered = problems(out)
  assert problems(out, '--direct_num_workers', '2') == gathered
  assert [kind for kind, *_ in gathered] == ['index_mismatch', 'sidecar_mismatch']


# --- sidecars ---------------------------------------------------------------------------


def test_an_edited_data_crc(out):
  lines = sidecar_lines(out)
  lines[3]['data_crc'] += 1
  write_sidecar(out, lines)
  shard = read_info(out)['splits']['train']['shards'][lines[3]['shard']]
  assert problems(out) == [
      ('sidecar_mismatch', SIDECAR, 4, f"line 4 (record {lines[3]['ordinal']} of {shard}): "
       f"data_crc is {lines[3]['data_crc']}, the record's {lines[3]['data_crc'] - 1}")]


def test_two_records_labels_swapped_in_the_sidecar(out):
  """What a later --previous_dataset run would trust: the labels a record is
  copied by."""
  lines = sidecar_lines(out)
  a, b = next((a, b) for a in lines for b in lines if a['label']['id'] != b['label']['id'])
  a['label'], b['label'] = b['label'], a['label']
  write_sidecar(out, lines)
  names = read_info(out)['splits']['train']['shards']
  found = problems(out)
  assert [(kind, line) for kind, _, line, _ in found] == sorted(
      ('sidecar_mismatch', lines.index(line) + 1) for line in (a, b))
  for line in (a, b):
    other = b if line is a else a
    number = lines.index(line) + 1
    assert (f"line {number} (record {line['ordinal']} of {names[line['shard']]}): label.id is "
            f"{line['label']['id']}, the record's {other['label']['id']} (also label.text)"
            ) in [detail for *_, detail in found]


def test_a_dropped_line(out):
  lines = sidecar_lines(out)
  dropped = lines.pop(5)
  write_sidecar(out, lines)
  shard = read_info(out)['splits']['train']['shards'][dropped['shard']]
  assert problems(out) == [
      ('sidecar_mismatch', SIDECAR, 9, f"record {dropped['ordinal']} of {shard} has no line")]


def test_a_duplicated_line(out):
  lines = sidecar_lines(out)
  lines.insert(7, lines[2])
  write_sidecar(out, lines)
  shard = read_info(out)['splits']['train']['shards'][lines[2]['shard']]
  # lines 3 and 7 name records 1 and 3 of the shard: record 1 again on line 8
  assert (lines[2]['ordinal'], lines[6]['ordinal'], lines[6]['shard']) == (1, 3, lines[2]['shard'])
  assert problems(out) == [
      ('sidecar_mismatch', SIDECAR, 8, f'line 8 (record 1 of {shard}): out of write order '
       f'or repeated (a line for record 3 of that shard came before it)')]


def test_a_changed_line(out):
  lines = sidecar_lines(out)
  key = lines[0]['key']
  lines[0]['key'], lines[0]['image'] = 'images/elsewhere.png', 'images/elsewhere.png'
  write_sidecar(out, lines)
  shard = read_info(out)['splits']['train']['shards'][0]
  assert problems(out) == [
      ('sidecar_mismatch', SIDECAR, 1, f"line 1 (record 0 of {shard}): key is "
       f"'images/elsewhere.png', the record's {key!r} (also image)")]


def test_a_garbled_line_and_a_sidecar_cut_short(out):
  path = out / SIDECAR
  text = gzip.decompress(path.read_bytes()).splitlines(True)
  path.write_bytes(gzip.compress(b''.join(text[:2] + [b'{"key": \n'] + text[3:])))
  garbled = json.loads(text[2])
  shard = read_info(out)['splits']['train']['shards'][garbled['shard']]
  (kind, file, line, detail), unnamed = problems(out)
  assert (kind, file, line) == ('sidecar_mismatch', SIDECAR, 3)
  assert detail.startswith('line 3 is not a sidecar line: ')
  assert unnamed == ('sidecar_mismatch', SIDECAR, 10,
                     f"record {garbled['ordinal']} of {shard} has no line")
  # cut inside its deflate stream: the lines before it compared, then one problem
  # (the records past it are not reported as lacking a line)
  path.write_bytes(gzip.compress(b''.join(text))[:-30])
  (kind, file, line, detail), = problems(out)
  assert (kind, file) == ('sidecar_mismatch', SIDECAR)
  assert detail.startswith(f'cannot be read past line {line - 1}: EOFError: ')


def test_a_missing_sidecar(out):
  (out / SIDECAR).unlink()
  (kind, file, record, detail), = problems(out)
  assert (kind, file, record) == ('sidecar_mismatch', SIDECAR, -1)
  assert detail.startswith('cannot be read: FileNotFoundError') and detail.endswith(
      "(dataset_info.json's sources_format_version says each split has one)")


def test_shard_files_swapped(out):
  """Both shards renamed, each to the other's name: every record framed and
  counted, but not where the index files and the sidecar say."""
  first, second = shards(out)
  data = first.read_bytes()
  first.write_bytes(second.read_bytes())
  second.write_bytes(data)
  found = problems(out)
  kinds = {}
  for kind, *_ in found:
    kinds[kind] = kinds.get(kind, 0) + 1
  # both indexes differ at once (record 0's length); every sidecar line names
  # a record of another length or key, and the longer shard's last record has none
  assert kinds == {'index_mismatch': 2, 'sidecar_mismatch': 10}


def test_a_record_moved_to_the_other_shard(out):
  first, second = shards(out)
  moved, *kept = records_of(first)
  first.write_bytes(b''.join(frame(r) for r in kept))
  second.write_bytes(second.read_bytes() + frame(moved))
  for shard in (first, second):  # as a careful tamperer would: indexes rewritten
    (out / (shard.name + '.index')).write_text(
        ''.join(f'{offset} {length}\n' for offset, length, _ in places(shard)))
  # appended to the second shard past its place in write order
  order, *found = problems(out)
  assert order[:3] == ('wrong_record_order', second.name, len(records_of(second)) - 1)
  assert {kind for kind, *_ in found} == {'sidecar_mismatch'}
  assert (f'record {len(records_of(second)) - 1} of {second.name} has no line'
          in [detail for *_, detail in found])
  assert found[0][3].startswith(f'line 1 (record 0 of {first.name}): key is ')


def test_a_dataset_without_sidecars_is_fine(out):
  """An older dataset, or --sink tfrecordio: no sources_format_version."""
  (out / SIDECAR).unlink()
  info = read_info(out)
  del info['sources_format_version'], info['splits']['train']['sources']
  write_info(out, info)
  code, report = run_validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0)


# --- compression --------------------------------------------------------------------------


def test_gzip_declared_for_plain_shards(out):
  info = read_info(out)
  info['compression'] = 'gzip'
  write_info(out, info)
  found = problems(out)
  assert [(kind, file, record) for kind, file, record, _ in found] == [
      ('compression_mismatch', shard.name, -1) for shard in shards(out)]
  head = shards(out)[0].read_bytes()[:4].hex(' ')
  assert found[0][3] == (
      "dataset_info.json says compression 'gzip' (read.load and tf.data decompress by it), "
      'but its name does not end in .gz (read.examples and validate decompress by the name) '
      f'and it is not gzip (it starts with {head})')


def test_none_declared_for_gzip_shards(converted_sample, tmp_path):
  out = copy_dataset(converted_sample(*RAW_16, '--compression', 'gzip')[1], tmp_path)
  info = read_info(out)
  info['compression'] = 'none'
  write_info(out, info)
  (kind, file, record, detail), = problems(out)
  assert (kind, file, record) == ('compression_mismatch', info['splits']['train']['shards'][0],
                                  -1)
  assert detail == ("dataset_info.json says compression 'none' (read.load and tf.data "
                    'decompress by it), but its name ends in .gz (read.examples and validate '
                    'decompress by the name) and it is gzip (it starts with 1f 8b 08 00)')


def test_a_gzip_named_shard_that_is_not_gzip(converted_sample, tmp_path):
  out = copy_dataset(converted_sample(*RAW_16, '--compression', 'gzip')[1], tmp_path)
  shard = out / read_info(out)['splits']['train']['shards'][0]
  plain = gzip.decompress(shard.read_bytes())
  shard.write_bytes(plain)
  found = sorted(problems(out))
  assert found[0] == (
      'compression_mismatch', shard.name, -1,
      "dataset_info.json says compression 'gzip' (read.load and tf.data decompress by it), "
      f"but it is not gzip (it starts with {plain[:4].hex(' ')})")
  # not read (as gzip, it would fail at once): its records are missing; and
  # its bytes are no longer num_bytes
  assert [kind for kind, *_ in found[1:]] == ['count_mismatch', 'count_mismatch']


def test_an_unknown_compression(out):
  info = read_info(out)
  info['compression'] = 'zstd'
  write_info(out, info)
  # the shape of dataset_info.json (info_shape.py) refuses it first
  assert problems(out) == [
      ('missing_dataset_info', 'dataset_info.json', -1,
       f"{out / 'dataset_info.json'}: compression 'zstd' is not one of 'none', 'gzip'")]


# --- the plain functions ---------------------------------------------------------------------


def test_a_plain_record_whose_length_starts_like_gzip_is_plain():
  data = b'x' * 0x8b1f  # its length's first bytes: 1f 8b
  head = frame(data)[:side_files.HEAD_BYTES]
  assert head[:2] == side_files.GZIP_MAGIC
  assert side_files.compression_problem('none', 'a.tfrecord', head) == (None, True)
  assert side_files.compression_problem('gzip', 'a.tfrecord.gz', gzip.compress(b'x')[:12]) == (
      None, True)
  detail, readable = side_files.compression_problem('none', 'a.tfrecord', b'\x1f\x8b' + b'\0' * 10)
  assert not readable and detail.endswith('but it is gzip (it starts with 1f 8b 00 00)')
  assert side_files.compression_problem(None, 'a.tfrecord', head) == (None, True)


def test_index_problems_compare_line_by_line():
  spans = [RecordPlace('s', 0, 0, 30, 1, 0, ()), RecordPlace('s', 1, 30, 40, 2, 0, ())]
  assert side_files.index_problems('s.index', b'0 30\n30 40\n', spans) == []
  assert side_files.index_problems('s.index', b'0 30\n30 40', spans) == []  # no last newline
  (problem,) = side_files.index_problems('s.index', b'0 30\n31 40\n', spans)
  assert (problem.record, problem.detail) == (
      1, "line 2 is '31 40'; record 1 is at byte 30, 40 bytes framed: '30 40'")


def test_framed_places_are_the_writers():
  records = [b'a' * 5, b'b' * 7]
  stream = io.BytesIO(b''.join(frame(r) for r in records))
  assert [place for _, _, place in read_framed(stream)] == [
      (0, 21, masked_crc(records[0])), (21, 23, masked_crc(records[1]))]
  assert struct.unpack('<I', frame(records[1])[-4:])[0] == masked_crc(records[1])
