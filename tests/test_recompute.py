"""validate --recompute N: a sample of records converted again from their
sources with the recorded options and compared byte for byte. Swapped records
(every CRC valid) and a forged sidecar fingerprint are problems; a source
changed or gone is a warning."""

import gzip
import json
import os
import pathlib

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import noise_png
from tests.conftest import read_info
from tests.conftest import recount_imbalance
from tests.test_validate_cli import records_of
from tests.test_validate_cli import resync_sidecars
from transforms.core import fingerprints
from transforms.core import recompute
from transforms.core.example_proto import parse_example
from transforms.core.example_proto import serialize_example
from transforms.core.shuffle import Ordering
from transforms.core.splits import hash_split
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import read_records

pytestmark = pytest.mark.xdist_group('recompute')

FLAGS = ('--encoding', 'png', '--height', '8', '--width', '8', '--num_shards', '2',
         '--progress', 'off', '--split', 'train=0.5,test=0.5', '--extra_features', 'w:float')
SIDECAR = 'train.sources.jsonl.gz'


def _corpus(root: pathlib.Path) -> pathlib.Path:
  """root: imgs/, m.csv (relative paths) and the dataset `out`."""
  (root / 'imgs').mkdir(parents=True)
  lines = ['image,label,key,w']
  for i in range(10):
    (root / 'imgs' / f'a{i}.png').write_bytes(noise_png(i))
    lines.append(f'imgs/a{i}.png,{"cat" if i % 3 else "dog"},k{i},{i / 2}')
  (root / 'm.csv').write_text('\n'.join(lines) + '\n')
  assert convert.main(['--manifest', str(root / 'm.csv'), '--output_dir', str(root / 'out'),
                       *FLAGS]) == EXIT_OK
  return root


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
  """A corpus converted once, for tests that change nothing of it."""
  return _corpus(tmp_path_factory.mktemp('recompute'))


@pytest.fixture
def fresh(tmp_path):
  """This test's own corpus and dataset, to change."""
  return _corpus(tmp_path / 'c')


def _validate(out: pathlib.Path, *flags: str):
  code = validate.main(['--input_dir', str(out), *flags])
  return code, json.loads((out / 'validation_report.json').read_text())


def _lines(out: pathlib.Path) -> list:
  return [json.loads(line) for line in gzip.open(out / SIDECAR)]


def test_an_untouched_dataset_recomputes_to_the_same_bytes(converted, capsys):
  code, report = _validate(converted / 'out', '--recompute', '1.0')
  assert capsys.readouterr().out.splitlines()[1] == (
      '--recompute: 10 record(s) converted again from their sources and compared byte for '
      'byte.')
  assert (code, report['valid'], report['num_warnings']) == (EXIT_OK, True, 0)
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (10, 0)
  code, report = _validate(converted / 'out', '--recompute', '3')
  assert (code, report['num_recomputed']) == (EXIT_OK, 3)
  code, report = _validate(converted / 'out', '--recompute', '0.25')
  assert (code, report['num_recomputed']) == (EXIT_OK, 3)
  code, report = _validate(converted / 'out')
  assert 'num_recomputed' not in report and 'num_recompute_skipped' not in report


def test_the_run_s_manifest_where_it_lives_now(fresh, tmp_path, capsys):
  """The corpus and its dataset moved (files keep their inodes and times):
  the recorded manifest is gone; --manifest says where it is, and its
  relative image paths resolve against its folder, as the run's did."""
  moved = tmp_path / 'moved'
  fresh.rename(moved)
  info_path = moved / 'out' / 'dataset_info.json'
  assert validate.main(['--input_dir', str(moved / 'out'), '--recompute', '3']) == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith(f'error: --recompute: the options {info_path} records do not load: ')
  assert str(fresh / 'm.csv') in err and err.endswith(
      "(--manifest: where the run's manifest lives now)\n") and len(err.splitlines()) == 1
  code, report = _validate(moved / 'out', '--recompute', '1.0', '--manifest',
                           str(moved / 'm.csv'))
  assert (code, report['valid'], report['num_warnings']) == (EXIT_OK, True, 0)


def test_a_relative_manifest_read_from_another_folder_is_named(fresh, monkeypatch):
  """A run given `--manifest m.csv` records that relative path, which
  validate reads from the folder it runs in: run from another folder holding
  another m.csv, every sampled record was skipped as 'no row gives it now',
  naming neither file. The warning names the file read (its full path) and
  --manifest."""
  monkeypatch.chdir(fresh)
  assert convert.main(['--manifest', 'm.csv', '--output_dir', 'rel', *FLAGS]) == EXIT_OK
  other = fresh / 'other'
  other.mkdir()
  (other / 'm.csv').write_text('image,label,key,w\nimgs/z.png,cat,z,1\n')
  monkeypatch.chdir(other)
  code, report = _validate(fresh / 'rel', '--recompute', '1.0')
  assert (code, report['num_recomputed'], report['num_recompute_skipped']) == (EXIT_OK, 0, 10)
  assert {w['detail'].split(': ', 1)[1] for w in report['warnings']} == {
      f"no row of the run's input gives it now (rows read from m.csv = {other / 'm.csv'}; "
      f"--manifest: where the run's manifest lives now)"}
  monkeypatch.chdir(fresh)
  code, report = _validate(fresh / 'rel', '--recompute', '1.0')
  assert (code, report['num_recomputed'], report['num_warnings']) == (EXIT_OK, 10, 0)


def _swap_first_two(out: pathlib.Path) -> list:
  """Swaps two records of one train shard whose lengths are equal: -> their keys."""
  lines = [line for line in _lines(out) if line['shard'] == 0]
  pairs = [(a, b) for i, a in enumerate(lines) for b in lines[i + 1:]
           if a['length'] == b['length']]
  a, b = pairs[0]
  shard = out / json.loads((out / 'dataset_info.json').read_text())['splits']['train'][
      'shards'][0]
  data = bytearray(shard.read_bytes())
  first = data[a['offset']:a['offset'] + a['length']]
  data[a['offset']:a['offset'] + a['length']] = data[b['offset']:b['offset'] + b['length']]
  data[b['offset']:b['offset'] + b['length']] = first
  shard.write_bytes(bytes(data))
  return [a['key'], b['key']]


def test_two_swapped_records_are_a_mismatch_each(fresh):
  out = fresh / 'out'
  keys = _swap_first_two(out)
  # every CRC is valid, but the sidecar's lines name the other record, and
  # the shard's records are out of write order
  code, report = _validate(out)
  assert (code, report['problems_by_kind']) == (
      EXIT_FAILED, {'sidecar_mismatch': 2, 'wrong_record_order': 1})
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind']) == (
      EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 2, 'sidecar_mismatch': 2,
                    'wrong_record_order': 1})
  details = sorted(p['detail'] for p in report['problems']
                   if p['kind'] == recompute.RECOMPUTE_MISMATCH)
  for key, detail in zip(sorted(keys), details):
    assert detail.startswith(f"key '{key}': image bytes, ")
    assert 'feature image/key' in detail and 'differ from its unchanged source' in detail


def _forge_fingerprint(fresh, key: str, name: str) -> None:
  """The source of `key` rewritten after the run, and its sidecar line's
  fingerprint forged to the new file's: the same fingerprint, other bytes."""
  image = fresh / 'imgs' / name
  image.unlink()
  image.write_bytes(noise_png(99))
  lines = _lines(fresh / 'out')
  for line in lines:
    if line['key'] == key:
      line['fingerprint'] = fingerprints.local_fingerprint(str(image))
  (fresh / 'out' / SIDECAR).write_bytes(gzip.compress(
      b''.join(json.dumps(line).encode() + b'\n' for line in lines), mtime=0))


def test_a_forged_fingerprint_is_caught_as_a_mismatch(fresh):
  """The source rewritten after the run, and its sidecar line's fingerprint
  forged to the new file's: the same fingerprint, other bytes."""
  out = fresh / 'out'
  _forge_fingerprint(fresh, 'k3', 'a3.png')
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1})
  assert report['problems'][0]['detail'].startswith(
      "key 'k3': image bytes, feature image/key/sha256 differ from its unchanged source ")


def test_a_deleted_source_is_a_warning_naming_its_key(fresh, capsys):
  out = fresh / 'out'
  (fresh / 'imgs' / 'a4.png').unlink()
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['valid'], report['warnings_by_kind']) == (
      EXIT_OK, True, {recompute.SOURCE_CHANGED: 1})
  assert report['warnings'][0]['detail'].startswith("key 'k4': its source ")
  # the skipped record was not converted again: counted apart (was: 10 recomputed)
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (9, 1)
  assert capsys.readouterr().out.splitlines()[1] == (
      '--recompute: 9 record(s) converted again from their sources and compared byte for '
      'byte; 1 sampled record(s) skipped, not compared: their source changed since the run '
      'or is gone (recompute_source_changed).')
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0', '--strict']) == (
      EXIT_FAILED)


def test_a_record_another_version_encoded_is_a_warning_not_a_mismatch(tmp_path, monkeypatch,
                                                                      capsys):
  """A dataset an older img2tfrecord wrote, whose pixels' code differs (its
  PIXELS_VERSION): its records are not compared (their bytes may differ
  rightly), each a warning; not a recompute_mismatch."""
  monkeypatch.setattr(fingerprints, 'PIXELS_VERSION', fingerprints.PIXELS_VERSION - 1)
  out = _corpus(tmp_path / 'c') / 'out'
  monkeypatch.undo()
  capsys.readouterr()
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['valid'], report['warnings_by_kind']) == (
      EXIT_OK, True, {recompute.OTHER_VERSION: 10})
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (0, 10)
  assert 'this version of img2tfrecord, Pillow and its codecs gives' in report['warnings'][0]['detail']
  assert capsys.readouterr().out.splitlines()[1] == (
      '--recompute: 0 record(s) converted again from their sources and compared byte for '
      'byte; 10 sampled record(s) skipped, not compared: another version of img2tfrecord '
      'encoded them (recompute_other_version).')


@pytest.mark.parametrize('amount', ['0', '-3', '0.0', '1.5', 'x', '1e3', ''])
def test_recompute_takes_a_count_or_a_fraction(converted, capsys, amount):
  """The one line says what --recompute takes (once it named a function of ours)."""
  assert validate.main(['--input_dir', str(converted / 'out'), '--recompute', amount]) == (
      EXIT_USAGE)
  err = capsys.readouterr().err
  assert err == (f'error: argument --recompute: {amount!r} is neither a number of records '
                 f'(a positive integer: 100) nor a fraction of them (with a decimal point, '
                 f'above 0 and at most 1.0: 0.1, 1.0)\n'), err


def test_the_sample_is_deterministic_and_sized_by_count_or_fraction():
  entries = [('train', f'k{i}', i) for i in range(10)]
  assert recompute.how_many(3, 10) == 3 and recompute.how_many(30, 10) == 10
  assert recompute.how_many(0.25, 10) == 3 and recompute.how_many(1.0, 10) == 10
  three = recompute.sample(entries, 3)
  assert three == recompute.sample(list(reversed(entries)), 3)
  assert three == recompute.sample(entries, 10)[:3] and len(three) == 3
  assert sorted(recompute.sample(entries, 1.0)) == sorted(entries)


def test_differences_name_the_image_the_label_and_features():
  one = {'image/encoded': ('bytes_list', [b'a']), 'image/class/label': ('int64_list', [1]),
         'image/class/text': ('bytes_list', [b'cat']), 'w': ('float_list', [1.0])}
  other = {**one, 'image/class/text': ('bytes_list', [b'dog']),
           'image/class/label': ('int64_list', [2]), 'w': ('float_list', [2.0])}
  assert recompute.differences(one, other) == ['label', 'feature w']
  assert recompute.differences(one, {**one, 'image/encoded': ('bytes_list', [b'b'])}) == [
      'image bytes']
  assert recompute.differences(one, one) == []


def test_a_pattern_of_parquet_or_tar_files_that_names_no_format_is_read_as_they_were(
    tmp_path, capsys):
  # 'data/*' names no format (its files told convert): its rows are read
  # again as Parquet rows and tar samples (read as lines, each sampled record
  # was a recompute_source_changed warning, exit 0; then refused, exit 2).
  import io
  import tarfile

  import pyarrow as pa
  import pyarrow.parquet as pq
  (tmp_path / 'pq').mkdir()
  pq.write_table(pa.table({'image': [noise_png(1), noise_png(2)], 'label': ['a', 'b']}),
                 tmp_path / 'pq' / 'rows.parquet')
  (tmp_path / 'tars').mkdir()
  with tarfile.open(tmp_path / 'tars' / 'shard.tar', 'w') as tar:
    for name, data in (('s0.png', noise_png(3)), ('s0.cls', b'1')):
      member = tarfile.TarInfo(name)
      member.size = len(data)
      tar.addfile(member, io.BytesIO(data))
  for folder, fmt in (('pq', 'parquet'), ('tars', 'webdataset')):
    out = tmp_path / f'out-{folder}'
    assert convert.main(['--manifest', str(tmp_path / folder / '*'), '--output_dir', str(out),
                         *FLAGS[:6]]) == EXIT_OK
    assert read_info(out)['options']['manifest'] == str(tmp_path / folder / '*')
    code, report = _validate(out, '--recompute', '1.0')
    assert (code, report['valid'], report['num_warnings']) == (EXIT_OK, True, 0), fmt
    assert (report['num_recomputed'], report['num_recompute_skipped']) == (
        2 if fmt == 'parquet' else 1, 0)


def _drop_last_train_record(out: pathlib.Path) -> str:
  """The last record of train's first shard taken out, with its sidecar line
  and every count edited to match, as a careful tamperer (or a writer that
  lost a row) would leave it: -> its key."""
  info = json.loads((out / 'dataset_info.json').read_text())
  lines = _lines(out)
  last = max((line for line in lines if line['shard'] == 0), key=lambda line: line['ordinal'])
  shard = out / info['splits']['train']['shards'][0]
  data = shard.read_bytes()
  assert last['offset'] + last['length'] == len(data)
  shard.write_bytes(data[:last['offset']])
  (out / SIDECAR).write_bytes(gzip.compress(b''.join(
      json.dumps(line).encode() + b'\n' for line in lines if line is not last), mtime=0))
  train = info['splits']['train']
  train['examples_per_class'][last['label']['text']] -= 1
  recount_imbalance(train)
  train['num_examples'] -= 1
  train['num_bytes'] -= last['length']
  info['num_examples'] -= 1
  info['num_manifest_rows'] -= 1
  (out / 'dataset_info.json').write_text(json.dumps(info))
  return last['key']


def test_a_row_dropped_with_every_count_edited_is_found_by_recounting_the_manifest(fresh):
  """Every count agrees with every other, so the checks of the dataset alone
  pass; the run's manifest, unchanged since (its recorded size and mtime),
  holds one more row than counted."""
  out = fresh / 'out'
  _drop_last_train_record(out)
  code, report = _validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {recompute.ROW_COUNT: 1})
  assert report['problems'][0]['detail'] == (
      f"{fresh / 'm.csv'} holds 10 data line(s), unchanged since the run; dataset_info.json's "
      'num_manifest_rows says 9')
  assert report['num_recomputed'] == 9


def test_a_manifest_changed_since_the_run_is_not_recounted(fresh):
  """Nightly manifests change: a row added after the run is no problem of the
  dataset (its recorded version is not the file's now)."""
  with open(fresh / 'm.csv', 'a') as manifest:
    manifest.write('imgs/a0.png,dog,k99,0.5\n')
  code, report = _validate(fresh / 'out', '--recompute', '1.0')
  assert (code, report['valid'], report['num_problems']) == (EXIT_OK, True, 0)
  info = json.loads((fresh / 'out' / 'dataset_info.json').read_text())
  assert info['manifest_versions'] != {'rows': [fingerprints.file_version(str(fresh / 'm.csv'))]}


def test_a_gzip_manifest_is_read_again_decompressed(fresh, capsys):
  """Its compressed bytes were read as lines: no row was found, and every
  record was skipped as recompute_source_changed (exit 0, nothing compared).
  Cut short since the run, it is one line and exit 2."""
  manifest = fresh / 'm.csv.gz'
  manifest.write_bytes(gzip.compress((fresh / 'm.csv').read_bytes(), mtime=0))
  out = fresh / 'gz-out'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['num_recomputed'], report['num_warnings'], report['num_problems']) == (
      EXIT_OK, 10, 0, 0)
  capsys.readouterr()
  manifest.write_bytes(manifest.read_bytes()[:-20])
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith(f'error: --recompute: the manifest {manifest} cannot be read: ')
  assert len(err.splitlines()) == 1 and 'Traceback' not in err


def _rename_a_record(out: pathlib.Path) -> tuple:
  """The key of train's first record replaced by one of its length that
  hashes to train too, and to its place in write order (so to its shard and
  its place there, as --num_shards deals them), in its record and its
  sidecar line, as a careful tamperer would leave it (every CRC, count,
  split and place right): -> (old, new)."""
  info = json.loads((out / 'dataset_info.json').read_text())
  lines = _lines(out)
  line = lines[0]
  old = line['key']
  order = Ordering(seed=0)
  others = [other['key'] for other in lines[1:]]

  def rank(key):
    return sum((order.key(other, 0), other) < (order.key(key, 0), key) for other in others)

  new = next(f'{letter}{old[1:]}' for letter in 'zyxwvutsrqponmlkjihgfedcb'
             if hash_split(f'{letter}{old[1:]}', (('train', 0.5), ('test', 0.5)), 0) == 'train'
             and rank(f'{letter}{old[1:]}') == rank(old))
  shard = out / info['splits']['train']['shards'][line['shard']]
  with open(shard, 'rb') as stream:
    records = [data for _, data in read_records(stream)]
  features = {name: ({'bytes_list': 'bytes', 'int64_list': 'int64',
                      'float_list': 'float'}[kind], values)
              for name, (kind, values) in parse_example(records[line['ordinal']]).items()}
  features['image/key'] = ('bytes', [new.encode()])
  records[line['ordinal']] = serialize_example(features)
  shard.write_bytes(b''.join(frame(data) for data in records))
  line['key'] = new
  (out / SIDECAR).write_bytes(gzip.compress(
      b''.join(json.dumps(line).encode() + b'\n' for line in lines), mtime=0))
  resync_sidecars(out)
  return old, new


def test_a_record_renamed_with_the_manifest_unchanged_is_a_mismatch(fresh):
  """No row of the run's manifest, unchanged since the run, gives the key:
  the run did not write that record (was: a recompute_source_changed
  warning, exit 0, as for a row gone from a changed manifest). Once the
  manifest changed, it is that warning again."""
  out = fresh / 'out'
  _, new = _rename_a_record(out)
  code, report = _validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind'], report['num_warnings']) == (
      EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1}, 0)
  assert report['problems'][0]['detail'] == (
      f"key '{new}': no row of the run's manifest gives it, and the manifest is unchanged "
      'since the run: the run wrote no such record')
  with open(fresh / 'm.csv', 'a') as manifest:
    manifest.write('imgs/a0.png,dog,k99,0.5\n')
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['num_problems'], report['warnings_by_kind']) == (
      EXIT_OK, 0, {recompute.SOURCE_CHANGED: 1})


def test_a_row_relabelled_since_the_run_is_a_warning_unless_the_manifest_looks_unchanged(
        fresh):
  """A manifest changed since the run may relabel a row (a nightly manifest
  corrected): the record was right for the run's row, a
  recompute_source_changed warning (was: recompute_mismatch, exit 1, 'label
  differ from its unchanged source'). The same edit with the manifest's size
  and mtime put back is what the run read: a problem."""
  manifest = fresh / 'm.csv'
  before = manifest.stat()
  manifest.write_text(manifest.read_text().replace('imgs/a1.png,cat,', 'imgs/a1.png,dog,'))
  code, report = _validate(fresh / 'out', '--recompute', '1.0')
  assert (code, report['num_problems'], report['warnings_by_kind']) == (
      EXIT_OK, 0, {recompute.SOURCE_CHANGED: 1})
  assert report['warnings'][0]['detail'] == (
      "key 'k1': label differ from its row; the run's manifest changed since the run: "
      'not compared')
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (9, 1)
  os.utime(manifest, ns=(before.st_atime_ns, before.st_mtime_ns))
  code, report = _validate(fresh / 'out', '--recompute', '1.0')
  assert (code, report['problems_by_kind'], report['num_warnings']) == (
      EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1}, 0)
  assert report['problems'][0]['detail'].startswith("key 'k1': label differ from its unchanged")


def test_a_record_of_other_bytes_but_the_same_features_is_a_mismatch(fresh):
  """A record rewritten with bytes a reader skips (a field Example does not
  have, appended), every CRC, count and sidecar line right: its features
  parse the same as its source converted again, but its bytes do not (was:
  no finding, though --recompute compares byte for byte)."""
  out = fresh / 'out'
  info = json.loads((out / 'dataset_info.json').read_text())
  line = _lines(out)[0]
  shard = out / info['splits']['train']['shards'][line['shard']]
  with open(shard, 'rb') as stream:
    records = [data for _, data in read_records(stream)]
  before = len(shard.read_bytes())
  records[line['ordinal']] += b'\x10\x01'  # field 2, the varint 1: no field of Example
  assert parse_example(records[line['ordinal']]) == parse_example(
      records[line['ordinal']][:-2])
  shard.write_bytes(b''.join(frame(data) for data in records))
  info['splits']['train']['num_bytes'] += len(shard.read_bytes()) - before
  (out / 'dataset_info.json').write_text(json.dumps(info))
  resync_sidecars(out)
  code, report = _validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind'], report['num_recomputed']) == (
      EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1}, 10)
  assert report['problems'][0]['detail'].startswith(
      f"key '{line['key']}': the bytes (every feature the same) differ from its unchanged "
      'source ')


def test_image_bytes_that_differ_stay_a_problem_once_the_manifest_changed(fresh):
  """A changed manifest lets a row's label, split or features differ (a
  warning); the image's own fingerprint is unchanged, so other image bytes
  are still a problem."""
  out = fresh / 'out'
  _forge_fingerprint(fresh, 'k3', 'a3.png')
  with open(fresh / 'm.csv', 'a') as manifest:
    manifest.write('imgs/a0.png,dog,k99,0.5\n')
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1})
  assert report['problems'][0]['detail'].startswith("key 'k3': image bytes, ")


def test_a_key_s_first_row_is_the_one_converted_again(fresh):
  """convert keeps the first row of a key (a later one is a duplicate):
  --recompute compares the record with that row, not a later one."""
  with open(fresh / 'm.csv', 'a') as manifest:
    manifest.write('imgs/a1.png,dog,k1,0.5\n')  # k1's row says cat
  code, report = _validate(fresh / 'out', '--recompute', '1.0')
  assert (code, report['num_problems'], report['num_warnings'], report['num_recomputed']) == (
      EXIT_OK, 0, 0, 10)


def test_rows_the_run_rejected_are_counted_and_a_content_split_recomputed(tmp_path):
  """A manifest row the run rejected (no image) is one of num_manifest_rows
  all the same; with --split_by content, each record's split is its image's
  SHA-256's, as the run chose it."""
  root = _corpus(tmp_path / 'c')
  manifest = root / 'm.csv'
  manifest.write_text(manifest.read_text() + ',cat,k98,0.5\n')
  out = root / 'more'
  assert convert.main(['--manifest', str(manifest), '--output_dir', str(out), *FLAGS,
                       '--split_by', 'content', '--max_error_rate', '0.5']) == EXIT_OK
  info = json.loads((out / 'dataset_info.json').read_text())
  assert (info['num_manifest_rows'], info['num_examples']) == (11, 10)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['num_problems'], report['num_warnings'], report['num_recomputed']) == (
      EXIT_OK, 0, 0, 10)


def _key_of(data: bytes) -> str:
  return parse_example(data)['image/key'][1][0].decode()


def test_a_record_in_another_split_than_its_rows_split_column_is_a_mismatch(tmp_path, capsys):
  """Splits from a manifest column: no hash says where a record belongs, so
  only the row read again does. A record moved from train to test, with
  every count and both sidecars made to match and the record in its place
  in the test shard's write order, passes plain validate;
  --recompute finds it."""
  from tests.test_validate_cli import resync_sidecars
  from tests.test_validate_trust import _move_first_train_record_to_test
  (tmp_path / 'imgs').mkdir()
  lines = ['image,label,key,split']
  for i in range(6):
    (tmp_path / 'imgs' / f'a{i}.png').write_bytes(noise_png(i))
    lines.append(f'imgs/a{i}.png,{"cat" if i % 2 else "dog"},k{i},{"train" if i < 4 else "test"}')
  (tmp_path / 'm.csv').write_text('\n'.join(lines) + '\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--encoding', 'png', '--height', '8', '--width', '8',
                       '--progress', 'off']) == EXIT_OK
  _, _, moved, _, position = _move_first_train_record_to_test(out)
  key = parse_example(moved)['image/key'][1][0].decode()
  train = [json.loads(line) for line in gzip.open(out / 'train.sources.jsonl.gz')]
  test = [json.loads(line) for line in gzip.open(out / 'test.sources.jsonl.gz')]
  (line,) = [line for line in train if line['key'] == key]
  train = [{**other, 'ordinal': other['ordinal'] - 1} for other in train if other is not line]
  test.append({**line, 'shard': 0, 'ordinal': position})
  # and the test shard's records in their write order (wrong_record_order otherwise)
  shard = out / read_info(out)['splits']['test']['shards'][0]
  order = Ordering(seed=0)
  records = sorted(records_of(shard), key=lambda data: order.key(_key_of(data), 0))
  shard.write_bytes(b''.join(frame(data) for data in records))
  ordinals = {_key_of(data): number for number, data in enumerate(records)}
  test = sorted(({**one, 'ordinal': ordinals[one['key']]} for one in test),
                key=lambda one: one['ordinal'])
  for name, kept in (('train', train), ('test', test)):
    (out / f'{name}.sources.jsonl.gz').write_bytes(gzip.compress(
        b''.join(json.dumps(one).encode() + b'\n' for one in kept), mtime=0))
  resync_sidecars(out)
  code, report = _validate(out)
  assert (code, report['num_problems']) == (EXIT_OK, 0), report['problems']
  capsys.readouterr()
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'recompute_mismatch': 1})
  assert report['problems'][0]['detail'].startswith(
      f'key {key!r}: split (test, its row gives train) differ from its unchanged source ')


def _joined(root: pathlib.Path, out: str = 'out', *flags: str) -> pathlib.Path:
  """root/images.csv (key,image) and root/labels.csv (key,label, in another
  order), k1, k3 and k5 cats, converted joined into root/OUT: -> OUT."""
  if not (root / 'imgs').exists():
    (root / 'imgs').mkdir()
    images, labels = ['key,image'], ['key,label']
    for i in range(6):
      (root / 'imgs' / f'a{i}.png').write_bytes(noise_png(i))
      images.append(f'k{i},imgs/a{i}.png')
      labels.append(f'k{i},{"cat" if i % 2 else "dog"}')
    (root / 'images.csv').write_text('\n'.join(images) + '\n')
    (root / 'labels.csv').write_text('\n'.join(labels[:1] + labels[:0:-1]) + '\n')
  assert convert.main(['--manifest', str(root / 'images.csv'), '--label_manifest',
                       str(root / 'labels.csv'), '--output_dir', str(root / out),
                       '--encoding', 'png', '--height', '8', '--width', '8',
                       '--progress', 'off', *flags]) == EXIT_OK
  return root / out


def test_a_dataset_joined_from_a_label_manifest_recomputes_to_its_bytes(tmp_path, capsys):
  """--manifest key,image and --label_manifest key,label: --recompute joins
  each row's label from the label manifest, as convert did (read without
  it, every record's label differed from its row's)."""
  out = _joined(tmp_path)
  capsys.readouterr()
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['num_problems'], report['num_warnings']) == (EXIT_OK, 0, 0), (
      report['problems'], report['warnings'])
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (6, 0)


def _convert_pattern(root: pathlib.Path, files: dict, *flags: str) -> pathlib.Path:
  """files: {manifest path under root: [(image cell, label, key, seed), ...]},
  each image written at the cell relative to its manifest's folder; converted
  from the pattern --manifest root/PATTERN (flags[0]): -> the dataset."""
  pattern, flags = flags[0], flags[1:]
  for name, rows in files.items():
    manifest = root / name
    for image, _, _, seed in rows:
      (manifest.parent / image).parent.mkdir(parents=True, exist_ok=True)
      (manifest.parent / image).write_bytes(noise_png(seed))
    manifest.write_text('\n'.join(['image,label,key'] + [
        f'{image},{label},{key}' for image, label, key, _ in rows]) + '\n')
  out = root / 'out'
  assert convert.main(['--manifest', str(root / pattern), '--output_dir', str(out),
                       '--encoding', 'png', '--height', '8', '--width', '8',
                       '--progress', 'off', *flags]) == EXIT_OK
  return out


def test_a_pattern_s_second_file_is_read_again_from_its_first_row(tmp_path):
  """--manifest 'parts/part-*.csv': the rows of every file, the second file's
  first row too, each record compared with its own row. A key repeated in the
  second file keeps the first file's row, as convert kept it (the duplicate
  another image and label), and the rows of every file are counted. The
  second file's first row relabelled since, its size and mtime put back, is
  found (was: no test read a pattern again; reading its first file only, the
  last row of a key, or counting the last file's lines passed every test)."""
  (tmp_path / 'parts').mkdir()
  out = _convert_pattern(tmp_path, {
      'parts/part-0.csv': [(f'imgs/a{i}.png', 'cat' if i % 2 else 'dog', f'k{i}', i)
                           for i in range(4)],
      'parts/part-1.csv': [('imgs/a4.png', 'cat', 'k4', 4), ('imgs/a9.png', 'cat', 'k2', 9),
                           ('imgs/a5.png', 'dog', 'k5', 5)],
  }, 'parts/part-*.csv', '--max_error_rate', '0.5')
  info = json.loads((out / 'dataset_info.json').read_text())
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (7, 6, 1)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['num_problems'], report['num_warnings']) == (EXIT_OK, 0, 0), (
      report['problems'], report['warnings'])
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (6, 0)
  second = tmp_path / 'parts' / 'part-1.csv'
  before = second.stat()
  second.write_text(second.read_text().replace('imgs/a4.png,cat,k4', 'imgs/a4.png,dog,k4'))
  os.utime(second, ns=(before.st_atime_ns, before.st_mtime_ns))
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind'], report['num_warnings']) == (
      EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1}, 0)
  assert report['problems'][0]['detail'].startswith(
      f"key 'k4': label differ from its unchanged source {tmp_path / 'parts' / 'imgs' / 'a4.png'}")


def test_a_pattern_s_files_in_other_folders_resolve_their_own_images(tmp_path):
  """--manifest 'parts/*/m.csv': each file's relative image paths resolve
  against its own folder, as convert resolved them; the same cell names
  another image in each (was: against the pattern's folder 'parts/*', every
  source 'changed since the run', nothing compared, exit 0)."""
  out = _convert_pattern(tmp_path, {
      f'parts/{name}/m.csv': [('imgs/a.png', label, f'{name}-k', seed),
                              (f'imgs/b{seed}.png', label, f'{name}-j', seed + 10)]
      for name, label, seed in (('p0', 'cat', 0), ('p1', 'dog', 1))}, 'parts/*/m.csv')
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['num_problems'], report['num_warnings']) == (EXIT_OK, 0, 0), (
      report['problems'], report['warnings'])
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (4, 0)


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_label_manifest_changed_since_the_run_is_noticed(tmp_path, capsys):
  """Two manifests, the image manifest unchanged and the label manifest
  relabelling k1 after the run: k1 is a recompute_source_changed warning
  (exit 1 with --strict), the others compared. The same edit with the label
  manifest's size and mtime put back is what the run read: a problem. A
  nightly run on it encodes k1 again (changed_label), and its dataset
  recomputes clean (was: judging by the image manifest's version alone, or
  recording none of the label manifest's, passed every test)."""
  out = _joined(tmp_path)
  labels = tmp_path / 'labels.csv'
  before = labels.stat()
  labels.write_text(labels.read_text().replace('k1,cat', 'k1,dog'))
  for flags, exit_code in (((), EXIT_OK), (('--strict',), EXIT_FAILED)):
    code, report = _validate(out, '--recompute', '1.0', *flags)
    assert (code, report['num_problems'], report['warnings_by_kind']) == (
        exit_code, 0, {recompute.SOURCE_CHANGED: 1})
    assert report['warnings'][0]['detail'] == (
        "key 'k1': label differ from its row; the run's manifest changed since the run: "
        'not compared')
    assert (report['num_recomputed'], report['num_recompute_skipped']) == (5, 1)
  os.utime(labels, ns=(before.st_atime_ns, before.st_mtime_ns))
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind'], report['num_warnings']) == (
      EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1}, 0)
  assert report['problems'][0]['detail'] == (
      f"key 'k1': label differ from its unchanged source {tmp_path / 'imgs' / 'a1.png'} "
      'converted again')
  labels.write_text(labels.read_text() + '\n')  # changed since the run again
  night = _joined(tmp_path, 'night', '--previous_dataset', str(out))
  reuse = json.loads((night / 'dataset_info.json').read_text())['reuse']
  assert (reuse['reused'], reuse['encoded']['changed_label'], reuse['num_encoded']) == (5, 1, 1)
  (k1,) = [line for line in _lines(night) if line['key'] == 'k1']  # one split: train
  assert k1['label'] == {'id': 1, 'text': 'dog'}
  capsys.readouterr()
  code, report = _validate(night, '--recompute', '1.0')
  assert (code, report['num_problems'], report['num_warnings'], report['num_recomputed']) == (
      EXIT_OK, 0, 0, 6)
