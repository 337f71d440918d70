"""WebDataset tars whose headers are hostile: an extended header (pax, GNU
long name) claiming far more bytes than any name needs, a sparse member
whose map tarfile cannot parse, a damaged header in a .tar.gz. Each is one
read/truncated line after the samples before it; none is read whole, none
is a traceback, and none ends a .tar.gz silently."""

from __future__ import annotations

import gzip
import io
import pathlib
import tarfile

from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import read_examples
from tests.conftest import rejected_lines
from transforms import webdataset_source

FLAGS = ('--height', '8', '--width', '8', '--progress', 'off', '--max_error_rate', '1')
CLAIM = 8 << 20  # what the hostile header announces: 8 times the cap


def _png(seed: int) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (5, 4), (seed * 50 % 256, 90, 200)).save(buffer, 'PNG')
  return buffer.getvalue()


def _member(name: str, data: bytes) -> bytes:
  info = tarfile.TarInfo(name)
  info.size = len(data)
  return info.tobuf(format=tarfile.GNU_FORMAT) + data + b'\0' * (-len(data) % 512)


def _header(name: str, size: int, kind: bytes, extended: int = 0) -> bytes:
  """A ustar header block of type `kind` announcing `size` bytes (the GNU
  sparse `isextended` flag set when `extended`), checksum and all."""
  info = tarfile.TarInfo(name)
  info.size, info.type = size, kind
  block = bytearray(info._create_header(info.get_info(), tarfile.USTAR_FORMAT, 'utf-8',
                                        'surrogateescape'))
  block[482] = extended
  block[148:156] = b'%06o\0 ' % (256 + sum(block[:148]) + sum(block[156:]))
  return bytes(block)


def _first() -> bytes:
  return _member('0.png', _png(0)) + _member('0.cls', b'0')


def _after() -> bytes:
  return _member('2.png', _png(2)) + _member('2.cls', b'0') + b'\0' * 1024


def _write(path: pathlib.Path, data: bytes) -> pathlib.Path:
  path.write_bytes(gzip.compress(data) if path.name.endswith('.gz') else data)
  return path


def _convert(path: pathlib.Path, out: pathlib.Path):
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), *FLAGS]) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['stage'], line['code'], line['line']) == ('read', 'truncated', 1)
  assert [e['image/key'][1][0] for e in read_examples(out)] == [
      f'{path.name}/0'.encode()]
  return line['reason']


@pytest.mark.parametrize('name', ['a.tar', 'a.tar.gz'])
@pytest.mark.parametrize('kind', [tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE])
def test_an_extended_header_over_the_cap_is_refused_not_read(tmp_path, name, kind):
  """tarfile read a pax header or GNU long name whole at the size it
  claimed: a 1 MB .tar.gz claiming 1 GiB held 2.1 GB, and the samples after
  it converted (exit 0, no line), or lost their name silently."""
  data = _first() + _header('././@LongLink', CLAIM, kind) + b'\0' * CLAIM + _after()
  path = _write(tmp_path / name, data)
  reason = _convert(path, tmp_path / 'out')
  assert f'announces a {CLAIM}-byte extended header' in reason
  assert 'the members after it are not read' in reason


class _Counting(io.BytesIO):
  def __init__(self, data: bytes):
    super().__init__(data)
    self.most = 0

  def read(self, size=-1):
    chunk = super().read(size)
    self.most = max(self.most, len(chunk))
    return chunk


def test_an_extended_header_over_the_cap_is_never_read_in_one_piece():
  data = _first() + _header('././@LongLink', CLAIM, tarfile.XHDTYPE) + b'\0' * CLAIM + _after()
  stream = _Counting(data)
  members = webdataset_source.tar_members(stream, 'a.tar', len(data))
  assert [m.name for m in [next(members), next(members)]] == ['0.png', '0.cls']
  with pytest.raises(webdataset_source.TarCutError):
    next(members)
  assert stream.most <= 1 << 20


@pytest.mark.parametrize('name', ['a.tar', 'a.tar.gz'])
@pytest.mark.parametrize('sparse', ['gnu', 'pax'])
def test_a_sparse_member_is_one_line_not_a_traceback(tmp_path, name, sparse):
  """A GNU sparse header whose extension blocks are missing (IndexError in
  tarfile), or a pax sparse 1.0 map without a line end (ValueError), failed
  the whole job with a traceback, exit 1."""
  if sparse == 'gnu':
    hostile = _header('1.png', 0, tarfile.GNUTYPE_SPARSE, extended=1)
  else:
    info = tarfile.TarInfo('1.png')
    info.size = 512
    info.pax_headers = {'GNU.sparse.major': '1', 'GNU.sparse.minor': '0',
                        'GNU.sparse.name': '1.png', 'GNU.sparse.realsize': '10'}
    hostile = info.tobuf(format=tarfile.PAX_FORMAT) + b'9' * 512 + _after()
  reason = _convert(_write(tmp_path / name, _first() + hostile), tmp_path / 'out')
  assert 'is a GNU sparse file' in reason


@pytest.mark.parametrize('damage', ['checksum', 'cut'])
def test_a_tar_gz_whose_header_is_damaged_says_so(tmp_path, damage):
  """tarfile ends a stream quietly at a header with a bad checksum, or cut
  short: a .tar.gz lost the samples after it with exit 0 and no line (a
  .tar's bytes after the header were checked, a .tar.gz's were not)."""
  header = bytearray(_member('1.png', _png(1)))
  if damage == 'checksum':
    header[148:156] = b'0000000\0'
    data = _first() + bytes(header) + _after()
  else:
    data = _first() + bytes(header[:300])
  reason = _convert(_write(tmp_path / 'a.tar.gz', data), tmp_path / 'out')
  assert f'the header at byte {len(_first())} of its tar cannot be read' in reason
  assert 'the members after it are lost' in reason
