"""Credentials never reach dataset_info.json: options named as credentials are
recorded as <redacted>, and credentials inside any other Beam option's value
(connection strings, URL user parts, signed-URL queries, KEY=VALUE lists,
JSON) are replaced where they stand."""

from __future__ import annotations

import json

import pytest

from pipeline import convert
from pipeline.configuration import command_line
from pipeline.configuration import flags as opts
from pipeline.errors import UsageError
from tests.conftest import read_info
from transforms.core import redact

R = redact.REDACTED


@pytest.mark.parametrize('text,expected', [
    # Azure connection strings: the key names and the account stay
    ('DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=HUSH==;'
     'EndpointSuffix=core.windows.net',
     f'DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={R};'
     'EndpointSuffix=core.windows.net'),
    ('BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=2022-11-02'
     '&ss=b&sig=HUSH%3D',
     f'BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature={R}&ss=b&sig={R}'),
    ('Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=HUSH=',
     f'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={R}'),
    ('Server=db;User Id=me;Password=HUSH;', f'Server=db;User Id=me;Password={R};'),
    ('Server=db;uid=me;pwd=HUSH', f'Server=db;uid=me;pwd={R}'),
    # signed URLs: the signature and token parameters, nothing else
    ('https://acct.blob.core.windows.net/?sv=2022&ss=b&sp=rl&se=2030-01-01&sig=HUSH%2B',
     f'https://acct.blob.core.windows.net/?sv=2022&ss=b&sp=rl&se=2030-01-01&sig={R}'),
    ('https://b.s3.amazonaws.com/j.jar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA'
     '&X-Amz-Security-Token=HUSH&X-Amz-Signature=HUSH',
     'https://b.s3.amazonaws.com/j.jar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential='
     f'{R}&X-Amz-Security-Token={R}&X-Amz-Signature={R}'),
    # a SigV2 presigned URL (boto3's default for s3 then): its access key too, as SigV4's
    ('http://127.0.0.1:9000/b/a.png?AWSAccessKeyId=AKIAHUSH&Signature=HUSH%3D&Expires=1796680604',
     f'http://127.0.0.1:9000/b/a.png?AWSAccessKeyId={R}&Signature={R}&Expires=1796680604'),
    ('https://storage.googleapis.com/b/o?X-Goog-Signature=HUSH&X-Goog-Date=20300101',
     f'https://storage.googleapis.com/b/o?X-Goog-Signature={R}&X-Goog-Date=20300101'),
    ('https://h/x?token=HUSH&access_token=HUSH&key=HUSH&api_key=HUSH&page=2',
     f'https://h/x?token={R}&access_token={R}&key={R}&api_key={R}&page=2'),
    # URL user parts: the whole of it (a token is often the user name alone)
    ('http://admin:HUSH@flink:8081', f'http://{R}@flink:8081'),
    ('https://HUSH@github.com/org/repo.git', f'https://{R}@github.com/org/repo.git'),
    ('http://me:p@HUSH@host/path', f'http://{R}@host/path'),  # an unescaped @ in it
    ('tcp://u:HUSH@dask:8786,tcp://other:8786', f'tcp://{R}@dask:8786,tcp://other:8786'),
    # KEY=VALUE lists, JVM properties, pairs inside a value
    ('-Djavax.net.ssl.keyStorePassword=HUSH', f'-Djavax.net.ssl.keyStorePassword={R}'),
    ('process_variables=API_TOKEN=HUSH', f'process_variables=API_TOKEN={R}'),
    ('region=eu,client_secret=HUSH', f'region=eu,client_secret={R}'),
    # JSON in a string: the values of secret-named keys, the rest as it was
    ('{"command": "run", "env": {"API_TOKEN": "HUSH", "HOME": "/h"}}',
     f'{{"command": "run", "env": {{"API_TOKEN": "{R}", "HOME": "/h"}}}}'),
    ('{"svc": "https://u:HUSH@h/x.jar"}', f'{{"svc": "https://{R}@h/x.jar"}}'),
    # nothing to hide: unchanged, byte for byte
    ('{ "team": "vision" }', '{ "team": "vision" }'),
    ('gs://bucket/key=abc/date=2030/', 'gs://bucket/key=abc/date=2030/'),
    ('train=0.9,validation=0.1', 'train=0.9,validation=0.1'),
    ('localhost:8099', 'localhost:8099'),
    ('https://acct.blob.core.windows.net/', 'https://acct.blob.core.windows.net/'),
    ('user@example.com', 'user@example.com'),
    ('Password=', 'Password='),
    ('[not json', '[not json'),
])
def test_credentials_in_a_value_are_replaced_where_they_stand(text, expected):
  assert redact.redact_text(text) == expected


@pytest.mark.parametrize('text', [
    'http://h/a.png?token=HUSH', 'http://u:HUSH@h/a.png?id=1&sig=HUSH&page=2',
    'https://h/x?X-Amz-Signature=HUSH', 'AccountKey=HUSH;x=1'])
def test_redacting_again_keeps_what_follows_a_hidden_value(text):
  # A rejected line's reason is a shown URL and its cause ('...?token=<redacted>:
  # HTTP 404'), redacted again as it is written: the cause was cut off with it.
  shown = redact.redact_text(text)
  assert 'HUSH' not in shown
  assert redact.redact_text(shown) == shown
  assert redact.redact_text(f'{shown}: HTTP 404 not retried') == f'{shown}: HTTP 404 not retried'
  assert redact.shown_url(f'{shown}: timed out') == f'{shown}: timed out'


@pytest.mark.parametrize('url, shown', [
    # what the request sends as basic authentication: the authority's part to
    # its last '@', spaces too ('...me:HU SH@h' showed its password)
    ('http://me:HU SH@h:1/a.png', f'http://{R}@h:1/a.png'),
    ('http://me@HUSH@h/a.png', f'http://{R}@h/a.png'),
    # a password holding '/', '?' or '#' unescaped: no URL that parses (its
    # port 'HU' is no number), and its row showed the password
    ('http://me:HU/SH@h:1/a.png', f'http://{R}@h:1/a.png'),
    ('http://me:HU?SH@h/a.png', f'http://{R}@h/a.png'),
    ('http://me:HU#S@H@h/a.png', f'http://{R}@h/a.png'),
    # an '@' in a path is no user part
    ('https://h/@user/a.png', 'https://h/@user/a.png'),
    ('http://h:80/@user/a.png', 'http://h:80/@user/a.png'),
    ('http://[::1]:80/@x.png', 'http://[::1]:80/@x.png'),
    ('http://h:abc/x.png', 'http://h:abc/x.png'),
    (f'http://{R}@h/a.png: HTTP 404', f'http://{R}@h/a.png: HTTP 404'),
])
def test_the_user_part_of_a_url_is_what_the_request_sends(url, shown):
  assert redact.shown_url(url) == shown


def test_values_of_every_json_shape():
  assert redact.redact_value({'a': 'http://u:HUSH@h', 'password': 'HUSH', 'token': None,
                              'n': 3, 'list': [1, 'token=HUSH', {'pwd': 'HUSH'}]}) == {
      'a': f'http://{R}@h', 'password': R, 'token': None, 'n': 3,
      'list': [1, f'token={R}', {'pwd': R}]}
  assert redact.redact_value(['https://h/?sig=HUSH', True, None]) == [f'https://h/?sig={R}',
                                                                      True, None]


@pytest.mark.parametrize('name,value,expected', [
    ('s3_access_key_id', 'AKIAHUSH', R),
    ('s3_secret_access_key', 'HUSH', R),
    ('s3_session_token', 'HUSH', R),
    ('gbek', 'type:GcpSecret;version_name:projects/p/secrets/k/versions/1', R),
    ('s3_session_token', None, None),  # not given: recorded as not given
    ('hdfs_user', 'hdfs', 'hdfs'),  # identities are not credentials
    ('impersonate_service_account', 'sa@p.iam.gserviceaccount.com',
     'sa@p.iam.gserviceaccount.com'),
    ('azure_managed_identity_client_id', '0000-1111', '0000-1111'),
    ('dataflow_kms_key', 'projects/p/locations/l/keyRings/r/cryptoKeys/k',
     'projects/p/locations/l/keyRings/r/cryptoKeys/k'),
])
def test_options_named_as_credentials_are_redacted_whole(name, value, expected):
  assert redact.redact_option(name, value) == expected


TEXT_WITH_CREDENTIALS = 'https://me:HUSH1@h.example/p?sv=1&sig=HUSH2;AccountKey=HUSH3'
JSON_WITH_CREDENTIALS = json.dumps({'svc': 'https://me:HUSH1@h.example/x?sig=HUSH2',
                                    'password': 'HUSH3'})


def _beam_flags_taking_text() -> dict:
  """{flag: its action} for every Beam option that takes text or JSON (one flag
  per option): every one that could carry a credential by its value."""
  parser = command_line._full_parser(opts.ValidateOptions)
  own = {a.dest for a in command_line.own_parser(opts.ValidateOptions)._actions}
  flags = {}
  for action in parser._actions:
    takes_text = action.type in (None, str, json.loads) or (
        getattr(action.type, '__name__', '') == '<lambda>')  # --beam_services: JSON
    if (action.dest in own or action.nargs == 0 or action.choices or not takes_text
        or action.dest in {a.dest for a in flags.values()}):
      continue
    flags[action.option_strings[0]] = action
  return flags


def test_no_beam_option_records_a_credential_given_in_its_value(tmp_path):
  """Every options class Beam 2.77 ships (command_line.beam_option_classes):
  each option that takes text gets a value holding a URL user part, a SAS
  signature and a connection-string key (JSON where it takes JSON), and the
  recorded options hold none of them."""
  flags = _beam_flags_taking_text()
  # the ones that carry credentials by design are among them
  assert {'--azure_connection_string', '--blob_service_endpoint', '--s3_access_key_id',
          '--s3_secret_access_key', '--s3_session_token', '--s3_endpoint_url', '--hdfs_host',
          '--flink_master', '--spark_rest_url', '--job_endpoint', '--maven_repository_url',
          '--gbek', '--environment_config', '--job_server_jvm_properties', '--beam_services',
          '--label', '--dataflow_endpoint', '--sdk_location'} <= set(flags)
  assert len(flags) > 90, len(flags)
  names = {}
  for flag in command_line._flags_of(command_line._full_parser(opts.ValidateOptions)):
    names.setdefault(flags[flag].dest if flag in flags else flag, flag[2:])
  for flag, action in flags.items():
    refused = []
    for value in (TEXT_WITH_CREDENTIALS, JSON_WITH_CREDENTIALS):
      try:
        recorded = command_line.parse(['--input_dir', str(tmp_path), f'{flag}={value}'],
                                      opts.ValidateOptions, '').effective
        break
      except UsageError as error:  # takes JSON only
        refused.append(str(error))
        continue
    else:
      # --runner takes a runner's name or module path: neither value is one,
      # and its one line shows no credential either
      assert flag == '--runner' and not any('HUSH' in line for line in refused), (
          flag, refused)
      continue
    assert recorded[names[action.dest]], flag  # recorded, with something in it
    assert 'HUSH' not in json.dumps(recorded), (flag, recorded[names[action.dest]])


CREDENTIAL_FLAGS = [  # the ones a local convert accepts, all at once
    '--s3_access_key_id=AKIAHUSH01', '--s3_secret_access_key=HUSH02',
    '--s3_session_token=HUSH03', '--s3_endpoint_url=http://minio:HUSH04@127.0.0.1:9/',
    '--azure_connection_string=DefaultEndpointsProtocol=https;AccountName=acct;'
    'AccountKey=HUSH05==;EndpointSuffix=core.windows.net',
    '--blob_service_endpoint=https://acct.blob.core.windows.net/?sv=2022-11-02&ss=b&sp=rl'
    '&sig=HUSH06%3D',
    '--hdfs_host=http://hdfs:HUSH07@namenode', '--hdfs_user=hdfs',
    '--flink_master=http://admin:HUSH08@flink:8081',
    '--flink_job_server_jar=https://repo.example/x.jar?X-Amz-Signature=HUSH09',
    '--spark_rest_url=http://u:HUSH10@spark:6066',
    '--maven_repository_url=https://deploy:HUSH11@maven.example/repo',
    '--job_server_jvm_property=-Djavax.net.ssl.keyStorePassword=HUSH12',
    '--label=api_token=HUSH13', '--dataflow_endpoint=https://HUSH14@dataflow.example',
    '--sdk_location=https://x.example/sdk.tar.gz?X-Goog-Signature=HUSH15',
    '--beam_services={"sdks:java:io:expansion-service:shadowJar": "https://u:HUSH16@h/x.jar"}',
    '--profiler_extra_env_vars=AGENT_TOKEN=HUSH17', '--dask_client_address=tcp://u:HUSH18@dask:1',
    '--gcs_custom_audit_entry=client_secret=HUSH19',
    '--docker_registry_push_url=https://u:HUSH20@registry.example',
    '--prism_location=https://h.example/prism.zip?token=HUSH21',
    '--job_endpoint=http://u:HUSH22@localhost:8099',
    '--environment_config={"command": "boot", "env": {"API_KEY": "HUSH23"}}',
]


def test_a_convert_given_credentials_writes_and_prints_none_of_them(sample, capfd):
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       *CREDENTIAL_FLAGS]) == 0
  out, err = capfd.readouterr()
  assert 'HUSH' not in out + err, out + err
  files = [p for p in sample.out.rglob('*') if p.is_file()]
  assert 'dataset_info.json' in {p.name for p in files}
  assert not [p for p in files if b'HUSH' in p.read_bytes()]
  options = read_info(sample.out)['options']
  assert options['azure_connection_string'] == (
      f'DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={R};'
      'EndpointSuffix=core.windows.net')
  assert options['blob_service_endpoint'] == (
      f'https://acct.blob.core.windows.net/?sv=2022-11-02&ss=b&sp=rl&sig={R}')
  assert options['flink_master'] == f'http://{R}@flink:8081'
  assert options['s3_secret_access_key'] == R and options['hdfs_user'] == 'hdfs'
  assert options['environment_config'] == f'{{"command": "boot", "env": {{"API_KEY": "{R}"}}}}'
