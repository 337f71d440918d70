"""dataset_info.json: the contract between convert, validate and readers."""

from __future__ import annotations

import json
from typing import Optional

from transforms.core.spec import FORMAT_VERSION


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


def parse_info(text: str, path: str) -> dict:
  """The text of dataset_info.json -> its dict; InfoError if it is unusable."""
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
