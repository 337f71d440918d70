"""The files and folders the flags name: a URL no filesystem here serves, a
file:// URL, a bucket left out, or a ~ no shell expanded is a usage error
(exit 2, one line) before anything is read or written, on every command and
in pipeline.api."""

from __future__ import annotations

import pytest

from pipeline import api
from pipeline import convert
from pipeline import export
from pipeline import look
from pipeline import validate
from pipeline.configuration.locations import location_problem
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import read_info


@pytest.mark.parametrize('path, problem', [
    ('gs://', 'names no bucket'),  # was written to a local folder gs:, exit 0
    ('s3://', 'names no bucket'),
    ('gs:///out', 'names no bucket'),
    ('foo://host/out', "URL scheme 'foo'"),  # was Beam's ValueError, exit 1
    ('GS://bucket/out', "URL scheme 'GS'"),
    ('https://host/m.csv', "URL scheme 'https'"),
    ('file:///tmp/out', 'give the local path (/tmp/out)'),
])
def test_a_url_no_run_can_use_is_named(path, problem):
  assert problem in location_problem(path)


@pytest.mark.parametrize('path', ['out', '/tmp/out/', 'gs://bucket', 'gs://bucket/out/',
                                  's3://bucket/a/*.csv'])
def test_local_paths_and_bucket_urls_pass(path):
  assert location_problem(path) is None


def _one_usage_line(capsys, flag: str) -> None:
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1, err
  assert err.startswith(f'error: {flag} ') and 'Traceback' not in err, err


@pytest.mark.parametrize('flag', ['--output_dir', '--manifest', '--label_map',
                                  '--previous_dataset', '--config'])
@pytest.mark.parametrize('path', ['gs://', 'foo://host/x'])
def test_convert_refuses_before_writing(sample, tmp_path, monkeypatch, capsys, flag, path):
  monkeypatch.chdir(tmp_path)  # where `gs://` made a folder gs:
  argv = {'--manifest': str(sample.manifest), '--output_dir': str(sample.out), flag: path}
  assert convert.main([a for item in argv.items() for a in item]) == EXIT_USAGE
  _one_usage_line(capsys, flag)
  assert not (tmp_path / 'gs:').exists() and not sample.out.exists()


@pytest.mark.parametrize('argv, flag', [
    (['--input_dir', 'gs://'], '--input_dir'),
    (['--input_dir', 'foo://host/out'], '--input_dir'),
    (['--input_dir', '{out}', '--report', 'foo://host/r.json'], '--report'),
])
def test_validate_refuses_before_checking(sample, tmp_path, monkeypatch, capsys, argv, flag):
  sample.out.mkdir()
  monkeypatch.chdir(tmp_path)
  assert validate.main([a.format(out=sample.out) for a in argv]) == EXIT_USAGE
  _one_usage_line(capsys, flag)
  assert not (tmp_path / 'gs:').exists()


def test_inspect_and_export_refuse_such_urls(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  assert look.main(['--input_dir', 'gs://']) == EXIT_USAGE
  _one_usage_line(capsys, '--input_dir')
  assert export.main(['--format', 'tfds', '--input_dir', 'foo://host/out']) == EXIT_USAGE
  _one_usage_line(capsys, '--input_dir')


def test_inspect_export_dir_must_be_local(converted_sample, tmp_path, monkeypatch, capsys):
  _, out = converted_sample()
  monkeypatch.chdir(tmp_path)
  # was exported to a local folder gs:/bucket/look, exit 0
  assert look.main(['--input_dir', str(out), '--export_dir', 'gs://bucket/look']) == EXIT_USAGE
  _one_usage_line(capsys, '--export_dir')
  assert list(tmp_path.iterdir()) == []
  assert look.main(['--input_dir', str(out), '--export_dir', 'look']) == EXIT_OK
  assert (tmp_path / 'look' / 'report.html').is_file()


def test_api_raises_usage_error(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(api.UsageError, match='names no bucket'):
    api.convert(rows=[{'image': 'a.png', 'label': 'x'}], output_dir='gs://')
  with pytest.raises(api.UsageError, match="URL scheme 'foo'"):
    api.validate(input_dir='foo://host/out')  # was Beam's ValueError
  assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('flag', ['--output_dir', '--manifest', '--label_map', '--config'])
def test_a_tilde_no_shell_expanded_is_refused_before_writing(sample, tmp_path, monkeypatch,
                                                             capsys, flag):
  """`--output_dir=~/x` (no shell expands a ~ after =) made a folder named ~
  below the current one and exited 0."""
  work = tmp_path / 'work'
  work.mkdir()
  monkeypatch.chdir(work)
  monkeypatch.setenv('HOME', str(tmp_path / 'home'))
  argv = {'--manifest': str(sample.manifest), '--output_dir': str(sample.out),
          flag: '~/x'}
  assert convert.main([f'{k}={v}' for k, v in argv.items()]) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: {flag} ~/x starts with ~, which no shell expanded (the --flag=~/... form, '
      f'quotes, a --config file): give the path ({tmp_path}/home/x) instead\n')
  assert list(work.iterdir()) == [] and not sample.out.exists()
  (tmp_path / 'c.yaml').write_text('output_dir: ~/x\n')  # a config file's too
  assert convert.main(['--config', str(tmp_path / 'c.yaml'), '--manifest',
                       str(sample.manifest)]) == EXIT_USAGE
  _one_usage_line(capsys, '--output_dir')
  assert validate.main(['--input_dir=~/x']) == EXIT_USAGE
  _one_usage_line(capsys, '--input_dir')
  with pytest.raises(api.UsageError, match=r'^--output_dir ~/x starts with ~'):
    api.convert(manifest=str(sample.manifest), output_dir='~/x')
  assert list(work.iterdir()) == [] and not (tmp_path / 'home').exists()

def test_a_relative_location_once_the_current_folder_is_removed_is_one_line(
    sample, tmp_path, monkeypatch, capsys):
  """A shell left in a folder that was removed: a relative path names nothing.
  convert exited 1, `the job failed: FileNotFoundError` and a traceback (a
  relative --config too); pipeline.api raised the FileNotFoundError."""
  gone = tmp_path / 'gone'
  gone.mkdir()
  monkeypatch.chdir(gone)
  gone.rmdir()
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', 'out']) == EXIT_USAGE
  assert capsys.readouterr().err == (
      'error: --output_dir out is relative and the current folder no longer exists (it was '
      'removed): give an absolute path, or run from a folder that exists\n')
  assert convert.main(['--config', 'c.yaml']) == EXIT_USAGE
  _one_usage_line(capsys, '--config')
  assert look.main(['--input_dir', 'out']) == EXIT_USAGE
  _one_usage_line(capsys, '--input_dir')
  with pytest.raises(api.UsageError, match=r'^--manifest m\.csv is relative and the current'):
    api.convert(manifest='m.csv', output_dir=str(sample.out))
  assert not sample.out.exists()
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir',
                       str(sample.out)]) == EXIT_OK  # absolute paths need no current folder
  assert read_info(sample.out)['num_examples'] == 9


def test_a_tilde_a_shell_would_not_expand_is_a_name():
  assert location_problem('~no_such_user_here/x') is None  # the shell keeps it too
  assert location_problem('out/~/x') is None
  assert '~root, which no shell expanded' in location_problem('~root/x')


def _closed_port() -> int:
  import socket
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return probe.getsockname()[1]  # closed again: nothing answers there


@pytest.mark.parametrize('command, flag', [(convert, '--output_dir'), (validate, '--input_dir')])
def test_an_s3_location_that_does_not_answer_is_one_line_at_once(tmp_path, capsys, command,
                                                                  flag):
  """Beam's S3 filesystem retries a bucket it cannot reach with growing waits
  for minutes, saying nothing (a run with no credentials was still silent
  after 2 minutes): the bucket is asked once, first."""
  endpoint = f'http://127.0.0.1:{_closed_port()}'
  argv = ['--manifest', str(tmp_path / 'm.csv'), '--output_dir', 's3://b/out'] if (
      command is convert) else ['--input_dir', 's3://b/out']
  (tmp_path / 'm.csv').write_text('image,label\na.png,x\n')
  code = command.main([*argv, '--s3_endpoint_url', endpoint, '--s3_access_key_id', 'k',
                       '--s3_secret_access_key', 'secret'])
  err = capsys.readouterr().err
  assert code == EXIT_USAGE
  assert err.startswith(f'error: {flag} s3://b/out cannot be reached: '
                        f'EndpointConnectionError: Could not connect to the endpoint URL: '
                        f'"{endpoint}/b?'), err
  assert len(err.strip().splitlines()) == 1 and 'secret' not in err


def test_a_config_file_on_s3_that_does_not_answer_is_one_line_at_once(tmp_path, capsys):
  """--config is read before the other flags are known: it is asked first
  too (it was read with Beam's retries, silent for minutes)."""
  endpoint = f'http://127.0.0.1:{_closed_port()}'
  code = convert.main(['--config', 's3://b/run.yaml', '--output_dir', str(tmp_path / 'out'),
                       '--s3_endpoint_url', endpoint, '--s3_access_key_id', 'k',
                       '--s3_secret_access_key', 'secret'])
  err = capsys.readouterr().err
  assert code == EXIT_USAGE
  assert err.startswith('error: --config s3://b/run.yaml cannot be reached: '
                        'EndpointConnectionError: '), err
  assert len(err.strip().splitlines()) == 1 and 'secret' not in err
  assert not (tmp_path / 'out').exists()


def test_a_latest_pointer_to_s3_that_does_not_answer_is_one_line_at_once(tmp_path, capsys):
  """The s3:// folder a local `latest` pointer names is asked first too: it
  was read with Beam's retries, silent for minutes."""
  endpoint = f'http://127.0.0.1:{_closed_port()}'
  (tmp_path / 'm.csv').write_text('image,label\na.png,x\n')
  (tmp_path / 'latest').write_text('s3://b/night5\n')
  code = convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir',
                       str(tmp_path / 'out'), '--previous_dataset', str(tmp_path / 'latest'),
                       '--s3_endpoint_url', endpoint, '--s3_access_key_id', 'k',
                       '--s3_secret_access_key', 'secret'])
  err = capsys.readouterr().err
  assert code == EXIT_USAGE
  assert err.startswith(f'error: --previous_dataset {tmp_path / "latest"} holds s3://b/night5, '
                        'which cannot be reached: EndpointConnectionError: '), err
  assert len(err.strip().splitlines()) == 1 and 'secret' not in err
  assert not (tmp_path / 'out').exists()


class _ListDenied:
  """An S3 client whose bucket refuses listing (AccessDenied) and holds one
  object, `readable`, which a HEAD may read (a policy granting s3:GetObject)."""

  def __init__(self, readable: str):
    self.readable = readable

  @staticmethod
  def _denied(operation: str):
    from botocore.exceptions import ClientError
    return ClientError({'Error': {'Code': 'AccessDenied', 'Message': 'Access Denied'}},
                       operation)

  def list_objects_v2(self, **_):
    raise self._denied('ListObjectsV2')

  def head_object(self, Bucket: str, Key: str):  # boto3's argument names
    if Key != self.readable:
      raise self._denied('HeadObject')
    return {'ContentLength': 10}


@pytest.mark.parametrize('path, reachable', [
    ('s3://b/shared/labels.txt', True),  # was refused: 'AccessDenied' of the listing
    ('s3://b/shared/other.txt', False),
    ('s3://b/shared/', False),  # a folder is listed
    ('s3://b/shared/*.txt', False),  # a pattern is listed
])
def test_an_object_readable_where_its_bucket_refuses_listing_is_reachable(monkeypatch, path,
                                                                         reachable):
  from pipeline.configuration.locations import unreachable
  from transforms.filesystem import FileAccess
  monkeypatch.setattr(FileAccess, 's3_client', lambda self: _ListDenied('shared/labels.txt'))
  problem = unreachable(path)
  if reachable:
    assert problem is None
  else:
    assert problem == ('cannot be reached: ClientError: An error occurred (AccessDenied) when '
                       'calling the ListObjectsV2 operation: Access Denied')


@pytest.mark.parametrize('flag, value', [
    ('--manifest', 'https://alice:s3cret@host/m.csv'),
    ('--manifest', 'foo://alice:s3cret@host/m.csv'),
    ('--output_dir', 'file://alice:s3cret@host/x')])
def test_a_refused_location_s_credentials_are_never_shown(tmp_path, capsys, flag, value):
  argv = {'--manifest': str(tmp_path / 'm.csv'), '--output_dir': str(tmp_path / 'out'),
          flag: value}
  (tmp_path / 'm.csv').write_text('image,label\na.png,x\n')
  assert convert.main([part for item in argv.items() for part in item]) == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith(f'error: {flag} ') and '<redacted>@host' in err, err
  assert 's3cret' not in err and len(err.strip().splitlines()) == 1
