"""validate --recompute reads its sampled records shard by shard
(transforms/core/recompute.in_shard_order): in the sample's order (by
SHA-256) its reader kept every shard open at once, and on a dataset of more
shards than the files a process may open (`ulimit -n`: 1,024 on many
desktops) the sources then failed to open: each a false recompute_mismatch
("Too many open files"), validate exit 1 on a sound dataset."""

from __future__ import annotations

import os
import pathlib
import resource
import subprocess
import sys

import pytest

from pipeline.errors import EXIT_OK
from tests.conftest import write_image
from transforms.core import recompute
from transforms.core.reuse import PreviousRecord

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'), reason='rlimits')


def _record(shard: str, offset: int) -> PreviousRecord:
  fields = dict.fromkeys(PreviousRecord._fields, '')
  fields.update(split='train', shard_path=shard, compressed=False, ordinal=0, offset=offset,
                length=1)
  return PreviousRecord(**fields)


class _Reader:
  """What in_shard_order asks of a ShardReader: close()."""

  def __init__(self):
    self.closed = 0

  def close(self):
    self.closed += 1


def test_records_are_taken_shard_by_shard_and_reported_in_the_sample_order():
  sampled = [('train', f'k{i}', _record(f's{i % 3}', 100 - i)) for i in range(9)]
  reader, taken, closes = _Reader(), [], []
  for index, _ in recompute.in_shard_order(sampled, reader):
    taken.append(index)
    closes.append(reader.closed)
  # by shard, then offset; the reader closed once before each shard
  assert taken == [6, 3, 0, 7, 4, 1, 8, 5, 2]
  assert closes == [1, 1, 1, 2, 2, 2, 3, 3, 3]
  found_at = [([f'p{i}'], [f'w{i}'] if i % 2 else []) for i in range(9)]
  problems, warnings = ['recount'], []
  recompute.in_sample_order(found_at, problems, warnings)
  assert problems == ['recount'] + [f'p{i}' for i in range(9)]
  assert warnings == ['w1', 'w3', 'w5', 'w7']


def test_recompute_of_more_shards_than_the_limit_of_open_files_finds_no_problem(tmp_path):
  shards, limit = 300, 200
  hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
  if hard != resource.RLIM_INFINITY and hard < shards + 200:
    pytest.skip(f'this process may open {hard} files at most')
  lines = ['image,label']
  for i in range(shards):
    write_image(tmp_path / 'img' / f'{i}.png', colour=(i % 256, i // 256, 9), size=(4, 4))
    lines.append(f'img/{i}.png,c{i % 2}')
  (tmp_path / 'm.csv').write_text('\n'.join(lines) + '\n')
  out = tmp_path / 'out'
  done = subprocess.run(
      [sys.executable, '-m', 'pipeline.convert', '--manifest', str(tmp_path / 'm.csv'),
       '--output_dir', str(out), '--height', '4', '--width', '4', '--progress', 'off',
       '--num_shards', str(shards)], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert done.returncode == EXIT_OK, done.stderr[-3000:]

  def limited():
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
  done = subprocess.run(
      [sys.executable, '-m', 'pipeline.validate', '--input_dir', str(out), '--recompute',
       '1.0'], cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=limited)
  assert done.returncode == EXIT_OK, (done.stdout + done.stderr)[-3000:]
  assert f'--recompute: {shards} record(s) converted again from their sources and compared ' \
         'byte for byte.' in done.stdout
  # the shards, dataset_info, label map, rejected rows, sidecar and the report: no more
  assert len(os.listdir(out)) == shards + 5
