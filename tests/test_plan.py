"""bench.plan: a job's size on paper from a bench JSON (a fixture here, no timing)."""

import json
import pathlib
import subprocess
import sys

import pytest

from bench import plan

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / 'tests' / 'data' / 'bench_fixture.json'


@pytest.fixture(scope='module')
def figures() -> dict:
  return json.loads(FIXTURE.read_text())


def test_estimate_from_the_measured_rate_output_and_memory(figures):
  e = plan.estimate(figures, images=1_000_000, workers=10, vcpus=4, startup_minutes=4)
  assert e['rate_per_core'] == 250.0  # steady 500 images/s on 2 cores
  assert e['bytes_per_image'] == 1000 * 2**20 / 4000
  # 1M / (250 x 10 x 4) = 100 s, after 4 min of start-up
  assert e['dataflow_minutes'] == pytest.approx(4 + 100 / 60)
  assert e['dataflow_vcpu_hours'] == pytest.approx(40 * (4 / 60 + 100 / 3600))
  assert e['output_gib'] == pytest.approx(1_000_000 * 1000 / 4000 / 1024)
  assert e['num_shards'] == 1954  # 250,000 MiB / 128 MiB, rounded up
  assert e['shard_mib'] == pytest.approx(250_000 / 1954)
  assert e['local_minutes'] == pytest.approx((2 + 1_000_000 / 500) / 60)
  # (218 - 200) MiB over 12,000 more rows
  assert e['bytes_per_row'] == pytest.approx(18 * 2**20 / 12000)
  assert e['base_mib'] == pytest.approx(194.0)
  assert e['rows_per_gib'] == pytest.approx(2**30 / (18 * 2**20 / 12000))
  assert e['local_max_rows'] == int((16 * 0.8 * 2**30 - 194 * 2**20) / (18 * 2**20 / 12000))


def test_render_names_every_figure(figures):
  text = plan.render(plan.estimate(figures, 10_000_000, 50, 8), 4)
  assert text.splitlines() == [
      'From the bench (raw300, 4,000 images on 2 cores): 250 images/s per core once '
      'started, peak PSS 200 MiB, 262.1 KB of output per image.',
      'Dataflow, 10,000,000 images on 50 workers x 8 vCPUs (assuming a vCPU converts as '
      'fast as a bench core, and 4 min for workers to start): 6 min, 37.8 vCPU-hours.',
      'Output: 2441.4 GiB; --num_shards 19532 gives 128 MiB per shard (aim for 100-200 MB: '
      'fewer, larger files for tf.data; at least as many shards as reading hosts).',
      'Locally, on 2 cores as in the bench: 333 min for 10,000,000 images.',
      'Local memory: 1.6 KB per manifest row (682,667 rows per GiB) over 194 MiB: 14.84 GiB '
      'peak for 10,000,000 rows; this machine (16.0 GiB, 80% usable) holds about '
      '8,608,800 rows.',
  ]


def test_command_line_reads_the_json(tmp_path):
  done = subprocess.run([sys.executable, '-m', 'bench.plan', '--images', '1000000',
                         '--workers', '10', '--vcpus', '4', '--bench_json', str(FIXTURE)],
                        cwd=ROOT, capture_output=True, text=True, timeout=60)
  assert done.returncode == 0, done.stderr
  assert 'Dataflow, 1,000,000 images on 10 workers x 4 vCPUs' in done.stdout
  missing = subprocess.run([sys.executable, '-m', 'bench.plan', '--images', '1', '--workers',
                            '1', '--vcpus', '1', '--bench_json', str(tmp_path / 'none.json')],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
  assert missing.returncode == 2
  assert missing.stderr == f'error: {tmp_path / "none.json"} does not exist: run make bench first\n'


def test_a_case_the_bench_did_not_finish_is_an_error(figures):
  with pytest.raises(plan.PlanError, match="convert did not finish in the bench for case 'jpeg224'"):
    plan.estimate(figures, 1000, 1, 1, case='jpeg224')
  with pytest.raises(plan.PlanError, match="no convert figures for case 'png512'"):
    plan.estimate(figures, 1000, 1, 1, case='png512')


def test_without_memory_scaling_the_per_row_memory_is_not_guessed(figures):
  partial = {k: v for k, v in figures.items() if k != 'memory_scaling'}
  e = plan.estimate(partial, 1000, 1, 1)
  assert 'bytes_per_row' not in e
  assert plan.render(e).splitlines()[-1] == (
      'Local memory per manifest row: not measured (make bench BENCH_ARGS=--memory_scaling).')


def test_a_disturbed_bench_is_flagged(figures):
  calm = plan.render(plan.estimate(figures, 1000, 1, 1))
  assert 'Warning' not in calm
  busy = json.loads(json.dumps(figures))
  busy['cases']['raw300']['stages']['convert']['other_cpu_percent'] = 88.0
  assert ("Warning: other processes used 88% of the CPU during the bench's convert"
          in plan.render(plan.estimate(busy, 1000, 1, 1)))
