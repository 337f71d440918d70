"""The checked, typed configs of convert and validate, assembled from the
parsed flags (pipeline/configuration/flags.py) by pure cross-field checks; the reads on the
launcher they need are in pipeline/configuration/preflight.py and preflight_input.py."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from pipeline.configuration import command_line
from pipeline.configuration import detection_config
from pipeline.configuration.configs import ConvertConfig
from pipeline.configuration.configs import ValidateConfig
from pipeline.configuration.configs import exclusive_pool_sizes
from pipeline.configuration.configs import parse_background
from pipeline.configuration.configs import parse_extra_features
from pipeline.configuration.configs import parse_formats
from pipeline.configuration.configs import parse_name_list
from pipeline.configuration.configs import parse_split_fractions
from pipeline.configuration.configs import parse_split_names
from pipeline.configuration.configs import recorded_config_file
from pipeline.configuration.flags import ConvertOptions
from pipeline.configuration.flags import ValidateOptions
from pipeline.configuration.flags import http_config
from pipeline.configuration.locations import usable_problem
from pipeline.configuration.output_flags import output_options
from pipeline.configuration.preflight import Rows
from pipeline.configuration.preflight import image_dir_splits
from pipeline.configuration.preflight import manifest_config
from pipeline.configuration.preflight import may_have_split_column
from pipeline.configuration.preflight import source_label_map
from pipeline.configuration.preflight_input import require_input
from pipeline.configuration.report_path import check_report_path
from pipeline.errors import UsageError
from pipeline.runs.previous import check as check_previous
from transforms import filesystem
from transforms.core import image_dir
from transforms.core import manifest
from transforms.core import paths
from transforms.core import splits
from transforms.core.labels import parse_normalize
from transforms.core.pointers import pointer_given
from transforms.core.shuffle import Ordering
from transforms.core.spec import VALIDATION_REPORT
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec


def parse_convert(argv: list, description: str = '', rows: Optional[Rows] = None,
                  switched_off=()) -> tuple:
  """convert's command line -> (ConvertConfig, PipelineOptions). rows:
  --manifest holds api.convert's rows= (preflight.Rows); switched_off:
  command_line.parse's."""
  parsed = command_line.parse(argv, ConvertOptions, description, switched_off)
  require_utf8(parsed.effective, ConvertOptions.LOCATIONS)
  return convert_config(parsed, rows), parsed.pipeline_options


def require_utf8(effective: dict, locations: tuple) -> None:
  """UsageError for an option whose value is not UTF-8 text: a path of bytes
  UTF-8 cannot decode (`mkdir $'out\\xff'`; Python gives them as lone
  surrogates), or a relative location in such a folder. dataset_info.json,
  rejected.jsonl, the `latest` pointer and Beam's job graph hold the
  options and paths as UTF-8, which cannot hold them: the run did all its
  work, then failed (exit 1, a traceback) and published nothing."""
  for name, value in effective.items():
    texts = value if isinstance(value, list) else [value]
    if name in locations and isinstance(value, str) and not paths.is_remote(value):
      texts = [value, os.path.abspath(value)]
    for text in texts:
      shown = paths.not_utf8_shown(text) if isinstance(text, str) else None
      if shown is not None:
        raise UsageError(f'--{name} {shown} is not UTF-8 text: the dataset records its '
                         'options and paths as UTF-8; rename it (or run from a folder '
                         'whose path is UTF-8)')


def parse_validate(argv: list, description: str = '', switched_off=()) -> tuple:
  """validate's command line -> (ValidateConfig, PipelineOptions)."""
  parsed = command_line.parse(argv, ValidateOptions, description, switched_off)
  return validate_config(parsed.args), parsed.pipeline_options


def validate_config(args) -> ValidateConfig:
  """Checks the parsed validate options; UsageError names the first problem."""
  if not args.input_dir:
    raise UsageError('--input_dir is required')
  exclusive_pool_sizes(args.check_threads, args.check_processes, 'check')
  input_dir = args.input_dir.rstrip('/') or '/'
  if not paths.is_remote(input_dir) and not os.path.isdir(input_dir):
    raise UsageError('--input_dir ' + (pointer_given(input_dir) or f'{input_dir} is not a folder'))
  if args.manifest and args.recompute is None:
    raise UsageError("--manifest goes with --recompute (where the run's manifest lives now)")
  report_path = args.report or filesystem.join(input_dir, VALIDATION_REPORT)
  check_report_path(report_path, bool(args.report))
  return ValidateConfig(
      input_dir=input_dir,
      report_path=report_path,
      expected_count=args.expected_count, max_problems=args.max_problems,
      check_threads=args.check_threads, check_processes=args.check_processes,
      strict=args.strict, job_endpoint_connect_timeout=args.job_endpoint_connect_timeout,
      recompute=args.recompute, manifest=args.manifest)


def convert_config(parsed: command_line.Parsed, rows: Optional[Rows] = None) -> ConvertConfig:
  """Checks the parsed convert options; UsageError names the first problem.
  rows: --manifest holds api.convert's rows=: the same checks, worded for them."""
  args = parsed.args
  if args.annotations or args.schema == 'detection':  # objects, not a label per image
    return detection_config.convert_config(parsed)
  sources = [bool(args.manifest), bool(args.image_dir)]
  if not any(sources):
    raise UsageError('--manifest is required (or --image_dir for a folder per class)')
  if not args.output_dir:
    raise UsageError('--output_dir is required')
  if all(sources):
    raise UsageError('give either --manifest or --image_dir, not both')
  if args.label_manifest and not args.manifest:
    raise UsageError('--label_manifest goes with --manifest')
  exclusive_pool_sizes(args.image_threads, args.image_processes, 'image')
  image = ImageSpec(
      height=args.height, width=args.width, channels=args.channels,
      encoding=args.encoding, resize_mode=args.resize_mode,
      resize_filter=args.resize_filter, jpeg_quality=args.jpeg_quality,
      background=parse_background(args.background), max_pixels=args.max_pixels,
      formats=parse_formats(args.formats), max_image_bytes=args.max_image_bytes)
  extras = parse_extra_features(args.extra_features)
  if args.resize_mode != 'none' and args.height * args.width > args.max_pixels:
    raise UsageError(f'--height x --width = {args.height * args.width} pixels is more '
                     f'than --max_pixels {args.max_pixels}')
  if args.schema == 'seed':
    if args.encoding != 'raw' or args.resize_mode == 'none' or args.channels != 3:
      raise UsageError('--schema seed stores fixed-size raw RGB pixels (read back with '
                       'reshape([H, W, 3])): it needs --encoding raw, --channels 3 and '
                       'a --resize_mode other than none')
    if extras:
      raise UsageError('--schema seed writes exactly img_raw and label; '
                       'drop --extra_features or use --schema default')
    if args.multi_label:
      raise UsageError('--schema seed stores one int64 label per record; '
                       '--multi_label needs --schema default')
  options = output_options(parsed)
  split_names = parse_split_names(args.split_names)
  split = splits.SplitConfig(
      fractions=parse_split_fractions(args.split) if args.split else (),
      seed=args.seed, names=split_names)
  columns = {c: getattr(args, f'{c}_column') for c in manifest.COLUMNS
             if getattr(args, f'{c}_column')}
  if not args.label_separator:
    raise UsageError('--label_separator is empty')
  if args.split_by == 'content' and not split.fractions:
    raise UsageError('--split_by content draws --split fractions from the image bytes: '
                     'give --split too')
  try:
    label_normalize = parse_normalize(args.label_normalize)
  except ValueError as error:
    raise UsageError(f'--label_normalize: {error}')
  reading = dict(fmt=args.manifest_format, columns=columns, multi_label=args.multi_label,
                 label_separator=args.label_separator, label_normalize=label_normalize)
  manifests = ()
  if args.manifest:
    role = manifest.ROLE_IMAGES if args.label_manifest else manifest.ROLE_COMBINED
    manifests = (manifest_config(args.manifest, role, split, extras, **reading, rows=rows),)
    if args.label_manifest:
      manifests += (manifest_config(args.label_manifest, manifest.ROLE_LABELS,
                                    split, (), **reading),)
  else:
    image_dir_flags = [f'--{c}_column' for c in columns] + [
        flag for flag, given in (('--manifest_format', args.manifest_format),
                                 ('--multi_label', args.multi_label)) if given]
    if image_dir_flags:
      raise UsageError(f'{image_dir_flags[0]} goes with --manifest, not --image_dir')
    if not paths.is_remote(args.image_dir) and not os.path.isdir(args.image_dir):
      raise UsageError(f'--image_dir {args.image_dir} is not a folder')
    _output_outside(args.output_dir, args.image_dir)
    if args.image_dir_layout == image_dir.LAYOUT_SPLIT_LABEL:
      if split.fractions:
        raise UsageError('--image_dir_layout split/label takes the split from the '
                         'first folder: drop --split')
      image_dir_splits(args.image_dir, split.names)
  known_splits = tuple(dict.fromkeys((*split.split_names(), *split_names)))
  extensions = parse_name_list(args.image_extensions, '--image_extensions', lower=True)
  if not args.allow_empty:  # no row to convert: exit 2 now, OUT untouched
    require_input(manifests, args.image_dir, extensions, rows)
  split_from_folders = (args.image_dir and
                        args.image_dir_layout == image_dir.LAYOUT_SPLIT_LABEL)
  if not split.fractions and not split_from_folders and not may_have_split_column(
      manifests):
    # Every row goes to the default split: build one writer, not one per name.
    split = dataclasses.replace(split, names=(splits.DEFAULT_SPLIT,))
    manifests = tuple(dataclasses.replace(m, split=split) for m in manifests)
  if extras and args.image_dir:
    raise UsageError('--extra_features needs a manifest with those columns')
  manifests, given_map = source_label_map(manifests, args.label_map, label_normalize,
                                          extensions)
  previous = args.previous_dataset and check_previous(
      args.previous_dataset, args.previous_dataset_missing, args.output_dir, args.schema,
      args.sink, location_problem=usable_problem)
  return ConvertConfig(
      output_dir=args.output_dir.rstrip('/') or '/', overwrite=args.overwrite,
      manifests=manifests, image_dir=args.image_dir,
      label_map=given_map, image=image,
      example=ExampleSpec(args.schema, extras, args.multi_label), split=split,
      num_shards=args.num_shards, shard_size_mb=args.shard_size_mb,
      compression=args.compression, max_error_rate=args.max_error_rate,
      progress=args.progress, image_threads=args.image_threads,
      image_processes=args.image_processes, label_map_path=args.label_map,
      image_dir_layout=args.image_dir_layout, image_timeout_s=args.image_timeout_s,
      image_extensions=extensions,
      options=options, config_file=recorded_config_file(parsed.config_file), sink=args.sink,
      write_index=args.write_index,
      ordering=Ordering(shuffle=args.shuffle == 'on', seed=args.seed),
      dedupe=args.dedupe, split_by=args.split_by, label_normalize=label_normalize,
      allow_empty=args.allow_empty, known_splits=known_splits,
      job_endpoint_connect_timeout=args.job_endpoint_connect_timeout,
      previous=previous or None, change_detection=args.change_detection,
      http=http_config(args))


def _output_outside(output_dir: str, folder: str) -> None:
  """UsageError for an --output_dir in --image_dir (or --image_dir itself):
  the folder the run creates there was listed as a class of no example (a
  class id of the label map, and num_classes one too many), and the next run
  lists the dataset's files among the images."""
  def whole(path: str) -> str:
    return (path.rstrip('/') if paths.is_remote(path) else os.path.realpath(path)) + '/'
  if whole(output_dir).startswith(whole(folder)):
    raise UsageError(f'--output_dir {output_dir} is in --image_dir {folder}, whose folders '
                     "are read as classes and files as images (the dataset's own too): "
                     'give an --output_dir outside it')
