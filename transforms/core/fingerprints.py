"""Source fingerprints and option digests: what a later run compares to tell
whether a record may be copied instead of encoded again (--previous_dataset).
Plain functions.

--change_detection metadata: what the store already knows, no image byte
read: a local file's size, mtime and ctime in nanoseconds and inode (cp -p,
rsync -t and tar x restore mtime, never ctime); an s3:// object's ETag and
size; a gs:// object's CRC32C, generation and size. content: the SHA-256 of
the file's bytes (read, not decoded): the only one a rewrite that restores
every timestamp cannot fool.
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import hashlib
import json
import os
import threading
import time
from typing import Optional

from transforms.core.paths import is_remote as paths_remote
from transforms.core.spec import SOURCES_FORMAT_VERSION
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec

METADATA = 'metadata'
CONTENT = 'content'


def local_fingerprint(path: str) -> str:
  """'local:SIZE:MTIME_NS:CTIME_NS:INODE' of a local file; '' if it cannot
  be stat'ed (the row is then encoded, and its read fails as in any run)."""
  try:
    stat = os.stat(path)
  except OSError:
    return ''
  return f'local:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}:{stat.st_ino}'


def file_version(path: str) -> str:
  """'SIZE:MTIME_NS' of a local file ('' if remote or it cannot be
  stat'ed): what tells validate --recompute that a manifest is the one the
  run read, moved or copied with its times kept (mv, cp -p, rsync -t) or not."""
  if paths_remote(path):
    return ''
  try:
    stat = os.stat(path)
  except OSError:
    return ''
  return f'{stat.st_size}:{stat.st_mtime_ns}'


def part_fingerprint(container: str, part: str, fallback: str = '') -> str:
  """The fingerprint of bytes held in a part of a file (a Parquet row): the
  file's fingerprint and the part's place, plus that of the path read when
  the part is empty (fallback); '' when the file's is unknown."""
  if not container:
    return ''
  return f'{container}#{part}' + (f'#{fallback}' if fallback else '')


def content_fingerprint(sha256: str) -> str:
  """--change_detection content: the SHA-256 (hex) of the source's bytes."""
  return f'sha256:{sha256}' if sha256 else ''


def remote_fingerprint(path: str, lookup: Callable[[str], dict]) -> str:
  """An object's fingerprint from its store's metadata: lookup(path) ->
  {'size', and 'etag' (s3), or 'crc32c' and 'generation' (gs), or 'mtime'};
  '' if it cannot be looked up (missing: the row is encoded and fails)."""
  try:
    meta = lookup(path)
  except Exception:  # BeamIOError, a store's own errors: the read will name it
    return ''
  scheme = path.split('://', 1)[0]
  fields = ('etag', 'crc32c', 'generation', 'mtime', 'size')
  return f'{scheme}:' + ':'.join(f'{name}={meta[name]}' for name in fields
                                 if meta.get(name) is not None)


def fingerprint_all(paths: list, lookup: Callable[[str], dict],
                    timeout_s: Optional[float]) -> list:
  """The metadata fingerprint of each path ('' for none): local files
  stat'ed, remote ones looked up (lookup, see remote_fingerprint) on a thread
  each, all within timeout_s (None: no limit). A lookup still waiting then (a
  stalled store) gives '': the row is encoded, and its read is stopped by
  --image_timeout_s as any. Daemon threads: a stalled one never holds up the
  process's exit."""
  found, remote = [''] * len(paths), []
  for i, path in enumerate(paths):  # one pass: a row each
    if not path:
      continue
    if paths_remote(path):
      remote.append(i)
    else:
      found[i] = local_fingerprint(path)

  def look_up(i: int) -> None:
    found[i] = remote_fingerprint(paths[i], lookup)

  threads = [threading.Thread(target=look_up, args=(i,), daemon=True) for i in remote]
  for thread in threads:
    thread.start()
  deadline = None if timeout_s is None else time.monotonic() + timeout_s
  for i, thread in zip(remote, threads):
    thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
      found[i] = ''
  return found


def beam_metadata(path: str, s3_object: Optional[Callable] = None) -> dict:
  """{'size', 'etag' | 'crc32c', 'generation' | 'mtime'} from Beam's
  filesystems: the checksum they report (an S3 ETag, a GCS CRC32C), a GCS
  object's generation where Beam's GCS client gives it, else the
  modification time. s3_object(path): the S3 object (FileAccess's client)."""
  from apache_beam.io.filesystems import FileSystems
  if path.startswith('s3://') and s3_object is not None:
    obj = s3_object(path)
    return {'etag': obj.etag, 'size': obj.size}
  match = FileSystems.match([path])[0].metadata_list
  if not match:
    raise FileNotFoundError(path)
  meta = {'size': match[0].size_in_bytes}
  if path.startswith('gs://'):
    filesystem = FileSystems.get_filesystem(path)
    gcs_object = filesystem._gcsIO()._gcs_object(path)  # crc32c and generation in one call
    meta.update(crc32c=gcs_object.crc32c, generation=gcs_object.generation)
  elif path.startswith('s3://'):
    meta['etag'] = FileSystems.checksum(path)
  else:
    meta['mtime'] = match[0].last_updated_in_seconds
  return meta


# The libraries whose upgrade may change an image's pixels or its encoded
# bytes: Pillow's resize and conversions, and the codecs it was built with.
# A nightly run after an upgrade copied the old library's records beside the
# new one's: not the bytes a full run writes. None: not in this build.
_CODECS = ('jpg', 'libjpeg_turbo', 'zlib', 'zlib_ng', 'webp', 'libtiff', 'jpg_2000', 'avif')


@functools.cache
def codec_versions() -> dict:
  """{'Pillow': its version, codec: its version or None} of this process."""
  import PIL
  from PIL import features
  return {'Pillow': PIL.__version__, **{codec: features.version(codec) for codec in _CODECS}}


# Raised when the same options give other pixels, so that no nightly run
# copies a record an older version encoded. 2: pad and crop after a
# reduced-scale JPEG decode follow the source's geometry (1 px apart before).
# 3: a PNG keeps no ICC profile of its source (some resize modes kept it).
# 4: a float image holding NaN or inf is scaled by its finite pixels (was all 0).
# 5: a JPEG keeps no comment of its source (the stretch, crop and none modes kept it).
# 6: a JPEG with an MPF preview (Pillow's MPO) is decoded at a reduced scale too.
# 7: a 16-bit RGB PNG's tRNS colour key is matched on 16 bits (it matched no pixel).
# 8: so is a 2- or 4-bit grey PNG's, widened to 8 bits as its pixels are.
# 9: a 16-bit or float MinIsWhite TIFF is inverted (0 is white); a 12-bit
# TIFF is scaled by 255/4095 (was by 1/257, near black).
# 10: a JPEG whose EXIF orientation is outside 1..8 is kept as it is by
# --resize_mode none --encoding jpeg (it was re-encoded).
PIXELS_VERSION = 10


def options_digest(image: ImageSpec, example: ExampleSpec) -> str:
  """The digest of every option that changes an Example's bytes (or whether a
  row is rejected): the image spec, the schema and its features, the version
  of the pixels' code, and those of the libraries that decode and encode
  them. A record made under another digest is never reused."""
  data = {'sources_format': SOURCES_FORMAT_VERSION, 'pixels': PIXELS_VERSION,
          'libraries': codec_versions(),
          'image': _bytes_options(image),
          'schema': example.schema, 'features': example.feature_spec(image)}
  return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def _bytes_options(image: ImageSpec) -> dict:
  """The image spec's options that change bytes: --jpeg_quality only with
  --encoding jpeg (a PNG dataset's recorded quality, changed, re-encoded
  every row for the same bytes)."""
  options = image.to_json()
  if image.encoding != 'jpeg':
    options.pop('jpeg_quality', None)
  return options


# The extras part of the digest of a row without extra features (most rows).
_NO_EXTRAS = hashlib.sha256(json.dumps(()).encode()).hexdigest()[:16]


def record_digest(options: str, extras: tuple) -> str:
  """A record's option digest: the run's options_digest and the row's extra
  features (their values), '<options>-<extras>', so a later run can tell a
  changed option from a changed feature."""
  if not extras:
    return f'{options}-{_NO_EXTRAS}'
  text = json.dumps(extras, default=_plain, sort_keys=True)
  return f'{options}-{hashlib.sha256(text.encode()).hexdigest()[:16]}'


def _plain(value):
  """Bytes values as JSON (latin-1 text: every byte one character)."""
  if isinstance(value, bytes):
    return value.decode('latin-1')
  raise TypeError(f'{type(value).__name__} in an extra feature')
