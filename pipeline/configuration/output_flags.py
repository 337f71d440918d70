"""convert's flags about what is written and how strictly (the sink, index
files, the error budget), checked alike for every kind of input."""

from __future__ import annotations

from pipeline.errors import UsageError
from transforms.core.spec import SINK_TFRECORDIO


def output_options(parsed) -> dict:
  """The sink, index and error-budget flags checked -> the options recorded."""
  args = parsed.args
  options = parsed.effective
  if args.sink == SINK_TFRECORDIO:
    if 'shard_size_mb' in parsed.given:
      raise UsageError('--shard_size_mb needs --sink ordered: with --sink tfrecordio the '
                       'runner sizes the shards (--num_shards 0) or --num_shards N sets '
                       'their number')
    if args.write_index:
      raise UsageError("--write_index needs --sink ordered: Beam's WriteToTFRecord "
                       'writes no index files')
    # Recorded as not set: the recorded options, read back as a --config
    # file, must not give it.
    options = {**options, 'shard_size_mb': None}
  if args.write_index and args.compression == 'gzip':
    raise UsageError('--write_index needs uncompressed shards: offsets in a gzip stream '
                     'cannot be used for random access (drop --compression gzip)')
  if not 0.0 <= args.max_error_rate <= 1.0:
    raise UsageError(f'--max_error_rate {args.max_error_rate} is not in 0..1')
  return options
