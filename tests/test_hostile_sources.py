"""Source files and trees that must not stall, exhaust or fool a run: FIFOs,
devices, huge or sparse files, non-images, unreadable folders and symlink
loops. Each is refused as a rejected row with its own code."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import os
import pathlib
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import pytest

from pipeline import convert
from pipeline import read
from pipeline import validate
from pipeline.errors import EXIT_OVER_BUDGET
from pipeline.errors import EXIT_USAGE
from tests.conftest import COLOURS
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.conftest import write_image
from tests.conftest import write_manifest
from tests.test_transforms import direct_pipeline
from transforms import filesystem
from transforms.batches import BatchedFn
from transforms.batches import Unbatch
from transforms.beam_util import EXAMPLES
from transforms.beam_util import REJECTED
from transforms.core import local_files
from transforms.core import manifest
from transforms.core.example_proto import parse_example
from transforms.core.image import prepare_pillow
from transforms.core.image import process_image
from transforms.core.labels import LabelMap
from transforms.core.rejects import RowError
from transforms.core.spec import DEFAULT_MAX_IMAGE_BYTES
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.dedupe import HashSourceFn
from transforms.encode import EncodeRows
from transforms.read_sources import read_bytes
from transforms.workers.checked_read import read_checked
from transforms.workers.pooled_step import PoolSize
from transforms.workers.source_image import DEFAULT_SPEC
from transforms.workers.source_image import read_local_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
GIB = 1024 ** 3


def bytes_read_so_far() -> int:
  """What this process has read through read() calls since it started (Linux)."""
  for line in pathlib.Path('/proc/self/io').read_text().splitlines():
    if line.startswith('rchar:'):
      return int(line.split()[1])
  raise AssertionError('no rchar in /proc/self/io')


def refused(path, spec: ImageSpec = DEFAULT_SPEC, within_s: float = 10.0) -> RowError:
  """The RowError read_local_file raises for `path`, which it must raise
  within `within_s` seconds (on a thread: a read that blocks fails the test
  rather than hanging it)."""
  outcome = {}

  def read():
    try:
      outcome['data'] = read_local_file(str(path), spec)
    except RowError as error:
      outcome['error'] = error
  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  reader.join(within_s)
  assert not reader.is_alive(), f'reading {path} still blocked after {within_s} s'
  assert 'error' in outcome, f'{path} was read: {len(outcome["data"])} bytes'
  return outcome['error']


def code(error: RowError) -> tuple:
  return error.stage, error.code


@contextlib.contextmanager
def fifo_writer_that_unblocks_readers(path: pathlib.Path):
  """A FIFO at `path`, and a thread that ends whatever read of it is blocked
  (opens the writing end whenever some reader holds it, then closes it: the
  reader gets end-of-file). Code that waits on the FIFO then fails its test
  on what it read instead of hanging it forever; code that never opens it
  for reading never meets the writer. Yields a list of the times it had to."""
  os.mkfifo(path)
  done, unblocked = threading.Event(), []

  def unblock():
    while not done.wait(0.2):
      try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
      except OSError as error:
        if error.errno == errno.ENXIO:  # nobody is reading: fine
          continue
        raise
      os.close(fd)
      unblocked.append(time.monotonic())
  writer = threading.Thread(target=unblock, daemon=True)
  writer.start()
  try:
    yield unblocked
  finally:
    done.set()
    writer.join()


# --- no whole read before the file type, the size and the header are checked


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
  os.mkfifo(tmp_path / 'x.jpg')
  error = refused(tmp_path / 'x.jpg')
  assert code(error) == ('read', 'not_a_file')
  assert error.reason == f'{tmp_path}/x.jpg is a FIFO (named pipe), not a regular file: not read'


def test_a_symlink_to_dev_zero_and_a_socket_are_refused_unread(tmp_path, monkeypatch):
  os.symlink('/dev/zero', tmp_path / 'zero.jpg')
  before = bytes_read_so_far()
  error = refused(tmp_path / 'zero.jpg')
  assert code(error) == ('read', 'not_a_file') and 'a character device' in error.reason
  assert bytes_read_so_far() - before < 65536  # a buffer, not the file
  with socket.socket(socket.AF_UNIX) as server:
    monkeypatch.chdir(tmp_path)  # a relative name: a unix socket's path has 107 bytes at most
    server.bind('sock.png')
    error = refused(tmp_path / 'sock.png')
  assert code(error) == ('read', 'not_a_file') and 'a socket' in error.reason
  (tmp_path / 'folder.png').mkdir()
  assert code(refused(tmp_path / 'folder.png')) == ('read', 'is_directory')


def test_a_sparse_3_gb_jpg_is_refused_from_its_size(tmp_path):
  big = tmp_path / 'big.jpg'
  with open(big, 'wb') as handle:
    handle.write(b'\xff\xd8\xff\xe0')  # a JPEG's first bytes: only the size refuses it
    handle.truncate(3 * GIB)
  peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  before = bytes_read_so_far()
  error = refused(big)
  assert code(error) == ('read', 'too_large')
  assert error.reason == (f'{big} is {3 * GIB} bytes, more than --max_image_bytes '
                          f'{DEFAULT_MAX_IMAGE_BYTES}: not read')
  assert bytes_read_so_far() - before < 65536  # a buffer, not the file
  # reading it whole took 3.1 GB of memory
  assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kb < 50_000


def test_max_image_bytes_is_the_largest_size_read(tmp_path):
  path = write_image(tmp_path / 'red.png', COLOURS['red'])
  size = path.stat().st_size
  assert read_local_file(str(path), ImageSpec(max_image_bytes=size)) == path.read_bytes()
  error = refused(path, ImageSpec(max_image_bytes=size - 1))
  assert code(error) == ('read', 'too_large')
  assert f'is {size} bytes, more than --max_image_bytes {size - 1}' in error.reason


def test_a_large_file_that_is_no_image_is_refused_from_its_first_bytes(tmp_path):
  prepare_pillow(ImageSpec().max_pixels)
  junk = tmp_path / 'junk.jpg'
  with open(junk, 'wb') as handle:
    handle.write(b'GARBAGE!')
    handle.truncate(200 * 1024 * 1024)
  before = bytes_read_so_far()
  error = refused(junk)
  assert bytes_read_so_far() - before < 65536  # a buffer, not the file
  # the code and words decoding the whole file gives
  assert code(error) == ('decode', 'not_an_image')
  assert error.reason == "not an image Pillow can read (204800 KB, starts with b'GARBAGE!')"
  # the same size with a PNG's first bytes is read (and then found corrupt)
  png = tmp_path / 'png.png'
  with open(png, 'wb') as handle:
    handle.write(b'\x89PNG\r\n\x1a\n')
    handle.truncate(30 * 1024 * 1024)
  before = bytes_read_so_far()
  assert len(read_local_file(str(png))) == 30 * 1024 * 1024
  assert bytes_read_so_far() - before >= 30 * 1024 * 1024


def test_a_format_left_out_of_formats_is_refused_from_its_first_bytes(tmp_path):
  prepare_pillow(ImageSpec().max_pixels)
  gif = write_image(tmp_path / 'a.gif', COLOURS['red'], fmt='GIF')
  spec = ImageSpec(formats=('PNG',))
  error = refused(gif, spec)
  with pytest.raises(RowError) as decoded:
    process_image(gif.read_bytes(), spec)
  assert (code(error), error.reason) == (code(decoded.value), decoded.value.reason) == (
      ('decode', 'format_not_allowed'), 'GIF image: format not in --formats (PNG)')


def test_formats_without_a_signature_are_read_whole(tmp_path):
  """TGA has no signature: any first bytes may be one, so nothing is refused
  before decoding."""
  prepare_pillow(ImageSpec().max_pixels)
  junk = tmp_path / 'junk.tga'
  junk.write_bytes(b'GARBAGE!' * 100)
  assert read_local_file(str(junk), ImageSpec(formats=('PNG', 'TGA'))) == junk.read_bytes()
  assert code(refused(junk, ImageSpec(formats=('PNG',)))) == ('decode', 'not_an_image')


def test_a_file_longer_than_its_reported_size_is_cut_at_the_limit():
  data = b'\x89PNG\r\n\x1a\n' + bytes(2000)
  with pytest.raises(RowError) as caught:
    read_checked(io.BytesIO(data), 'grown.png', 10, ImageSpec(max_image_bytes=1000))
  assert code(caught.value) == ('read', 'too_large')
  assert caught.value.reason == 'grown.png grew past --max_image_bytes 1000: not read further'
  assert read_checked(io.BytesIO(data), 'a.png', 10, ImageSpec()) == data
  assert read_checked(io.BytesIO(data), 'a.png', None, ImageSpec()) == data


class CountingStream(io.BytesIO):
  """An object store's stream: seekable (its size comes from the object's
  metadata), counting the bytes read from it."""

  def __init__(self, data: bytes, counts: list):
    super().__init__(data)
    self._counts = counts

  def read(self, size=-1):
    data = super().read(size)
    self._counts.append(len(data))
    return data


class FakeS3IO:

  def __init__(self, objects: dict, counts: list):
    self._objects = objects
    self._counts = counts

  def open(self, path: str, mode: str):
    return CountingStream(self._objects[path], self._counts)


def test_remote_files_are_refused_from_their_reported_size_and_first_bytes():
  prepare_pillow(ImageSpec().max_pixels)
  counts = []
  objects = {'s3://b/big.png': b'\x89PNG\r\n\x1a\n' + bytes(5000),
             's3://b/junk.png': b'GARBAGE!' + bytes(5000)}
  reader = filesystem.FileAccess(make_s3io=lambda: FakeS3IO(objects, counts))
  with pytest.raises(RowError) as caught:
    read_bytes('s3://b/big.png', reader, ImageSpec(max_image_bytes=5000))
  assert code(caught.value) == ('read', 'too_large') and sum(counts) == 0
  with pytest.raises(RowError) as caught:
    read_bytes('s3://b/junk.png', reader)
  assert code(caught.value) == ('decode', 'not_an_image') and sum(counts) == 16
  assert read_bytes('s3://b/big.png', reader) == objects['s3://b/big.png']


def test_the_limit_is_recorded_when_not_the_default():
  assert 'max_image_bytes' not in ImageSpec().to_json()
  spec = ImageSpec(max_image_bytes=1000)
  assert spec.to_json()['max_image_bytes'] == 1000
  assert ImageSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize('value,message', [
    ('0', "argument --max_image_bytes: invalid positive integer value: '0'"),
    ('-5', "argument --max_image_bytes: invalid positive integer value: '-5'"),
    ('lots', "argument --max_image_bytes: invalid positive integer value: 'lots'"),
])
def test_max_image_bytes_must_be_positive(sample, capsys, value, message):
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--max_image_bytes', value]) == EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and message in err, err
  assert not sample.out.exists()


def test_convert_rejects_fifos_devices_and_oversized_files_and_converts_the_rest(sample):
  images = sample.root / 'images'
  os.mkfifo(images / 'x.jpg')
  os.symlink('/dev/zero', images / 'zero.jpg')
  with open(images / 'sparse.jpg', 'wb') as handle:
    handle.truncate(3 * GIB)
  largest = max(sample.labels, key=lambda name: (sample.root / name).stat().st_size)
  limit = (sample.root / largest).stat().st_size - 1
  write_manifest(sample.manifest, list(sample.labels.items()) + [
      ('images/x.jpg', 'red'), ('images/zero.jpg', 'red'), ('images/sparse.jpg', 'red')])
  started = time.monotonic()
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--height', '4', '--width', '4', '--image_timeout_s', '5',
                       '--max_image_bytes', str(limit)]) == EXIT_OVER_BUDGET
  assert time.monotonic() - started < 60
  rejected = {(r['row']['image'], r['stage'], r['code']) for r in rejected_lines(sample.out)}
  assert rejected == {('images/x.jpg', 'read', 'not_a_file'),
                      ('images/zero.jpg', 'read', 'not_a_file'),
                      ('images/sparse.jpg', 'read', 'too_large'),
                      (largest, 'read', 'too_large')}
  info = read_info(sample.out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (12, 8, 4)
  assert info['rejected_by_reason'] == {'read/not_a_file': 2, 'read/too_large': 2}
  assert info['image']['max_image_bytes'] == limit


# --- content hashing in the time-limited image workers


def _content_run(sample, *flags) -> tuple:
  """convert of the sample plus a copy of red_0 and a FIFO named x.jpg
  (--image_timeout_s 2) -> (exit code, {image: (stage, code)} rejected, info,
  times a blocked reader of the FIFO had to be released)."""
  images = sample.root / 'images'
  shutil.copy(images / 'red_0.png', images / 'red_copy.png')
  with fifo_writer_that_unblocks_readers(images / 'x.jpg') as unblocked:
    write_manifest(sample.manifest, list(sample.labels.items()) + [
        ('images/x.jpg', 'red'), ('images/red_copy.png', 'red')])
    exit_code = convert.main(['--manifest', str(sample.manifest), '--output_dir',
                              str(sample.out), '--height', '4', '--width', '4',
                              '--image_timeout_s', '2', *flags])
  rejected = {r['row']['image']: (r['stage'], r['code']) for r in rejected_lines(sample.out)}
  return exit_code, rejected, read_info(sample.out), unblocked


def test_dedupe_content_refuses_a_fifo_and_finishes(sample):
  exit_code, rejected, info, unblocked = _content_run(sample, '--dedupe', 'content')
  assert unblocked == []  # nobody ever waited on the FIFO
  assert exit_code == EXIT_OVER_BUDGET
  assert rejected == {'images/x.jpg': ('read', 'not_a_file'),
                      'images/red_copy.png': ('duplicate', 'duplicate_content')}
  assert (info['num_manifest_rows'], info['num_examples']) == (11, 9)


def test_split_by_content_refuses_a_fifo_and_finishes(sample):
  exit_code, rejected, info, unblocked = _content_run(
      sample, '--split_by', 'content', '--split', 'train=0.5,test=0.5')
  assert unblocked == []
  assert exit_code == EXIT_OVER_BUDGET
  assert rejected == {'images/x.jpg': ('read', 'not_a_file')}
  assert (info['num_manifest_rows'], info['num_examples']) == (11, 10)
  # the copy went where the original went
  assert sum(split['num_examples'] for split in info['splits'].values()) == 10
  assert info['content_duplicates']['num_across_splits'] == 0
  assert info['content_duplicates']['num_within_split'] == 1


def _rows(folder: pathlib.Path, names: list) -> list:
  return [manifest.ManifestRow({'image': name}, 'm', line, image=name,
                               path=str(folder / name), key=name, label='red')
          for line, name in enumerate(names, 2)]


@pytest.mark.slow
def test_hashing_that_overruns_the_time_limit_is_stopped_and_its_row_rejected(tmp_path):
  """Hashing runs in the image worker processes under --image_timeout_s: a
  file whose hashing never ends has its worker killed, its row alone is
  rejected (decode/timeout) when its image would be loaded, and it is not
  read again; the other rows are hashed and converted."""
  names = [f'{i}-SLOW.png' if i == 3 else f'{i}.png' for i in range(10)]
  for i, name in enumerate(names):
    write_image(tmp_path / name, (i, 0, 0), size=(3, 2))
  spec = ImageSpec(height=1, width=1)
  from tests.process_helpers import sleep_on_marked_hash
  started = time.monotonic()
  with direct_pipeline() as p:
    label_map = p | 'LabelMap' >> beam.Create([LabelMap(('red',))])
    hashed = (p | 'Rows' >> beam.Create([_rows(tmp_path, names)])
              | 'Hash' >> beam.ParDo(BatchedFn(HashSourceFn(
                  spec, PoolSize(1, 2, 1.0), hash_in_process=sleep_on_marked_hash))))
    assert_that(hashed | 'Hashed' >> Unbatch() | 'Sums' >> beam.Map(lambda r: (r.image, r.content_sha256)),
                equal_to([(name, '' if 'SLOW' in name else hashlib.sha256(
                    (tmp_path / name).read_bytes()).hexdigest()) for name in names]),
                label='Hashes')
    encoded = hashed | EncodeRows(spec, ExampleSpec(), label_map, image_processes=2,
                                  image_timeout_s=60)
    assert_that(encoded[EXAMPLES] | Unbatch() | beam.Map(
        lambda e: parse_example(e.data)['image/filename'][1][0].decode()),
                equal_to([name for name in names if 'SLOW' not in name]), label='Examples')
    assert_that(encoded[REJECTED] | beam.Map(lambda r: (r.row['image'], r.stage, r.code,
                                                        r.reason)),
                equal_to([('3-SLOW.png', 'decode', 'timeout', 'reading and hashing the file '
                           '(content) took longer than --image_timeout_s 1: stopped')]),
                label='Rejected')
  # its batch, then itself alone: twice the limit, not the 600 s the hashing takes
  assert time.monotonic() - started < 60


def test_a_file_that_cannot_be_hashed_is_rejected_with_that_error_unread_again(tmp_path):
  write_image(tmp_path / 'a.png', COLOURS['red'], size=(3, 2))
  os.mkfifo(tmp_path / 'x.jpg')
  spec = ImageSpec(height=1, width=1)
  with direct_pipeline() as p:
    label_map = p | 'LabelMap' >> beam.Create([LabelMap(('red',))])
    hashed = (p | 'Rows' >> beam.Create([_rows(tmp_path, ['a.png', 'x.jpg'])])
              | 'Hash' >> beam.ParDo(BatchedFn(HashSourceFn(spec, PoolSize(2, 0)))))
    encoded = hashed | EncodeRows(spec, ExampleSpec(), label_map, image_threads=2)
    assert_that(encoded[EXAMPLES] | Unbatch() | beam.Map(lambda e: len(e.data) > 0),
                equal_to([True]),
                label='Examples')
    assert_that(encoded[REJECTED] | beam.Map(lambda r: (r.row['image'], r.stage, r.code)),
                equal_to([('x.jpg', 'read', 'not_a_file')]), label='Rejected')


def test_hashing_uses_the_image_spec_limit(tmp_path):
  """--dedupe content reads no more than decoding does (--max_image_bytes)."""
  path = write_image(tmp_path / 'a.png', COLOURS['red'])
  spec = dataclasses.replace(ImageSpec(), max_image_bytes=path.stat().st_size - 1)
  from transforms.workers.source_image import hash_sources
  [result] = hash_sources([str(path)], spec)
  assert isinstance(result, RowError) and code(result) == ('read', 'too_large')
  [digest] = hash_sources([str(path)], ImageSpec())
  assert digest == hashlib.sha256(path.read_bytes()).hexdigest()


# --- nothing below --image_dir vanishes


def locked_scandir(monkeypatch, *locked: pathlib.Path) -> None:
  """os.scandir refuses `locked` folders as a non-root run would (the tests
  run as root, who may list a chmod 000 folder)."""
  real = os.scandir
  refused_paths = {str(path) for path in locked}

  def scandir(path='.'):
    if str(path).rstrip('/') in refused_paths:
      raise PermissionError(errno.EACCES, 'Permission denied', str(path))
    return real(path)
  monkeypatch.setattr(os, 'scandir', scandir)


def hostile_tree(root: pathlib.Path) -> pathlib.Path:
  """red/ and green/ with two images each, locked/ (two images, chmod 000),
  a dangling symlink, a loop of file symlinks, a folder symlink back up the
  tree, a symlinked class folder, a hidden folder and a note."""
  for name in ('red', 'green', 'locked'):
    for i in range(2):
      write_image(root / name / f'{i}.png', COLOURS.get(name, (0, 0, 255)), size=(5, 4))
  os.symlink('/nowhere/gone.png', root / 'red' / 'dangling.png')
  os.symlink('b.jpg', root / 'red' / 'a.jpg')
  os.symlink('a.jpg', root / 'red' / 'b.jpg')
  os.symlink('..', root / 'green' / 'up')
  os.symlink('green', root / 'linked')
  write_image(root / '.cache' / 'hidden.png')
  (root / 'green' / 'notes.txt').write_text('not an image')
  os.chmod(root / 'locked', 0)
  return root


@pytest.fixture
def tree(tmp_path):
  root = hostile_tree(tmp_path / 'tree')
  yield root
  os.chmod(root / 'locked', 0o755)  # so that pytest can remove it


def test_the_listing_names_every_entry_it_cannot_use(tree, monkeypatch):
  locked_scandir(monkeypatch, tree / 'locked')
  listed = {relative: problem and (problem.stage, problem.code)
            for relative, problem in local_files.walk_local_files(str(tree))}
  assert listed == {
      'green/0.png': None, 'green/1.png': None, 'green/notes.txt': None,
      'green/up/': ('read', 'unreadable'),  # a loop: one entry, not followed
      'linked/0.png': None, 'linked/1.png': None, 'linked/notes.txt': None,
      'linked/up/': ('read', 'unreadable'),
      'locked/': ('read', 'unreadable'),
      'red/0.png': None, 'red/1.png': None, 'red/a.jpg': None, 'red/b.jpg': None,
      'red/dangling.png': None,  # files: reading them says what they are
  }
  problems = dict(local_files.walk_local_files(str(tree)))
  assert problems['locked/'].reason == (f'cannot list folder {tree}/locked: Permission '
                                        f'denied; its files are not converted')
  assert problems['green/up/'].reason == (f'{tree}/green/up leads to {tree}, a folder it is '
                                          f'in (a loop): not followed')


def test_a_link_to_a_folder_holding_the_image_dir_is_a_loop_not_followed(tmp_path):
  """A link to DIR's parent (or to /: a downloaded tree's `x -> /`) leads back
  to a folder it is in: it was followed, as only the folders below DIR were
  checked, and the walk listed the whole file system (/sys's links without
  end: a run still listing after 300 s) before it came back to DIR."""
  root = tmp_path / 'data'
  write_image(root / 'cat' / '0.png', size=(5, 4))
  write_image(tmp_path / 'stray' / '1.png', size=(5, 4))
  os.symlink(tmp_path, root / 'cat' / 'up')
  listed = {relative: problem and problem.reason
            for relative, problem in local_files.walk_local_files(str(root))}
  assert listed == {
      'cat/0.png': None,
      'cat/up/': f'{root}/cat/up leads to {tmp_path}, a folder it is in (a loop): not followed'}


def test_an_unreadable_root_is_one_entry(tmp_path, monkeypatch):
  write_image(tmp_path / 'red' / 'a.png')
  locked_scandir(monkeypatch, tmp_path)
  assert [(relative, problem.code) for relative, problem
          in local_files.walk_local_files(str(tmp_path))] == [('./', 'unreadable')]


@pytest.mark.parametrize('layout', ['label', 'split/label'])
def test_convert_of_an_image_dir_it_cannot_list_rejects_it_in_either_layout(
    tmp_path, monkeypatch, capsys, layout):
  """DIR itself unlistable (chmod 000, another user's folder): with layout
  label it was one rejected row './' and exit 2 (every row rejected); with
  split/label the check of its split folders listed it first and raised a
  PermissionError traceback (exit 1)."""
  root = tmp_path / 'data'
  write_image(root / 'train' / 'red' / 'a.png')
  locked_scandir(monkeypatch, root)
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(root), '--image_dir_layout', layout,
                       '--output_dir', str(out), '--height', '4', '--width', '4',
                       '--progress', 'off']) == EXIT_USAGE
  assert 'Traceback' not in capsys.readouterr().err
  assert [(r['row']['image'], r['stage'], r['code'], r['reason']) for r in rejected_lines(out)] == [
      ('./', 'read', 'unreadable',
       f'cannot list folder {root}: Permission denied; its files are not converted')]
  assert sorted(path.name for path in out.iterdir()) == ['rejected.jsonl']


def _check_tree_run(out: pathlib.Path, tree: pathlib.Path) -> None:
  rejected = {(r['row']['image'], r['stage'], r['code'], r['line'])
              for r in rejected_lines(out)}
  assert rejected == {
      ('green/up/', 'read', 'unreadable', 3),
      ('linked/up/', 'read', 'unreadable', 6),
      ('locked/', 'read', 'unreadable', 7),
      ('red/a.jpg', 'read', 'unreadable', 10),  # a loop of file links: ELOOP
      ('red/b.jpg', 'read', 'unreadable', 11),
      ('red/dangling.png', 'read', 'missing_file', 12),
  }
  loop = next(r for r in rejected_lines(out) if r['row']['image'] == 'red/a.jpg')
  assert loop['reason'] == f'cannot read {tree}/red/a.jpg: Too many levels of symbolic links'
  dangling = next(r for r in rejected_lines(out) if r['code'] == 'missing_file')
  assert dangling['reason'] == (f'file not found: {tree}/red/dangling.png (a symlink to '
                                f'/nowhere/gone.png, which does not exist)')
  assert dangling['row'] == {'image': 'red/dangling.png', 'label': 'red'}
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (12, 6, 6)
  assert info['rejected_by_reason'] == {'read/unreadable': 5, 'read/missing_file': 1}
  assert (info['num_skipped_files'], info['skipped_files']) == (
      2, ['green/notes.txt', 'linked/notes.txt'])
  # locked is a class folder, as Keras lists it, with no example: its one row is rejected
  assert info['label_map'] == ['green', 'linked', 'locked', 'red']
  assert info['label_warnings']['empty_classes'] == ['locked']


def test_a_path_too_long_is_named_once_in_its_reason(tmp_path):
  """A name over the file system's 255 bytes, a path over PATH_MAX: their
  reasons read `cannot read <path>: File name too long`; they held the path
  twice ([Errno 36] File name too long: '<path>'), 10 KB for the deep one."""
  write_image(tmp_path / 'a.png')
  long_name = 'x' * 300 + '.png'
  deep = '/'.join(['d' * 200] * 25) + '/a.png'
  manifest_path = write_manifest(tmp_path / 'm.csv', [('a.png', 'cat'), (long_name, 'cat'),
                                                      (deep, 'cat')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(manifest_path), '--output_dir', str(out),
                       '--height', '4', '--width', '4', '--progress', 'off']) == EXIT_OVER_BUDGET
  assert {r['line']: (r['stage'], r['code'], r['reason']) for r in rejected_lines(out)} == {
      3: ('read', 'unreadable', f'cannot read {tmp_path}/{long_name}: File name too long'),
      4: ('read', 'unreadable', f'cannot read {tmp_path}/{deep}: File name too long')}
  assert read_info(out)['num_examples'] == 1


def test_convert_image_dir_rejects_what_it_cannot_list_or_read(tree, tmp_path, monkeypatch):
  locked_scandir(monkeypatch, tree / 'locked')
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(tree), '--output_dir', str(out), '--height', '4',
                       '--width', '4']) == EXIT_OVER_BUDGET
  _check_tree_run(out, tree)


@pytest.mark.slow
def test_a_chmod_000_class_folder_is_rejected_in_a_real_run(tree, tmp_path):
  """The same tree, converted by a process the kernel refuses the chmod 000
  folder to: as root, one without the capabilities that bypass permissions."""
  if os.geteuid() == 0:
    setpriv = shutil.which('setpriv')
    if setpriv is None:
      pytest.skip('needs setpriv to drop root permission bypass')
    prefix = [setpriv, '--bounding-set=-dac_override,-dac_read_search']
  else:
    prefix = []
  out = tmp_path / 'out'
  done = subprocess.run(
      [*prefix, sys.executable, '-m', 'pipeline.convert', '--image_dir', str(tree),
       '--output_dir', str(out), '--height', '4', '--width', '4'],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert done.returncode == EXIT_OVER_BUDGET, done.stderr
  assert 'rejected read/unreadable: 5' in done.stdout
  _check_tree_run(out, tree)



def test_a_file_or_folder_name_that_is_not_utf8_rejects_its_row_only(tmp_path):
  # Bytes a file system allows and UTF-8 does not (a Latin-1 upload): Beam's
  # coders carry UTF-8 only, so such a name once failed the whole job.
  tree = tmp_path / 'photos'
  write_image(tree / 'cat' / 'ok.png', (255, 0, 0))
  write_image(tree / 'dog' / 'fine.png', (0, 0, 255))
  root = os.fsencode(tree)
  for name in (b'dog/caf\xe9.png', b'd\xf6g/x.png'):
    os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
    shutil.copy(tree / 'cat' / 'ok.png', os.path.join(root, name))
  with open(os.path.join(root, b'dog/notes\xe9.txt'), 'wb'):
    pass  # not an image by name: skipped, as any .txt
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(tree), '--output_dir', str(out), '--height', '4',
                       '--width', '4', '--max_error_rate', '1']) == 0
  info = read_info(out)
  assert info['num_examples'] == 2 and info['num_manifest_rows'] == 4
  assert sorted((r['row']['image'], r['code'], r['reason']) for r in rejected_lines(out)) == [
      ('d\\xf6g/x.png', 'bad_encoding', 'file name is not UTF-8: d\\xf6g/x.png'),
      ('dog/caf\\xe9.png', 'bad_encoding', 'file name is not UTF-8: dog/caf\\xe9.png')]


def test_an_image_dir_name_with_a_leading_or_trailing_space_is_read_as_listed(tmp_path):
  # ' cat/a.png' (a class folder whose name starts with a space) was stripped
  # like a manifest cell into 'cat/a.png', a file that does not exist: each
  # image of the folder was rejected as read/missing_file. The label is still
  # stripped, as every label is (label_map.txt cannot hold the spaces).
  tree = tmp_path / 'photos'
  write_image(tree / ' cat' / 'a.png', (255, 0, 0))
  write_image(tree / 'dog' / 'b.png', (0, 0, 255))
  write_image(tree / 'dog' / 'c.png ', (0, 255, 0), fmt='PNG')
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(tree), '--output_dir', str(out), '--height', '4',
                       '--width', '4', '--image_extensions', 'all']) == 0
  info = read_info(out)
  assert (info['num_examples'], info['num_rejected'], info['label_map']) == (3, 0, ['cat', 'dog'])
  got = {e['key']: (e['class_text'], e['label'], e['image'][0, 0].tolist())
         for e in read.examples(str(out))}
  assert got == {' cat/a.png': ('cat', 0, [255, 0, 0]), 'dog/b.png': ('dog', 1, [0, 0, 255]),
                 'dog/c.png ': ('dog', 1, [0, 255, 0])}
  # validate --recompute reads the sources by the same names
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == 0
  report = json.loads((out / 'validation_report.json').read_text())
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (3, 0)
