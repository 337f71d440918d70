"""Where a WebDataset tar ends: after its end-of-archive block, a tar may
hold more (a second tar appended with `cat a.tar b.tar`, .tar.gz files
concatenated, other data), which tarfile, tar and webdataset never read: one
read/truncated line says so, in a .tar and a .tar.gz alike; a header with a
bad checksum is named so in a .tar too; a .tar.gz whose gzip check fails
after its members is one line; one cut inside its closing zeros is whole,
as a .tar cut there is."""

from __future__ import annotations

import gzip
import pathlib
import struct
import tarfile
import zlib

from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import read_examples
from tests.conftest import rejected_lines
from tests.test_webdataset_headers import FLAGS
from tests.test_webdataset_headers import _after
from tests.test_webdataset_headers import _convert
from tests.test_webdataset_headers import _first
from tests.test_webdataset_headers import _member
from tests.test_webdataset_headers import _png
from tests.test_webdataset_headers import _write

END = b'\0' * 1024  # the end-of-archive blocks


@pytest.mark.parametrize('name', ['a.tar', 'a.tar.gz'])
def test_a_second_tar_appended_after_the_end_is_one_line(tmp_path, name):
  """`cat a.tar b.tar`: a .tar said 'cut short inside the header' (it is
  whole), a .tar.gz lost b's samples with exit 0 and no line."""
  first = _first() + END
  reason = _convert(_write(tmp_path / name, first + _after()), tmp_path / 'out')
  assert (f'its tar ends with the end-of-archive block at byte {len(_first())}, but data '
          f'that is not zeros follows at byte {len(first)}') in reason, reason
  assert 'cut short' not in reason


def test_concatenated_tar_gz_files_are_one_line(tmp_path):
  """`cat a.tar.gz b.tar.gz`: two gzip members, which tarfile's own stream
  ends at the first of, silently."""
  path = tmp_path / 'a.tar.gz'
  path.write_bytes(gzip.compress(_first() + END) + gzip.compress(_after()))
  reason = _convert(path, tmp_path / 'out')
  assert f'not zeros follows at byte {len(_first()) + len(END)}' in reason, reason


def test_a_tar_header_with_a_bad_checksum_is_named_so(tmp_path):
  """It was 'cut short inside the header': the file is whole."""
  header = bytearray(_member('1.png', b'x' * 600))
  header[148:156] = b'0000000\0'
  reason = _convert(_write(tmp_path / 'a.tar', _first() + bytes(header) + _after()),
                    tmp_path / 'out')
  assert reason.endswith(f'a.tar: the header at byte {len(_first())} of its tar cannot be '
                         f'read (bad checksum): the members after it are lost'), reason


def test_a_tar_gz_whose_gzip_check_fails_is_one_line(tmp_path):
  """The CRC at a gzip stream's end was never checked: a .tar.gz whose bytes
  decompress to other than were compressed converted with no word."""
  data = bytearray(gzip.compress(_first() + END))
  crc, = struct.unpack('<I', data[-8:-4])
  data[-8:-4] = struct.pack('<I', crc ^ 1)
  path = tmp_path / 'a.tar.gz'
  path.write_bytes(bytes(data))
  reason = _convert(path, tmp_path / 'out')
  assert 'BadGzipFile: CRC check failed' in reason, reason
  # checked at the member's end, the damage may be anywhere before it
  assert reason.startswith(f'{path}: its gzip check fails at byte '), reason
  assert 'bytes before it are damaged, perhaps in the samples already read' in reason, reason


def test_a_tar_gz_cut_in_its_closing_zeros_is_whole(tmp_path):
  """As a .tar cut there is: every member is there, no line."""
  data = gzip.compress(_first() + END * 8)
  path = tmp_path / 'a.tar.gz'
  path.write_bytes(data[:-12])  # the gzip trailer and the last deflate bytes
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  assert rejected_lines(out) == []
  assert [e['image/key'][1][0] for e in read_examples(out)] == [b'a.tar.gz/0']


def test_the_data_after_an_end_is_read_in_pieces():
  """What follows a tar's end may be a whole second tar: never read at once."""
  from transforms import webdataset_source
  reads = []

  def read(size):
    reads.append(size)
    return b'\0' * size if len(reads) < 3 else b'\0\0x'
  assert webdataset_source._first_data(read, 10, 'a.tar') == 10 + 2 * (1 << 20) + 2
  assert max(reads) == 1 << 20
  with pathlib.Path('/dev/zero').open('rb') as zeros:  # a limit: up to it alone
    assert webdataset_source._first_data(zeros.read, 0, 'a.tar', 3 << 20) is None


def _cut_gzip(data: bytes, end: int) -> bytes:
  """`data` gzipped, the stream cut where it has given exactly `end` bytes."""
  compressor = zlib.compressobj(wbits=31)
  return compressor.compress(data[:end]) + compressor.flush(zlib.Z_FULL_FLUSH)


def _folder(name: str) -> bytes:
  info = tarfile.TarInfo(name)
  info.type = tarfile.DIRTYPE
  return info.tobuf(format=tarfile.GNU_FORMAT)


def test_a_header_that_fails_after_a_folder_keeps_the_sample_before_it(tmp_path):
  """A GNU long name whose real header is damaged (tarfile raises, not ends
  quietly) right after a folder's entry: the whole sample 0 was lost, with
  one `not_a_tar` line for a tar whose samples had been read."""
  long_name = _member('L' * 150 + '.png', b'x' * 100)  # its 'L' header, name, real header
  damaged = bytearray(long_name)
  damaged[1024 + 148:1024 + 156] = b'0000000\0'
  reason = _convert(_write(tmp_path / 'a.tar', _first() + _folder('sub') + bytes(damaged)
                           + END), tmp_path / 'out')
  assert reason.startswith(f'{tmp_path / "a.tar"}: the header at byte {len(_first()) + 512} '
                           f'of its tar cannot be read (ReadError: '), reason


def test_a_tar_gz_cut_inside_a_label_member_rejects_its_sample_alone(tmp_path):
  """The .cls read in the first pass raised out of the tar: its sample (a
  whole image, a label cut short) was lost, under one `not_a_tar` line."""
  data = _first() + _member('1.png', b'\x89PNG' + b'x' * 96) + _member('1.cls', b'1' * 300)
  path = tmp_path / 'a.tar.gz'
  path.write_bytes(_cut_gzip(data, len(data) - 512 + 100))  # inside 1.cls's 300 bytes
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['code'], line['line'], line['row']['members']) == (
      'truncated', 1, ['1.png', '1.cls']), line
  assert 'member 1.cls of' in line['reason'], line['reason']
  assert [e['image/key'][1][0] for e in read_examples(out)] == [b'a.tar.gz/0']


def test_a_gzip_stream_cut_at_a_header_s_start_is_one_line(tmp_path):
  """Cut where a header would start, a .tar.gz looked like a tar written
  without its end-of-archive blocks, read as whole: gzip knows it is cut."""
  path = tmp_path / 'a.tar.gz'
  path.write_bytes(_cut_gzip(_first() + _after(), len(_first())))
  reason = _convert(path, tmp_path / 'out')
  assert f'its gzip stream is cut short after byte {len(_first())}' in reason, reason


@pytest.mark.parametrize('name', ['a.tar', 'a.tar.gz'])
@pytest.mark.parametrize('zeros', [1, 100, 511])
def test_a_tar_cut_inside_its_first_end_of_archive_block_is_whole(tmp_path, name, zeros):
  """Cut before the first end-of-archive block is whole: a .tar was read as
  whole, a .tar.gz said 'the header at byte N of its tar cannot be read
  (truncated header): the members after it are lost'."""
  data = _first() + b'\0' * zeros
  path = tmp_path / name
  path.write_bytes(_cut_gzip(data, len(data)) if name.endswith('.gz') else data)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  assert rejected_lines(out) == []
  assert [e['image/key'][1][0] for e in read_examples(out)] == [f'{name}/0'.encode()]


def test_a_tar_gz_of_many_gzip_members_is_read_whole(tmp_path):
  """A tar gzipped in blocks, each its own gzip member (bgzip's layout; gzip
  and tar read it whole): tarfile's stream ended at the first member, so 1
  of its 3 samples converted, the 2nd was 'cut short', the 3rd lost."""
  data = b''.join(_member(f'{i}.png', _png(i)) + _member(f'{i}.cls', str(i).encode())
                  for i in range(3)) + END
  path = tmp_path / 'a.tar.gz'
  path.write_bytes(b''.join(gzip.compress(data[i:i + 1500]) for i in range(0, len(data), 1500)))
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  assert rejected_lines(out) == []
  examples = {e['image/key'][1][0]: e for e in read_examples(out)}
  assert sorted(examples) == [b'a.tar.gz/0', b'a.tar.gz/1', b'a.tar.gz/2']
  for i in range(3):
    example = examples[f'a.tar.gz/{i}'.encode()]
    assert example['image/class/text'][1] == [str(i).encode()]
    pixels = Image.frombytes('RGB', (8, 8), example['image/encoded'][1][0])
    assert pixels.getpixel((4, 4)) == (i * 50, 90, 200)  # _png(i)'s one colour


@pytest.mark.parametrize('tail, line', [(b'garbage after the stream\n', True),
                                        (b'\0' * 5000, False)])
def test_what_follows_a_tar_gz_s_gzip_stream(tmp_path, tail, line):
  """Data that is not gzip after the stream: gzip and tar say 'trailing
  garbage' and exit 2, it went unread without a word; zeros after it are
  padding, as gzip reads them."""
  path = tmp_path / 'a.tar.gz'
  path.write_bytes(gzip.compress(_first() + END) + tail)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  reasons = [rejected['reason'] for rejected in rejected_lines(out)]
  assert reasons == ([f'{path} cannot be read after byte {len(_first()) + 512} of its tar, '
                      f"past its members (BadGzipFile: Not a gzipped file (b'ga')): the "
                      f'members after it, if any, are lost'] if line else [])
  assert [e['image/key'][1][0] for e in read_examples(out)] == [b'a.tar.gz/0']
