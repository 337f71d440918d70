"""The Beam steps of convert and validate, and the layers behind them.

  transforms/          Beam steps (PTransforms, DoFns), imported by their modules:
                       sources, dedupe, encode, write_shards, write_metadata,
                       check_shards; beam_util holds the output tags and counters
  transforms/core/     plain per-element functions and specs; never import Beam
  transforms/workers/  code that runs on pool threads or in child processes

Importing this package imports nothing: `transforms.core.*` and
`transforms.workers.*` (image worker processes import them) never pay for
importing Beam.
"""
