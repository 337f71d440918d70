"""The files and folders a command's flags name, checked before anything is
read or written: a URL must be one of Beam's filesystems (gs://, s3://, ...)
with its bucket. Otherwise Beam's "Unable to get filesystem" ended a run as a
crash (exit 1, a traceback), and `gs://` (a bucket variable left empty) lost
its slashes and wrote a local folder `gs:`, exit 0."""

from __future__ import annotations

import itertools
import os
from typing import Optional

from pipeline.errors import UsageError
from transforms.core import paths
from transforms.core import redact

# Schemes whose first path part is a bucket (or a storage account): never empty.
_BUCKET_SCHEMES = ('gs', 's3', 'azfs')


def _schemes() -> str:
  from apache_beam.io.filesystem import FileSystem
  known = sorted({cls.scheme() for cls in FileSystem.get_all_subclasses() if cls.scheme()})
  return ', '.join(f'{scheme}://' for scheme in known)


def _current_folder_removed() -> bool:
  try:
    os.getcwd()
  except FileNotFoundError:
    return True
  return False


def location_problem(path: str) -> Optional[str]:
  """Why `path` names no place a run can read or write (a URL scheme Beam
  has no filesystem for, a file:// URL, a bucket left out, a ~ no shell
  expanded, a relative path once the current folder is removed), or None."""
  if not paths.is_remote(path):
    # `--output_dir=~/x`, a quoted '~/x' or a config file's ~/x: no shell
    # expands it, and it was made a folder named `~` (exit 0). Refused, not
    # expanded: a --config file may run as another user (cron, Airflow),
    # whose home is not the one its writer meant.
    home = os.path.expanduser(path)
    if home != path:
      return (f'starts with {path.split("/", 1)[0]}, which no shell expanded (the '
              f'--flag=~/... form, quotes, a --config file): give the path ({home}) instead')
    if not os.path.isabs(path) and _current_folder_removed():
      # a shell left in a removed folder: was FileNotFoundError, exit 1, a traceback
      return ('is relative and the current folder no longer exists (it was removed): '
              'give an absolute path, or run from a folder that exists')
    return None
  scheme, rest = path.split('://', 1)
  if scheme.lower() == paths.FILE_SCHEME:
    return f'is a file:// URL: give the local path ({paths.local_file(path)}) instead'
  # Beam only for a URL: inspect and export read local datasets without it.
  from apache_beam.io.filesystems import FileSystems
  try:
    FileSystems.get_filesystem(path)
  except ValueError:
    return (f'has a URL scheme {scheme!r} that no filesystem here reads or writes '
            f'(a local path, or {_schemes()})')
  if scheme in _BUCKET_SCHEMES and not rest.split('/', 1)[0]:
    return f'names no bucket: expected {scheme}://BUCKET/...'
  return None


def check_location(flag: str, path: Optional[str]) -> None:
  """UsageError naming `flag` when `path` is given and location_problem finds
  something wrong with it. An empty one is refused too: `--previous_dataset
  "$PREV"` with PREV unset was taken as no flag, so every night converted
  everything and wrote no `latest`, exit 0; an empty --label_map made the
  label map from the rows."""
  if path is not None and not path.strip():
    raise UsageError(f'{flag} is empty (a variable left unset?): give a path, or leave the '
                     f'flag out')
  problem = path and location_problem(path)
  if problem:
    raise UsageError(f'{flag} {redact.shown_url(path)} {problem}')


def unreachable(path: str, files=None) -> Optional[str]:
  """Why the s3:// location `path` cannot be reached now (no credentials, an
  endpoint that does not answer, no such bucket, access denied), asked once
  of its bucket, or None. Beam's S3 filesystem retries such a failure with
  growing waits for about eight minutes, without a word (measured: a run to
  s3:// with no credentials still silent after 2 minutes). Other schemes:
  None (not asked). files: the FileAccess whose S3 client asks (each new
  client costs 0.1-0.5 s of CPU: transforms/filesystem.py)."""
  if not path.startswith('s3://'):
    return None
  from transforms.filesystem import FileAccess
  bucket, _, prefix = path[len('s3://'):].partition('/')
  client = (files or FileAccess()).s3_client()
  try:
    client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
  except _s3_errors() as error:
    if _readable_unlisted(client, error, bucket, prefix):
      return None
    # botocore's text names the endpoint URL, with a user:password@ given in it
    return f'cannot be reached: {type(error).__name__}: {redact.redact_text(str(error))}'
  return None


def _s3_errors() -> tuple:
  """What boto3 raises for a request that failed (botocore: imported only
  for an s3:// location)."""
  from botocore.exceptions import BotoCoreError
  from botocore.exceptions import ClientError
  return BotoCoreError, ClientError


def _readable_unlisted(client, error: Exception, bucket: str, key: str) -> bool:
  """Whether `key`, one object's name, is readable where listing its bucket
  was refused (a policy granting s3:GetObject alone, as a shared dataset's
  often does): Beam reads such a file without listing (a HEAD, then GET)."""
  code = getattr(error, 'response', {}).get('Error', {}).get('Code')  # a ClientError's
  if code != 'AccessDenied' or not key or key.endswith('/') or paths.has_glob(key):
    return False
  try:
    client.head_object(Bucket=bucket, Key=key)
  except _s3_errors():
    return False  # the listing's refusal is the line
  return True


def usable_problem(path: str) -> Optional[str]:
  """location_problem, then (a usable URL) unreachable: what a path no flag
  names, such as the one a `latest` pointer holds, is checked with."""
  return location_problem(path) or unreachable(path)


def check_reachable_location(flag: str, path: Optional[str], files=None) -> None:
  """UsageError naming `flag` when `path` is given and `unreachable` finds
  it cannot be reached."""
  problem = isinstance(path, str) and unreachable(path, files)
  if problem:
    raise UsageError(f'{flag} {redact.shown_url(path)} {problem}')


def check_reachable(values: dict, dests: tuple) -> None:
  """check_reachable_location for each of `dests` given in `values` ({dest:
  value}), in order: the first unreachable one is the UsageError. One S3
  client asks for all of them."""
  if not any(isinstance(values.get(dest), str) and values[dest].startswith('s3://')
             for dest in dests):
    return
  from transforms.filesystem import FileAccess
  files = FileAccess()
  for dest in dests:
    check_reachable_location(f'--{dest}', values.get(dest), files)


def check_locations(values: dict, dests: tuple) -> None:
  """check_location for each of `dests` given in `values` ({dest: value})."""
  for dest in dests:
    value = values.get(dest)
    if isinstance(value, str):
      check_location(f'--{dest}', value)


def check_inputs_given_once(argv: list, inputs: tuple) -> None:
  """UsageError for an input flag (an options class's INPUTS; export's and
  inspect's --input_dir) given twice on the line: argparse keeps the last,
  and the first input was left out without a word. Several manifests are
  one pattern. The values are shown as check_location shows them."""
  seen = {}
  tokens = list(itertools.takewhile(lambda a: a != '--', argv))
  for index, token in enumerate(tokens):
    name, equals, value = token.partition('=')
    if name[2:] not in inputs or not name.startswith('--'):
      continue
    value = value if equals else (tokens[index + 1] if index + 1 < len(tokens) else '')
    if name in seen:
      several = (" (several manifests are read as one through a pattern, such as "
                 "'parts/*.csv')" if 'manifest' in name else '')
      raise UsageError(f'{name} is given twice ({redact.shown_url(seen[name])}, then '
                       f'{redact.shown_url(value)}): only one would be '
                       f'read; give it once{several}')
    seen[name] = value
