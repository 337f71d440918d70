"""Before anything is locked, created or written: a job service that does
not answer is one line and exit 2 (runners.check_before_submit), and a job
that fails says what failed (exits.failure_reason), its partial output gone."""

from __future__ import annotations

import contextlib
import os
import socket
import threading

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.engines import job_endpoint
from pipeline.engines import runners
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from pipeline.runs import exits
from pipeline.runs import run_guard
from tests.conftest import free_port

TIMEOUT = '0.5'


@contextlib.contextmanager
def silent_listener():
  """127.0.0.1:PORT that accepts connections and never says a word (no
  gRPC server: no HTTP/2 settings frame)."""
  server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  server.bind(('127.0.0.1', 0))
  server.listen(8)
  accepted, stop = [], threading.Event()

  def accept():
    server.settimeout(0.1)
    while not stop.is_set():
      try:
        accepted.append(server.accept()[0])
      except TimeoutError:
        continue

  thread = threading.Thread(target=accept, daemon=True)
  thread.start()
  try:
    yield f'127.0.0.1:{server.getsockname()[1]}', accepted
  finally:
    stop.set()
    thread.join()
    for connection in accepted:
      connection.close()
    server.close()


@contextlib.contextmanager
def closed_port():
  """127.0.0.1:PORT where nothing listens: connections are refused at once."""
  yield f'127.0.0.1:{free_port()}', None


@pytest.mark.parametrize('endpoint', [closed_port, silent_listener],
                         ids=['closed_port', 'silent_listener'])
def test_convert_with_a_job_endpoint_that_does_not_answer(endpoint, sample, tmp_path, capsys):
  out = tmp_path / 'out'
  with endpoint() as (address, accepted):
    code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out),
                         '--runner', 'PortableRunner', '--job_endpoint', address,
                         '--job_endpoint_connect_timeout', TIMEOUT])
    if accepted is not None:
      assert accepted  # it was reached: connected, and got no answer
  assert code == EXIT_USAGE
  assert capsys.readouterr().err == f'error: job endpoint {address} did not answer in 0.5 s\n'
  assert not out.exists()  # no folder, no lock


def test_validate_with_a_job_endpoint_that_does_not_answer(tmp_path, capsys):
  dataset = tmp_path / 'dataset'
  dataset.mkdir()
  (dataset / 'dataset_info.json').write_text('{}')
  with silent_listener() as (address, _):
    code = validate.main(['--input_dir', str(dataset), '--runner', 'FlinkRunner',
                          '--job_endpoint', address, '--job_endpoint_connect_timeout', '0.25'])
  assert code == EXIT_USAGE
  assert capsys.readouterr().err == f'error: job endpoint {address} did not answer in 0.25 s\n'
  assert os.listdir(dataset) == ['dataset_info.json']  # no report


def test_portable_runner_without_a_job_endpoint(sample, tmp_path, capsys):
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out),
                       '--runner', 'PortableRunner']) == EXIT_USAGE
  assert capsys.readouterr().err == (
      'error: --runner PortableRunner needs --job_endpoint host:port (a Flink or Spark job '
      'server, or any Beam job service)\n')
  assert not out.exists()


@pytest.mark.parametrize('value', ['-1', 'soon', 'inf'])
def test_bad_connect_timeout_is_a_usage_error(value, sample, tmp_path, capsys):
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir',
                       str(tmp_path / 'out'), '--job_endpoint_connect_timeout', value]) == EXIT_USAGE
  assert '--job_endpoint_connect_timeout' in capsys.readouterr().err


def _options(*flags):
  from apache_beam.options.pipeline_options import PipelineOptions
  return PipelineOptions(list(flags))


def test_which_runs_are_checked():
  """Only a runner submitting to a job service at --job_endpoint; 0 and
  `embed` (a job server in this process) are not checked."""
  unreachable = f'--job_endpoint=127.0.0.1:{free_port()}'
  for flags in ([unreachable],  # the DirectRunner ignores it
                ['--runner=DataflowRunner', unreachable],
                ['--runner=FlinkRunner'],  # Flink finds or starts its own job server
                ['--runner=PortableRunner', '--job_endpoint=embed']):
    job_endpoint.check_answers(_options(*flags), 0.1)
  job_endpoint.check_answers(_options('--runner=PortableRunner', unreachable), 0)
  for runner in job_endpoint.PORTABLE_RUNNERS:
    with pytest.raises(UsageError, match=r'did not answer in 0\.1 s'):
      job_endpoint.check_answers(_options(f'--runner={runner}', unreachable), 0.1)


def test_pre_submit_checks_run_before_output_dir_is_touched(sample, tmp_path, capsys,
                                                             monkeypatch):
  """The hook other runners' checks plug into: it runs with the options and
  the connect timeout, before the lock or OUT exists."""
  seen = []

  def no_job_server(options, connect_timeout_s):
    seen.append((options.view_as(runners.StandardOptions).runner, connect_timeout_s))
    raise UsageError('no job server here')

  monkeypatch.setattr(runners, 'PRE_SUBMIT_CHECKS', (no_job_server,))
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out),
                       '--job_endpoint_connect_timeout', '7']) == EXIT_USAGE
  assert capsys.readouterr().err == 'error: no job server here\n'
  assert seen == [('DirectRunner', 7.0)]
  assert not out.exists()


# --- a failed job --------------------------------------------------------------


def _raise(error: BaseException, cause: BaseException | None = None):
  try:
    raise error from cause
  except BaseException as raised:
    return raised


@pytest.mark.parametrize('error, reason', [
    (ValueError('bad row'), 'ValueError: bad row'),
    (RuntimeError(), 'RuntimeError'),
    (KeyError(), 'KeyError'),
    (ValueError('\n  \nthe second line\nthe third'), 'ValueError: the second line'),
    (_raise(RuntimeError(), OSError(28, 'No space left on device')),
     'RuntimeError: OSError: [Errno 28] No space left on device'),
    (_raise(RuntimeError(''), _raise(ValueError(), TimeoutError('read timed out'))),
     'RuntimeError: ValueError: TimeoutError: read timed out'),
    (RuntimeError('Pipeline job-1 failed in state FAILED: Traceback (most recent call last):\n'
                  '  File "x.py", line 1, in f\nZeroDivisionError: division by zero\n'),
     'RuntimeError: Pipeline job-1 failed in state FAILED: ZeroDivisionError: division by '
     'zero'),
    (RuntimeError('Pipeline job-2 failed in state FAILED: Error running pipeline.\n'
                  'Traceback (most recent call last):\n  File "y.py", line 2, in g\n'
                  'EOFError: cut\n\nDuring handling of the above exception, another '
                  'exception occurred:\n\nTraceback (most recent call last):\n  File "z"\n'
                  "EOFError: cut [while running 'Read']\n"),
     "RuntimeError: Pipeline job-2 failed in state FAILED: Error running pipeline: EOFError: "
     "cut [while running 'Read']"),
], ids=['message', 'empty', 'empty_key', 'blank_first_line', 'cause', 'cause_of_cause',
        'traceback_in_message', 'job_service_message'])
def test_failure_reason_is_never_empty(error, reason):
  assert exits.failure_reason(error) == reason


def test_failed_run_names_the_cause_and_publishes_nothing(sample, tmp_path, capsys,
                                                          monkeypatch):
  """A job that fails after writing everything (an exception with no
  message, raised from an OSError): the one line names the cause, and the
  run deletes what it wrote: no dataset_info.json, shard or lock."""
  run = run_guard.RunGuard.run

  def run_then_fail(self, pipeline):
    run(self, pipeline)
    assert (out / 'dataset_info.json').exists()  # written, about to be taken back
    raise RuntimeError() from OSError(28, 'No space left on device')

  monkeypatch.setattr(run_guard.RunGuard, 'run', run_then_fail)
  out = tmp_path / 'out'
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out),
                       '--height', '8', '--width', '8'])
  assert code == EXIT_FAILED
  err = capsys.readouterr().err
  assert err.splitlines()[0] == (
      'error: the job failed: RuntimeError: OSError: [Errno 28] No space left on device')
  assert os.listdir(out) == []


@pytest.mark.parametrize('flags, reasons', [
    (['--runner', 'DataflowRunner'],
     '--runner DataflowRunner: Missing GCS path option: temp_location; Missing GCS path '
     'option: staging_location; Missing required option: project; Missing required option: '
     'region'),
    (['--environment_type', 'PROCESS'],
     '--runner DirectRunner: Option process_command is required for environment type PROCESS'),
])
def test_options_beam_refuses_are_one_line_before_anything_is_written(sample, tmp_path, capsys,
                                                                      flags, reasons):
  """Beam's own option checks (PipelineOptionsValidator) ran when the pipeline
  was made, after OUT was locked and made: 'the job failed: ValueError:
  Pipeline has validations errors:', a traceback, exit 1. Now a usage error
  naming every reason on one line, for convert and validate."""
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out),
                       *flags]) == EXIT_USAGE
  assert capsys.readouterr().err == f'error: the Beam options do not hold for {reasons}\n'
  assert not out.exists()
  dataset = tmp_path / 'dataset'
  dataset.mkdir()
  (dataset / 'dataset_info.json').write_text('{}')
  assert validate.main(['--input_dir', str(dataset), *flags]) == EXIT_USAGE
  assert capsys.readouterr().err == f'error: the Beam options do not hold for {reasons}\n'
  assert os.listdir(dataset) == ['dataset_info.json']  # no report


_DATAFLOW = ['--runner=DataflowRunner', '--project=img2tfrecord-test', '--region=us-central1',
             '--temp_location=gs://img2tfrecord-test/tmp']


@pytest.mark.parametrize('setup_file, message', [
    ('nosuch/setup.py', 'nosuch/setup.py: no such file (the setup.py the workers install)'),
    ('requirements.txt', 'requirements.txt: Beam builds the package from a file named '
     'setup.py or pyproject.toml'),
])
def test_a_setup_file_beam_cannot_stage_is_one_line_before_anything_is_written(
    sample, tmp_path, capsys, monkeypatch, setup_file, message):
  """Beam's stager raised a RuntimeError as the job was submitted, after OUT
  was locked and made: a traceback and exit 1. Now one line and exit 2, for
  convert and validate; the local runner, which stages nothing, ignores it."""
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'requirements.txt').write_text('Pillow\n')
  out = tmp_path / 'out'
  argv = ['--manifest', str(sample.manifest), '--output_dir', str(out),
          f'--setup_file={setup_file}']
  assert convert.main([*argv, *_DATAFLOW]) == EXIT_USAGE
  assert capsys.readouterr().err == f'error: --setup_file {tmp_path}/{message}\n'
  assert not out.exists()
  dataset = tmp_path / 'dataset'
  dataset.mkdir()
  (dataset / 'dataset_info.json').write_text('{}')
  assert validate.main(['--input_dir', str(dataset), f'--setup_file={setup_file}',
                        *_DATAFLOW]) == EXIT_USAGE
  assert capsys.readouterr().err == f'error: --setup_file {tmp_path}/{message}\n'
  assert os.listdir(dataset) == ['dataset_info.json']
  runners.check_setup_file(_options(f'--setup_file={setup_file}'))  # DirectRunner


def test_a_setup_file_named_without_its_folder_is_made_absolute(tmp_path, monkeypatch):
  """Beam's stager changes into the setup file's folder: `--setup_file
  setup.py` named the folder '', and the job failed as it was submitted
  (FileNotFoundError: '', a traceback and exit 1, OUT locked)."""
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'setup.py').write_text('')
  options = runners.local_defaults({'runner': 'DataflowRunner', 'setup_file': 'setup.py'})
  assert options['setup_file'] == str(tmp_path / 'setup.py')
  runners.check_setup_file(_options(*_DATAFLOW, f'--setup_file={options["setup_file"]}'))
  assert 'setup_file' not in runners.local_defaults({'runner': 'DataflowRunner'})
