"""A local run of --num_shards N keeps every shard of every split open at once
(pipeline/runs/open_files.py): the run raises its soft limit of open files as
far as it needs, a hard limit too low is a usage error (exit 2, one line,
nothing written), and pipeline.api puts the limit back after its run."""

from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import sys
import textwrap

import pytest

from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.runs import open_files
from tests.conftest import read_info
from tests.conftest import write_image

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'), reason='rlimits')

# The files the run may hold besides its shards, on this machine.
OTHERS = open_files.OTHER_FILES + open_files.FILES_PER_CORE * (os.cpu_count() or 1)


def _hard_at_least(count: int) -> None:
  hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
  if hard != resource.RLIM_INFINITY and hard < count:
    pytest.skip(f'this process may open {hard} files at most')


def _convert(sample, limits: tuple, *flags) -> subprocess.CompletedProcess:
  """The command line, started with these (soft, hard) limits of open files."""
  def limited():
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)
  return subprocess.run(
      [sys.executable, '-m', 'pipeline.convert', '--manifest', str(sample.manifest),
       '--output_dir', str(sample.out), '--height', '4', '--width', '4', '--progress', 'off',
       *flags], cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=limited)


def test_more_shards_than_the_soft_limit_raise_it(sample):
  """1.5x the soft limit of shards, the hard limit above: every shard written
  (the run failed with 'Too many open files' at its first record, exit 1)."""
  soft = 256
  shards = soft + soft // 2
  _hard_at_least(shards + OTHERS)
  done = _convert(sample, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]),
                  '--num_shards', str(shards))
  assert done.returncode == EXIT_OK, done.stderr[-3000:]
  assert done.stderr == ''
  info = read_info(sample.out)
  assert info['num_examples'] == 9
  assert len(info['splits']['train']['shards']) == shards
  assert len(list(sample.out.glob('train-*-of-*.tfrecord'))) == shards


def test_more_shards_than_the_hard_limit_are_a_usage_error_before_anything_is_written(sample):
  """Two splits of 150 shards with room for 100 of them: exit 2 and one line
  naming the largest --num_shards that fits, nothing written (the run
  failed at the first record: exit 1 and a 170-line traceback)."""
  hard = OTHERS + 100
  _hard_at_least(hard)
  done = _convert(sample, (hard, hard), '--num_shards', '150',
                  '--split', 'train=0.5,validation=0.5')
  assert done.returncode == EXIT_USAGE
  assert done.stderr == (
      f'error: --num_shards 150: a local run keeps its 300 shards open at once (150 for '
      f'each of 2 splits), and this process may open {hard} files (ulimit -Hn): give '
      f'--num_shards 50 or fewer, or --num_shards 0 (shards cut at --shard_size_mb), or '
      f'raise the limit\n')
  assert not sample.out.exists()
  # Shards cut by size, or as many as fit, need no more room.
  assert _convert(sample, (hard, hard), '--num_shards', '50',
                  '--split', 'train=0.5,validation=0.5').returncode == EXIT_OK


_API_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    from pipeline import api

    manifest, out, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    result = api.convert(manifest=manifest, output_dir=out, num_shards=shards, height=4,
                         width=4, progress=False)
    print(json.dumps([result.num_examples, len(result.splits['train']['shards']),
                      resource.getrlimit(resource.RLIMIT_NOFILE) == (256, hard)]))
""")


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_run_in_process_puts_the_limit_back(sample):
  shards = 384
  _hard_at_least(shards + OTHERS)
  done = subprocess.run([sys.executable, '-c', _API_SCRIPT, str(sample.manifest),
                         str(sample.out), str(shards)], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert json.loads(done.stdout.splitlines()[-1]) == [9, shards, True]


# ------------------------------------------ a nightly run over many previous shards


def _many_rows(tmp_path: pathlib.Path, count: int) -> pathlib.Path:
  """A manifest of `count` 4x4 PNGs, each its own colour."""
  lines = ['image,label']
  for i in range(count):
    write_image(tmp_path / 'img' / f'{i}.png', colour=(i % 256, i // 256, 7), size=(4, 4))
    lines.append(f'img/{i}.png,c{i % 3}')
  manifest = tmp_path / 'm.csv'
  manifest.write_text('\n'.join(lines) + '\n')
  return manifest


def _nightly(manifest, out, previous, limits: tuple) -> subprocess.CompletedProcess:
  def limited():
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)
  return subprocess.run(
      [sys.executable, '-m', 'pipeline.convert', '--manifest', str(manifest), '--output_dir',
       str(out), '--height', '4', '--width', '4', '--progress', 'off', '--previous_dataset',
       str(previous)], cwd=ROOT, capture_output=True, text=True, timeout=300,
      preexec_fn=limited)


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_nightly_run_over_more_previous_shards_than_the_soft_limit_raises_it(tmp_path):
  """Its reader keeps each previous shard it copies from open: 1.5x the soft
  limit of them failed with 'Too many open files' (exit 1, a traceback, the
  partial output and temp folder left behind). Every record is copied."""
  soft = 256
  shards = soft + soft // 2
  _hard_at_least(shards + OTHERS)
  manifest = _many_rows(tmp_path, shards)
  done = subprocess.run(
      [sys.executable, '-m', 'pipeline.convert', '--manifest', str(manifest), '--output_dir',
       str(tmp_path / 'night1'), '--height', '4', '--width', '4', '--progress', 'off',
       '--num_shards', str(shards)], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert done.returncode == EXIT_OK, done.stderr[-3000:]
  done = _nightly(manifest, tmp_path / 'night2', tmp_path / 'night1',
                  (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
  assert done.returncode == EXIT_OK, done.stderr[-3000:]
  assert done.stderr == ''
  assert f'Reuse: {shards} record(s) copied' in done.stdout
  info = read_info(tmp_path / 'night2')
  assert (info['num_examples'], info['num_rejected']) == (shards, 0)


def test_previous_shards_over_the_hard_limit_are_a_usage_error(tmp_path):
  hard = OTHERS + 100
  _hard_at_least(hard)
  manifest = _many_rows(tmp_path, 150)
  done = subprocess.run(
      [sys.executable, '-m', 'pipeline.convert', '--manifest', str(manifest), '--output_dir',
       str(tmp_path / 'night1'), '--height', '4', '--width', '4', '--progress', 'off',
       '--num_shards', '150'], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert done.returncode == EXIT_OK, done.stderr[-3000:]
  done = _nightly(manifest, tmp_path / 'night2', tmp_path / 'night1', (hard, hard))
  assert done.returncode == EXIT_USAGE
  assert done.stderr == (
      f'error: --previous_dataset {tmp_path / "night1"}: a local run reusing its records '
      f'keeps its shards open at once (150 files), and this process may open {hard} files '
      f'(ulimit -Hn): raise the limit\n')
  assert not (tmp_path / 'night2').exists()
