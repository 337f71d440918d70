"""A manifest of several files read in ranges on Beam's portable job service,
by SDK workers of an EXTERNAL worker pool (as on a cluster): the same dataset
as the DirectRunner's.

Two harnesses reading ranges side by side are shown on the DirectRunner's
engine (tests/test_manifest_ranges.py, --direct_num_workers 2: two SDK
worker processes). Beam 2.77's Python job service cannot show it: it runs
each job on FnApiRunner.run_via_runner_api, which keeps one worker per
environment whatever --direct_num_workers or --sdk_worker_parallelism say,
so an EXTERNAL pool gets one StartWorker request per job.
"""

from __future__ import annotations

import gzip
import os

import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import rejected_lines
from tests.test_manifest_ranges import csv_text
from tests.test_manifest_ranges import digests
from tests.test_manifest_ranges import make_images
from tests.test_runners import Service
from tests.test_runners import describe
from tests.test_runners import run_module
from transforms.manifest_ranges import RANGE_LOG_ENV

# An engine test (Beam's portable job service): make test-integration.
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.xdist_group('runners')]


def test_a_pattern_on_an_external_worker_pool_gives_the_direct_runners_dataset(
    tmp_path, monkeypatch):
  rows = make_images(tmp_path)
  parts = tmp_path / 'parts'
  parts.mkdir()
  (parts / 'p0.csv').write_bytes(csv_text(rows[:6]))
  (parts / 'p1.csv.gz').write_bytes(gzip.compress(csv_text(rows[6:8])))
  (parts / 'p2.csv').write_bytes(csv_text(rows[8:], crlf=True))
  pattern = str(parts / 'p*.csv*')
  flags = ['--num_shards', '2', '--write_index', '--max_error_rate', '0.5',
           '--shuffle', 'off', '--progress', 'off', '--height', '8', '--width', '8']
  direct = tmp_path / 'direct'
  assert convert.main(['--manifest', pattern, '--output_dir', str(direct), *flags]) == EXIT_OK

  log = tmp_path / 'ranges'
  log.mkdir()
  monkeypatch.setenv(RANGE_LOG_ENV, str(log))  # the pool's workers inherit it
  services = tmp_path / 'services'
  services.mkdir()
  job_service = Service('job_service', 'apache_beam.runners.portability.local_job_service_main',
                        '--port', services, ['--staging_dir', str(services / 'staging')])
  pool = Service('worker_pool', 'apache_beam.runners.worker.worker_pool_main',
                 '--service_port', services)
  try:
    job_service.start()
    pool.start()
    portable = tmp_path / 'portable'
    monkeypatch.delenv(RANGE_LOG_ENV)  # not in the launcher
    result = run_module('pipeline.convert', '--manifest', pattern, '--output_dir', portable,
                        *flags, '--runner=PortableRunner',
                        f'--job_endpoint=localhost:{job_service.port}',
                        '--environment_type=EXTERNAL',
                        f'--environment_config=localhost:{pool.port}')
    assert result.returncode == EXIT_OK, describe(result, job_service, pool)
  finally:
    pool.stop()
    job_service.stop()
  assert digests(portable) == digests(direct)
  assert sorted(map(str, rejected_lines(portable))) == sorted(map(str, rejected_lines(direct)))
  reads = [(log / name).read_text().split() for name in sorted(os.listdir(log))]
  # one read per file (each smaller than a range), all in the pool's worker
  assert sorted(os.path.basename(path) for _, path, *_ in reads) == [
      'p0.csv', 'p1.csv.gz', 'p2.csv']
  assert len({pid for pid, *_ in reads}) == 1 and reads[0][0] != str(os.getpid())
