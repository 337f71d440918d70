"""The benchmark's arithmetic (its runs are not tests: no timing is asserted)."""

from bench import bench


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
      'convert/ceiling': 0.9, 'convert/seed': 2.0, 'validate/bare': None}
  assert bench.stage_ratios(stages, 'steady_images_per_s') == {
      'convert/ceiling': 0.95, 'convert/seed': None, 'validate/bare': None}


def test_startup_manifest_holds_the_first_images_with_absolute_paths(tmp_path):
  (tmp_path / 'm.csv').write_text(
      'image,label\n' + ''.join(f'img/{i}.jpg,c{i % 2}\n' for i in range(30)))
  small = bench.startup_manifest(str(tmp_path / 'm.csv'), str(tmp_path / 'work'))
  rows = bench.read_manifest(small)
  assert len(rows) == bench.STARTUP_IMAGES
  assert rows[0] == (str(tmp_path / 'img' / '0.jpg'), 'c0')
  assert rows[-1] == (str(tmp_path / 'img' / '9.jpg'), 'c1')
