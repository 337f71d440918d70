"""convert --schema detection's options checked on the launcher, before
anything is written: the flags that go together, and the annotations' own
structure (malformed COCO JSON, VOC XML or YOLO YAML is a usage error, exit 2)."""

from __future__ import annotations

import dataclasses
import os

from pipeline.configuration import configs as opts
from pipeline.configuration.manifest_files import require_file
from pipeline.configuration.output_flags import output_options
from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import annotations as objects
from transforms.core import boxes
from transforms.core import coco
from transforms.core import fingerprints
from transforms.core import paths
from transforms.core import splits
from transforms.core.detect import DetectionOptions
from transforms.core.detection_info import DetectionConfig
from transforms.core.labels import LabelMap
from transforms.core.shuffle import Ordering
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec

DETECTION = 'detection'
# Flags of the classification inputs that mean nothing here.
_NOT_WITH_ANNOTATIONS = ('manifest', 'label_manifest', 'label_map', 'multi_label',
                         'extra_features', 'manifest_format', 'image_column',
                         'label_column', 'key_column', 'split_column')


def _check_flags(parsed) -> None:
  args, given = parsed.args, parsed.given
  if not args.annotations:
    raise UsageError('--schema detection needs --annotations PATH and --annotation_format '
                     'coco|voc|yolo')
  if 'schema' in given and args.schema != DETECTION:
    raise UsageError(f'--annotations writes --schema detection, not --schema {args.schema}')
  if not args.annotation_format:
    raise UsageError('--annotations needs --annotation_format coco|voc|yolo')
  for name in _NOT_WITH_ANNOTATIONS:
    if name in given and getattr(args, name):
      raise UsageError(f'--{name} does not go with --annotations (the classes and '
                       f'images come from the annotations)')
  if not args.output_dir:
    raise UsageError('--output_dir is required')
  if args.previous_dataset:
    # Reuse compares a row's label; a detection row's objects are not in the
    # sidecar yet, so a copied record could keep stale boxes.
    raise UsageError(f'--previous_dataset {args.previous_dataset} does not go with '
                     f'--annotations yet: convert a detection dataset whole')
  if args.encoding == 'raw' and 'encoding' in given:
    raise UsageError('--schema detection stores JPEG or PNG (the Model Garden decoder '
                     'cannot read --encoding raw): give --encoding jpeg or png')
  if args.annotation_format != 'yolo' and not args.image_dir:
    raise UsageError(f'--annotation_format {args.annotation_format} needs --image_dir, '
                     f'the folder the images are in')
  if args.image_dir and not paths.is_remote(args.image_dir) and not os.path.isdir(
      args.image_dir):
    raise UsageError(f'--image_dir {args.image_dir} is not a folder')


def _coco(args, options: DetectionOptions) -> DetectionConfig:
  files = filesystem.FileAccess()
  if not files.exists(args.annotations):
    raise UsageError(f'--annotations {args.annotations}: no such file')
  require_file('--annotations', args.annotations)  # a FIFO or device: never opened
  version = fingerprints.file_version(args.annotations)  # before it is read
  try:
    with files.open(args.annotations) as stream:
      summary = coco.scan(stream, args.annotations)
  except coco.CocoFormatError as error:
    raise UsageError(str(error))
  if not summary.num_images and not args.allow_empty:
    raise UsageError(f'{args.annotations} lists no image (--allow_empty publishes an '
                     f'empty dataset)')
  labels, shift = coco.label_ids(summary.categories)
  try:
    names = objects.label_names({labels[c]: n for c, n in summary.categories.items()},
                                args.annotations)
  except objects.LabelMapError as error:
    raise UsageError(str(error))
  return DetectionConfig('coco', args.annotations, args.image_dir.rstrip('/'), names,
                         options, shift, tuple(sorted(labels.items())),
                         annotations_version=version)


def convert_config(parsed) -> opts.ConvertConfig:
  """Checks the parsed options of a detection convert; UsageError names the
  first problem."""
  _check_flags(parsed)
  args = parsed.args
  opts.exclusive_pool_sizes(args.image_threads, args.image_processes, 'image')
  if args.resize_mode != 'none' and args.height * args.width > args.max_pixels:
    raise UsageError(f'--height x --width = {args.height * args.width} pixels is more '
                     f'than --max_pixels {args.max_pixels}')
  image = ImageSpec(
      height=args.height, width=args.width, channels=args.channels,
      encoding=args.encoding if 'encoding' in parsed.given else 'jpeg',
      resize_mode=args.resize_mode, resize_filter=args.resize_filter,
      jpeg_quality=args.jpeg_quality, background=opts.parse_background(args.background),
      max_pixels=args.max_pixels, formats=opts.parse_formats(args.formats),
      max_image_bytes=args.max_image_bytes)
  options = DetectionOptions(args.include_masks, args.min_box_visibility,
                             args.annotation_orientation or boxes.default_orientation(
                                 args.annotation_format),
                             args.skip_empty, args.on_bad_box,
                             args.on_size_mismatch, args.max_pixels)
  split_names = opts.parse_split_names(args.split_names)
  split = splits.SplitConfig(
      fractions=opts.parse_split_fractions(args.split) if args.split else (),
      seed=args.seed, names=split_names)
  if args.annotation_format == 'coco':
    detection = _coco(args, options)
  else:
    from pipeline.configuration import detection_files
    detection = detection_files.file_config(args, options)
  found_splits = detection.split_names()
  if not split.fractions:
    split = dataclasses.replace(split, names=found_splits or (splits.DEFAULT_SPLIT,))
  effective = dict(output_options(parsed))
  effective['encoding'] = image.encoding
  effective['schema'] = DETECTION
  return opts.ConvertConfig(
      output_dir=args.output_dir.rstrip('/') or '/', overwrite=args.overwrite,
      manifests=(), image_dir=None, label_map=LabelMap(detection.names),
      image=image, example=ExampleSpec(DETECTION, masks=args.include_masks), split=split,
      num_shards=args.num_shards, shard_size_mb=args.shard_size_mb,
      compression=args.compression, max_error_rate=args.max_error_rate,
      progress=args.progress, image_threads=args.image_threads,
      image_processes=args.image_processes, image_timeout_s=args.image_timeout_s,
      options=effective, config_file=opts.recorded_config_file(parsed.config_file),
      sink=args.sink, write_index=args.write_index,
      ordering=Ordering(shuffle=args.shuffle == 'on', seed=args.seed),
      dedupe=args.dedupe, split_by=args.split_by, allow_empty=args.allow_empty,
      known_splits=tuple(dict.fromkeys((*split.split_names(), *split_names))),
      job_endpoint_connect_timeout=args.job_endpoint_connect_timeout,
      detection=detection)
