"""--runner as Beam reads it: a bare name in any case, with or without
'Runner' (beam_runtime.runner_class_name). A local run never starts Prism (a
download from GitHub): not under another spelling of the DirectRunner, and
not with --runner PrismRunner and no Prism binary here (exit 2 before OUT is
made)."""

from __future__ import annotations

import json

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import prism_runner
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.beam_runtime import KNOWN_RUNNERS
from pipeline.beam_runtime import local_runner
from pipeline.beam_runtime import runner_class_name
from pipeline.engines import runners
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE


def _argv(sample, *flags):
  return ['--manifest', str(sample.manifest), '--output_dir', str(sample.out), *flags]


@pytest.fixture
def prism_started(monkeypatch):
  """Each Prism job server Beam makes (it would fetch its binary from GitHub)."""
  made = []

  def refuse(self, options):
    made.append(options)
    raise RuntimeError('a Prism job server was made')
  monkeypatch.setattr(prism_runner.PrismJobServer, '__init__', refuse)
  return made


def test_known_runners_are_beams():
  from apache_beam.options.pipeline_options import StandardOptions
  assert list(KNOWN_RUNNERS) == list(StandardOptions.KNOWN_RUNNER_NAMES)


@pytest.mark.parametrize('given,name', [
    ('directrunner', 'DirectRunner'), ('DIRECT', 'DirectRunner'), ('Direct', 'DirectRunner'),
    ('portable', 'PortableRunner'), ('prism', 'PrismRunner'), ('dataflow', 'DataflowRunner'),
    ('fnapi', 'FnApiRunner'), ('testdirect', 'TestDirectRunner'),
    ('apache_beam.runners.direct.direct_runner.DirectRunner', 'DirectRunner'),
    ('my.pkg.directrunner', 'directrunner'),  # a module path: its class as written
    ('NoSuchRunner', 'NoSuchRunner'), (None, ''),
])
def test_runner_class_name(given, name):
  assert runner_class_name(given) == name


@pytest.mark.parametrize('runner', ['directrunner', 'DIRECT', 'TestDirectRunner'])
def test_other_spellings_of_the_direct_runner_run_locally(runner):
  options = PipelineOptions([f'--runner={runner}'])
  assert isinstance(local_runner.for_options(options), local_runner.LocalRunner)
  assert runners.is_local(options)
  assert runners.local_defaults({'runner': runner})['direct_running_mode'] == 'in_memory'


def test_dry_run_on_dataflow_in_lower_case():
  assert runners.is_dry_run(PipelineOptions(['--runner=dataflow', '--dry_run=True']))


@pytest.mark.parametrize('runner', ['directrunner', 'DIRECT'])
def test_convert_and_validate_never_start_prism_for_the_direct_runner(sample, runner,
                                                                     prism_started, capsys):
  """Beam's own DirectRunner ran these (the run took them for remote
  runners): validate's pipeline made a Prism job server, which tried to
  download Prism, before falling back."""
  assert convert.main(_argv(sample, '--runner', runner)) == EXIT_OK
  assert validate.main(['--input_dir', str(sample.out), '--runner', runner]) == EXIT_OK
  assert prism_started == []
  assert 'OK: 9 examples' in capsys.readouterr().out


@pytest.mark.parametrize('flags,words', [
    (['--runner', 'PrismRunner'], "--runner PrismRunner would download Beam's Prism binary"),
    (['--runner', 'prism'], "--runner PrismRunner would download Beam's Prism binary"),
    (['--runner', 'prism', '--prism_location', '/no/such/prism'],
     '--prism_location /no/such/prism is not a file here'),
    (['--runner', 'portable'], '--runner PortableRunner needs --job_endpoint host:port'),
])
def test_runners_that_would_download_or_have_nowhere_to_submit(sample, flags, words,
                                                               prism_started, capsys):
  """Was: a traceback and exit 1 after OUT was made (Prism's download failing
  offline; Beam's NotImplementedError for `portable`)."""
  assert convert.main(_argv(sample, *flags)) == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith(f'error: {words}') and len(err.splitlines()) == 1, err
  assert not sample.out.exists()
  assert prism_started == []


@pytest.mark.parametrize('flags', [
    ['--runner', 'PortableRunner', '--job_endpoint', 'embed'],
    ['--runner', 'portable', '--job_endpoint', 'embed', '--environment_type', 'docker'],
])
def test_an_embedded_job_service_with_docker_workers_and_no_docker(sample, flags, capsys,
                                                                   monkeypatch):
  """Was Beam's `docker run` failing the job after OUT was made: exit 1 and
  a 150-line traceback."""
  monkeypatch.setenv('PATH', '/nonexistent')  # no docker command: no daemon answers
  assert convert.main(_argv(sample, *flags)) == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith("error: --job_endpoint embed runs the Python workers in Beam's default "
                        'environment, DOCKER, and no docker daemon answers here') and (
                            len(err.splitlines()) == 1), err
  assert not sample.out.exists()


def test_an_embedded_job_service_with_loopback_workers_converts(sample):
  assert convert.main(_argv(sample, '--runner', 'PortableRunner', '--job_endpoint', 'embed',
                            '--environment_type', 'LOOPBACK')) == EXIT_OK
  info = json.loads((sample.out / 'dataset_info.json').read_text())
  assert info['num_examples'] == 9 and info['engine'] == {
      'runner': 'PortableRunner', 'job_endpoint': 'embed', 'environment_type': 'LOOPBACK'}
