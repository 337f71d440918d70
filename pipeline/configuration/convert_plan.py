"""What a convert config decides about its job beyond its flags one by one:
whether a previous dataset's records are reused (previous_used), where an
http(s) image's fingerprint comes from (fingerprints_fetched), whether the
in-order resolve step makes the label map (label_map_made_here), and the
settings dataset_info.json records (info_settings). pipeline/convert.py's
build reads them."""

from __future__ import annotations

import dataclasses

from pipeline.configuration import configs
from pipeline.engines import runners
from transforms.core import fingerprints
from transforms.core.spec import SINK_TFRECORDIO


def label_map_made_here(config: configs.ConvertConfig, in_order: bool, inline: bool) -> bool:
  """Whether the in-order resolve step makes the label map for the steps
  fused after it (label_maps.LabelMapHere): a map from the rows, every row
  kept until the map's combine (no --dedupe content), and no shuffle between
  (remote sidecars are joined through one: a side input there costs no stage)."""
  return (in_order and config.label_map is None and config.detection is None
          and config.dedupe != 'content' and (inline or not previous_used(config)))


def fingerprints_fetched(config: configs.ConvertConfig) -> bool:
  """Whether an http(s) image's fingerprint comes from the GET that fetches
  it (no HEAD first: nothing is decided before the image step). 4,000
  URLs from 127.0.0.1: 20.3 s with a HEAD each, 14.3 s with the GET's."""
  return (config.sink != SINK_TFRECORDIO and config.change_detection == fingerprints.METADATA
          and not previous_used(config) and config.detection is None)


def previous_used(config: configs.ConvertConfig) -> bool:
  """Whether this run reuses a previous dataset's records."""
  return config.previous is not None and config.previous.dataset is not None


def info_settings(config: configs.ConvertConfig, options):
  settings = config.info_settings(runners.engine_record(options))
  if config.previous is None:
    return settings
  return dataclasses.replace(settings, reuse={
      'previous_dataset': config.previous.dataset or config.previous.given,
      'previous_run_id': config.previous.run_id, 'missing': not previous_used(config)})
