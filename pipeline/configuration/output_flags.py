"""convert's flags about what is written and how strictly (the sink, index
files, the error budget, the output size), checked alike for every kind of input."""

from __future__ import annotations

import shlex

from pipeline.errors import UsageError
from transforms.core import paths
from transforms.core.manifest import DEFAULT_LABEL_SEPARATOR
from transforms.core.spec import SINK_TFRECORDIO

# A flag another's value makes meaningless is refused, not ignored: a user
# who gave it expected it to do something. (flag, the other, whether its
# value makes the flag meaningless, why)
_POINTLESS = (
    ('jpeg_quality', 'encoding', lambda encoding: encoding != 'jpeg',  # None: raw
     'it is the quality of --encoding jpeg'),
    ('shard_size_mb', 'num_shards', lambda shards: (shards or 0) > 0,
     'with --num_shards N each split has N shards, whatever their size'),
    # ignored, a cell 'cat|dog' was the one class 'cat|dog', exit 0
    ('label_separator', 'multi_label', lambda multi_label: not multi_label,
     'it splits a label cell into several labels with --multi_label (give it too, or '
     'drop --label_separator)'),
)


# The defaults of the flags _POINTLESS pairs with a switch.
_DEFAULTS = {'label_separator': DEFAULT_LABEL_SEPARATOR}


def without_pointless(options: dict) -> dict:
  """A run's recorded options (which hold every option) with those its other
  options made meaningless left out (None), so that they convert again
  (validate --recompute). An option not recorded is at its default (raw,
  0 shards)."""
  options = dict(options)
  for flag, needs, pointless, _ in _POINTLESS:
    if pointless(options.get(needs)):
      options[flag] = None
  return options


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
    if paths.has_glob(args.output_dir or ''):
      # Beam's sink matches its temp files by a pattern made of the path: the
      # job failed (exit 1) once every shard was written, renaming them.
      raise UsageError(f'--output_dir {args.output_dir} has a glob character (*, ?, [), '
                       "which Beam's WriteToTFRecord takes as a pattern: use --sink "
                       'ordered, or a folder without them')
    # Recorded as not set: the recorded options, read back as a --config
    # file, must not give it.
    options = {**options, 'shard_size_mb': None}
  for flag, needs, pointless, why in _POINTLESS:
    # A --config file that gives both may be an options block a run recorded
    # (it holds every option): taken. Its switch that is off (multi_label:
    # false) gives nothing, so the flag it gives at its default is taken too.
    recorded = flag in parsed.from_config and (
        needs in parsed.from_config or getattr(args, flag) == _DEFAULTS.get(flag))
    if pointless(getattr(args, needs)) and flag in parsed.given and not recorded:
      value = getattr(args, needs)  # a switch is off: 'without --multi_label'
      other = f'without --{needs}' if value is False else f'with --{needs} {value}'
      raise UsageError(f'--{flag} {shlex.quote(str(getattr(args, flag)))} has no effect '
                       f'{other}: {why}')
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
