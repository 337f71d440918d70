"""--previous_dataset on the launcher: following a `latest` pointer, checking
the previous dataset before anything is trusted or written (each problem a
one-line exit 2 naming the path), and writing the pointer after a success."""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import dataclasses
import os
import sys
import tempfile
from typing import Optional

from pipeline.errors import PointerNotWritten
from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import file_kinds
from transforms.core import paths
from transforms.core import redact
from transforms.core.dataset_info import MAX_INFO_BYTES
from transforms.core.dataset_info import InfoError
from transforms.core.dataset_info import parse_info
from transforms.core.pointers import LATEST
from transforms.core.pointers import MAX_POINTER_BYTES
from transforms.core.pointers import pointer_target
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import READABLE_SOURCES_FORMAT_VERSIONS
from transforms.core.spec import SINK_TFRECORDIO
from transforms.core.spec import SOURCES_SUFFIX
from transforms.sidecars import Sidecar


@dataclasses.dataclass(frozen=True)
class Previous:
  """A checked previous dataset (dataset is None: it did not exist and
  --previous_dataset_missing full made this a full run)."""
  given: str
  dataset: Optional[str] = None
  run_id: Optional[str] = None
  sidecars: tuple = ()  # transforms.sidecars.Sidecar per split


def _norm(path: str) -> str:
  return path.rstrip('/') if paths.is_remote(path) else os.path.realpath(path)


def _same_local_folder(path: str, other: str) -> bool:
  """One local folder by two paths realpath does not join (a bind mount):
  the run replaced the shards it read from, and warned of a damaged sidecar."""
  if paths.is_remote(path) or paths.is_remote(other):
    return False
  try:
    return os.path.samefile(path, other)
  except OSError:  # --output_dir not made yet: no folder to be
    return False


def _is_file(path: str, files: filesystem.FileAccess) -> bool:
  if not paths.is_remote(path):
    return os.path.isfile(path)
  return files.exists(path) and not files.exists(filesystem.join(path, DATASET_INFO))


def _is_missing(path: str, files: filesystem.FileAccess) -> bool:
  if not paths.is_remote(path):
    return not os.path.exists(path)
  return not files.exists(path) and not files.list(path.rstrip('/') + '/')


def follow(given: str, files: filesystem.FileAccess,
           location_problem: Callable[[str], Optional[str]] = lambda path: None) -> str:
  """A `latest` pointer file -> the folder it names (a relative name is
  relative to the pointer's folder); any other path as it is. The path a
  pointer holds is refused (UsageError) when location_problem finds it no
  place a run can read: the check the flag's own value had."""
  if os.path.basename(given.rstrip('/')) != LATEST:
    return given
  if given.endswith('/') and not paths.is_remote(given) and os.path.isfile(given.rstrip('/')):
    raise UsageError(f'--previous_dataset {given} names a folder, but {given.rstrip("/")} is '
                     f'a file (a pointer): give it without the trailing /')
  kind = None if paths.is_remote(given) else file_kinds.not_regular(given)
  if kind and kind != 'folder':  # a folder named latest is a dataset folder
    raise UsageError(f'--previous_dataset {given} is a {kind}, not a pointer file')
  if not _is_file(given, files):
    return given
  try:
    data = files.read_at_most(given, MAX_POINTER_BYTES)  # a pointer: one line, a few hundred bytes
  except filesystem.read_errors() as error:  # another user's 0600 pointer: was a traceback, exit 1
    raise UsageError(f'--previous_dataset {given} cannot be read: {type(error).__name__}: '
                     f'{error}') from error
  target = pointer_target(data)
  if target == '':
    raise UsageError(f'--previous_dataset {given} is an empty pointer file')
  if target is None:
    raise UsageError(f'--previous_dataset {given} is no pointer file (one line of UTF-8 text '
                     f'naming a dataset folder, as a run with --previous_dataset writes)')
  problem = location_problem(target)
  if problem:  # file://, http://: was Beam's ValueError traceback at the first look
    raise UsageError(f'--previous_dataset {given} holds {redact.shown_url(target)}, which '
                     f'{problem}')
  if paths.is_remote(target) or os.path.isabs(target):
    return target
  return os.path.join(os.path.dirname(given), target)


def check(given: str, missing: str, output_dir: str, schema: str, sink: str,
          files: Optional[filesystem.FileAccess] = None,
          location_problem: Callable[[str], Optional[str]] = lambda path: None) -> Previous:
  """The previous dataset, checked; UsageError (exit 2) names the problem.
  location_problem: what is wrong with a path a `latest` pointer holds
  (pipeline/configuration/locations.py's, as for the flags), or None."""
  files = files or filesystem.FileAccess()
  if os.path.basename(output_dir.rstrip('/')) == LATEST:
    raise UsageError(f'--output_dir {output_dir} is named {LATEST}, the pointer a run with '
                     f'--previous_dataset writes beside its folder: name the folder otherwise')
  written = pointer_text(output_dir)
  if written != written.strip() or any(c in written for c in '\n\r\x00'):
    # follow() strips a pointer's surrounding spaces: a folder 'night 1 '
    # was read back as 'night 1', and every later night failed (exit 2) or,
    # with --previous_dataset_missing full, converted everything again.
    raise UsageError(f'--output_dir {output_dir!r} ends in a space or holds a line break: '
                     f'the {LATEST} pointer a run with --previous_dataset writes beside it '
                     f'could not name it (a pointer is one line, its surrounding spaces '
                     f'ignored): name the folder otherwise')
  pointer = latest_path(output_dir)
  if not paths.is_remote(pointer) and os.path.isdir(pointer) and not os.path.islink(pointer):
    # os.replace cannot put the pointer over a folder: the run wrote the
    # whole dataset, then failed (exit 1, a traceback) and left no pointer.
    raise UsageError(f'--output_dir {output_dir}: {pointer}, where a run with '
                     f'--previous_dataset writes its pointer, is a folder: rename it, or '
                     "write the run's folder elsewhere")
  if not paths.is_remote(pointer) and not os.access(_made_in(os.path.dirname(pointer)),
                                                     os.W_OK | os.X_OK):
    # OUT writable in a folder that is not (or on a read-only mount): the
    # run wrote and published the whole dataset, then failed on the pointer
    # (exit 1, a traceback), the next night reading the night before.
    raise UsageError(f'--output_dir {output_dir}: {os.path.dirname(pointer)}, where a run '
                     f'with --previous_dataset writes its {LATEST} pointer, cannot be '
                     "written by this user: make it writable, or write the run's folder "
                     'elsewhere')
  if sink == SINK_TFRECORDIO:
    raise UsageError("--previous_dataset needs --sink ordered: Beam's WriteToTFRecord "
                     'writes other bytes on every run, so its records cannot be reused')
  path = follow(given, files, location_problem)
  named = given if path == given else f'{given} (-> {path})'
  _require_reachable(path, named)
  if _is_missing(path, files):
    if missing == 'full':
      print(f'Warning: --previous_dataset {named} does not exist: converting everything '
            f'(--previous_dataset_missing full)', file=sys.stderr)
      return Previous(given)
    raise UsageError(f'--previous_dataset {named} does not exist (the first run? '
                     f'--previous_dataset_missing full converts everything then)')
  if _is_file(path, files):
    raise UsageError(f'--previous_dataset {named} is a file, not a dataset folder')
  if _norm(path) == _norm(output_dir) or _same_local_folder(path, output_dir):
    raise UsageError(f'--previous_dataset {named} is --output_dir: a run cannot read the '
                     f'shards it replaces (write each run to its own folder)')
  info_path = filesystem.join(path, DATASET_INFO)
  if not files.exists(info_path):
    raise UsageError(f'--previous_dataset {named} has no {DATASET_INFO}: not a complete '
                     f'dataset (half-written, or not written by convert)')
  file_kinds.require_file(f'--previous_dataset {named}:', info_path, UsageError)  # a FIFO: never opened
  try:
    info = parse_info(files.read_at_most(info_path, MAX_INFO_BYTES), info_path)
  except InfoError as error:
    raise UsageError(f'--previous_dataset: {error}')
  except filesystem.read_errors() as error:  # another user's 0600 file: was a traceback, exit 1
    raise UsageError(f'--previous_dataset {named}: {info_path} cannot be read: '
                     f'{type(error).__name__}: {error}') from error
  if info['schema'] != schema:
    raise UsageError(f'--previous_dataset {named} holds a --schema {info["schema"]} '
                     f'dataset; this run writes --schema {schema}')
  if (info.get('sink') or {}).get('deterministic') is False:
    raise UsageError(f'--previous_dataset {named} was written by --sink tfrecordio: '
                     f'its records cannot be reused')
  return Previous(given, path, info.get('run_id'), _sidecars(path, info, named, files))


def _require_reachable(path: str, named: str) -> None:
  """UsageError when this user cannot reach a local folder or its files
  (another user's 0700 folder, or one inside it; a night run under umask 077
  by someone else): they seemed absent, and the run said the folder did not
  exist (with --previous_dataset_missing full, converted everything) or was
  half-written."""
  if paths.is_remote(path):
    return
  for place in (path, os.path.join(path, DATASET_INFO)):
    try:
      os.stat(place)
    except OSError as error:
      if not isinstance(error, PermissionError):
        return  # missing, not a folder: the checks below say so
      raise UsageError(f'--previous_dataset {named} cannot be read by this user: '
                       f'{type(error).__name__}: {error}') from error


def _sidecars(path: str, info: dict, named: str, files: filesystem.FileAccess) -> tuple:
  version = info.get('sources_format_version')
  if version is not None and version not in READABLE_SOURCES_FORMAT_VERSIONS:
    raise UsageError(f'--previous_dataset {named} has sources_format_version {version}; '
                     f'this tool reads {", ".join(map(str, READABLE_SOURCES_FORMAT_VERSIONS))}')
  sidecars = []
  for split, entry in sorted(info['splits'].items()):
    sidecar = filesystem.join(path, entry.get('sources') or split + SOURCES_SUFFIX)
    if version is None or not files.exists(sidecar):
      raise UsageError(f'--previous_dataset {named} has no {sidecar}: a dataset written '
                       f'without sidecars cannot be reused (convert it once in full)')
    file_kinds.require_file(f'--previous_dataset {named}:', sidecar, UsageError)  # a FIFO hung the reuse step
    shards = tuple(filesystem.join(path, name) for name in entry['shards'])
    sizes = files.sizes(list(shards))
    absent = [shard for shard in shards if shard not in sizes]
    if absent:
      raise UsageError(f'--previous_dataset {named} lacks the shard {absent[0]}')
    # A local listing gives a folder's own size (4096) as its bytes: named
    # for what it is, not as shards of other sizes. A FIFO is never opened.
    for shard in () if paths.is_remote(path) else shards:
      kind = file_kinds.not_regular(shard)
      if kind:
        raise UsageError(f'--previous_dataset {named}: the shard {shard} is a {kind}, '
                         f'not a file')
    if sum(sizes.values()) != entry['num_bytes']:
      raise UsageError(f'--previous_dataset {named}: the {split} shards hold '
                       f'{sum(sizes.values())} bytes, {DATASET_INFO} says '
                       f'{entry["num_bytes"]}: they changed after it was written')
    sidecars.append(Sidecar(split, sidecar, shards, info.get('compression') == 'gzip',
                            version, entry['num_examples']))
  return tuple(sidecars)


def latest_path(output_dir: str) -> str:
  """Where a run writing to output_dir leaves its pointer: OUT/../latest (a
  local OUT made absolute first)."""
  if paths.is_remote(output_dir):
    return output_dir.rstrip('/').rsplit('/', 1)[0] + '/' + LATEST
  return os.path.join(os.path.dirname(os.path.abspath(output_dir)), LATEST)


def _made_in(folder: str) -> str:
  """folder, or its nearest existing ancestor (the run makes the rest)."""
  while not os.path.exists(folder) and os.path.dirname(folder) != folder:
    folder = os.path.dirname(folder)
  return folder


def pointer_text(output_dir: str) -> str:
  """The path the `latest` pointer of a run writing to output_dir holds."""
  return output_dir.rstrip('/') if paths.is_remote(output_dir) else os.path.abspath(output_dir)


def write_latest(output_dir: str, files: Optional[filesystem.FileAccess] = None) -> str:
  """Writes, last, OUT/../latest holding OUT's path (a local one absolute), so
  a reader finds the old pointer or the new one, whoever else writes it at
  the same time: locally under a temp name of this run's own and os.replace;
  on an object store in one write of the object (no temp object copied over
  it, which two runs could interleave). PointerNotWritten if it cannot be."""
  files = files or filesystem.FileAccess()
  pointer = latest_path(output_dir)
  target = pointer_text(output_dir)
  try:
    return _write_pointer(pointer, target, files)
  except filesystem.read_errors() as error:
    raise PointerNotWritten(
        f'the dataset in {output_dir} is complete, but its pointer {pointer} could not be '
        f'written ({type(error).__name__}: {error}), so a run with --previous_dataset '
        f'{pointer} does not read this one: write {target} into it') from error


def _write_pointer(pointer: str, target: str, files: filesystem.FileAccess) -> str:
  if paths.is_remote(pointer):
    with files.create(pointer) as handle:
      handle.write((target + '\n').encode('utf-8'))
    return pointer
  descriptor, temp = tempfile.mkstemp(prefix=f'.{LATEST}.', dir=os.path.dirname(pointer))
  try:
    with os.fdopen(descriptor, 'w', encoding='utf-8') as handle:
      handle.write(target + '\n')
    os.chmod(temp, 0o644)
    os.replace(temp, pointer)
  except BaseException:
    with contextlib.suppress(OSError):
      os.unlink(temp)
    raise
  return pointer
