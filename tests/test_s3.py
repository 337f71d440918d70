"""convert and validate end to end on s3:// paths, against a local moto server.

Everything runs as users run it: `python -m pipeline.convert` / `validate` in
a subprocess, with Beam's --s3_* options pointing at 127.0.0.1. Skipped only
when moto cannot start at all.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
import pytest

from tests.s3_server import isolated_env
from tests.s3_server import running_moto
from transforms import filesystem
from transforms.core.example_proto import parse_example
from transforms.core.tfrecord import read_records

# One worker builds one moto server and its converted dataset (make test: --dist loadgroup).
# a long system test: make test stays within 6 minutes
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('s3'),
              pytest.mark.integration]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = 'img2tfrecord-test'
OUT = f's3://{BUCKET}/out'
SIZE = 8  # --height/--width: every Example holds SIZE*SIZE*3 raw bytes
COLOURS = {'blue': (0, 0, 255), 'red': (255, 0, 0)}
# (file under data/images/, label); solid colours, both formats in both classes.
IMAGES = [('red_0.png', 'red'), ('red_1.jpg', 'red'), ('red_2.png', 'red'),
          ('blue_0.png', 'blue'), ('blue_1.jpg', 'blue')]
RUN_TIMEOUT = 120


@pytest.fixture(scope='module')
def server():
  with running_moto() as moto:
    yield moto


def _image_bytes(name: str, colour: tuple) -> bytes:
  from PIL import Image
  buffer = io.BytesIO()
  Image.new('RGB', (16, 12), colour).save(
      buffer, format='PNG' if name.endswith('.png') else 'JPEG', quality=95)
  return buffer.getvalue()


@pytest.fixture(scope='module')
def s3(server):
  """A boto3 client with the bucket holding data/manifest.csv and data/images/."""
  client = server.client()
  client.create_bucket(Bucket=BUCKET)
  for name, label in IMAGES:
    client.put_object(Bucket=BUCKET, Key=f'data/images/{name}',
                      Body=_image_bytes(name, COLOURS[label]))
  manifest = 'image,label\n' + ''.join(f'images/{n},{l}\n' for n, l in IMAGES)
  client.put_object(Bucket=BUCKET, Key='data/manifest.csv', Body=manifest.encode())
  return client


def _env() -> dict:
  """Only the --s3_* options configure S3: no profile, config file or proxy."""
  return isolated_env()


def _start(server, module: str, *args: str, temp: str | None = None) -> subprocess.Popen:
  env = _env() if temp is None else dict(_env(), TMPDIR=temp)
  return subprocess.Popen([sys.executable, '-m', module, *args, *server.beam_options()],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def _run(server, module: str, *args: str, temp: str | None = None) -> subprocess.CompletedProcess:
  process = _start(server, module, *args, temp=temp)
  try:
    stdout, stderr = process.communicate(timeout=RUN_TIMEOUT)
  except subprocess.TimeoutExpired:
    process.kill()
    raise
  return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _explain(result: subprocess.CompletedProcess) -> str:
  return (f'exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}'
          f'\n--- stderr\n{result.stderr[-6000:]}')


def convert(server, output_dir: str, *extra: str) -> subprocess.CompletedProcess:
  return _run(server, 'pipeline.convert', '--manifest', f's3://{BUCKET}/data/manifest.csv',
              '--output_dir', output_dir, '--height', str(SIZE), '--width', str(SIZE),
              '--progress', 'off', *extra)


def validate(server, input_dir: str) -> subprocess.CompletedProcess:
  return _run(server, 'pipeline.validate', '--input_dir', input_dir)


def keys(s3, prefix: str) -> list:
  response = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix.rstrip('/') + '/')
  return sorted(o['Key'][len(prefix.rstrip('/')) + 1:] for o in response.get('Contents', []))


def get(s3, key: str) -> bytes:
  return s3.get_object(Bucket=BUCKET, Key=key)['Body'].read()


def copy_dataset(s3, source: str, target: str) -> None:
  """Server-side copy of every object under s3://BUCKET/source/ to target/."""
  for name in keys(s3, source):
    s3.copy_object(Bucket=BUCKET, Key=f'{target}/{name}',
                   CopySource={'Bucket': BUCKET, 'Key': f'{source}/{name}'})


@pytest.fixture(scope='module')
def converted(server, s3):
  """One convert run into s3://BUCKET/out; -> its dataset_info.json."""
  result = convert(server, OUT)
  assert result.returncode == 0, _explain(result)
  return json.loads(get(s3, 'out/dataset_info.json'))


def test_convert_writes_shards_label_map_and_info(s3, converted):
  names = keys(s3, 'out')
  shards = converted['splits']['train']['shards']
  assert shards, converted
  for name in shards + ['label_map.txt', 'dataset_info.json']:
    assert name in names, names
  assert not [n for n in names if n.startswith('beam-temp') or n.endswith('.tmp')], names
  assert converted['num_examples'] == len(IMAGES)
  assert converted['num_manifest_rows'] == len(IMAGES)
  assert converted['num_rejected'] == 0
  assert list(converted['splits']) == ['train']
  assert converted['splits']['train']['num_examples'] == len(IMAGES)
  assert converted['label_map'] == ['blue', 'red']
  assert converted['config']['output_dir'] == OUT
  sizes = {o['Key']: o['Size'] for o in
           s3.list_objects_v2(Bucket=BUCKET, Prefix='out/')['Contents']}
  assert converted['splits']['train']['num_bytes'] == sum(
      sizes[f'out/{s}'] for s in shards)
  assert get(s3, 'out/label_map.txt').decode().split() == ['blue', 'red']


def test_shards_hold_the_pixels_and_labels(s3, converted):
  examples = {}
  for shard in converted['splits']['train']['shards']:
    for _, data in read_records(io.BytesIO(get(s3, f'out/{shard}'))):
      features = parse_example(data)
      examples[features['image/filename'][1][0].decode()] = features
  assert sorted(examples) == sorted(f'images/{n}' for n, _ in IMAGES)
  for name, label in IMAGES:
    features = examples[f'images/{name}']
    assert features['image/class/text'][1] == [label.encode()]
    assert features['image/class/label'][1] == [converted['label_map'].index(label)]
    assert features['image/height'][1] == [SIZE]
    assert features['image/width'][1] == [SIZE]
    pixels = features['image/encoded'][1][0]
    assert len(pixels) == SIZE * SIZE * 3
    tolerance = 0 if name.endswith('.png') else 8  # JPEG is lossy
    for channel, want in enumerate(COLOURS[label]):
      got = pixels[channel::3]
      assert max(abs(value - want) for value in got) <= tolerance, (name, channel, got[:4])


def test_validate_accepts_the_s3_dataset(server, s3, converted):
  del converted
  result = validate(server, OUT)
  assert result.returncode == 0, _explain(result)
  assert 'OK' in result.stdout
  report = json.loads(get(s3, 'out/validation_report.json'))
  assert report['valid'] and report['num_examples'] == len(IMAGES)


def test_tfrecordio_sink_on_s3(server, s3):
  """Beam's WriteToTFRecord into s3:// (gzip): its shards listed with their
  sizes, no temp objects left, validate accepts them. The test split gets no
  row (seed 0): the empty shard Beam writes for it is deleted."""
  out = f's3://{BUCKET}/tfrecordio'
  result = convert(server, out, '--sink', 'tfrecordio', '--compression', 'gzip',
                   '--split', 'train=0.5,validation=0.49,test=0.01')
  assert result.returncode == 0, _explain(result)
  info = json.loads(get(s3, 'tfrecordio/dataset_info.json'))
  names = keys(s3, 'tfrecordio')
  assert not [n for n in names if n.startswith('beam-temp') or n.endswith('.tmp')], names
  sizes = {o['Key']: o['Size'] for o in
           s3.list_objects_v2(Bucket=BUCKET, Prefix='tfrecordio/')['Contents']}
  shards = [s for split in info['splits'].values() for s in split['shards']]
  assert sorted(shards) == sorted(n for n in names if '.tfrecord' in n)
  assert all(s.endswith('-of-00001.tfrecord.gz') for s in shards)
  for declared in info['splits'].values():
    assert declared['num_bytes'] == sum(sizes[f'tfrecordio/{s}'] for s in declared['shards'])
  assert list(info['splits']) == ['train', 'validation']
  assert info['num_examples'] == len(IMAGES) and info['sink']['name'] == 'tfrecordio'
  result = validate(server, out)
  assert result.returncode == 0, _explain(result)
  assert f'OK: {len(IMAGES)} examples' in result.stdout


def test_validate_names_a_corrupted_shard(server, s3, converted):
  copy_dataset(s3, 'out', 'corrupt')
  shard = converted['splits']['train']['shards'][0]
  data = bytearray(get(s3, f'corrupt/{shard}'))
  data[len(data) // 2] ^= 0xFF
  s3.put_object(Bucket=BUCKET, Key=f'corrupt/{shard}', Body=bytes(data))
  result = validate(server, f's3://{BUCKET}/corrupt')
  assert result.returncode == 1, _explain(result)
  assert shard in result.stdout, _explain(result)
  report = json.loads(get(s3, 'corrupt/validation_report.json'))
  assert not report['valid']
  assert 'corrupt_shard' in report['problems_by_kind'], report
  assert shard in {p['file'] for p in report['problems']}, report


def test_validate_reads_rejected_jsonl_and_label_map_on_s3(server, s3, converted):
  copy_dataset(s3, 'out', 'tampered')
  s3.put_object(Bucket=BUCKET, Key='tampered/rejected.jsonl',
                Body=b'{"stage": "read", "code": "missing_file"}\n')
  s3.delete_object(Bucket=BUCKET, Key='tampered/label_map.txt')
  result = validate(server, f's3://{BUCKET}/tampered')
  assert result.returncode == 1, _explain(result)
  report = json.loads(get(s3, 'tampered/validation_report.json'))
  rows, examples = converted['num_manifest_rows'], converted['num_examples']
  assert [(p['kind'], p['detail']) for p in report['problems']] == [
      ('row_accounting', f"dataset_info.json's num_manifest_rows is {rows}, but its {examples} "
       f'examples and the 1 rejected row(s) in rejected.jsonl make {examples + 1}'),
      ('label_map_mismatch', "label_map.txt is missing; dataset_info.json's label_map has "
       f"{converted['num_classes']} classes"),
      ('row_accounting', 'rejected.jsonl holds 1 row(s) rejected as read/missing_file; '
       "dataset_info.json's rejected_by_reason says 0")]


def test_refuses_a_non_empty_output_dir_unless_overwrite(server, s3, converted):
  copy_dataset(s3, 'out', 'again')
  s3.put_object(Bucket=BUCKET, Key='again/notes.txt', Body=b'not ours')
  # what a killed run leaves: a beam-temp-* "folder" of objects
  s3.put_object(Bucket=BUCKET, Key='again/beam-temp-train-0123abcd/part', Body=b'x')
  before = keys(s3, 'again')

  refused = convert(server, f's3://{BUCKET}/again')
  assert refused.returncode == 2, _explain(refused)
  assert 'not empty' in refused.stderr and '--overwrite' in refused.stderr, _explain(refused)
  assert keys(s3, 'again') == before

  replaced = convert(server, f's3://{BUCKET}/again', '--overwrite')
  assert replaced.returncode == 0, _explain(replaced)
  info = json.loads(get(s3, 'again/dataset_info.json'))
  assert info['num_examples'] == len(IMAGES)
  assert info['config']['output_dir'] == f's3://{BUCKET}/again'
  names = keys(s3, 'again')
  assert 'notes.txt' in names  # files that are not ours are left alone
  assert not [n for n in names if n.startswith('beam-temp-')], names
  stale = [n for n in names if n.endswith('.tfrecord')
           and n not in info['splits']['train']['shards']]
  assert not stale, names
  del converted


def test_image_worker_processes_get_s3_images_from_the_parent(server, s3):
  """Worker processes have no S3 client: the parent reads the bytes for them."""
  result = convert(server, f's3://{BUCKET}/out-processes', '--encoding', 'png',
                   '--image_processes', '2')
  assert result.returncode == 0, _explain(result)
  info = json.loads(get(s3, 'out-processes/dataset_info.json'))
  assert (info['num_examples'], info['num_rejected']) == (len(IMAGES), 0)
  from PIL import Image
  seen = set()
  for shard in info['splits']['train']['shards']:
    for _, data in read_records(io.BytesIO(get(s3, f'out-processes/{shard}'))):
      features = parse_example(data)
      name = features['image/filename'][1][0].decode()
      label = features['image/class/text'][1][0].decode()
      pixels = Image.open(io.BytesIO(features['image/encoded'][1][0])).convert('RGB')
      assert max(abs(a - b) for a, b in zip(pixels.getpixel((4, 4)), COLOURS[label])) <= 8
      seen.add(name)
  assert seen == {f'images/{n}' for n, _ in IMAGES}


def test_a_config_file_on_s3(server, s3):
  """--config s3://...: read with the command line's --s3_* options; recorded."""
  s3.put_object(Bucket=BUCKET, Key='conf/nightly.yaml', Body=(
      f'manifest: s3://{BUCKET}/data/manifest.csv\n'
      f'output_dir: s3://{BUCKET}/from-config\n'
      f'height: {SIZE}\nwidth: {SIZE}\nprogress: "off"\n').encode())
  result = _run(server, 'pipeline.convert', '--config', f's3://{BUCKET}/conf/nightly.yaml',
                '--width', '4')
  assert result.returncode == 0, _explain(result)
  info = json.loads(get(s3, 'from-config/dataset_info.json'))
  assert info['config_file'] == f's3://{BUCKET}/conf/nightly.yaml'
  assert (info['image']['height'], info['image']['width']) == (SIZE, 4)
  assert info['num_examples'] == len(IMAGES)
  assert info['options']['s3_secret_access_key'] == '<redacted>'
  missing = _run(server, 'pipeline.convert', '--config', f's3://{BUCKET}/conf/nope.yaml')
  assert missing.returncode == 2, _explain(missing)
  assert missing.stderr.startswith(f'error: --config s3://{BUCKET}/conf/nope.yaml cannot be '
                                   'read: ') and len(missing.stderr.splitlines()) == 1


# ---------------------------------------------------------------- the run lock on S3


def _convert_args(output_dir: str) -> list:
  return ['--manifest', f's3://{BUCKET}/data/manifest.csv', '--output_dir', output_dir,
          '--height', str(SIZE), '--width', str(SIZE), '--progress', 'off']


def _dataset_keys(s3, prefix: str) -> list:
  """What convert writes (a validate run may have added its report)."""
  return [n for n in keys(s3, prefix) if n != 'validation_report.json']


def _locks(s3, prefix: str) -> list:
  return [n for n in keys(s3, prefix) if n.startswith('.convert.lock.')]


def test_two_converts_at_once_on_s3_exactly_one_proceeds(server, s3, converted, tmp_path):
  """Both reach the lock together; S3's If-None-Match lets one create it."""
  sync = tmp_path / 'sync'
  sync.mkdir()
  target = f's3://{BUCKET}/racing'
  runs = [_start(server, 'tests.lock_helpers', f'hold:{sync}', str(sync / 'go'), '--',
                 *_convert_args(target)) for _ in range(2)]
  time.sleep(0.5)
  (sync / 'go').write_text('')
  deadline = time.monotonic() + RUN_TIMEOUT
  while all(r.poll() is None for r in runs) and time.monotonic() < deadline:
    time.sleep(0.05)
  (loser,) = [r for r in runs if r.poll() is not None]
  (winner,) = [r for r in runs if r is not loser]
  _, err = loser.communicate()
  assert loser.returncode == 2, err
  while not list(sync.glob('holding-*')) and time.monotonic() < deadline:
    time.sleep(0.05)
  assert [p.name for p in sync.glob('holding-*')] == [f'holding-{winner.pid}']
  assert _locks(s3, 'racing') == ['.convert.lock.000000']
  held = json.loads(get(s3, 'racing/.convert.lock.000000'))
  assert held['pid'] == winner.pid
  assert (f'--output_dir {target} is being written by run {held["run_id"]} (host '
          f'{held["host"]}, pid {winner.pid}, started {held["started"]}') in err, err
  (sync / 'release').write_text('')
  _, err = winner.communicate(timeout=RUN_TIMEOUT)
  assert winner.returncode == 0, err
  assert keys(s3, 'racing') == _dataset_keys(s3, 'out')  # no lock left
  del converted


@pytest.mark.slow
def test_killed_s3_run_is_incomplete_and_overwrite_recovers(server, s3, converted, tmp_path):
  target = f's3://{BUCKET}/killed'
  # SIGKILL leaves the run's private temp folder: in a TMPDIR of its own
  killed = _run(server, 'tests.lock_helpers', 'shards', '--', *_convert_args(target),
                '--overwrite', temp=str(tmp_path))
  assert killed.returncode == -signal.SIGKILL, _explain(killed)
  assert _locks(s3, 'killed') == ['.convert.lock.000000']
  assert 'dataset_info.json' not in keys(s3, 'killed')
  incomplete = validate(server, target)
  assert incomplete.returncode == 1, _explain(incomplete)
  assert 'incomplete' in incomplete.stdout + incomplete.stderr, _explain(incomplete)
  refused = convert(server, target)
  assert refused.returncode == 2, _explain(refused)
  assert 'holds the lock of a run that is no longer running' in refused.stderr
  recovered = convert(server, target, '--overwrite')
  assert recovered.returncode == 0, _explain(recovered)
  assert keys(s3, 'killed') == _dataset_keys(s3, 'out')  # nothing of the dead run, no lock
  for shard in converted['splits']['train']['shards']:
    assert get(s3, f'killed/{shard}') == get(s3, f'out/{shard}')
  assert validate(server, target).returncode == 0


def test_write_text_replaces_an_existing_object_and_leaves_no_temp(server, s3):
  """FileAccess.replacing renames over the old object (no delete first)."""
  path = f's3://{BUCKET}/replaced/dataset_info.json'
  FileSystems.set_options(PipelineOptions(server.beam_options()))
  try:
    filesystem.write_text(path, 'first')
    filesystem.write_text(path, 'second, longer')
    assert filesystem.read_text(path) == 'second, longer'
    assert keys(s3, 'replaced') == ['dataset_info.json']
  finally:
    FileSystems.set_options(None)


def test_file_access_does_every_operation_with_one_client_per_thread(server, s3):
  """Beam's S3 filesystem made a client (~0.2-0.5 s of CPU) per call."""
  made = []

  def make():
    made.append(threading.get_ident())
    return filesystem._beam_s3io()

  root = f's3://{BUCKET}/access'
  FileSystems.set_options(PipelineOptions(server.beam_options()))
  try:
    files = filesystem.FileAccess(make_s3io=make)
    with files.create(f'{root}/a.bin') as handle:
      handle.write(b'12345')
    with files.create(f'{root}/b.txt.gz', gzip_compressed=True) as handle:
      handle.write(b'squeezed ' * 10)
    files.write_text(f'{root}/tmp/c.txt', 'in a folder')
    assert files.exists(f'{root}/a.bin') and not files.exists(f'{root}/nope')
    assert files.read_text(f'{root}/b.txt.gz') == 'squeezed ' * 10
    assert sorted(path for path, _ in files.list(f'{root}/')) == [
        f'{root}/a.bin', f'{root}/b.txt.gz', f'{root}/tmp/c.txt']
    assert files.sizes([f'{root}/a.bin', f'{root}/gone.bin']) == {f'{root}/a.bin': 5}
    files.rename([f'{root}/a.bin'], [f'{root}/d.bin'])
    files.delete([f'{root}/tmp/'])
    assert keys(s3, 'access') == ['b.txt.gz', 'd.bin']
    files.s3_client().put_object(Bucket=BUCKET, Key='access/e.bin', Body=b'x')
    files.delete([f'{root}/b.txt.gz', f'{root}/d.bin', f'{root}/e.bin'])
    assert keys(s3, 'access') == []
    assert made == [threading.get_ident()]
    other = threading.Thread(target=lambda: files.exists(f'{root}/a.bin'))
    other.start()
    other.join()
    assert len(made) == 2 and made[1] != made[0]
  finally:
    FileSystems.set_options(None)


def test_an_s3_pattern_matches_without_beam_options_and_sets_none(server, s3, monkeypatch):
  """inspect --files and FileAccess.match take filesystem.beam_options(),
  the one place empty Beam options come from (boto3's own configuration: the
  AWS_* variables here). FileAccess.match raised without options set, and
  foreign_records.matching_files set empty ones globally for the rest of
  the process (a notebook's later read.examples, an api.convert)."""
  from pipeline.looking.foreign_records import matching_files
  from tests.s3_server import ACCESS_KEY
  from tests.s3_server import REGION
  from tests.s3_server import SECRET_KEY
  for name, value in dict(AWS_ENDPOINT_URL=server.endpoint, AWS_ACCESS_KEY_ID=ACCESS_KEY,
                          AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION).items():
    monkeypatch.setenv(name, value)
  for name in ('a', 'b', 'c'):
    s3.put_object(Bucket=BUCKET, Key=f'matched/{name}.bin', Body=name.encode())
  s3.put_object(Bucket=BUCKET, Key='matched/d.txt', Body=b'd')
  assert FileSystems._pipeline_options is None
  try:
    assert filesystem.FileAccess().match(f's3://{BUCKET}/matched/*.bin') == [
        (f's3://{BUCKET}/matched/{name}.bin', 1) for name in ('a', 'b', 'c')]
    assert matching_files(f's3://{BUCKET}/matched/[bd].*') == [
        f's3://{BUCKET}/matched/b.bin', f's3://{BUCKET}/matched/d.txt']
    assert FileSystems._pipeline_options is None
  finally:
    FileSystems.set_options(None)
    for name in ('a.bin', 'b.bin', 'c.bin', 'd.txt'):
      s3.delete_object(Bucket=BUCKET, Key=f'matched/{name}')


def test_an_s3_image_above_max_image_bytes_is_refused_without_a_byte_downloaded(
    server, s3, monkeypatch):
  """The object's size comes from its metadata (the HEAD Beam's reader makes
  on open): a 2 MB object over a 1 MB limit is never fetched; one that is no
  image is refused after its first range."""
  from apache_beam.io.aws import s3io

  from transforms.core.rejects import RowError
  from transforms.core.spec import ImageSpec
  from transforms.read_sources import read_bytes
  fetched = []
  real_get_range = s3io.S3Downloader.get_range

  def get_range(self, start, end):
    fetched.append(end - start)
    return real_get_range(self, start, end)
  monkeypatch.setattr(s3io.S3Downloader, 'get_range', get_range)
  big = b'\x89PNG\r\n\x1a\n' + bytes(2 * 1024 * 1024)
  s3.put_object(Bucket=BUCKET, Key='limits/big.png', Body=big)
  s3.put_object(Bucket=BUCKET, Key='limits/junk.png', Body=b'GARBAGE!' * 1000)
  FileSystems.set_options(PipelineOptions(server.beam_options()))
  try:
    files = filesystem.FileAccess()
    with pytest.raises(RowError) as caught:
      read_bytes(f's3://{BUCKET}/limits/big.png', files, ImageSpec(max_image_bytes=1 << 20))
    assert (caught.value.code, fetched) == ('too_large', [])
    assert caught.value.reason == (f's3://{BUCKET}/limits/big.png is {len(big)} bytes, more '
                                   f'than --max_image_bytes {1 << 20}: not read')
    with pytest.raises(RowError) as caught:
      read_bytes(f's3://{BUCKET}/limits/junk.png', files)
    assert (caught.value.stage, caught.value.code, len(fetched)) == (
        'decode', 'not_an_image', 1)
    assert read_bytes(f's3://{BUCKET}/limits/big.png', files) == big
  finally:
    FileSystems.set_options(None)


def test_image_timeout_covers_reading_a_stalled_s3_object(server, s3, tmp_path):
  """--image_timeout_s covers the read: an object whose server never answers
  is rejected as decode/timeout after about the limit, the others convert.
  (The parent reads remote files for the image worker processes: that read
  used to run before the limit's clock started, and the run waited on it.)"""
  from tests.s3_server import StallingProxy
  s3.put_object(Bucket=BUCKET, Key='stall/slow.png', Body=_image_bytes('slow.png', (0, 255, 0)))
  rows = [(f's3://{BUCKET}/data/images/{name}', label) for name, label in IMAGES[:3]]
  rows.insert(1, (f's3://{BUCKET}/stall/slow.png', 'green'))
  manifest = tmp_path / 'manifest.csv'
  manifest.write_text('image,label\n' + ''.join(f'{p},{l}\n' for p, l in rows))
  out = tmp_path / 'out'
  with StallingProxy(server.endpoint, f'{BUCKET}/stall/slow.png') as proxy:
    options = server.beam_options()
    options[options.index('--s3_endpoint_url') + 1] = proxy.endpoint
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, '-m', 'pipeline.convert', '--manifest', str(manifest),
         '--output_dir', str(out), '--height', str(SIZE), '--width', str(SIZE),
         '--progress', 'off', '--image_timeout_s', '2', '--image_processes', '1',
         '--max_error_rate', '0.5', *options],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    elapsed = time.monotonic() - started
    assert proxy.stalled_requests >= 1
  assert result.returncode == 0, _explain(result)
  rejected = [json.loads(line) for line in (out / 'rejected.jsonl').read_text().splitlines()]
  assert [(r['row']['image'], r['stage'], r['code']) for r in rejected] == [
      (f's3://{BUCKET}/stall/slow.png', 'decode', 'timeout')]
  assert '--image_timeout_s 2' in rejected[0]['reason']
  info = json.loads((out / 'dataset_info.json').read_text())
  assert (info['num_examples'], info['num_rejected']) == (3, 1)
  # The batch of four waits 2 s, then the stalled row alone 2 s more; start-up
  # is a few seconds. Without the limit on the read, the run waits for the
  # proxy's 300 s stall (or boto's own 60 s read timeout and its retries).
  assert elapsed < 40, elapsed


def test_a_nightly_run_on_s3_reuses_by_etag_and_writes_latest(server, s3, converted):
  """--previous_dataset on S3: fingerprints are the objects' ETags and sizes
  (no image read), every record is copied, the bytes are the full run's, and
  the pointer s3://BUCKET/latest names the new folder."""
  result = convert(server, f's3://{BUCKET}/nightly', '--previous_dataset', OUT)
  assert result.returncode == 0, _explain(result)
  info = json.loads(get(s3, 'nightly/dataset_info.json'))
  assert (info['reuse']['reused'], info['reuse']['num_encoded']) == (len(IMAGES), 0)
  for shard in converted['splits']['train']['shards']:
    assert get(s3, f'nightly/{shard}') == get(s3, f'out/{shard}')
  sidecar = gzip.decompress(get(s3, 'nightly/train.sources.jsonl.gz')).decode()
  assert all(json.loads(line)['fingerprint'].startswith('s3:etag="')
             for line in sidecar.splitlines())
  assert get(s3, 'latest') == f's3://{BUCKET}/nightly\n'.encode()


def test_a_parquet_manifest_on_s3_reads_its_cells_by_row_group(server, s3, tmp_path):
  """Footers on the launcher, row groups in the pipeline and each cell's
  bytes in the image step, all through S3; a cell without bytes reads the
  Image's path beside the file; worker processes get the bytes from the parent."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  names = ['red', 'blue']
  images = [{'bytes': _image_bytes(n, COLOURS[l]), 'path': f'own/{n}'} for n, l in IMAGES]
  images[0] = {'bytes': None, 'path': 'images/red_0.png'}  # on S3, beside the file
  table = pa.table({'image': pa.array(images, pa.struct([('bytes', pa.binary()),
                                                         ('path', pa.string())])),
                    'label': [names.index(l) for _, l in IMAGES]})
  features = {'image': {'_type': 'Image'}, 'label': {'_type': 'ClassLabel', 'names': names}}
  table = table.replace_schema_metadata(
      {'huggingface': json.dumps({'info': {'features': features}})})
  pq.write_table(table, tmp_path / 'f.parquet', row_group_size=2)
  s3.put_object(Bucket=BUCKET, Key='data/train-00000-of-00001.parquet',
                Body=(tmp_path / 'f.parquet').read_bytes())
  result = _run(server, 'pipeline.convert', '--manifest',
                f's3://{BUCKET}/data/train-*.parquet', '--output_dir',
                f's3://{BUCKET}/out-parquet', '--height', str(SIZE), '--width', str(SIZE),
                '--progress', 'off', '--encoding', 'png', '--image_processes', '2')
  assert result.returncode == 0, _explain(result)
  info = json.loads(get(s3, 'out-parquet/dataset_info.json'))
  assert (info['num_examples'], info['num_rejected']) == (len(IMAGES), 0)
  assert get(s3, 'out-parquet/label_map.txt') == b'red\nblue\n'
  from PIL import Image
  seen, keys = {}, []
  for shard in info['splits']['train']['shards']:
    for _, data in read_records(io.BytesIO(get(s3, f'out-parquet/{shard}'))):
      features = parse_example(data)
      label = features['image/class/text'][1][0].decode()
      pixels = Image.open(io.BytesIO(features['image/encoded'][1][0])).convert('RGB')
      assert max(abs(a - b) for a, b in zip(pixels.getpixel((4, 4)), COLOURS[label])) <= 8
      seen[features['image/filename'][1][0].decode()] = label
      keys.append(features['image/key'][1][0].decode())
  assert seen == {'images/red_0.png': 'red', **{f'own/{n}': l for n, l in IMAGES[1:]}}
  # keyed by file and row, never by the Image's path (which datasets cuts to its name)
  assert sorted(keys) == sorted(f'train-00000-of-00001.parquet:{row}'
                                for row in range(len(IMAGES)))


def test_webdataset_tars_on_s3_are_streamed_and_read_by_offset(server, s3, tmp_path):
  """Tars listed by brace range on S3, each read by a worker for its member
  headers and .cls members, each image member read by offset (.tar) or from
  its stream (.tar.gz) through S3."""
  import tarfile
  for shard, suffix in ((0, 'tar'), (1, 'tar.gz')):
    local = tmp_path / f's-{shard}.{suffix}'
    with tarfile.open(local, 'w:gz' if suffix.endswith('gz') else 'w') as tar:
      for i, (name, label) in enumerate(IMAGES):
        for member, data in ((f'{shard}{i}.{name.rsplit(".", 1)[1]}',
                              _image_bytes(name, COLOURS[label])),
                             (f'{shard}{i}.cls', str(['red', 'blue'].index(label)).encode())):
          info = tarfile.TarInfo(member)
          info.size = len(data)
          tar.addfile(info, io.BytesIO(data))
    s3.put_object(Bucket=BUCKET, Key=f'tars/{local.name}', Body=local.read_bytes())
  (tmp_path / 'names.txt').write_text('red\nblue\n')
  result = _run(server, 'pipeline.convert', '--manifest',
                f's3://{BUCKET}/tars/s-{{0..1}}.tar*', '--output_dir',
                f's3://{BUCKET}/out-tars', '--height', str(SIZE), '--width', str(SIZE),
                '--progress', 'off', '--label_map', str(tmp_path / 'names.txt'))
  assert result.returncode == 0, _explain(result)
  info = json.loads(get(s3, 'out-tars/dataset_info.json'))
  assert (info['num_examples'], info['num_rejected']) == (2 * len(IMAGES), 0)
  from PIL import Image
  seen = {}
  for shard in info['splits']['train']['shards']:
    for _, data in read_records(io.BytesIO(get(s3, f'out-tars/{shard}'))):
      features = parse_example(data)
      label = features['image/class/text'][1][0].decode()
      pixels = Image.frombytes('RGB', (SIZE, SIZE), features['image/encoded'][1][0])
      assert max(abs(a - b) for a, b in zip(pixels.getpixel((4, 4)), COLOURS[label])) <= 8
      seen[features['image/key'][1][0].decode()] = label
  assert seen == {f's-{s}.{x}/{s}{i}': l for s, x in ((0, 'tar'), (1, 'tar.gz'))
                  for i, (_, l) in enumerate(IMAGES)}
