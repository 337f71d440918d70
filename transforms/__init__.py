"""The Beam steps of convert and validate, and the layers behind them.

  transforms/          Beam steps (PTransforms, DoFns): this package's API
  transforms/core/     plain per-element functions and specs; never import Beam
  transforms/workers/  code that runs on pool threads or in child processes

The public transforms and output tags are exported here lazily, so importing
`transforms.core.*` or `transforms.workers.*` (image worker processes do)
never pays for importing Beam.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    'ReadManifest': 'transforms.read_manifest',
    'ReadImageDir': 'transforms.read_manifest',
    'ResolveKeys': 'transforms.read_manifest',
    'LabelMapFromRows': 'transforms.read_manifest',
    'EncodeRows': 'transforms.encode_rows',
    'WriteShards': 'transforms.write_dataset',
    'WriteRejected': 'transforms.write_dataset',
    'WriteInfoFn': 'transforms.write_dataset',
    'CheckShards': 'transforms.validate_shards',
    'WriteReportFn': 'transforms.validate_shards',
    **{tag: 'transforms.tags' for tag in (
        'ROWS', 'REJECTED', 'EXAMPLES', 'TALLIES', 'LABELLED', 'LOADED',
        'SUMMARIES', 'PROBLEMS', 'TALLY_SUMS', 'FIRST_PROBLEMS', 'FIRST_WARNINGS')},
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605  (built from the table above)


def __getattr__(name: str):
  if name not in _EXPORTS:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  return getattr(importlib.import_module(_EXPORTS[name]), name)
