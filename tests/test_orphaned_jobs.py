"""A job that outlives its launcher publishes nothing: on a cluster, a job
keeps running when its job server dies, while the launcher fails, takes back
what the job had written and gives up OUT's run lock. dataset_info.json is
written only while the run's lock is still there (WriteInfoFn,
check_lock_held), and the launcher cancels its job on a Flink cluster
(pipeline/engines/flink_jobs.py). The real thing, a Flink job whose job server or
TaskManager is killed, is in tests/test_engines_same_dataset.py."""

from __future__ import annotations

import http.server
import json
import threading

from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.options.pipeline_options import PipelineOptions
import pytest

from pipeline import convert
from pipeline.configuration import config as opts
from pipeline.engines import flink_jobs
from pipeline.errors import EXIT_OK
from pipeline.runs.run_lock import lock_name
from tests.conftest import SubmittedPipeline
from tests.conftest import free_port
from tests.conftest import local_pipeline
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
  p = local_pipeline()
  convert.build(p, config, lock=(lock_name(0), 'gone0000run'))
  with pytest.raises(Exception, match='run gone0000run no longer holds the lock'):
    p.run().wait_until_finish()
  assert not (sample.out / 'dataset_info.json').exists()
  assert not (sample.out / 'label_map.txt').exists()

  # The launcher's own run (it holds the lock while the job runs) publishes.
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--height', '4', '--width', '4', '--overwrite']) == EXIT_OK
  assert read_info(sample.out)['num_examples'] == 9


class _FakeFlink(http.server.BaseHTTPRequestHandler):
  """Flink's REST API as far as the launcher uses it: /jobs/overview, cancel."""
  jobs: list = []
  cancelled: list = []
  hidden_for = 0  # GETs that still list no job (a job still being submitted)

  def do_GET(self):
    assert self.path == '/jobs/overview'
    if type(self).hidden_for > 0:
      type(self).hidden_for -= 1
      self._reply(200, {'jobs': []})
      return
    self._reply(200, {'jobs': self.jobs})

  def do_PATCH(self):
    jid, _, query = self.path[len('/jobs/'):].partition('?')
    assert query == 'mode=cancel'
    type(self).cancelled.append(jid)
    self._reply(202, {})

  def _reply(self, status: int, body: dict):
    data = json.dumps(body).encode()
    self.send_response(status)
    self.send_header('Content-Type', 'application/json')
    self.send_header('Content-Length', str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def log_message(self, *args):
    pass


@pytest.fixture()
def fake_flink():
  server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _FakeFlink)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  _FakeFlink.cancelled = []
  _FakeFlink.hidden_for = 0
  yield server
  server.shutdown()
  server.server_close()


def test_the_abandoned_job_is_cancelled_on_the_flink_cluster(fake_flink, capsys):
  port = fake_flink.server_address[1]
  options = PipelineOptions(['--runner', 'FlinkRunner', '--flink_master', f'127.0.0.1:{port}',
                             '--environment_type', 'EXTERNAL'])
  running, done, other = 'a' * 32, 'b' * 32, 'c' * 32
  with pytest.raises(RuntimeError, match='job server gone'):
    with flink_jobs.cancelled_if_abandoned(options):
      name = options.view_as(GoogleCloudOptions).job_name  # named for the cluster
      assert name.startswith('img2tfrecord-')
      _FakeFlink.jobs = [{'jid': running, 'name': name, 'state': 'RUNNING'},
                         {'jid': done, 'name': name, 'state': 'FINISHED'},
                         {'jid': other, 'name': 'someone-else', 'state': 'RUNNING'}]
      raise RuntimeError('job server gone')
  assert _FakeFlink.cancelled == [running]
  assert capsys.readouterr().err == (
      f'note: cancelled Flink job {running} ({name}) on http://127.0.0.1:{port}: its '
      f'launcher stopped waiting for it\n')

  # A run that ends well cancels nothing; a name the user gave is kept.
  options = PipelineOptions(['--runner', 'FlinkRunner', '--flink_master', f'127.0.0.1:{port}',
                             '--job_name', 'nightly'])
  with flink_jobs.cancelled_if_abandoned(options):
    pass
  assert options.view_as(GoogleCloudOptions).job_name == 'nightly'
  assert _FakeFlink.cancelled == [running]


def test_a_job_still_being_submitted_is_waited_for(fake_flink, capsys, monkeypatch):
  """Interrupted while its job server uploaded the job, the launcher found no
  job on the cluster, stopped, and the job appeared there RUNNING a second or
  two later (writing into OUT): a job not there yet is looked for again."""
  monkeypatch.setattr(flink_jobs, '_POLL_S', 0.01)
  port = fake_flink.server_address[1]
  running = 'd' * 32
  _FakeFlink.jobs = [{'jid': running, 'name': 'img2tfrecord-late', 'state': 'INITIALIZING'}]
  _FakeFlink.hidden_for = 3
  assert flink_jobs.cancel_running(f'http://127.0.0.1:{port}', 'img2tfrecord-late') == [
      f'note: cancelled Flink job {running} (img2tfrecord-late) on http://127.0.0.1:{port}: '
      f'its launcher stopped waiting for it']
  assert _FakeFlink.cancelled == [running]
  # Never submitted: looked for until SUBMIT_SETTLE_S, then nothing to cancel.
  monkeypatch.setattr(flink_jobs, 'SUBMIT_SETTLE_S', 0.05)
  assert flink_jobs.cancel_running(f'http://127.0.0.1:{port}', 'img2tfrecord-never') == []
  assert _FakeFlink.cancelled == [running]


def test_no_cluster_to_ask(capsys):
  """Flink inside the job server, other runners: nothing named, nothing asked."""
  for flags in (['--runner', 'FlinkRunner'], ['--runner', 'SparkRunner'], []):
    options = PipelineOptions(flags)
    with pytest.raises(ValueError):
      with flink_jobs.cancelled_if_abandoned(options):
        raise ValueError('failed')
    assert options.view_as(GoogleCloudOptions).job_name is None
  # A cluster that does not answer: one note saying so.
  port = free_port()
  assert flink_jobs.cancel_running(f'http://127.0.0.1:{port}', 'img2tfrecord-x') == [
      f'note: could not ask the Flink cluster at http://127.0.0.1:{port} for job '
      f'img2tfrecord-x (URLError: <urlopen error [Errno 111] Connection refused>); if it '
      f'still runs, cancel it there']
  assert capsys.readouterr().err == ''


class _StoppedServerResult:
  """A Flink or Spark job's result once its job server is stopped with the
  job (engine_runners): the wait's state is all there is; asking again fails."""

  def __init__(self, ends_in: str):
    self._ends_in = ends_in
    self._state = None

  def wait_until_finish(self):
    from apache_beam.runners.runner import PipelineState
    self._state = getattr(PipelineState, self._ends_in)
    if self._ends_in == 'FAILED':
      raise RuntimeError('Pipeline BeamApp-x failed in state FAILED: boom')
    return self._state

  @property
  def state(self):
    raise ValueError('Cannot invoke RPC on closed channel!')

  def cancel(self):
    raise AssertionError('a finished job is not cancelled')


def test_a_job_that_ended_is_not_asked_again(capsys):
  """The job's state comes from the wait (its job server is gone by then):
  DONE is success; FAILED is the wait's error, no cancel, no note."""
  from pipeline.runs.run_guard import RunGuard
  assert RunGuard().run(SubmittedPipeline(_StoppedServerResult('DONE')))._state == 'DONE'
  cleaned = []
  with pytest.raises(RuntimeError, match='failed in state FAILED: boom'):
    with RunGuard(lambda: cleaned.append(True)) as guard:
      guard.run(SubmittedPipeline(_StoppedServerResult('FAILED')))
  assert cleaned == [True]
  assert capsys.readouterr().err == ''


def test_an_interrupted_job_cancelled_with_its_clean_up_is_not_asked_again(capsys):
  """Flink, Spark: an interrupted wait runs the job's clean-up, which cancels
  the job and stops its job server (engine_runners); RunGuard then asks
  nothing (its job server is gone) and prints no note."""
  from pipeline.runs.interrupts import Interrupted
  from pipeline.runs.run_guard import RunGuard

  class Interrupted_result(_StoppedServerResult):
    def wait_until_finish(self):
      self.job_server_stopped = True  # what engine_runners' clean-up leaves
      raise Interrupted()

  cleaned = []
  with pytest.raises(Interrupted):
    with RunGuard(lambda: cleaned.append(True)) as guard:
      guard.run(SubmittedPipeline(Interrupted_result('RUNNING')))
  assert cleaned == [True]
  assert capsys.readouterr().err == ''
