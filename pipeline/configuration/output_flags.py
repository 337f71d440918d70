"""convert's flags about what is written and how strictly (the sink, index
files, the error budget, the output size), checked alike for every kind of input."""

from __future__ import annotations

from pipeline.errors import UsageError
from transforms.core.spec import SINK_TFRECORDIO


def output_options(parsed) -> dict:
  """The sink, index, error-budget and size flags checked -> the options recorded."""
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
  if args.resize_mode == 'none':
    # A --config file that says resize_mode none itself may be an options
    # block recorded before the sizes were refused with it (it holds them,
    # at 300 if not given): output.md says it is a --config file of its run.
    recorded = 'resize_mode' in parsed.from_config
    sized = [f'--{name} {getattr(args, name)}' for name in ('height', 'width')
             if name in parsed.given and not (recorded and name in parsed.from_config)]
    if sized:
      raise UsageError(f'{" and ".join(sized)} need{"" if len(sized) > 1 else "s"} '
                       '--resize_mode stretch, pad or crop: with --resize_mode none each '
                       'image keeps its own size')
    # Recorded as not set, as the output records them: the recorded options,
    # read back as a --config file, must not give them.
    options = {**options, 'height': None, 'width': None}
  return options
