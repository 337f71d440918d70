"""--previous_dataset: a run that copies unchanged records from an earlier
run's output writes the same bytes as a full run, on every path (a manifest,
--image_dir, splits, --dedupe content, multi-label, gzip shards); its reuse
counts; every bad previous dataset exits 2 with its one line; a record that
fails its CRC is encoded instead."""

import io
import json
import pathlib
import shutil

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import read_info
from transforms.core.fingerprints import local_fingerprint

pytestmark = pytest.mark.xdist_group('incremental')

SIZE = ('--height', '12', '--width', '12', '--progress', 'off')
VARIANTS = {
    'manifest': ('--encoding', 'jpeg', '--num_shards', '2', '--write_index',
                 '--extra_features', 'weight:float'),
    'splits': ('--encoding', 'png', '--split', 'train=0.5,validation=0.5', '--seed', '3',
               '--shard_size_mb', '1'),
    'dedupe': ('--encoding', 'jpeg', '--dedupe', 'content', '--split',
               'train=0.5,test=0.5', '--split_by', 'content', '--max_error_rate', '0.5'),
    'multi_label': ('--multi_label', '--num_shards', '3'),
    'gzip': ('--compression', 'gzip', '--num_shards', '2', '--change_detection', 'content'),
    'image_dir': ('--encoding', 'jpeg',),
}
# Fields of dataset_info.json that may differ between a full and an incremental run.
MAY_DIFFER = ('reuse', 'run_id')


def _image(seed: int, fmt: str = 'PNG') -> bytes:
  pixels = np.random.default_rng(seed).integers(0, 256, size=(14, 18, 3), dtype=np.uint8)
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, format=fmt)
  return buffer.getvalue()


def _manifest(path: pathlib.Path, rows: list, multi: bool = False) -> pathlib.Path:
  lines = ['image,label,weight'] + [f'{image},"{label}",{weight}' for image, label, weight in rows]
  path.write_text('\n'.join(lines) + '\n')
  return path


class Corpus:
  """16 images of two (three) classes in images/ and in a folder per class
  (by/), night 1's manifests, then night 2's changes: 2 rows deleted, 2
  relabelled, 2 new, 1 file rewritten (in place, same name), 1 weight changed."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self.rows = []
    for i in range(16):
      name = f'images/img_{i:02d}.{"jpg" if i % 2 else "png"}'
      data = _image(i if i != 15 else 14, 'JPEG' if i % 2 else 'PNG')  # 15 copies 14's bytes
      self._write(name, data)
      label = 'cat' if i % 3 else 'dog'
      self.rows.append((name, label, i / 4))
      self._write(f'by/{label}/img_{i:02d}.png', _image(i))

  def _write(self, name: str, data: bytes) -> None:
    path = self.root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)

  def manifest(self, name: str, rows: list, multi: bool) -> pathlib.Path:
    if multi:
      rows = [(image, f'{label}|{"big" if i % 2 else "small"}', w)
              for i, (image, label, w) in enumerate(rows)]
    return _manifest(self.root / name, rows)

  def night2(self) -> list:
    rows = [row for row in self.rows if row[0] not in ('images/img_04.png', 'images/img_09.jpg')]
    rows = [(image, 'dog' if image.endswith(('_01.jpg', '_02.png')) else label, w)
            for image, label, w in rows]
    rows = [(image, label, 9.5 if image.endswith('_06.png') else w) for image, label, w in rows]
    for i in (20, 21):
      self._write(f'images/img_{i}.png', _image(i))
      self._write(f'by/cat/img_{i}.png', _image(i))
      rows.append((f'images/img_{i}.png', 'cat', 1.0))
    self._write('images/img_03.jpg', _image(303, 'JPEG'))
    (self.root / 'by/dog/img_00.png').unlink()
    self._write('by/cat/img_02.png', _image(302))
    return rows


def _convert(corpus_source: list, out: pathlib.Path, flags: tuple, *more) -> int:
  return convert.main([*corpus_source, '--output_dir', str(out), *SIZE, *flags, *more])


class Nights:
  """Each variant's own corpus converted on night 1, then, after night 2's
  changes, in full and with --previous_dataset night 1 (once per module, on
  first use: a test of one variant converts only that one)."""

  def __init__(self, root: pathlib.Path):
    self._root = root
    self._runs = {}
    self.sources = {}

  def __getitem__(self, name: str) -> tuple:
    """-> (night1, full2, inc2) of variant `name`."""
    if name not in self._runs:
      self._runs[name] = self._convert(name, VARIANTS[name])
    return self._runs[name]

  def _convert(self, name: str, flags: tuple) -> tuple:
    root = self._root / name
    root.mkdir()
    corpus = Corpus(root)
    multi = name == 'multi_label'
    source = (['--image_dir', str(root / 'by')] if name == 'image_dir' else
              ['--manifest', str(corpus.manifest('night1.csv', corpus.rows, multi))])
    assert _convert(source, root / 'night1', flags) == EXIT_OK
    rows2 = corpus.night2()
    if name != 'image_dir':
      source = ['--manifest', str(corpus.manifest('night2.csv', rows2, multi))]
    self.sources[name] = source
    assert _convert(source, root / 'full2', flags) == EXIT_OK
    assert _convert(source, root / 'inc2', flags,
                    '--previous_dataset', str(root / 'night1')) == EXIT_OK
    return root / 'night1', root / 'full2', root / 'inc2'


@pytest.fixture(scope='module')
def nights(tmp_path_factory) -> Nights:
  return Nights(tmp_path_factory.mktemp('incremental'))


def _comparable(info: dict) -> dict:
  info = {k: v for k, v in info.items() if k not in MAY_DIFFER}
  info['options'] = {k: v for k, v in info['options'].items()
                     if k not in ('previous_dataset', 'output_dir')}
  info['config'] = {k: v for k, v in info['config'].items() if k != 'output_dir'}
  return info


# Each variant costs three conversions: the first two stay in make test.
@pytest.mark.parametrize('variant', [
    pytest.param(name, marks=[] if name in ('manifest', 'gzip') else pytest.mark.slow)
    for name in VARIANTS])
def test_an_incremental_run_writes_the_bytes_of_a_full_run(nights, variant):
  _, full, inc = nights[variant]
  names = sorted(p.name for p in full.iterdir())
  assert names == sorted(p.name for p in inc.iterdir())
  assert any(n.endswith('.sources.jsonl.gz') for n in names)
  for name in names:
    if name != 'dataset_info.json':
      assert (full / name).read_bytes() == (inc / name).read_bytes(), name
  assert _comparable(read_info(full)) == _comparable(read_info(inc))
  assert read_info(inc)['reuse']['reused'] > 0
  assert 'reuse' not in read_info(full)


def test_the_reuse_section_counts_each_decision(nights):
  runs = nights
  night1, _, inc = runs['manifest']
  reuse = read_info(inc)['reuse']
  assert reuse == {
      'previous_dataset': str(night1), 'previous_run_id': read_info(night1)['run_id'],
      'reused': 10, 'num_encoded': 6, 'rejected': 0, 'dropped': 2, 'reuse_fallback': 0,
      'encoded': {'new': 2, 'changed_source': 1, 'changed_label': 2, 'changed_split': 0,
                  'changed_features': 1, 'changed_options': 0, 'changed_path': 0,
                  'sidecar_upgrade': 0},
      'bytes_copied': reuse['bytes_copied']}
  # every copied record's framed bytes: the previous shards' records of the reused keys
  # (those whose record is the same: the data CRC of its line in both sidecars)
  import gzip
  lines = [{line['key']: line
            for line in map(json.loads, gzip.open(run / 'train.sources.jsonl.gz'))}
           for run in (night1, inc)]
  reused = [line for key, line in lines[0].items()
            if key in lines[1] and lines[1][key]['data_crc'] == line['data_crc']]
  assert len(reused) == 10
  assert reuse['bytes_copied'] == sum(line['length'] for line in reused)


def test_the_sidecar_lists_every_record_where_it_sits(nights):
  import gzip
  runs = nights
  night1 = runs['manifest'][0]
  info = read_info(night1)
  assert info['sources_format_version'] == 2
  assert info['splits']['train']['sources'] == 'train.sources.jsonl.gz'
  lines = [json.loads(line) for line in gzip.open(night1 / 'train.sources.jsonl.gz')]
  assert len(lines) == 16
  assert list(lines[0]) == ['key', 'shard', 'ordinal', 'offset', 'length', 'data_crc',
                            'fingerprint', 'source_sha256', 'image', 'label', 'option_digest']
  shards = info['splits']['train']['shards']
  for line in lines:  # the index files say the same
    index = (night1 / (shards[line['shard']] + '.index')).read_text().splitlines()
    assert index[line['ordinal']] == f'{line["offset"]} {line["length"]}'
    assert line['fingerprint'].startswith('local:')
    shard = (night1 / shards[line['shard']]).read_bytes()
    end = line['offset'] + line['length']
    assert line['data_crc'] == int.from_bytes(shard[end - 4:end], 'little')
    assert line['image'] == line['key']  # the path as written (the key here)
  assert [line['shard'] for line in lines[:4]] == [0, 1, 0, 1]  # write order: round robin
  gz = [json.loads(line) for line in gzip.open(runs['gzip'][0] / 'train.sources.jsonl.gz')]
  assert all(line['fingerprint'] == f'sha256:{line["source_sha256"]}' for line in gz)


def test_the_summary_says_what_was_reused(nights, capsys, tmp_path):
  runs, sources = nights, nights.sources
  runs['manifest']
  night1 = runs['manifest'][0]
  assert _convert(sources['manifest'], tmp_path / 'again', VARIANTS['manifest'],
                  '--previous_dataset', str(runs['manifest'][2])) == EXIT_OK
  lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith('Reuse')]
  assert len(lines) == 1 and lines[0].startswith(
      'Reuse: 16 record(s) copied (') and lines[0].endswith(
      f'from {runs["manifest"][2]}; 0 encoded; 0 dropped; 0 reuse_fallback.')
  assert night1.exists()


def test_an_option_that_changes_example_bytes_encodes_everything(nights, tmp_path):
  runs, sources = nights, nights.sources
  runs['manifest']
  out = tmp_path / 'q'
  assert _convert(sources['manifest'], out, VARIANTS['manifest'], '--jpeg_quality', '60',
                  '--previous_dataset', str(runs['manifest'][2])) == EXIT_OK
  reuse = read_info(out)['reuse']
  assert (reuse['reused'], reuse['encoded']['changed_options']) == (0, 16)


def _flip_byte_in_record(shard: pathlib.Path, offset: int) -> None:
  data = bytearray(shard.read_bytes())
  data[offset + 20] ^= 0xFF  # inside the record's data: its data CRC fails
  shard.write_bytes(bytes(data))


def test_a_corrupt_reused_record_is_encoded_from_its_source(nights, tmp_path):
  import gzip
  runs, sources = nights, nights.sources
  runs['manifest']
  night1, full, _ = runs['manifest']
  previous = tmp_path / 'previous'
  shutil.copytree(night1, previous)
  first = json.loads(gzip.open(previous / 'train.sources.jsonl.gz').readline())
  shard = previous / read_info(previous)['splits']['train']['shards'][first['shard']]
  _flip_byte_in_record(shard, first['offset'])
  out = tmp_path / 'out'
  assert _convert(sources['manifest'], out, VARIANTS['manifest'],
                  '--previous_dataset', str(previous)) == EXIT_OK
  reuse = read_info(out)['reuse']
  # the record that failed is no copy and no rejected row: 16 rows, each counted once
  assert (reuse['reuse_fallback'], reuse['reused'], reuse['num_encoded'], reuse['rejected'],
          reuse['dropped']) == (1, 9, 6, 0, 2)
  for name in ('train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord'):
    assert (out / name).read_bytes() == (full / name).read_bytes()
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK


def test_a_damaged_sidecar_line_ends_its_records_and_the_rest_are_encoded(nights, tmp_path):
  import gzip
  runs, sources = nights, nights.sources
  night1, full, _ = runs['manifest']
  previous = tmp_path / 'previous'
  shutil.copytree(night1, previous)
  sidecar = previous / 'train.sources.jsonl.gz'
  lines = gzip.open(sidecar).read().splitlines(keepends=True)
  sidecar.write_bytes(gzip.compress(b''.join(lines[:3]) + b'{"key": not json\n'
                                    + b''.join(lines[4:]), mtime=0))
  out = tmp_path / 'out'
  assert _convert(sources['manifest'], out, VARIANTS['manifest'],
                  '--previous_dataset', str(previous)) == EXIT_OK
  reuse = read_info(out)['reuse']
  # Only the 3 records before the damaged line are known: 2 of them unchanged
  # and copied, 1 a row deleted on night 2; every other row is new to the run.
  assert (reuse['reused'], reuse['encoded']['new'], reuse['dropped']) == (2, 14, 1)
  assert reuse['num_encoded'] == 14 and reuse['reuse_fallback'] == 0
  for name in ('train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord'):
    assert (out / name).read_bytes() == (full / name).read_bytes()


def test_latest_points_at_the_last_good_run_and_is_followed(nights, tmp_path, capsys):
  nights['manifest']
  sources = nights.sources
  flags = VARIANTS['manifest']
  latest = tmp_path / 'latest'
  assert _convert(sources['manifest'], tmp_path / '2026-11-30', flags,
                  '--previous_dataset', str(latest),
                  '--previous_dataset_missing', 'full') == EXIT_OK
  err = capsys.readouterr().err
  assert err == (f'Warning: --previous_dataset {latest} does not exist: converting '
                 f'everything (--previous_dataset_missing full)\n')
  assert latest.read_text() == f'{tmp_path / "2026-11-30"}\n'
  first = read_info(tmp_path / '2026-11-30')
  assert first['reuse']['previous_dataset_missing'] is True
  # every record written is a new one (it said 0 encoded: a new-user trial)
  written = sum(split['num_examples'] for split in first['splits'].values())
  assert (first['reuse']['num_encoded'], first['reuse']['encoded']['new'],
          first['reuse']['reused'], written) == (16, 16, 0, 16)
  assert _convert(sources['manifest'], tmp_path / '2026-12-01', flags,
                  '--previous_dataset', str(latest)) == EXIT_OK
  info = read_info(tmp_path / '2026-12-01')
  assert info['reuse']['previous_dataset'] == str(tmp_path / '2026-11-30')
  assert info['reuse']['reused'] == 16
  assert latest.read_text() == f'{tmp_path / "2026-12-01"}\n'


def _bad(tmp_path, night1: pathlib.Path, case: str) -> tuple:
  """A bad --previous_dataset and the extra flags of `case`."""
  bad = tmp_path / 'bad'
  if case == 'missing':
    return bad, ()
  if case == 'file':
    bad.write_text('x')
    return bad, ()
  if case == 'output_dir':
    shutil.copytree(night1, tmp_path / 'out')
    return tmp_path / 'out', ()
  shutil.copytree(night1, bad)
  info = read_info(bad)
  if case == 'half_written':
    (bad / 'dataset_info.json').unlink()
  elif case == 'no_sidecar':
    (bad / 'train.sources.jsonl.gz').unlink()
  elif case == 'schema':
    return bad, ('--schema', 'seed', '--encoding', 'raw')
  elif case == 'format':
    info['format_version'] = 99
    (bad / 'dataset_info.json').write_text(json.dumps(info))
  elif case == 'no_shard':
    (bad / 'train-00001-of-00002.tfrecord').unlink()
  elif case == 'sources_format':
    info['sources_format_version'] = 7
    (bad / 'dataset_info.json').write_text(json.dumps(info))
  elif case == 'shard_size':
    with open(bad / 'train-00001-of-00002.tfrecord', 'ab') as shard:
      shard.write(b'more')
  return bad, ()


BAD = {
    'missing': '{bad} does not exist (the first run? --previous_dataset_missing full '
               'converts everything then)',
    'file': '{bad} is a file, not a dataset folder',
    'output_dir': '{bad} is --output_dir: a run cannot read the shards it replaces (write '
                  'each run to its own folder)',
    'half_written': '{bad} has no dataset_info.json: not a complete dataset (half-written, '
                    'or not written by convert)',
    'no_sidecar': '{bad} has no {bad}/train.sources.jsonl.gz: a dataset written without '
                  'sidecars cannot be reused (convert it once in full)',
    'schema': '{bad} holds a --schema default dataset; this run writes --schema seed',
    'format': ': {bad}/dataset_info.json has format_version 99; this tool reads 1, 2',
    'no_shard': '{bad} lacks the shard {bad}/train-00001-of-00002.tfrecord',
    'sources_format': '{bad} has sources_format_version 7; this tool reads 1, 2',
    'shard_size': '{bad}: the train shards hold {size} bytes, dataset_info.json says '
                  '{recorded}: they changed after it was written',
}


@pytest.mark.parametrize('case', list(BAD))
def test_a_bad_previous_dataset_exits_2_naming_it(nights, tmp_path, capsys, case):
  runs, sources = nights, nights.sources
  runs['manifest']
  night1 = runs['manifest'][0]
  bad, more = _bad(tmp_path, night1, case)
  flags = [f for f in VARIANTS['manifest'] if f not in ('--extra_features', 'weight:float')]
  code = convert.main([*sources['manifest'], '--output_dir', str(tmp_path / 'out'), *SIZE,
                       *flags, *more, '--previous_dataset', str(bad)])
  recorded = read_info(night1)['splits']['train']['num_bytes']
  message = BAD[case].format(bad=bad, size=recorded + 4, recorded=recorded)
  assert (code, capsys.readouterr().err) == (
      EXIT_USAGE, f'error: --previous_dataset{"" if case == "format" else " "}{message}\n')
  assert not (tmp_path / 'out').exists() or case == 'output_dir'


def test_tfrecordio_can_neither_be_nor_use_a_previous_dataset(nights, tmp_path, capsys):
  runs, sources = nights, nights.sources
  runs['manifest']
  code = convert.main([*sources['manifest'], '--output_dir', str(tmp_path / 'out'), *SIZE,
                       '--sink', 'tfrecordio', '--previous_dataset', str(runs['manifest'][0])])
  assert (code, capsys.readouterr().err) == (
      EXIT_USAGE, "error: --previous_dataset needs --sink ordered: Beam's WriteToTFRecord "
      'writes other bytes on every run, so its records cannot be reused\n')


@pytest.mark.parametrize('by_shard', [False, True], ids=['inline', 'by_shard'])
def test_content_detection_reuses_a_dataset_made_with_metadata(nights, tmp_path, monkeypatch,
                                                               by_shard):
  """Every sidecar records each source's SHA-256: --change_detection content
  compares against it, whatever the previous run's mode was. The copies'
  sidecar lines take this run's fingerprints (sha256:...), as a full content
  run's: the by-shard copy path carried the previous run's local:... ones."""
  runs, sources = nights, nights.sources
  runs['manifest']
  if by_shard:
    monkeypatch.setattr(convert.runners, 'single_local_worker', lambda options: False)
  out, full = tmp_path / 'content', tmp_path / 'full'
  assert _convert(sources['manifest'], out, VARIANTS['manifest'], '--change_detection',
                  'content', '--previous_dataset', str(runs['manifest'][2])) == EXIT_OK
  assert read_info(out)['reuse']['reused'] == 16
  assert _convert(sources['manifest'], full, VARIANTS['manifest'], '--change_detection',
                  'content') == EXIT_OK
  names = sorted(p.name for p in full.iterdir())
  assert names == sorted(p.name for p in out.iterdir()) and 'train.sources.jsonl.gz' in names
  for name in names:
    if name != 'dataset_info.json':
      assert (out / name).read_bytes() == (full / name).read_bytes(), name
  for name in ('train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord'):
    assert (out / name).read_bytes() == (runs['manifest'][1] / name).read_bytes()


@pytest.mark.parametrize('variant', ['manifest', pytest.param('gzip', marks=pytest.mark.slow)])
def test_the_distributed_path_copies_by_shard_to_the_same_bytes(nights, tmp_path, monkeypatch,
                                                                variant):
  """As on a distributed runner: rows joined by key (CoGroupByKey), records
  copied a previous shard per call (by offset; a gzip one streamed to the offsets), written
  through the writer's shuffle; a corrupt record is encoded instead."""
  import gzip
  night1, full, _ = nights[variant]
  previous = tmp_path / 'previous'
  shutil.copytree(night1, previous)
  first = json.loads(gzip.open(previous / 'train.sources.jsonl.gz').readline())
  shard = previous / read_info(previous)['splits']['train']['shards'][first['shard']]
  if variant == 'manifest':
    _flip_byte_in_record(shard, first['offset'])
  monkeypatch.setattr(convert.runners, 'single_local_worker', lambda options: False)
  out = tmp_path / 'out'
  assert _convert(nights.sources[variant], out, VARIANTS[variant],
                  '--previous_dataset', str(previous)) == EXIT_OK
  reuse = read_info(out)['reuse']
  assert (reuse['reuse_fallback'], reuse['dropped']) == (int(variant == 'manifest'), 2)
  # the weight changed too in 'manifest' (--extra_features); one record is corrupt there
  assert reuse['reused'] == {'manifest': 9, 'gzip': 11}[variant]
  for name in sorted(p.name for p in full.iterdir()):
    if name != 'dataset_info.json':
      assert (full / name).read_bytes() == (out / name).read_bytes(), name


def test_reused_runs_that_start_and_end_at_shard_boundaries_copy_to_full_run_bytes(tmp_path):
  """Size-capped shards of 4 records (raw 300x300: 270 KB a record, 1 MiB a
  shard): night 2 changes the first record of shard 1 and the last of shard
  2 and deletes shard 0's last, so the runs of reused records start and end
  at the previous shards' boundaries; the incremental run writes the full
  run's bytes and copies exactly the other records."""
  import gzip
  flags = ('--encoding', 'raw', '--height', '300', '--width', '300', '--shard_size_mb', '1',
           '--progress', 'off')
  rows = []
  for i in range(16):
    name = f'images/img_{i:02d}.png'
    (tmp_path / 'images').mkdir(exist_ok=True)
    (tmp_path / name).write_bytes(_image(i))
    rows.append((name, 'cat' if i % 3 else 'dog', i))
  source = ['--manifest', str(_manifest(tmp_path / 'night1.csv', rows))]
  assert _convert(source, tmp_path / 'night1', flags) == EXIT_OK
  shards = read_info(tmp_path / 'night1')['splits']['train']['shards']
  assert len(shards) == 4
  lines = [json.loads(line) for line in gzip.open(tmp_path / 'night1/train.sources.jsonl.gz')]
  by_shard = [[line['key'] for line in lines if line['shard'] == s] for s in range(4)]
  assert [len(keys) for keys in by_shard] == [4, 4, 4, 4]
  changed = (by_shard[1][0], by_shard[2][-1])
  deleted = by_shard[0][-1]
  for key in changed:  # rewritten in place: new bytes, same path
    (tmp_path / key).write_bytes(_image(1000 + int(key[-6:-4])))
  night2 = [row for row in rows if row[0] != deleted]
  source = ['--manifest', str(_manifest(tmp_path / 'night2.csv', night2))]
  assert _convert(source, tmp_path / 'full2', flags) == EXIT_OK
  assert _convert(source, tmp_path / 'inc2', flags,
                  '--previous_dataset', str(tmp_path / 'night1')) == EXIT_OK
  full, inc = tmp_path / 'full2', tmp_path / 'inc2'
  names = sorted(p.name for p in full.iterdir())
  assert names == sorted(p.name for p in inc.iterdir())
  assert len([n for n in names if n.endswith('.tfrecord')]) == 4
  for name in names:
    if name != 'dataset_info.json':
      assert (full / name).read_bytes() == (inc / name).read_bytes(), name
  reuse = read_info(inc)['reuse']
  assert (reuse['reused'], reuse['num_encoded'], reuse['dropped']) == (13, 2, 1)
  assert reuse['encoded']['changed_source'] == 2


@pytest.mark.parametrize('flags', [(), ('--image_timeout_s', '0'), ('--image_threads', '2')])
def test_a_first_run_records_each_files_stat_as_the_next_night_takes_it(tmp_path, flags):
  """A first run records each local file's stat fingerprint, whichever pool
  reads its image (an image process; a thread with no time limit or with
  --image_threads): what FingerprintFn compares it with the next night."""
  import gzip
  (tmp_path / 'images').mkdir()
  rows = []
  for i in range(5):
    name = f'images/img_{i}.png'
    (tmp_path / name).write_bytes(_image(i))
    rows.append((name, 'cat', i))
  source = ['--manifest', str(_manifest(tmp_path / 'm.csv', rows))]
  assert _convert(source, tmp_path / 'out', flags) == EXIT_OK
  lines = [json.loads(line) for line in gzip.open(tmp_path / 'out/train.sources.jsonl.gz')]
  assert sorted((line['key'], line['fingerprint']) for line in lines) == [
      (name, local_fingerprint(str(tmp_path / name))) for name, _, _ in rows]


@pytest.mark.parametrize('source', ['manifest', 'label_manifest'])
def test_a_first_nights_rejected_rows_count_as_the_next_nights_do(tmp_path, source):
  """A first night (--previous_dataset_missing full) counts the rows its image
  step rejects (a missing file, no image, an empty label) as `rejected`, as
  every later night's decision does; it said -4, the records written taken
  from no decision at all. A row rejected before (a line that does not parse,
  an image row the label manifest has no label for) is no decided row either
  night."""
  (tmp_path / 'images').mkdir()
  names = [f'images/img_{i}.png' for i in range(4)] + ['images/unlabelled.png']
  for i, name in enumerate(names):
    (tmp_path / name).write_bytes(_image(i))
  (tmp_path / 'images/text.png').write_text('no image')
  rows = [(name, 'cat', i) for i, name in enumerate(names[:4])] + [
      ('images/gone.png', 'cat', 4), ('images/text.png', 'dog', 5),
      ('images/unlabelled.png', '', 6)]
  manifest = _manifest(tmp_path / 'm.csv', rows)
  if source == 'manifest':
    with manifest.open('a') as f:
      f.write('"images/img_9.png,cat,7\n')
    inputs = ['--manifest', str(manifest)]
  else:  # keyed by image; img_3 and unlabelled.png have no line: no_label
    (tmp_path / 'images.csv').write_text(
        'key,image\n' + ''.join(f'{image},{image}\n' for image, _, _ in rows))
    (tmp_path / 'labels.csv').write_text(
        'key,label\n' + ''.join(f'{image},{label}\n' for image, label, _ in rows
                                 if image not in ('images/img_3.png', 'images/unlabelled.png')))
    inputs = ['--manifest', str(tmp_path / 'images.csv'),
              '--label_manifest', str(tmp_path / 'labels.csv')]
  flags = ('--max_error_rate', '0.9', '--previous_dataset', str(tmp_path / 'latest'),
           '--previous_dataset_missing', 'full')
  counts = []
  for night in ('n1', 'n2'):
    assert _convert(inputs, tmp_path / night, flags) == EXIT_OK
    info = read_info(tmp_path / night)
    reuse = info['reuse']
    counts.append((info['num_rejected'], reuse['reused'], reuse['num_encoded'],
                   reuse['rejected']))
  assert counts == {'manifest': [(4, 0, 4, 3), (4, 4, 0, 3)],
                    'label_manifest': [(4, 0, 3, 2), (4, 3, 0, 2)]}[source]


def test_content_duplicates_never_reach_the_reuse_decision(tmp_path):
  """With --dedupe content a row whose bytes an earlier row holds is rejected
  before the reuse decision, as a duplicate key is: reused + num_encoded +
  reuse_fallback + rejected is num_manifest_rows less both (docs/incremental.md
  listed only the rows rejected while the manifest is read, 3 short here)."""
  (tmp_path / 'images').mkdir()
  for i in range(4):
    (tmp_path / f'images/img_{i}.png').write_bytes(_image(i))
  for i in (7, 8):  # copies of img_0's bytes under other names
    (tmp_path / f'images/img_{i}.png').write_bytes(_image(0))
  rows = [(f'images/img_{i}.png', 'cat', i) for i in (0, 1, 2, 3, 7, 8)]
  rows += [('images/img_1.png', 'cat', 1), ('images/gone.png', 'dog', 9)]
  manifest = _manifest(tmp_path / 'm.csv', rows)
  flags = ('--dedupe', 'content', '--max_error_rate', '0.9', '--previous_dataset',
           str(tmp_path / 'latest'), '--previous_dataset_missing', 'full')
  counts = []
  for night in ('n1', 'n2'):
    assert _convert(['--manifest', str(manifest)], tmp_path / night, flags) == EXIT_OK
    info = read_info(tmp_path / night)
    reasons = [json.loads(line)['reason'].split(' ')[0] for line in
               (tmp_path / night / 'rejected.jsonl').read_text().splitlines()]
    reuse = info['reuse']
    decided = reuse['reused'] + reuse['num_encoded'] + reuse['reuse_fallback'] + reuse['rejected']
    counts.append((info['num_manifest_rows'], sorted(reasons), reuse['reused'],
                   reuse['rejected'], decided))
  before = ['duplicate', 'file', 'same', 'same']  # a duplicate key, 2 copies; gone.png
  assert counts == [(8, before, 0, 1, 5), (8, before, 4, 1, 5)]
