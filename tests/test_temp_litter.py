"""A command line run leaves nothing in the system temp folder (only OUT is written)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest

from tests.conftest import read_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tree(folder) -> list:
  return sorted(os.path.relpath(os.path.join(d, n), folder)
                for d, dirs, files in os.walk(folder) for n in dirs + files)


def _run(module: str, args: list, temp) -> subprocess.CompletedProcess:
  """`python -m module args` with TMPDIR = temp; asserts temp is as it was."""
  before = _tree(temp)
  env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=ROOT)
  done = subprocess.run([sys.executable, '-m', module] + [str(a) for a in args],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
  assert _tree(temp) == before, done.stderr
  return done


@pytest.fixture
def system_temp(tmp_path):
  temp = tmp_path / 'system_temp'
  temp.mkdir()
  (temp / 'someone_elses_file').write_text('kept')
  return temp


@pytest.mark.slow
def test_convert_and_validate_leave_no_temp_files(sample, system_temp):
  convert = _run('pipeline.convert', ['--manifest', sample.manifest, '--output_dir',
                                      sample.out, '--encoding', 'jpeg'], system_temp)
  assert convert.returncode == 0, convert.stderr
  assert read_info(sample.out)['num_examples'] == 9
  validate = _run('pipeline.validate', ['--input_dir', sample.out], system_temp)
  assert validate.returncode == 0, validate.stderr
  assert (system_temp / 'someone_elses_file').read_text() == 'kept'


@pytest.mark.parametrize('module, args', [
    ('pipeline.convert', ['--output_dir', 'out']),
    ('pipeline.validate', ['--input_dir', 'no_such_folder']),
])
def test_usage_errors_leave_no_temp_files(module, args, system_temp):
  done = _run(module, args, system_temp)
  assert done.returncode == 2
  assert done.stderr.startswith('error: ')


@pytest.mark.slow
def test_failed_run_leaves_no_temp_files(tmp_path, system_temp):
  rows = ''.join(f'img{i}.png,cat\n' for i in range(20000))
  data = gzip.compress(('image,label\n' + rows).encode())
  (tmp_path / 'm.csv.gz').write_bytes(data[:len(data) // 2])
  done = _run('pipeline.convert', ['--manifest', tmp_path / 'm.csv.gz', '--output_dir',
                                   tmp_path / 'out', '--max_error_rate', '1'], system_temp)
  assert done.returncode == 1
  assert 'EOFError' in done.stderr
  assert not (tmp_path / 'out' / 'dataset_info.json').exists()
