"""transforms.filesystem: one S3 client per reader, whole-file replacement."""

from __future__ import annotations

import io
import os
import threading

import pytest

from transforms import filesystem
from transforms.core.rejects import RowError
from transforms.read_sources import read_bytes

PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


class FakeS3IO:
  """Beam's S3IO as FileAccess uses it: open(path, 'rb') -> a binary stream.
  Records the threads that use it: Beam's client keeps its current download
  in the client, so one used from two threads mixes their bytes."""

  def __init__(self, objects: dict):
    self._objects = objects
    self.threads = set()

  def open(self, path: str, mode: str):
    assert mode == 'rb'
    self.threads.add(threading.get_ident())
    if path not in self._objects:
      raise OSError(f'Not found: {path} (404)')
    return io.BytesIO(self._objects[path])


def counting_s3io(objects: dict):
  made = []

  def make():
    made.append(FakeS3IO(objects))
    return made[-1]
  return make, made


def test_each_thread_reads_s3_through_one_client_of_its_own():
  # each a PNG by its first bytes (read_bytes refuses other files before reading them)
  objects = {f's3://bucket/images/{i}.png': PNG_SIGNATURE + bytes([i]) * (i + 1)
             for i in range(40)}
  make, made = counting_s3io(objects)
  reader = filesystem.FileAccess(make_s3io=make)
  start, results = threading.Barrier(8), {}

  def read_some(first: int):
    start.wait()
    for i in range(first, 40, 8):
      path = f's3://bucket/images/{i}.png'
      results[path] = read_bytes(path, reader)

  threads = [threading.Thread(target=read_some, args=(n,)) for n in range(8)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert results == objects
  # 8 clients for 40 reads, and never one client in two threads.
  assert len(made) == 8
  assert all(len(client.threads) == 1 for client in made)
  assert len(set().union(*(client.threads for client in made))) == 8


def test_a_missing_s3_object_is_a_missing_file_row_error():
  make, made = counting_s3io({})
  with pytest.raises(RowError) as caught:
    read_bytes('s3://bucket/gone.png', filesystem.FileAccess(make_s3io=make))
  assert (caught.value.stage, caught.value.code) == ('read', 'missing_file')
  assert 's3://bucket/gone.png' in caught.value.reason
  assert len(made) == 1


def test_other_paths_go_through_beams_filesystems_without_an_s3_client(tmp_path):
  make, made = counting_s3io({})
  (tmp_path / 'a.bin').write_bytes(b'\x00\x01gz-like but not decompressed')
  (tmp_path / 'b.gz').write_bytes(b'\x1f\x8b stored as is')
  reader = filesystem.FileAccess(make_s3io=make)
  with reader.open(str(tmp_path / 'a.bin')) as stream:
    assert stream.read() == b'\x00\x01gz-like but not decompressed'
  with reader.open(str(tmp_path / 'b.gz')) as stream:
    assert stream.read() == b'\x1f\x8b stored as is'
  assert made == []


def test_replacing_swaps_the_whole_file_at_the_end_and_leaves_no_temp(tmp_path):
  path = tmp_path / 'rejected.jsonl'
  path.write_bytes(b'old\n')
  with filesystem.FileAccess().replacing(str(path)) as handle:
    handle.write(b'new 1\n')
    assert path.read_bytes() == b'old\n'  # not replaced before the block ends
    handle.write(b'new 2\n')
  assert path.read_bytes() == b'new 1\nnew 2\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['rejected.jsonl']


def test_two_writers_of_one_path_at_once_each_publish_a_whole_file(tmp_path):
  """Two validate runs of one dataset write its report at once: each writes
  under a temp name of its own in the report's folder and renames it over
  the report, so the report is always one writer's whole bytes (was: both
  wrote validation_report.json.tmp; the second truncated it under the first,
  renamed it, and the first's later bytes landed in the published report,
  b'{"run": "second"}\n"n": 1}\n', and its own rename failed: BeamIOError)."""
  path = tmp_path / 'validation_report.json'
  (tmp_path / 'validation_report.json.tmp').write_bytes(b"an older version's temp")
  files = filesystem.FileAccess()
  with files.replacing(str(path)) as first:
    first.write(b'{"run": "first", ')
    first.flush()
    with files.replacing(str(path)) as second:
      second.write(b'{"run": "second"}\n')
      temps = sorted(p.name for p in tmp_path.iterdir() if p.name != 'validation_report.json.tmp')
    assert path.read_bytes() == b'{"run": "second"}\n'
    first.write(b'"n": 1}\n')
  assert path.read_bytes() == b'{"run": "first", "n": 1}\n'
  assert len(temps) == 2 and all(
      name.startswith('validation_report.json.') and name.endswith('.tmp') for name in temps)
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      'validation_report.json', 'validation_report.json.tmp']  # another writer's: untouched
  assert (tmp_path / 'validation_report.json.tmp').read_bytes() == b"an older version's temp"


def test_a_write_that_raises_leaves_the_file_and_no_temp(tmp_path):
  path = tmp_path / 'dataset_info.json'
  path.write_bytes(b'{}')
  with pytest.raises(ValueError, match='cut short'):
    with filesystem.FileAccess().replacing(str(path)) as handle:
      handle.write(b'{"half": ')
      raise ValueError('cut short')
  assert path.read_bytes() == b'{}'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['dataset_info.json']


def test_local_paths_every_operation_and_no_s3_client(tmp_path):
  make, made = counting_s3io({})
  files = filesystem.FileAccess(make_s3io=make)
  folder = str(tmp_path / 'out')
  os.makedirs(folder)
  with files.create(f'{folder}/a.txt') as handle:
    handle.write(b'plain')
  with files.create(f'{folder}/b.txt.gz', gzip_compressed=True) as handle:
    handle.write(b'squeezed ' * 10)
  assert files.exists(f'{folder}/a.txt') and not files.exists(f'{folder}/nope.txt')
  assert files.read_text(f'{folder}/b.txt.gz') == 'squeezed ' * 10  # .gz decompressed
  with files.open(f'{folder}/b.txt.gz') as stream:
    assert stream.read(2) == b'\x1f\x8b'  # open(): the bytes as stored
  sizes = dict(files.list(f'{folder}/'))
  assert sizes == {f'{folder}/a.txt': 5,
                   f'{folder}/b.txt.gz': os.path.getsize(f'{folder}/b.txt.gz')}
  assert files.sizes([f'{folder}/a.txt', f'{folder}/gone.txt']) == {f'{folder}/a.txt': 5}
  files.write_text(f'{folder}/c.txt', 'old')
  files.rename([f'{folder}/a.txt'], [f'{folder}/c.txt'])  # over an existing file
  assert files.read_text(f'{folder}/c.txt') == 'plain'
  files.delete([f'{folder}/c.txt'])
  assert sorted(os.listdir(folder)) == ['b.txt.gz']
  assert made == []


def test_local_paths_with_glob_characters_are_taken_as_written(tmp_path):
  files = filesystem.FileAccess()
  folder = tmp_path / 'runs [v2]' / 'out*'
  (folder / 'beam-temp-x').mkdir(parents=True)
  (folder / 'beam-temp-x' / '0.tfrecord').write_bytes(b'12345')
  (folder / 'a?.txt').write_bytes(b'abc')
  (tmp_path / 'runs v').mkdir()  # what '[v2]' as a pattern would name
  (tmp_path / 'runs v' / 'decoy.txt').write_bytes(b'no')
  assert sorted(files.list(f'{folder}/')) == [
      (f'{folder}/a?.txt', 3), (f'{folder}/beam-temp-x/0.tfrecord', 5)]
  assert files.list(f'{folder}/a') == [(f'{folder}/a?.txt', 3)]
  assert files.sizes([f'{folder}/a?.txt', f'{folder}/ab.txt']) == {f'{folder}/a?.txt': 3}
  files.delete([f'{folder}/beam-temp-x'])
  files.delete([f'{folder}/a?.txt'])
  assert list(folder.iterdir()) == []
  assert (tmp_path / 'runs v' / 'decoy.txt').read_bytes() == b'no'
  with pytest.raises(filesystem.BeamIOError):
    files.delete([f'{folder}/gone.txt'])


# ------------------------------------------- an S3 store that does not answer


def _refusing_client():
  """transforms/s3_client.py's client for a port nobody listens on (refused
  at once), and the list its requests are counted in."""
  from tests.conftest import free_port
  from transforms.s3_client import BoundedClient
  client = BoundedClient({'s3_endpoint_url': f'http://127.0.0.1:{free_port()}',
                          's3_access_key_id': 'testing', 's3_secret_access_key': 'testing',
                          's3_region_name': 'us-east-1'})
  sent = []
  client.client.meta.events.register('before-send.s3', lambda **kw: sent.append(kw) and None)
  return client, sent


def test_a_store_that_does_not_answer_is_tried_3_times_not_retried_by_beam():
  pytest.importorskip('boto3')
  from apache_beam.io.aws import s3io

  from transforms import s3_client
  client, sent = _refusing_client()
  with pytest.raises(s3_client.StoreNotAnswering) as raised:
    s3io.S3IO(client=client).exists('s3://bucket/key')
  assert len(sent) == s3_client.ATTEMPTS == 3  # Beam's S3IO took it as final
  assert str(raised.value).startswith(
      f'the S3 endpoint {client.endpoint} stopped answering: EndpointConnectionError: ')
  assert str(raised.value).endswith('(after 3 tries of 10 s to connect and 20 s per read)')
  # The next request to that endpoint is not sent: it fails at once, with the same line
  with pytest.raises(s3_client.StoreNotAnswering) as again:
    s3io.S3IO(client=client).delete_paths(['s3://bucket/key'])
  assert len(sent) == 3
  assert str(again.value) == str(raised.value)


def test_a_store_that_did_not_answer_is_asked_again_later(monkeypatch):
  pytest.importorskip('boto3')
  from transforms import s3_client
  client, sent = _refusing_client()
  monkeypatch.setattr(s3_client, 'NOT_ANSWERING_FOR_S', 0.0)
  for _ in range(2):
    with pytest.raises(s3_client.StoreNotAnswering):
      client.get_object_metadata(type('Get', (), {'bucket': 'b', 'object': 'k'})())
  assert len(sent) == 6


def test_the_exit_line_of_a_store_not_answering_as_beam_reports_it():
  from pipeline.runs.exits import store_not_answering
  line = 'the S3 endpoint http://h:1 stopped answering: X: y (after 3 tries of 10 s ...)'
  wrapped = RuntimeError(f"Traceback (most recent call last):\n  File 'a.py'\n"
                         f"transforms.s3_client.StoreNotAnswering: {line} [while running 'Read']")
  assert store_not_answering(wrapped) == line
  assert store_not_answering(RuntimeError('EndpointConnectionError: y')) == ''


def test_a_store_not_answering_is_known_by_its_type_not_its_name(capsys):
  """exits.py and output_dir.py matched the class's name 'StoreNotAnswering':
  a subclass of it was a crash (exit 1, a traceback; its clean-up note 'could
  not remove'), and any other library's class of that name was exit 4. Both
  now ask transforms/core/not_answering.py, which imports no Beam."""
  pytest.importorskip('boto3')
  from pipeline.runs.exits import store_not_answering
  from pipeline.runs.output_dir import removed_on_failure
  from transforms import s3_client
  from transforms.core import not_answering
  assert s3_client.StoreNotAnswering.__name__ == not_answering.NAME  # Beam's text names it
  assert issubclass(s3_client.StoreNotAnswering, not_answering.NotAnswering)

  class Unreachable(s3_client.StoreNotAnswering):
    pass

  class StoreNotAnswering(Exception):  # another library's
    pass

  line = 'the S3 endpoint http://h:1 stopped answering: X: y'
  assert store_not_answering(Unreachable(line)) == line
  assert store_not_answering(StoreNotAnswering('down for a while')) == ''
  try:
    raise RuntimeError('the job failed') from Unreachable(line)
  except RuntimeError as error:
    assert store_not_answering(error) == line

  class Files:
    def list(self, prefix):
      raise Unreachable(line)

  with pytest.raises(RuntimeError, match='the job failed'):
    with removed_on_failure('s3://bucket/out', ('train',), files=Files()):
      raise RuntimeError('the job failed')
  assert capsys.readouterr().err.startswith(
      'note: s3://bucket/out was left as it is: its store stopped answering')
