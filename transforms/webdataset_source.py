"""ReadTars: a WebDataset manifest's tars -> one ManifestRow per sample, one
tar per work item, streamed (never extracted).

A worker reads its tar's member headers and its label and metadata members
(.cls, .txt, .json); image members are skipped over (a seek in a .tar),
and the row carries where the image is (core/webdataset.TarMember: tar,
offset, size), for the image step to read. What goes wrong is a rejected
line naming the tar and the member: a sample without an image or with two,
a member cut short, a key that comes back later in the tar; a tar cut after
its last whole member (inside a header, or inside the padding after that
member's data) is one line after its samples, and so is data after its
end-of-archive block (a second tar appended to it); a file that is no tar
at all is one rejected line, and the other tars go on.
"""

from __future__ import annotations

import dataclasses
import gzip
import tarfile
from typing import Optional
import zlib

import apache_beam as beam

from transforms.batches import Batch
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.beam_util import counter
from transforms.core import manifest
from transforms.core import webdataset
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import Rejection
from transforms.core.rejects import RowError
from transforms.core.tally import lines_key
from transforms.filesystem import FileAccess

_TAR_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error)
# A pax header or GNU long name is read whole by tarfile, at whatever size its
# header claims (a 1 MB .tar.gz claiming 1 GiB took 2.1 GB): at most this.
MAX_EXTENDED_HEADER = 1 << 20
_EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
             tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_ENDS = (tarfile.EOFHeaderError, tarfile.EmptyHeaderError)  # a tar's own end
_PIECE = 1 << 20  # bytes read at a time after a tar's end


class TarHeaderRefused(tarfile.TarError):
  """A header tarfile would read without bound or fail on with no TarError
  (a GNU sparse member's map: IndexError, ValueError): the tar is read up to it."""


def _header_reader() -> type:
  """A TarInfo class for one tar: it refuses extended headers over
  MAX_EXTENDED_HEADER and sparse members (never written by webdataset; their
  bytes are not one run the image step could read by offset), and records
  the HeaderError the tar's last header read ended with (`ended`): tarfile
  ends quietly at a damaged header, which a .tar.gz cannot be checked for
  afterwards as a .tar is (the bytes after it)."""

  class Info(tarfile.TarInfo):
    ended = None

    @classmethod
    def frombuf(cls, buf, encoding, errors):
      try:
        return super().frombuf(buf, encoding, errors)
      except tarfile.HeaderError as error:
        # A block cut short that holds only zeros is the end-of-archive block,
        # cut: a .tar is read as whole there (_check_end), and a .tar.gz said
        # its 'header cannot be read (truncated header)', members lost.
        zeros = isinstance(error, tarfile.TruncatedHeaderError) and not buf.strip(b'\0')
        Info.ended = tarfile.EOFHeaderError(f'end-of-archive block cut short ({error})'
                                            ) if zeros else error
        raise

    def _proc_member(self, tar):
      if self.type in _EXTENDED and self.size > MAX_EXTENDED_HEADER:
        raise TarHeaderRefused(f'the header at byte {self.offset} announces a {self.size}-byte '
                               f'extended header (pax or GNU long name), over '
                               f'{MAX_EXTENDED_HEADER}')
      if self.type == tarfile.GNUTYPE_SPARSE:
        self._sparse_member()
      try:
        return super()._proc_member(tar)
      except (ValueError, IndexError) as error:  # tarfile's parsing of a sparse map
        raise TarHeaderRefused(f'the header at byte {self.offset} cannot be read '
                               f'({type(error).__name__}: {error})') from None

    def _sparse_member(self, *_):
      raise TarHeaderRefused(f'the member at byte {self.offset} is a GNU sparse file, whose '
                             f'bytes are not stored as one run')

    _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = _sparse_member

  return Info


class _Gunzip:
  """A .tar.gz's tar, for tarfile's stream mode, as tarfile's own 'r|gz'
  stream reads it (each read what one step decompresses; a stream cut short
  ends, without error, after every byte before the cut: `cut`), but read on
  over concatenated gzip members (`cat a.tar.gz b.tar.gz`), where tarfile's
  stream ends silently, and with each member's CRC checked."""

  def __init__(self, stream):
    self._gzip = gzip.GzipFile(fileobj=stream)
    self.cut = None  # the EOFError a stream cut short ended with

  def read(self, size: int) -> bytes:
    if self.cut is not None:
      return b''
    try:
      return self._gzip.read1(size)
    except EOFError as error:
      self.cut = error
      return b''


def tar_members(stream, path: str, size: int):
  """The regular members of an open tar (webdataset.Member each, label and
  metadata members with their data), in tar order. A member cut short has
  its `error`; ReadError when the file is no tar at all (no member read)."""
  gzipped = webdataset.is_gzipped(path)
  headers = _header_reader()
  source = _Gunzip(stream) if gzipped else stream
  tar = tarfile.open(fileobj=source, mode='r|' if gzipped else 'r:', tarinfo=headers)
  last, read_any = None, False
  try:
    while True:
      try:
        info = tar.next()
      except TarHeaderRefused as error:
        if last is not None:
          yield last
        raise TarCutError(f'{path}: {error}: the members after it are not read') from None
      except _TAR_ERRORS as error:
        if not read_any:
          raise tarfile.ReadError(f'{type(error).__name__}: {error}')
        # a .tar's size; a .tar.gz's bytes read out of it (tarfile's stream
        # counts them: never too many)
        available = getattr(tar.fileobj, 'pos', None) if gzipped else size
        if last is not None and (last.error is not None or available is None
                                 or last.offset + last.size > available):
          # the member before the header that could not be read was cut short
          yield last._replace(error=last.error or f'{type(error).__name__}: {error}')
          return
        if last is not None:
          yield last  # all its bytes are there: its sample is read
        if last is not None and webdataset.ends_in_padding(last, available, tar.offset):
          raise TarCutError(f'{path} is cut short at byte {available}, inside the padding '
                            f'after member {last.name}, whose {last.size} bytes are all '
                            f'there: the members after it, if any, are lost')
        # A header past whole members (or past a folder's) that cannot be read:
        # the sample before it is whole, and was lost with this tar's line.
        raise TarCutError(f'{path}: the header at byte {tar.offset} of its tar cannot be '
                          f'read ({type(error).__name__}: {error}): the members after it '
                          f'are lost') from None
      if info is None:
        break
      read_any = True
      if last is not None:
        yield last
      last = _member(tar, info, gzipped, size) if info.isreg() else None
    if last is not None:
      yield last
    _check_end(tar, stream, path, size, gzipped, headers.ended)
    if gzipped and source.cut is not None and not isinstance(headers.ended,
                                                             tarfile.EOFHeaderError):
      raise TarCutError(f'{path}: its gzip stream is cut short after byte {tar.offset} of its '
                        f'tar ({source.cut}): the members after it, if any, are lost')
  finally:
    tar.close()


def _check_end(tar, stream, path: str, size: int, gzipped: bool, ended) -> None:
  """TarCutError unless the tar ended where its members do: tarfile ends
  quietly at a damaged header (a bad checksum), at one cut short, and at
  its end-of-archive block even when more data follows it (a tar appended
  with `cat a.tar b.tar`: tar and webdataset read the first tar alone)."""
  if isinstance(ended, tarfile.InvalidHeaderError) or (
      gzipped and not isinstance(ended, _ENDS)):
    raise TarCutError(f'{path}: the header at byte {tar.offset} of its tar cannot be read '
                      f'({ended}): the members after it are lost')
  if gzipped:
    at = _first_data(tar.fileobj.read, tar.offset + tarfile.BLOCKSIZE, path)
  else:
    stream.seek(tar.offset)
    at = _first_data(stream.read, tar.offset, path, size - tar.offset)
    if at is not None and not isinstance(ended, tarfile.EOFHeaderError):
      raise TarCutError(f'{path} is cut short inside the header after byte {tar.offset}: '
                        f'the members after it are lost')
  if at is not None:
    raise TarCutError(f'{path}: its tar ends with the end-of-archive block at byte '
                      f'{tar.offset}, but data that is not zeros follows at byte {at} (a '
                      f'second tar appended to it, as `cat a.tar b.tar` or .tar.gz files '
                      f'concatenated make?): tar and webdataset stop at that end too; the '
                      f'members after it, if any, are not read')


def _first_data(read, start: int, path: str, limit: Optional[int] = None) -> Optional[int]:
  """The offset of the first byte that is not zero from `start` on (read in
  1 MiB pieces: what follows may be a whole second tar), or None."""
  at = start
  while limit is None or at < start + limit:
    try:
      piece = read(_PIECE if limit is None else min(_PIECE, start + limit - at))
    except _TAR_ERRORS as error:  # a .tar.gz damaged, or not gzip after its stream
      if _failed_check(error):
        # The CRC covers the whole gzip member, checked at its end: the
        # damage may lie in the bytes the samples already read came from.
        raise TarCutError(f'{path}: its gzip check fails at byte {at} of its tar '
                          f'({type(error).__name__}: {error}): bytes before it are damaged, '
                          f'perhaps in the samples already read from it; the members after '
                          f'it, if any, are lost') from None
      raise TarCutError(f'{path} cannot be read after byte {at} of its tar, past its '
                        f'members ({type(error).__name__}: {error}): the members after '
                        f'it, if any, are lost') from None
    if not piece:
      return None
    stripped = piece.lstrip(b'\0')
    if stripped:
      return at + len(piece) - len(stripped)
    at += len(piece)
  return None


def _failed_check(error: Exception) -> bool:
  """Whether a gzip member's own check failed at its end (its CRC, or its
  length), rather than bytes that are no gzip following it."""
  return isinstance(error, gzip.BadGzipFile) and (
      'CRC check failed' in str(error) or 'Incorrect length' in str(error))


class TarCutError(Exception):
  """A tar cut inside a member's header, or inside the padding after its
  last member's data: its samples up to there are read."""


def _member(tar, info, gzipped: bool, size: int) -> webdataset.Member:
  data, error = None, None
  if not gzipped and info.offset_data + info.size > size:
    error = f'the tar ends at byte {size}, before the {info.size} bytes of this member'
  elif webdataset.wanted_small(info.name) and info.size <= webdataset.MAX_SMALL_MEMBER:
    try:
      data = tar.extractfile(info).read()
    except _TAR_ERRORS as cut:  # a .tar.gz cut inside it: its sample's line, not the tar's
      return webdataset.Member(info.name, info.offset_data, info.size, None,
                               f'{type(cut).__name__}: {cut}')
    if len(data) < info.size:
      data, error = None, f'read {len(data)} of its {info.size} bytes'
  return webdataset.Member(info.name, info.offset_data, info.size, data, error)


class ReadTarFn(beam.DoFn):
  """(tar index, path, size) -> a ManifestRow per sample, or its Rejection
  under REJECTED, and (lines tally, samples) under TALLIES."""

  def __init__(self, config: manifest.ManifestConfig):
    self._config = config
    self._rows = counter('manifest_rows')

  def setup(self):
    self._files = FileAccess()

  def process(self, item):
    index, path, size = item
    layout = self._config.layout
    config = dataclasses.replace(self._config, path=path, files=(), layout=None)
    number, seen, cut = 0, set(), []

    def members(stream):
      try:
        yield from tar_members(stream, path, size)
      except TarCutError as error:  # after the samples before it
        cut.append(error)

    try:
      with self._files.open(path) if '://' in path else open(path, 'rb') as stream:
        for key, group in webdataset.samples(members(stream)):
          yield self._row(key, group, number, path, index, config, layout, key in seen)
          seen.add(key)
          number += 1
      for error in cut:
        number += 1
        yield self._reject({'tar': path}, path, number - 1, RowError(
            STAGE_READ, 'truncated', str(error)))
    except _TAR_ERRORS as error:
      # Not a tar at all (or unreadable before its first member): one line for it.
      number += 1
      yield self._reject({'tar': path}, path, number - 1, RowError(
          STAGE_READ, 'not_a_tar', f'{path} cannot be read as a tar after {number - 1} '
          f'sample(s): {type(error).__name__}: {error}'))
    self._rows.inc(number)
    yield beam.pvalue.TaggedOutput(TALLIES, (lines_key(False), number))

  def _row(self, key, group, number, path, index, config, layout, repeated):
    fields, bad_name = webdataset.shown_names(key, group)
    if bad_name is not None:
      return self._reject(fields, path, number, bad_name)
    try:
      return webdataset.sample_row(key, group, number, path, index, config, layout, repeated)
    except RowError as error:
      return self._reject(fields, path, number, error)
    except Exception as error:  # a sample nobody foresaw is that sample's problem
      return self._reject(fields, path, number, RowError(
          STAGE_MANIFEST, 'unexpected_error', f'{type(error).__name__}: {error}'))

  def _reject(self, fields: dict, path: str, number: int, error: RowError):
    return beam.pvalue.TaggedOutput(REJECTED, Rejection(
        fields, error.stage, error.code, error.reason, path, number))


class ReadTars(beam.PTransform):
  """A WebDataset manifest (config.layout: its tars, listed on the launcher)
  -> {ROWS: batches of ManifestRows, REJECTED: Rejection, TALLIES: sample tallies}."""

  def __init__(self, config: manifest.ManifestConfig):
    super().__init__()
    self._config = config  # no progress total: samples are counted as the tars are read

  def expand(self, pbegin):
    tars = [(index, path, size) for index, (path, size) in enumerate(self._config.layout.files)]
    read = (pbegin
            | 'Once' >> beam.Impulse()
            | 'Tars' >> beam.FlatMap(lambda _, tars: tars, tars)
            | 'Spread' >> beam.Reshuffle()
            | 'ReadTars' >> beam.ParDo(ReadTarFn(self._config))
            .with_outputs(REJECTED, TALLIES, main=ROWS))
    return {ROWS: read[ROWS] | 'BatchRows' >> Batch(), REJECTED: read[REJECTED],
            TALLIES: read[TALLIES]}
