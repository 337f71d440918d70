"""--previous_dataset copies only what it can prove: a record is copied only
if the whole row that made it is unchanged, and only if the record found is
the one its sidecar line names (its data CRC, its key). A damaged or
tampered previous dataset gives the bytes of a full run or one line and exit
2, never a traceback. A small raw corpus: every record has the same length,
so records can be swapped without changing any shard's size."""

import gzip
import hashlib
import io
import json
import pathlib
import shutil
import threading

import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.runs.previous import write_latest
from tests.conftest import noise_png
from tests.conftest import read_info
from tests.test_hostile_sources import fifo_writer_that_unblocks_readers
from transforms import dedupe
from transforms.core import reuse

pytestmark = pytest.mark.xdist_group('reuse_checks')

FLAGS = ('--encoding', 'raw', '--height', '8', '--width', '8', '--num_shards', '2',
         '--progress', 'off')
SHARDS = ('train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord')
SIDECAR = 'train.sources.jsonl.gz'


def _manifest(path: pathlib.Path, rows: list) -> pathlib.Path:
  path.write_text('image,label,key\n' + ''.join(f'{i},{lab},{k}\n' for i, lab, k in rows))
  return path


@pytest.fixture(scope='module')
def night1(tmp_path_factory):
  """(corpus folder, its manifest's rows, night 1's dataset): 8 images, keys
  k0..k7 of one length, labels of one length (cat, dog)."""
  root = tmp_path_factory.mktemp('reuse_checks')
  rows = []
  for i in range(8):
    (root / 'imgs').mkdir(exist_ok=True)
    (root / 'imgs' / f'a{i}.png').write_bytes(noise_png(i))
    rows.append((f'imgs/a{i}.png', 'cat' if i % 3 else 'dog', f'k{i}'))
  manifest = _manifest(root / 'night1.csv', rows)
  assert _run(manifest, root / 'night1') == EXIT_OK
  return root, rows, root / 'night1'


def _run(manifest: pathlib.Path, out: pathlib.Path, *more: str) -> int:
  return convert.main(['--manifest', str(manifest), '--output_dir', str(out), *FLAGS, *more])


def _previous(night1_dir: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
  previous = tmp_path / 'previous'
  shutil.copytree(night1_dir, previous)
  return previous


def _lines(dataset: pathlib.Path) -> list:
  return [json.loads(line) for line in gzip.open(dataset / SIDECAR)]


def _write_lines(dataset: pathlib.Path, lines: list) -> None:
  (dataset / SIDECAR).write_bytes(gzip.compress(b''.join(
      (line if isinstance(line, bytes) else json.dumps(line).encode()) + b'\n'
      for line in lines), mtime=0))


def _same_shards(out: pathlib.Path, full: pathlib.Path) -> None:
  for name in SHARDS:
    assert (out / name).read_bytes() == (full / name).read_bytes(), name


@pytest.fixture(params=['inline', 'by_shard'])
def path(request, monkeypatch):
  """Both copy paths: inline in the image step (a single local worker), and a
  previous shard per call (as on a distributed runner)."""
  if request.param == 'by_shard':
    monkeypatch.setattr(convert.runners, 'single_local_worker', lambda options: False)
  return request.param


def test_two_swapped_records_are_encoded_not_copied_under_the_wrong_key(night1, tmp_path,
                                                                          path):
  root, _, full = night1
  previous = _previous(full, tmp_path)
  lines = [line for line in _lines(previous) if line['shard'] == 0]
  first, second = lines[0], lines[1]
  assert first['length'] == second['length']  # the same length: both CRC-valid when swapped
  shard = bytearray((previous / SHARDS[0]).read_bytes())
  a = shard[first['offset']:first['offset'] + first['length']]
  b = shard[second['offset']:second['offset'] + second['length']]
  shard[first['offset']:first['offset'] + first['length']] = b
  shard[second['offset']:second['offset'] + second['length']] = a
  (previous / SHARDS[0]).write_bytes(bytes(shard))
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  assert (reuse_info['reused'], reuse_info['reuse_fallback']) == (6, 2)
  _same_shards(out, full)


@pytest.mark.parametrize('tamper', ['repointed', 'swapped'])
def test_a_sidecar_line_naming_another_record_is_caught(night1, tmp_path, path, tamper):
  """A line re-pointed at another record (its offset, length, ordinal and
  CRC: every CRC valid), or two lines' places swapped: the record's own key
  feature says it is not the row's."""
  root, _, full = night1
  previous = _previous(full, tmp_path)
  lines = _lines(previous)
  other = next(line for line in lines[1:] if line['shard'] == lines[0]['shard'])
  place = ('ordinal', 'offset', 'length', 'data_crc')
  first = {k: lines[0][k] for k in place}
  lines[0].update({k: other[k] for k in place})
  if tamper == 'swapped':
    other.update(first)
  _write_lines(previous, lines)
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  fallbacks = {'repointed': 1, 'swapped': 2}[tamper]
  assert (reuse_info['reused'], reuse_info['reuse_fallback']) == (8 - fallbacks, fallbacks)
  _same_shards(out, full)


def test_a_sidecar_whose_labels_are_swapped_copies_no_record_under_the_old_label(
    night1, tmp_path, path):
  """Two lines' labels swapped in the sidecar, and the two rows' labels
  swapped the same way in the manifest: each line now says what its row
  says, so the run decided to copy both; their records still hold the old
  labels. Each copy is checked against its line's label: both are encoded."""
  root, rows, full = night1
  previous = _previous(full, tmp_path)
  lines = _lines(previous)
  first = next(line for line in lines if line['label']['text'] == 'cat')
  second = next(line for line in lines if line['label']['text'] == 'dog')
  first['label'], second['label'] = second['label'], first['label']
  _write_lines(previous, lines)
  swapped = {first['key']: 'dog', second['key']: 'cat'}
  manifest = _manifest(root / f'swapped_labels_{path}.csv',  # beside the images
                       [(image, swapped.get(key, label), key) for image, label, key in rows])
  out, fresh = tmp_path / 'out', tmp_path / 'fresh'
  assert _run(manifest, out, '--previous_dataset', str(previous)) == EXIT_OK
  assert _run(manifest, fresh) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  assert (reuse_info['reused'], reuse_info['reuse_fallback']) == (6, 2)
  _same_shards(out, fresh)  # the manifest's labels, not the old records'


@pytest.mark.parametrize('field', ['source_sha256', 'image'])
def test_a_sidecar_line_whose_sha256_or_path_is_not_its_records_is_encoded_not_carried(
    night1, tmp_path, path, field):
  """A line whose source_sha256 is another line's (edited, the gzip written
  again), or whose image path was edited to the one the manifest now gives
  (./imgs/a0.png): its record still holds the old value. Copied, the line's
  value went into the new sidecar (and k0 was reported a copy of k1's
  bytes), or the old image/filename into the shard. Each copy is checked
  against its line's path and SHA-256: k0 is encoded, as a full run does."""
  root, rows, full = night1
  previous = _previous(full, tmp_path)
  lines = _lines(previous)
  first = next(line for line in lines if line['key'] == 'k0')
  other = next(line for line in lines if line['key'] == 'k1')
  manifest = root / 'night1.csv'
  if field == 'image':
    first['image'] = './imgs/a0.png'
    manifest = _manifest(root / f'dotted_{path}.csv',  # beside the images
                         [('./' + image if key == 'k0' else image, label, key)
                          for image, label, key in rows])
  else:
    first['source_sha256'] = other['source_sha256']
  _write_lines(previous, lines)
  out, fresh = tmp_path / 'out', tmp_path / 'fresh'
  assert _run(manifest, out, '--previous_dataset', str(previous)) == EXIT_OK
  assert _run(manifest, fresh) == EXIT_OK
  info = read_info(out)
  assert (info['reuse']['reused'], info['reuse']['reuse_fallback']) == (7, 1)
  assert info['content_duplicates']['num_contents'] == 0
  _same_shards(out, fresh)
  assert (out / SIDECAR).read_bytes() == (fresh / SIDECAR).read_bytes()
  k0 = next(line for line in _lines(out) if line['key'] == 'k0')
  assert (k0['image'], k0['source_sha256']) == (
      './imgs/a0.png' if field == 'image' else 'imgs/a0.png',
      hashlib.sha256((root / 'imgs' / 'a0.png').read_bytes()).hexdigest())


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('flags', [('--dedupe', 'content'),
                                   ('--split_by', 'content', '--split', 'train=0.5,test=0.5')])
def test_a_sidecar_sha256_is_proven_by_its_record_before_rows_are_deduped_or_split_by_it(
    night1, tmp_path, path, flags):
  """With --dedupe content or --split_by content (and metadata), an unchanged
  file's SHA-256 is taken from its sidecar line, not read again. A line
  whose source_sha256 was edited to another split's or row's: k0 was
  rejected as a duplicate (exit 3, validate OK) or written to the other
  split. Each such SHA-256 is now checked against its record first: the
  file is hashed, and the night is a full run's."""
  root, _, _ = night1
  manifest = root / 'night1.csv'
  previous = _k0_given_another_sha256(manifest, tmp_path, flags)
  info = _night_against_full(manifest, tmp_path, flags, previous)
  assert (info['reuse']['reused'], info['reuse']['num_encoded'], info['reuse']['reuse_fallback']) \
      == (7, 0, 1)  # k0's hash is not its line's: encoded, not copied


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('flags', [('--dedupe', 'content'),
                                   ('--split_by', 'content', '--split', 'train=0.5,test=0.5')])
def test_a_seed_record_proves_no_sha256_so_files_are_hashed_and_records_not_read_for_it(
    night1, tmp_path, path, flags, monkeypatch):
  """--schema seed records hold no SHA-256: each reused row's record was read
  to prove its line's (a 12 us read for nothing), then its file hashed. Now
  only the file is hashed; a line whose SHA-256 was edited still neither
  dedupes nor moves k0, and k0 is not copied under its line's SHA-256 (the
  new sidecar would carry it): the night is a full run's, byte for byte."""
  root, _, _ = night1
  manifest = root / 'night1.csv'
  flags = ('--schema', 'seed', *flags)
  previous = _k0_given_another_sha256(manifest, tmp_path, flags)
  proofs = []

  class CountingReader(dedupe.ShardReader):
    def copy(self, record, key):
      proofs.append(record.ordinal)
      return super().copy(record, key)

  monkeypatch.setattr(dedupe, 'ShardReader', CountingReader)
  out, fresh = tmp_path / 'out', tmp_path / 'fresh'
  assert _run(manifest, out, *flags, '--previous_dataset', str(previous)) == EXIT_OK
  assert proofs == []
  assert _run(manifest, fresh, *flags) == EXIT_OK
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected']) == (8, 0)
  assert (info['reuse']['reused'], info['reuse']['num_encoded'], info['reuse']['reuse_fallback']) \
      == (7, 0, 1)
  _same_files(out, fresh)


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('flags', [('--dedupe', 'content'),
                                   ('--split_by', 'content', '--split', 'train=0.5,test=0.5')])
def test_a_sidecar_sha256_beside_a_remote_shard_is_not_trusted_unproven(night1, tmp_path, flags,
                                                                        monkeypatch):
  """A previous shard on an object store is not read to prove its line's
  SHA-256. It was trusted: a line edited to another row's SHA-256 had k0
  rejected as that row's duplicate, or written to the other split, before
  its copy was refused. Its file is hashed instead (the shards here are local,
  taken for remote ones; the copies are by shard, as a remote dataset's)."""
  monkeypatch.setattr(convert.runners, 'single_local_worker', lambda options: False)
  monkeypatch.setattr(dedupe, 'is_remote', lambda path: True)
  root, _, _ = night1
  manifest = root / 'night1.csv'
  previous = _k0_given_another_sha256(manifest, tmp_path, flags)
  info = _night_against_full(manifest, tmp_path, flags, previous)
  assert (info['reuse']['reused'], info['reuse']['num_encoded'], info['reuse']['reuse_fallback']) \
      == (7, 0, 1)


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('flags', [('--dedupe', 'content'),
                                   ('--split_by', 'content', '--split', 'train=0.5,test=0.5')])
def test_a_sidecar_line_naming_another_rows_record_proves_no_sha256(night1, tmp_path, path,
                                                                   flags):
  """k0's line given another row's place, data CRC and SHA-256 (and moved to
  that row's sidecar), as a line whose key was edited: that record holds the
  line's SHA-256, and was taken as proving it, so k0 had the other row
  rejected as its duplicate (exit 3; validate OK where allowed) or was
  written to the other split. The record must hold k0's key too: k0's file
  is hashed instead, and the night is a full run's."""
  root, _, _ = night1
  manifest = root / 'night1.csv'
  previous = _k0_given_another_sha256(manifest, tmp_path, flags, whole_record=True)
  info = _night_against_full(manifest, tmp_path, flags, previous)
  # k0 hashed: not its line's SHA-256 (encoded, not copied), or not its split
  encoded = (0, 1) if flags[0] == '--dedupe' else (1, 0)
  assert (info['reuse']['reused'], info['reuse']['num_encoded'],
          info['reuse']['reuse_fallback']) == (7, *encoded)


def _night_against_full(manifest, tmp_path, flags, previous) -> dict:
  """The night with `previous` and a full run of `manifest`, both exit 0 with
  8 examples and no rejection, every file the same bytes: -> the night's
  dataset_info.json."""
  out, fresh = tmp_path / 'out', tmp_path / 'fresh'
  assert _run(manifest, out, *flags, '--previous_dataset', str(previous)) == EXIT_OK
  assert _run(manifest, fresh, *flags) == EXIT_OK
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected']) == (8, 0)
  _same_files(out, fresh)
  return info


def _same_files(out: pathlib.Path, fresh: pathlib.Path) -> None:
  """Every file but dataset_info.json the same bytes (cmp)."""
  written = sorted(name.name for name in fresh.iterdir() if name.name != 'dataset_info.json')
  assert written == sorted(name.name for name in out.iterdir() if name.name != 'dataset_info.json')
  for name in written:
    assert (out / name).read_bytes() == (fresh / name).read_bytes(), name


def _k0_given_another_sha256(manifest: pathlib.Path, tmp_path: pathlib.Path,
                             flags: tuple, whole_record: bool = False) -> pathlib.Path:
  """A night converted with `flags`, copied to tmp_path/previous, k0's line
  given another row's source_sha256 (another split's, when there is one);
  whole_record: also its shard, ordinal, offset, length and data_crc, the
  line moved to that row's sidecar (naming its record)."""
  night, previous = tmp_path / 'night', tmp_path / 'previous'
  assert _run(manifest, night, *flags) == EXIT_OK
  shutil.copytree(night, previous)
  sidecars = sorted(previous.glob('*.sources.jsonl.gz'))
  lines = {sidecar: [json.loads(line) for line in gzip.open(sidecar)] for sidecar in sidecars}
  owner = next(sidecar for sidecar in sidecars if any(l['key'] == 'k0' for l in lines[sidecar]))
  # another row's SHA-256: from the other split's sidecar when there is one
  donor = next(line for sidecar in sorted(sidecars, key=lambda s: s == owner)
               for line in lines[sidecar] if line['key'] != 'k0')
  if flags[0] == '--split_by':
    assert donor not in lines[owner]  # the SHA-256 of a row of the other split
  k0 = next(line for line in lines[owner] if line['key'] == 'k0')
  named = ('shard', 'ordinal', 'offset', 'length', 'data_crc') if whole_record else ()
  k0.update({name: donor[name] for name in ('source_sha256', *named)})
  if whole_record:
    lines[owner].remove(k0)
    next(ls for ls in lines.values() if donor in ls).append(k0)
  for sidecar, written in lines.items():
    sidecar.write_bytes(gzip.compress(b''.join(json.dumps(line).encode() + b'\n'
                                               for line in written), mtime=0))
  return previous


def test_a_changed_image_path_with_the_same_key_is_encoded_again(night1, tmp_path):
  """`imgs/a.png` -> `./imgs/a.png`: the same file and key, but the record's
  image/filename is the path as written."""
  root, rows, night1_dir = night1
  changed = [(f'./{image}' if key == 'k3' else image, label, key) for image, label, key in rows]
  manifest = _manifest(tmp_path / 'night2.csv', changed)
  (tmp_path / 'imgs').symlink_to(root / 'imgs')  # the same files, by the same inodes
  assert _run(manifest, tmp_path / 'full') == EXIT_OK
  out = tmp_path / 'out'
  assert _run(manifest, out, '--previous_dataset', str(night1_dir)) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  assert reuse_info['encoded']['changed_path'] == 1 and reuse_info['reused'] == 7
  _same_shards(out, tmp_path / 'full')
  # night 1's record of k3 (imgs/a3.png) would be wrong: the full run differs from it
  assert [(tmp_path / 'full' / name).read_bytes() for name in SHARDS] != [
      (night1_dir / name).read_bytes() for name in SHARDS]


def test_a_version_1_sidecar_is_read_and_its_records_encoded_once(night1, tmp_path):
  root, _, full = night1
  previous = _previous(full, tmp_path)
  info = read_info(previous)
  info['sources_format_version'] = 1
  (previous / 'dataset_info.json').write_text(json.dumps(info))
  _write_lines(previous, [{k: v for k, v in line.items() if k not in ('data_crc', 'image')}
                          for line in _lines(previous)])
  upgraded = tmp_path / 'upgraded'
  assert _run(root / 'night1.csv', upgraded, '--previous_dataset', str(previous)) == EXIT_OK
  reuse_info = read_info(upgraded)
  assert reuse_info['sources_format_version'] == 2
  assert (reuse_info['reuse']['reused'], reuse_info['reuse']['encoded']['sidecar_upgrade']) == (
      0, 8)
  _same_shards(upgraded, full)
  assert (upgraded / SIDECAR).read_bytes() == (full / SIDECAR).read_bytes()
  again = tmp_path / 'again'
  assert _run(root / 'night1.csv', again, '--previous_dataset', str(upgraded)) == EXIT_OK
  assert read_info(again)['reuse']['reused'] == 8


@pytest.mark.parametrize('damage, reused, fallback', [
    ({'length': 10 ** 12}, 7, 1),
    ({'offset': 2 ** 63}, 7, 1),
    ({'offset': 2 ** 64, 'length': 2 ** 70}, 7, 1),
    ({'key': ['k0']}, 0, 0),  # the sidecar ends at its first line: every row is new
])
def test_a_damaged_sidecar_line_is_a_fallback_never_a_crash(night1, tmp_path, path, damage,
                                                              reused, fallback):
  root, _, full = night1
  previous = _previous(full, tmp_path)
  lines = _lines(previous)
  lines[0].update(damage)
  _write_lines(previous, lines)
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  assert (reuse_info['reused'], reuse_info['reuse_fallback']) == (reused, fallback)
  _same_shards(out, full)


@pytest.mark.parametrize('name', [SHARDS[0], SIDECAR, 'dataset_info.json'])
def test_a_previous_shard_or_sidecar_that_is_a_fifo_exits_2_never_hangs(night1, tmp_path,
                                                                         capsys, name):
  """The previous dataset's shard, sidecar or dataset_info.json replaced by
  a FIFO: refused on the launcher (exit 2, one line), the FIFO unopened. A
  sidecar FIFO hung the reuse step; a shard's is caught by the size check."""
  root, _, full = night1
  previous = _previous(full, tmp_path)
  (previous / name).unlink()
  out = tmp_path / 'out'
  with fifo_writer_that_unblocks_readers(previous / name) as unblocked:
    assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_USAGE
  assert not unblocked
  assert capsys.readouterr().err.strip() == f'error: --previous_dataset {previous}: ' + (
      f'the shard {previous / name} is a FIFO (named pipe), not a file' if name == SHARDS[0]
      else f'{previous / name} does not exist or is not a file')


def test_a_previous_shard_that_is_a_folder_exits_2_naming_it(night1, tmp_path, capsys):
  """Was "the train shards hold 4096 + ... bytes": a folder's own size counted."""
  root, _, full = night1
  previous = _previous(full, tmp_path)
  (previous / SHARDS[1]).unlink()
  (previous / SHARDS[1]).mkdir()
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_USAGE
  assert capsys.readouterr().err == (f'error: --previous_dataset {previous}: the shard '
                                     f'{previous / SHARDS[1]} is a folder, not a file\n')
  assert not out.exists()


def test_a_latest_pointer_that_is_a_fifo_exits_2_unopened(night1, tmp_path, capsys):
  """Was "... has no dataset_info.json: not a complete dataset"."""
  root, _, _ = night1
  pointer = tmp_path / 'latest'
  out = tmp_path / 'out'
  with fifo_writer_that_unblocks_readers(pointer) as unblocked:
    assert _run(root / 'night1.csv', out, '--previous_dataset', str(pointer)) == EXIT_USAGE
  assert not unblocked
  assert capsys.readouterr().err == (
      f'error: --previous_dataset {pointer} is a FIFO (named pipe), not a pointer file\n')


@pytest.mark.parametrize('content', [b'\x00\xff\xfe junk\n', b'caf\xe9\n', b'a\x00b\n',
                                     b'one\ntwo\n', b'x' * (70 << 10)])
@pytest.mark.parametrize('missing', ['error', 'full'])
def test_a_latest_pointer_that_is_no_text_line_exits_2(night1, tmp_path, capsys, content,
                                                       missing):
  """Not UTF-8 was a UnicodeDecodeError traceback (exit 1); a NUL byte, two
  lines, or a file of any size read whole, no better."""
  root, _, _ = night1
  pointer = tmp_path / 'latest'
  pointer.write_bytes(content)
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(pointer),
              '--previous_dataset_missing', missing) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --previous_dataset {pointer} is no pointer file (one line of UTF-8 text naming '
      f'a dataset folder, as a run with --previous_dataset writes)\n')
  assert not out.exists()


def test_a_latest_pointer_an_editor_saved_with_a_bom_and_crlf_names_its_folder(night1, tmp_path,
                                                                          capsys):
  """A BOM was kept as the folder name's first character: "does not exist",
  or with --previous_dataset_missing full a full run with a warning."""
  root, _, full = night1
  previous = _previous(full, tmp_path)
  pointer = tmp_path / 'latest'
  pointer.write_bytes(b'\xef\xbb\xbfprevious\r\n')
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(pointer),
              '--previous_dataset_missing', 'full') == EXIT_OK
  assert 'Warning' not in capsys.readouterr().err
  reuse_section = read_info(out)['reuse']
  assert (reuse_section['previous_dataset'], reuse_section['reused']) == (str(previous), 8)
  _same_shards(out, full)
  assert pointer.read_text() == f'{out}\n'


def test_a_latest_pointer_given_with_a_trailing_slash_exits_2_saying_so(night1, tmp_path,
                                                                       capsys):
  """Was "... does not exist", of a file that does."""
  root, _, full = night1
  write_latest(str(_previous(full, tmp_path)))
  pointer = tmp_path / 'latest'
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', f'{pointer}/') == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --previous_dataset {pointer}/ names a folder, but {pointer} is a file (a '
      f'pointer): give it without the trailing /\n')


@pytest.mark.parametrize('url, problem', [
    ('file://{full}', 'is a file:// URL: give the local path ({full}) instead'),
    ('memory://out', "has a URL scheme 'memory' that no filesystem here reads or writes"),
    ('gs:///out', 'names no bucket: expected gs://BUCKET/...'),
], ids=['file', 'memory', 'no_bucket'])
def test_a_latest_pointer_holding_a_url_no_filesystem_reads_exits_2(night1, tmp_path, capsys,
                                                                    url, problem):
  """Was Beam's "Unable to get filesystem" ValueError traceback, exit 1: the
  pointer's path is checked as --previous_dataset's own value is."""
  root, _, full = night1
  target = url.format(full=full)
  pointer = tmp_path / 'latest'
  pointer.write_text(target + '\n')
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(pointer)) == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith(f'error: --previous_dataset {pointer} holds {target}, which '
                        f'{problem.format(full=full)}') and err.count('\n') == 1, err
  assert not out.exists()


def test_a_sidecar_line_too_long_to_hold_ends_the_sidecar(night1, tmp_path, monkeypatch):
  """A gzip sidecar that expands to one huge line (4 GB in the report that
  found it) is read MAX_LINE_BYTES at a time; here that bound is made small."""
  monkeypatch.setattr(reuse, 'MAX_LINE_BYTES', 4096)
  root, _, full = night1
  previous = _previous(full, tmp_path)
  lines = _lines(previous)
  _write_lines(previous, [lines[0], b'{"key": "' + b'x' * 100_000 + b'"}', *lines[1:]])
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_OK
  assert read_info(out)['reuse']['reused'] == 1
  _same_shards(out, full)


def _damage_info(info: dict, case: str) -> dict:
  if case == 'no_num_bytes':
    del info['splits']['train']['num_bytes']
  elif case == 'no_shards':
    del info['splits']['train']['shards']
  elif case == 'splits_list':
    info['splits'] = []
  return info


@pytest.mark.parametrize('case, message', [
    ('no_num_bytes', ': {bad}/dataset_info.json: splits.train has no num_bytes'),
    ('no_shards', ': {bad}/dataset_info.json: splits.train has no list of shards'),
    ('splits_list', ': {bad}/dataset_info.json: splits [] is not an object of splits'),
])
def test_a_malformed_previous_dataset_info_exits_2_naming_it(night1, tmp_path, capsys, case,
                                                             message):
  root, _, full = night1
  bad = _previous(full, tmp_path)
  (bad / 'dataset_info.json').write_text(json.dumps(_damage_info(read_info(bad), case)))
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(bad)) == EXIT_USAGE
  separator = '' if message.startswith(':') else ' '
  assert capsys.readouterr().err == (
      f'error: --previous_dataset{separator}{message.format(bad=bad)}\n')
  assert not out.exists()


@pytest.mark.parametrize('content, message', [
    (b'\xff\xfe{}', "is not UTF-8 text: 'utf-8' codec can't decode byte 0xff in position 0: "
                    'invalid start byte'),
    (b'[' * 100_000 + b']' * 100_000, 'is not valid JSON: nested too deeply'),
], ids=['not_utf8', 'nested'])
def test_a_previous_dataset_info_that_is_no_json_text_exits_2_naming_it(
    night1, tmp_path, capsys, content, message):
  # Were a UnicodeDecodeError and a RecursionError traceback (exit 1).
  root, _, full = night1
  bad = _previous(full, tmp_path)
  (bad / 'dataset_info.json').write_bytes(content)
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(bad)) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --previous_dataset: {bad}/dataset_info.json {message}\n')
  assert not out.exists()


def test_an_output_dir_named_latest_is_refused_before_anything_is_written(night1, tmp_path,
                                                                          capsys):
  root, _, full = night1
  out = tmp_path / 'latest'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(full)) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --output_dir {out} is named latest, the pointer a run with --previous_dataset '
      f'writes beside its folder: name the folder otherwise\n')
  assert not out.exists()


@pytest.mark.parametrize('name', ['night 1 ', 'night 1\t', 'night\n1', 'night\r'],
                         ids=['space', 'tab', 'newline', 'carriage_return'])
def test_an_output_dir_its_pointer_could_not_name_is_refused_before_anything_is_written(
    night1, tmp_path, capsys, name):
  """The pointer is read back stripped, as one line: a night written to
  'night 1 ' left a pointer to 'night 1', and the next night failed (exit 2:
  does not exist) or, with --previous_dataset_missing full, converted
  everything again, every night."""
  root, _, full = night1
  out = tmp_path / name
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(full),
              '--previous_dataset_missing', 'full') == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --output_dir {str(out)!r} ends in a space or holds a line break: the latest '
      f'pointer a run with --previous_dataset writes beside it could not name it (a pointer '
      f'is one line, its surrounding spaces ignored): name the folder otherwise\n')
  assert sorted(p.name for p in tmp_path.iterdir()) == []
  # the same folder, named without the space, is a night as any other
  out = tmp_path / 'night 1'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(full)) == EXIT_OK
  assert read_info(out)['reuse']['reused'] == 8
  _same_shards(out, full)
  assert (tmp_path / 'latest').read_text() == f'{out}\n'


def test_a_folder_named_latest_beside_the_output_is_refused_before_anything_is_written(
    night1, tmp_path, capsys):
  """--previous_dataset may be a folder named latest; beside --output_dir, it
  is where the run's pointer goes: the run wrote the whole dataset, then
  failed to put its pointer over the folder (exit 1, IsADirectoryError's
  traceback, no pointer)."""
  root, _, full = night1
  latest = tmp_path / 'latest'
  shutil.copytree(full, latest)
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(latest)) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --output_dir {out}: {latest}, where a run with --previous_dataset writes its '
      f"pointer, is a folder: rename it, or write the run's folder elsewhere\n")
  assert not out.exists()
  assert sorted(p.name for p in latest.iterdir()) == sorted(p.name for p in full.iterdir())
  # elsewhere, a folder named latest is a previous dataset as any other
  other = tmp_path / 'nights' / 'out'
  other.parent.mkdir()
  assert _run(root / 'night1.csv', other, '--previous_dataset', str(latest)) == EXIT_OK
  assert read_info(other)['reuse']['reused'] == 8
  _same_shards(other, full)
  assert (other.parent / 'latest').read_text() == f'{other}\n'


def test_two_runs_writing_latest_at_once_never_fail_and_leave_one_whole_pointer(tmp_path):
  """Each writer has its own temp name (one shared `latest.tmp` let one
  writer rename the other's file away: 32 failures in 600 calls)."""
  errors = []

  def night(name: str) -> None:
    try:
      for _ in range(300):
        write_latest(str(tmp_path / name))
    except Exception as error:  # the test reports what a writer met
      errors.append(error)

  writers = [threading.Thread(target=night, args=(name,)) for name in ('a', 'b')]
  for writer in writers:
    writer.start()
  for writer in writers:
    writer.join()
  assert errors == []
  assert (tmp_path / 'latest').read_text() in (f'{tmp_path / "a"}\n', f'{tmp_path / "b"}\n')
  assert sorted(p.name for p in tmp_path.iterdir()) == ['latest']  # no temp file left


def test_latest_on_an_object_store_is_one_write(monkeypatch):
  calls = []

  class Store:
    def create(self, path):
      calls.append(('create', path))
      return io.BytesIO()

    def __getattr__(self, name):  # rename, delete, ...: a second call on the store
      return lambda *args: calls.append((name, *args))

  assert write_latest('gs://b/out/2026-12-01', Store()) == 'gs://b/out/latest'
  assert calls == [('create', 'gs://b/out/latest')]


def test_a_row_rejected_every_night_is_counted_as_rejected_not_as_new(night1, tmp_path, capsys):
  root, rows, _ = night1
  manifest = _manifest(tmp_path / 'm.csv', [*rows, ('imgs/gone.png', 'cat', 'k8')])
  (tmp_path / 'imgs').symlink_to(root / 'imgs')
  budget = ('--max_error_rate', '0.5')
  assert _run(manifest, tmp_path / 'first', *budget) == EXIT_OK
  out = tmp_path / 'second'
  assert _run(manifest, out, *budget, '--previous_dataset', str(tmp_path / 'first')) == EXIT_OK
  info = read_info(out)
  assert info['num_rejected'] == 1
  assert (info['reuse']['reused'], info['reuse']['num_encoded'], info['reuse']['rejected']) == (
      8, 0, 1)
  assert info['reuse']['encoded']['new'] == 0
  assert capsys.readouterr().out.splitlines()[-1] == (
      f'Reuse: 8 record(s) copied (0.0 MB) from {tmp_path / "first"}; 0 encoded; 1 rejected; '
      f'0 dropped; 0 reuse_fallback.')


@pytest.mark.parametrize('damage', ['truncated', 'garbled_line', 'flipped', 'emptied',
                                    'cut_at_a_line_end', 'empty_gzip'])
def test_a_damaged_sidecar_is_counted_and_warned_of_bytes_unchanged(night1, tmp_path, capsys,
                                                                    path, damage):
  """A sidecar cut short, with a line that does not parse, or with a flipped
  byte was silent (exit 0, its rows past the damage encoded as new, only a
  Beam counter said so): now reuse.sidecars_cut_short and a Warning line, the
  shards still a full run's. So were an emptied sidecar (0 bytes, or a gzip
  of nothing) and one cut at a line's end and compressed whole: no gzip check
  fails, but it has fewer lines than its split has records."""
  root, _, full = night1
  previous = _previous(full, tmp_path)
  data = bytearray((previous / SIDECAR).read_bytes())
  if damage == 'truncated':
    data = data[:len(data) // 2]
  elif damage == 'emptied':
    data = b''
  elif damage == 'empty_gzip':
    data = gzip.compress(b'')
  elif damage == 'cut_at_a_line_end':
    lines = gzip.decompress(bytes(data)).splitlines(keepends=True)
    data = gzip.compress(b''.join(lines[:len(lines) // 2]))
  elif damage == 'garbled_line':  # gzip intact, its middle line no JSON
    lines = gzip.decompress(bytes(data)).splitlines(keepends=True)
    lines[len(lines) // 2] = b'{not json\n'
    data = gzip.compress(b''.join(lines))
  else:
    data[len(data) // 2] ^= 0xFF
  (previous / SIDECAR).write_bytes(bytes(data))
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  assert reuse_info['sidecars_cut_short'] == 1
  # the lines past the damage are unread: their rows are new; a flipped byte,
  # found by gzip's CRC only at the end: no line of that sidecar is used
  assert 0 < reuse_info['encoded']['new'] <= 8
  if damage in ('flipped', 'emptied', 'empty_gzip'):
    assert (reuse_info['reused'], reuse_info['encoded']['new']) == (0, 8)
  else:  # the lines before the damage still serve
    assert reuse_info['reused'] > 0
  _same_shards(out, full)
  assert (out / SIDECAR).read_bytes() == (full / SIDECAR).read_bytes()
  assert ('Warning: 1 sidecar(s) of the previous dataset are damaged: read up to the damage '
          '(none of one whose gzip check fails), the rows past it encoded as new (see '
          'reuse.sidecars_cut_short in dataset_info.json)') in capsys.readouterr().out.splitlines()


def test_a_flipped_sidecar_byte_that_garbles_a_line_into_json_is_never_trusted(
    night1, tmp_path, path):
  """A byte flipped in the deflate stream's literals turns a SHA-256 into
  another string, the line still JSON: gzip's CRC finds it only at the end.
  The run copied the record and wrote the garbled SHA-256 into the new
  sidecar (with --split_by content it drew the row's split from it too)."""
  root, _, full = night1
  previous = _previous(full, tmp_path)
  text = gzip.decompress((previous / SIDECAR).read_bytes())
  stored = bytearray(gzip.compress(text, compresslevel=0, mtime=0))  # literals: bytes as they are
  digest = json.loads(text.splitlines()[0])['source_sha256']
  at = bytes(stored).index(digest.encode())
  stored[at] ^= ord('0') ^ ord('1') if chr(stored[at]) in '01' else ord('a') ^ ord('b')
  (previous / SIDECAR).write_bytes(bytes(stored))
  garbled = gzip.GzipFile(fileobj=io.BytesIO(bytes(stored)))
  with pytest.raises(gzip.BadGzipFile):  # the line reads as JSON; the CRC fails at the end
    garbled.read()
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_OK
  assert read_info(out)['reuse']['reused'] == 0
  _same_shards(out, full)
  assert (out / SIDECAR).read_bytes() == (full / SIDECAR).read_bytes()


def test_an_intact_sidecar_adds_no_cut_short_count(night1, tmp_path):
  root, _, full = night1
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(full)) == EXIT_OK
  assert 'sidecars_cut_short' not in read_info(out)['reuse']
