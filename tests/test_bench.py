"""The benchmark's arithmetic (its runs are not tests: no timing is asserted)."""

import os
import struct
import sys

import numpy as np
from PIL import Image
import pytest

from bench import bench
from bench import quality
from bench.common import write_record
from transforms.core.example_proto import serialize_example


def test_steady_rate_removes_the_startup_run():
  result = {'status': 'ok', 'seconds': 12.0}
  bench.add_steady_rate(result, {'status': 'ok', 'seconds': 2.0}, 1010)
  assert result['startup_seconds'] == 2.0
  assert result['steady_images_per_s'] == 100.0  # (1010 - 10) images in 10 s


def test_no_steady_rate_from_a_failed_startup_run():
  result = {'status': 'ok', 'seconds': 12.0}
  bench.add_steady_rate(result, {'status': 'failed', 'seconds': 0.5}, 1010)
  assert 'startup_seconds' not in result and 'steady_images_per_s' not in result


def test_ratios_per_rate_and_missing_stages():
  stages = {'convert': {'images_per_s': 90.0, 'steady_images_per_s': 95.0},
            'ceiling': {'images_per_s': 100.0, 'steady_images_per_s': 100.0},
            'seed': {'images_per_s': 45.0},
            'validate': {'status': 'skipped'}, 'bare': {'images_per_s': 10.0}}
  assert bench.stage_ratios(stages) == {
      'convert/ceiling': 0.9, 'convert/seed': 2.0, 'convert/tfdata': None,
      'validate/bare': None}
  assert bench.stage_ratios(stages, 'steady_images_per_s') == {
      'convert/ceiling': 0.95, 'convert/seed': None, 'convert/tfdata': None,
      'validate/bare': None}


def test_startup_manifest_holds_the_first_images_with_absolute_paths(tmp_path):
  (tmp_path / 'm.csv').write_text(
      'image,label\n' + ''.join(f'img/{i}.jpg,c{i % 2}\n' for i in range(30)))
  small = bench.startup_manifest(str(tmp_path / 'm.csv'), str(tmp_path / 'work'))
  rows = bench.read_manifest(small)
  assert len(rows) == bench.STARTUP_IMAGES
  assert rows[0] == (str(tmp_path / 'img' / '0.jpg'), 'c0')
  assert rows[-1] == (str(tmp_path / 'img' / '9.jpg'), 'c1')


def test_crop_box_is_centred_with_the_target_aspect():
  assert quality.crop_box((400, 200), (100, 100)) == (100, 0, 300, 200)
  assert quality.crop_box((200, 400), (100, 50)) == (0, 150, 200, 250)


def test_mean_pixel_error_against_pillows_reference(tmp_path):
  rng = np.random.default_rng(3)
  sources = []
  for i in range(3):
    path = tmp_path / f'{i}.png'
    Image.fromarray(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)).save(path)
    sources.append((str(path), 'c'))
  exact = tmp_path / 'exact.tfrecord'
  off = tmp_path / 'off.tfrecord'
  with open(exact, 'wb') as f, open(off, 'wb') as g:
    for i, (path, _) in enumerate(sources):
      pixels = np.clip(np.round(quality.reference(path, 20, 10)), 0, 255).astype(np.uint8)
      brighter = np.clip(pixels.astype(int) + 4, 0, 255).astype(np.uint8)
      for out, image in ((f, pixels), (g, brighter)):
        write_record(out, serialize_example({
            'image/encoded': ('bytes', image.tobytes()), 'image/key': ('bytes', f'{i}.png')}))
  def stored(path):
    return quality.tfrecord_images([str(path)], str(tmp_path))
  error = quality.mean_pixel_error(stored(exact), sources, 'raw', 20, 10)
  assert 0 < error <= 0.5  # rounding only
  shifted = quality.mean_pixel_error(stored(off), sources, 'raw', 20, 10)
  assert 3.0 < shifted <= 4.5
  assert quality.mean_pixel_error(stored(exact), sources, 'raw', 20, 10, sample=0) is None


def test_webdataset_samples_are_traced_back_to_their_file_urls(tmp_path):
  import io
  import json
  import tarfile
  path = tmp_path / '00000.tar'
  with tarfile.open(path, 'w') as tar:
    for name, data in (('000.jpg', b'jpeg0'), ('000.json', json.dumps(
        {'url': 'file:///data/a.jpg'}).encode()), ('001.json', b'{"url": "file:///b.jpg"}')):
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  assert list(quality.webdataset_images([str(path)])) == [('/data/a.jpg', b'jpeg0')]


def test_a_peer_without_its_venv_is_skipped(tmp_path, monkeypatch):
  monkeypatch.setattr(bench, 'PROJECT_ROOT', str(tmp_path))
  assert bench.peer_command('tfds', 'm.csv', 'out') is None
  command = bench.peer_command('convert', 'm.csv', 'out')
  assert command[1:3] == ['-m', 'pipeline.convert']
  assert command[-6:] == ['--resize_mode', 'crop', '--height', '224', '--width', '224']


def test_the_incremental_bench_changes_what_it_says_and_never_the_cached_corpus(tmp_path):
  from bench import incremental
  from bench.corpus import relative_path
  cache = tmp_path / 'cache'
  rows = [(relative_path(i), f'class_{i % 10:02d}') for i in range(30)]
  for image, _ in rows:
    (cache / image).parent.mkdir(parents=True, exist_ok=True)
    (cache / image).write_bytes(b'jpeg ' + image.encode())
  manifest = incremental._write(str(cache / 'manifest.csv'), rows)
  night1 = incremental.scratch_corpus(manifest, str(tmp_path / 'scratch'))
  changed = {'new': 2, 'relabelled': 3, 'rewritten': 1, 'deleted': 4}
  night2 = incremental._read(incremental.night2(night1, changed))
  assert len(night2) == 30 - 4 + 2
  assert len(set(night2) - set(rows)) == 3 + 2  # relabelled rows and new ones
  rewritten = [image for image, _ in rows
               if (tmp_path / 'scratch' / image).read_bytes() != b'jpeg ' + image.encode()]
  assert len(rewritten) == 1
  assert (cache / rewritten[0]).read_bytes() == b'jpeg ' + rewritten[0].encode()
  # The floor run's rows are night 1's first ones, all unchanged on night 2.
  floor = incremental._read(incremental.floor_manifest(night1))
  assert floor == rows[:incremental.FLOOR_ROWS]
  assert set(floor) <= set(night2) and not set(image for image, _ in floor) & set(rewritten)


def test_the_reuse_floor_copies_every_unchanged_row_and_nothing_else(tmp_path):
  from bench import incremental
  from bench import reuse_floor
  from pipeline import convert
  from tests.conftest import write_image
  rows = []
  for i in range(6):
    write_image(tmp_path / 'corpus' / f'img_{i}.png', (i * 40, 10, 200 - i * 30))
    rows.append((f'img_{i}.png', f'class_{i % 2}'))
  night1 = tmp_path / 'night1'
  manifest = incremental._write(str(tmp_path / 'corpus' / 'night1.csv'), rows)
  assert convert.main(['--manifest', manifest, '--output_dir', str(night1), '--height', '8', '--width', '8',
                       '--progress', 'off', '--shuffle', 'off']) == 0
  rows[2] = ('img_2.png', 'class_1')  # relabelled: not reused
  night2 = incremental._write(str(tmp_path / 'corpus' / 'night2.csv'), rows[:5])
  reused, _, written = reuse_floor.reuse_rows(night2, reuse_floor.previous_records(str(night1)))
  assert reused == 4
  shard = (night1 / 'train-00000-of-00001.tfrecord').read_bytes()
  assert written == b''.join(_records(shard)[i] for i in (0, 1, 3, 4))
  listed = sorted(os.listdir(night1))
  assert reuse_floor.copy_floor_us(str(night1)) > 0
  assert sorted(os.listdir(night1)) == listed  # its copy of the shards is gone


def _records(shard: bytes) -> list:
  """The framed records of a plain shard, in order."""
  records, at = [], 0
  while at < len(shard):
    length, = struct.unpack_from('<Q', shard, at)
    records.append(shard[at:at + length + 16])
    at += length + 16
  return records


_BURNS_IN_A_CHILD = """
import multiprocessing, sys, time


def burn(seconds):
  start = time.process_time()
  while time.process_time() - start < seconds:
    pass
  time.sleep(1)  # the sampler reads a process's CPU while it lives


if __name__ == '__main__':
  child = multiprocessing.get_context('spawn').Process(target=burn, args=(0.6,))
  child.start()
  child.join()
"""


def test_the_cpu_of_each_process_is_told_apart(tmp_path):
  """bench.measure sums each process's own CPU by role: the command itself
  (launcher) and its Python child, which does nearly all the work here."""
  from bench.engines import cpu_ms_per_row
  from bench.measure import run_measured
  script = tmp_path / 'burns.py'
  script.write_text(_BURNS_IN_A_CHILD)
  result = run_measured([sys.executable, str(script)], str(tmp_path / 'log'))
  assert result['returncode'] == 0, result
  by_role = result['cpu_by_process']
  assert sorted(by_role) == ['launcher', 'python children']
  assert by_role['python children'] >= 0.55 > by_role['launcher']  # 10 ms ticks
  assert sum(by_role.values()) <= result['cpu_seconds'] + 0.05  # as the kernel counts them
  assert cpu_ms_per_row({'launcher': 1.0}, {'launcher': 3.0, 'java': 4.0}, 2000) == {
      'java': 2.0, 'launcher': 1.0}


def test_the_engines_rates_leave_out_the_startup_runs_images():
  """--startup_images K: the steady rate and each process's CPU per row are
  over the N - K rows between the two runs."""
  from bench.engines import engine_row
  from bench.engines import launcher_lines
  def run(seconds, cpu):
    return {'seconds': seconds, 'peak_pss_mib': 300.0, 'cpu_seconds': sum(cpu.values()),
            'other_cpu_seconds': 0.1, 'cpu_by_process': cpu}
  startup = run(5.0, {'launcher': 3.0, 'python children': 1.0})
  whole = run(14.0, {'launcher': 3.9, 'python children': 10.0})
  row = engine_row(startup, whole, 20_000, 2_000)
  assert row['startup_seconds'] == 5.0 and row['images_per_s'] == round(20_000 / 14, 1)
  assert row['steady_images_per_s'] == 2000.0  # 18,000 rows in 14 - 5 s
  assert row['cpu_ms_per_row'] == {'launcher': 0.05, 'python children': 0.5}
  # The default K, 10: the same runs, other rows between.
  assert engine_row(startup, whole, 20_000)['steady_images_per_s'] == round(19_990 / 9, 1)
  assert engine_row(startup, whole, 2_000, 2_000)['steady_images_per_s'] is None
  assert engine_row(startup, whole, 2_000, 2_000)['cpu_ms_per_row'] == {}
  lines = launcher_lines({'direct': {**row, 'steady_vs_direct': 1.0},
                          'over': {'cpu_ms_per_row': {'launcher': 0.051}}, 'none': {}},
                         20_000, 2_000)
  assert lines[0].startswith('Launcher CPU per row, marginal over the 2000-image run, '
                             'on 18000 rows')
  assert lines[1:] == ['- direct: 0.050 ms a row: met', '- over: 0.051 ms a row: NOT met',
                       '- none: no figure']


def test_the_engines_command_line_picks_the_tiny_corpus_case():
  from bench import engines
  default = engines.parse_args([])
  assert (default.corpus, default.case, default.startup_images) == ('photo', 'jpeg224', 10)
  assert default.engines == list(engines.ENGINES)
  tiny = engines.parse_args(['--engines', 'direct', '--corpus', 'tiny', '--startup_images',
                             '2000', '--num_images', '20000'])
  assert (tiny.case, tiny.startup_images, tiny.engines) == ('raw16', 2000, ['direct'])
  assert engines.parse_args(['--corpus', 'tiny', '--case', 'jpeg224']).case == 'jpeg224'
  with pytest.raises(SystemExit):
    engines.parse_args(['--startup_images', '0'])
  assert default.startup_repeat == 3
  with pytest.raises(SystemExit):
    engines.parse_args(['--startup_repeat', '0'])


def test_the_engines_bench_takes_the_median_of_three_start_up_runs(monkeypatch):
  import contextlib

  from bench import engines
  startup_seconds = iter([9.0, 11.0, 8.5, 10.5])  # the start-up runs' times, in order
  made = []

  def convert_once(engine, manifest, num_images, *args):
    made.append((engine, num_images))
    seconds = next(startup_seconds) if num_images == 10 else 20.0
    return {'seconds': seconds, 'peak_pss_mib': 1.0, 'cpu_seconds': seconds,
            'other_cpu_seconds': 0.0, 'cpu_by_process': {'launcher': seconds}}

  monkeypatch.setattr(engines, 'convert_once', convert_once)
  monkeypatch.setattr(engines, 'engine_context',
                      lambda engine, work: contextlib.nullcontext(([], [])))
  rows = engines.measure(['direct'], 'unused', 1010, None, 'unused',
                         corpus=lambda folder, n: (f'manifest-{n}', {}))
  assert made == [('direct', 10), ('direct', 1010), ('direct', 10), ('direct', 10)]
  # the median start-up (9.0 of 9.0, 11.0, 8.5): 1,000 rows in 20 - 9 s
  assert rows['direct']['startup_seconds'] == 9.0
  assert rows['direct']['steady_images_per_s'] == round(1000 / 11.0, 1)
  assert rows['direct']['cpu_ms_per_row'] == {'launcher': 11.0}


def test_the_tiny_corpus_is_16x16_pngs_with_their_labels(tmp_path):
  from bench import corpus
  manifest, info = corpus.ensure_tiny_corpus(str(tmp_path), 25)
  folder = tmp_path / 'tiny16-v1'
  assert manifest == str(folder / 'manifest-25.csv')
  assert info['generated_now'] == 25
  rows = bench.read_manifest(manifest)
  assert len(rows) == 25
  assert {label for _, label in rows} == {f'class_{i:02d}' for i in range(10)}
  for index, (path, label) in enumerate(rows):
    assert path == str(folder / 'images' / label / f'{index:07d}.png')
    assert label == f'class_{index % 10:02d}'
    with Image.open(path) as img:
      assert (img.format, img.mode, img.size) == ('PNG', 'RGB', (16, 16))
  with Image.open(rows[0][0]) as first, Image.open(rows[1][0]) as second:
    assert first.tobytes() != second.tobytes()
    assert first.tobytes() == corpus.make_tiny_image(0).tobytes()  # a function of the index
  # A smaller corpus is the first rows of the cached one: nothing made again.
  small, again = corpus.ensure_tiny_corpus(str(tmp_path), 12)
  assert again['generated_now'] == 0 and bench.read_manifest(small) == rows[:12]
  # Nothing but the images and the manifests, and nothing beside the folder.
  files = {str(p.relative_to(folder)) for p in folder.rglob('*') if p.is_file()}
  assert files == {'manifest-25.csv', 'manifest-12.csv'} | {
      corpus.tiny_relative_path(i) for i in range(25)}
  assert [p.name for p in tmp_path.iterdir()] == ['tiny16-v1']


def test_the_marginal_cost_of_a_row_is_taken_between_two_sizes():
  from bench import incremental
  # 6,000 more reused rows took 0.24 s more: 40 us a row, start-up gone.
  assert incremental.marginal_us_per_row((10.0, 5_940), (10.24, 11_940)) == 40.0
  assert incremental.marginal_us_per_row((10.0, 5_940), (9.94, 11_940)) == -10.0
  assert incremental.marginal_us_per_row((10.0, 100), (12.0, 100)) is None
  assert incremental.marginal_us_per_row((10.0, None), (12.0, 100)) is None

  def sized(full, metadata, content, rows, content_exit=0):
    reused = rows - 80  # night 2's rows less those changed
    return {'runs': {  # CPU seconds: half the wall time
        'full': {'returncode': 0, 'seconds': full, 'cpu_seconds': full / 2, 'rows': rows},
        'metadata': {'returncode': 0, 'seconds': metadata, 'cpu_seconds': metadata / 2,
                     'reuse': {'reused': reused}},
        'content': {'returncode': content_exit, 'seconds': content, 'cpu_seconds': content / 2,
                    'reuse': {'reused': reused}}}}
  costs = incremental.marginal_costs({12_000: sized(60.0, 7.3, 2.0, 12_020, content_exit=1),
                                      6_000: sized(30.0, 7.0, 15.0, 6_020)})
  assert costs['full'] == {'us_per_row': 5000.0, 'cpu_us_per_row': 2500.0,
                           'rows': [6_020, 12_020], 'comparable': True}
  assert costs['metadata'] == {'us_per_row': 50.0, 'cpu_us_per_row': 25.0,
                               'rows': [5_940, 11_940], 'comparable': True,
                               'target_us': 40.0, 'target_met': False}
  assert costs['content'] == {'us_per_row': None, 'cpu_us_per_row': None,
                              'rows': [5_940, None], 'comparable': False}  # a failed run
  met = incremental.marginal_costs({1_200: sized(12.0, 6.0, 8.0, 1_220),
                                    600: sized(10.0, 5.988, 7.0, 620)})['metadata']
  assert (met['us_per_row'], met['target_met']) == (20.0, True)
  # Seen with hard-linked scratch corpora: at 600 nothing reused, 1120 at 1200.
  small = sized(10.0, 8.4, 6.4, 620)
  small['runs']['metadata']['reuse']['reused'] = 0
  unlike = incremental.marginal_costs({1_200: sized(12.2, 6.2, 8.8, 1_220), 600: small})
  assert unlike['metadata'] == {'us_per_row': -1929.8, 'cpu_us_per_row': -964.9,
                                'rows': [0, 1_140], 'comparable': False,
                                'target_us': 40.0, 'target_met': False}


def test_a_reused_row_is_set_beside_the_plain_loop_of_the_same_hour(capsys):
  """The plain loop's figure, and a reused row as a multiple of it, are
  printed with the marginal costs (the VM's speed moves both alike)."""
  from bench import incremental
  runs = {'metadata': {'speedup': 7.5}, 'full': {}, 'content': {'speedup': 5.0}}
  marginal = {'metadata': {'us_per_row': 90.0, 'cpu_us_per_row': 88.0,
                           'rows': [5_920, 11_920], 'comparable': True,
                           'target_us': 40.0, 'target_met': False}}
  incremental.print_marginal({6_000: {'runs': runs}, 12_000: {'runs': runs}}, marginal,
                             {'us_per_row': 60.0, 'all_us': [61.0, 60.0],
                              'copy_floor_us': 21.5, 'copy_floor_all_us': [21.5, 24.0]},
                             'Some CPU')
  out = capsys.readouterr().out
  assert '  the bytes    21.5 us a record at 12000' in out
  assert '   90.0 us a reused row (CPU 88.0 us)' in out
  assert 'plain loop    60.0 us a row at 12000' in out
  assert 'this machine: Some CPU' in out
  assert "metadata's reused row is 1.50x it" in out
  incremental.print_marginal({6_000: {'runs': runs}, 12_000: {'runs': runs}}, marginal)
  assert 'plain loop' not in capsys.readouterr().out


def test_a_copied_scratch_corpus_shares_no_inode_with_the_cache(tmp_path):
  """The metadata fingerprint holds the inode's ctime: two sizes' scratch
  corpora linked to one cache change each other's fingerprints."""
  from bench import incremental
  (tmp_path / 'cache' / 'images').mkdir(parents=True)
  (tmp_path / 'cache' / 'images' / 'a.jpg').write_bytes(b'jpeg a')
  manifest = incremental._write(str(tmp_path / 'cache' / 'm.csv'), [('images/a.jpg', 'c')])
  cached = (tmp_path / 'cache' / 'images' / 'a.jpg').stat().st_ino
  incremental.scratch_corpus(manifest, str(tmp_path / 'linked'))
  incremental.scratch_corpus(manifest, str(tmp_path / 'copied'), copy=True)
  assert (tmp_path / 'linked' / 'images' / 'a.jpg').stat().st_ino == cached
  copied = tmp_path / 'copied' / 'images' / 'a.jpg'
  assert copied.stat().st_ino != cached and copied.read_bytes() == b'jpeg a'


def test_the_incremental_sizes_option():
  args = bench.parse_args(['--incremental_sizes', '12000,6000'])
  assert args.incremental and args.incremental_sizes == [6_000, 12_000]
  assert args.num_images is None
  assert bench.parse_args(['--incremental']).incremental_sizes is None
  assert bench.parse_args([]).cases == ['raw300', 'jpeg224']  # raw16 is the engines' case
  for wrong in (['--incremental_sizes', '6000'], ['--incremental_sizes', '6000,6000'],
                ['--incremental_sizes', '6000,0'],
                ['--incremental_sizes', '6000,12000', '--num_images', '100']):
    with pytest.raises(SystemExit):
      bench.parse_args(wrong)
