"""dataset_info.json: the contract between convert, validate and readers."""

from __future__ import annotations

import contextlib
import gzip
import json
import posixpath
from typing import Optional

from apache_beam.io.filesystems import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.spec import DATASET_INFO
from transforms.spec import FORMAT_VERSION


def join(directory: str, name: str) -> str:
  if '://' in directory:
    return directory.rstrip('/') + '/' + name
  return posixpath.join(directory, name)


def basename(path: str) -> str:
  return path.rstrip('/').rsplit('/', 1)[-1]


def write_text(path: str, text: str) -> None:
  """Writes `text` to `path` on any Beam filesystem, via a temp name + rename."""
  temp = path + '.tmp'
  with FileSystems.create(temp) as handle:
    handle.write(text.encode('utf-8'))
  if FileSystems.exists(path):
    FileSystems.delete([path])
  FileSystems.rename([temp], [path])


@contextlib.contextmanager
def open_checked(path: str):
  """Opens any Beam path for reading; a .gz through Python's gzip, which,
  unlike Beam's decompressor, raises EOFError on a truncated file instead of
  ending early."""
  with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
    if path.endswith('.gz'):
      with gzip.GzipFile(fileobj=raw) as stream:
        yield stream
    else:
      yield raw


def read_text(path: str) -> str:
  with FileSystems.open(path) as handle:
    return handle.read().decode('utf-8')


def build_info(*, config: dict, feature_spec: dict, image_spec: dict,
               label_names: list, splits: dict, num_manifest_rows: int,
               rejected: dict, num_label_rows: Optional[int],
               label_rows_rejected: dict, max_error_rate: float) -> dict:
  """Assembles dataset_info.json's content.

  `splits`: {name: {'num_examples', 'num_bytes', 'shards'}};
  `rejected`: {'stage/code': count} for image-manifest rows;
  `label_rows_rejected`: the same for label-manifest rows (two manifests).
  """
  num_rejected = sum(rejected.values())
  num_examples = sum(s['num_examples'] for s in splits.values())
  error_rate = num_rejected / num_manifest_rows if num_manifest_rows else 0.0
  info = {
      'format_version': FORMAT_VERSION,
      'schema': config['schema'],
      'feature_spec': feature_spec,
      'image': image_spec,
      'compression': config['compression'],
      'num_classes': len(label_names),
      'label_map': list(label_names),
      'splits': splits,
      'num_examples': num_examples,
      'num_manifest_rows': num_manifest_rows,
      'num_rejected': num_rejected,
      'rejected_by_reason': dict(sorted(rejected.items())),
      'error_rate': error_rate,
      'max_error_rate': max_error_rate,
      'over_budget': error_rate > max_error_rate,
      'config': config,
  }
  if num_label_rows is not None:
    info['num_label_manifest_rows'] = num_label_rows
    info['num_label_manifest_rows_rejected'] = sum(label_rows_rejected.values())
    info['label_manifest_rejected_by_reason'] = dict(sorted(label_rows_rejected.items()))
  return info


class InfoError(Exception):
  """dataset_info.json is missing or unusable."""


def read_info(output_dir: str) -> dict:
  path = join(output_dir, DATASET_INFO)
  try:
    text = read_text(path)
  except Exception as error:  # missing file: FileNotFoundError or BeamIOError
    raise InfoError(f'{path} is missing or unreadable ({type(error).__name__}): '
                    f'the dataset is incomplete or was never written')
  try:
    info = json.loads(text)
  except json.JSONDecodeError as error:
    raise InfoError(f'{path} is not valid JSON: {error}')
  if not isinstance(info, dict):
    raise InfoError(f'{path} does not hold a JSON object')
  missing = [k for k in ('format_version', 'schema', 'feature_spec', 'image',
                         'label_map', 'splits') if k not in info]
  if missing:
    raise InfoError(f'{path} lacks {", ".join(missing)}')
  if info['format_version'] != FORMAT_VERSION:
    raise InfoError(f'{path} has format_version {info["format_version"]}; '
                    f'this tool reads {FORMAT_VERSION}')
  return info
