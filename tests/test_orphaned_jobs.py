"""A job that outlives its launcher publishes nothing: on a cluster, a job
keeps running when its job server dies, while the launcher fails, takes back
what the job had written and gives up OUT's run lock. dataset_info.json is
written only while the run's lock is still there (WriteInfoFn,
check_lock_held). The real thing, a Flink job whose job server is killed, is
in tests/test_engines_same_dataset.py."""

from __future__ import annotations

import json

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
import pytest

from pipeline import config as opts
from pipeline import convert
from pipeline.cli import EXIT_OK
from pipeline.run_lock import lock_name
from tests.conftest import read_info
from transforms import filesystem
from transforms.write_metadata import RunNotCurrent
from transforms.write_metadata import check_lock_held


def _lock(folder, generation: int, run_id: str) -> tuple:
  name = lock_name(generation)
  (folder / name).write_text(json.dumps({'run_id': run_id, 'pid': 1}) + '\n')
  return name, run_id


def test_the_lock_must_still_name_the_run(tmp_path):
  files = filesystem.FileAccess()
  name, run_id = _lock(tmp_path, 3, 'abc123')
  check_lock_held(files, str(tmp_path), (name, run_id))  # ours: no complaint
  with pytest.raises(RunNotCurrent) as raised:
    check_lock_held(files, str(tmp_path), (name, 'def456'))
  assert str(raised.value) == (
      f'run def456 no longer holds the lock of {tmp_path} ({name} is held by run abc123): '
      f'its launcher ended or gave up the run, so this job does not publish '
      f'dataset_info.json')
  (tmp_path / name).unlink()
  with pytest.raises(RunNotCurrent, match=rf'\({name} is gone\)'):
    check_lock_held(files, str(tmp_path), (name, run_id))
  # Caught half-written (a store without atomic replace): the run is given
  # the benefit of the doubt.
  (tmp_path / name).write_text('{"run_id": "ab')
  check_lock_held(files, str(tmp_path), (name, run_id))


@pytest.mark.slow
def test_a_job_whose_launcher_gave_up_writes_no_dataset_info(sample):
  """The same pipeline as convert's, with a lock that is not there: the job
  fails at the last step and publishes nothing; with the lock, it does."""
  config, _ = opts.parse_convert(['--manifest', str(sample.manifest), '--output_dir',
                                  str(sample.out), '--height', '4', '--width', '4'])
  sample.out.mkdir()
  p = TestPipeline(options=PipelineOptions(['--runner=DirectRunner']))
  convert.build(p, config, lock=(lock_name(0), 'gone0000run'))
  with pytest.raises(Exception, match='run gone0000run no longer holds the lock'):
    p.run().wait_until_finish()
  assert not (sample.out / 'dataset_info.json').exists()
  assert not (sample.out / 'label_map.txt').exists()

  # The launcher's own run (it holds the lock while the job runs) publishes.
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--height', '4', '--width', '4', '--overwrite']) == EXIT_OK
  assert read_info(sample.out)['num_examples'] == 9
