"""validate --recompute N of a --schema detection dataset (COCO, VOC, YOLO):
each sampled record converted again from its image and its annotations,
read again from the annotation files dataset_info.json records (a COCO JSON
streamed, as convert reads it: only the sampled images' records and
annotations kept), with the converter's own per-image functions, and compared
byte for byte. Its image changed since the run (its SHA-256 is not the
sidecar's source_sha256), or its annotations (their fingerprint,
core/annotation_versions, is not the sidecar's `fingerprint`), or gone: a
warning (recompute_source_changed), not compared. The same sources giving
other bytes: a problem (recompute_mismatch)."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Optional

import ijson

from pipeline.errors import UsageError
from transforms import detection as detection_steps
from transforms import filesystem
from transforms.core import annotation_versions
from transforms.core import coco
from transforms.core import copies
from transforms.core import fingerprints
from transforms.core import recompute
from transforms.core import splits
from transforms.core import yolo
from transforms.core.detect import detect
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedImage
from transforms.core.example import build_example
from transforms.core.image import prepare_pillow
from transforms.core.redact import shown_url
from transforms.core.rejects import RowError
from transforms.detection_files import MAX_ANNOTATION_FILE_BYTES
from transforms.detection_files import file_row
from transforms.detection_files import read_capped
from transforms.read_sources import read_bytes
from transforms.workers import http_fetch
from transforms.workers.source_image import convert_sources


@dataclasses.dataclass(frozen=True)
class _Read:
  """One sampled key's annotations read again: the row they give now (None:
  rejected or skipped, `why`), and their fingerprint now."""
  row: Optional[object]
  why: str
  fingerprint: str


def _recorded(config, info: dict):
  """The run's DetectionConfig with what dataset_info.json records: the label
  map (COCO: its category ids, by the recorded category_shift), the classes
  the records were labelled by whatever the categories say now; and YOLO's
  keypoint values per row, what data.yaml's kpt_shape gave the run (a
  dataset that records none: data.yaml's now)."""
  detection = config.detection
  recorded = info.get('detection') or {}
  names = tuple(info['label_map'])
  shift = recorded.get('category_shift', detection.category_shift)
  labels = tuple((i - shift, i) for i, name in enumerate(names) if name) if (
      detection.annotation_format == 'coco') else detection.category_labels
  return dataclasses.replace(
      detection, names=names, category_labels=labels,
      annotations_version=recorded.get('annotations_version') or '',
      keypoint_values=recorded.get('keypoint_values', detection.keypoint_values))


def _require_fingerprints(input_dir: str, sampled: list) -> None:
  old = [key for _, key, record in sampled
         if not record.fingerprint.startswith(annotation_versions.PREFIX)]
  if old:
    raise UsageError(f'--recompute: the sidecars of {input_dir} record no fingerprint of '
                     f'the annotations of {len(old)} sampled record(s) (key {old[0]!r}; '
                     f'written by an older img2tfrecord): nothing tells whether they '
                     f'changed since the run; convert the dataset again to recompute it')


def _coco_reads(detection, split, keys: set, files) -> dict:
  """{key: _Read} of the sampled keys, the COCO file streamed three times
  (the sampled images' ids; every image record of those ids, as convert
  groups them; their annotations): never loaded whole."""
  source = detection.coco_source(split)
  image_key = detection_steps.image_key
  ids, images, anns = set(), {}, {}
  with files.open(detection.annotations) as stream:
    for _, image in coco.items(stream, 'images'):
      if isinstance(image, dict) and isinstance(image.get('file_name'), str) and (
          image['file_name'] in keys):
        ids.add(image_key(image.get('id')))
  with files.open(detection.annotations) as stream:
    for line, image in coco.items(stream, 'images'):
      if isinstance(image, dict) and image_key(image.get('id')) in ids:
        images.setdefault(image_key(image.get('id')), []).append((line, image))
  with files.open(detection.annotations) as stream:
    for line, ann in coco.items(stream, 'annotations'):
      if isinstance(ann, dict) and image_key(ann.get('image_id')) in ids:
        anns.setdefault(image_key(ann.get('image_id')), []).append((line, ann))
  reads = {}
  for image_id, found in images.items():
    found = sorted(found, key=lambda item: item[0])
    mine = anns.get(image_id, [])
    fingerprint = annotation_versions.coco_fingerprint(found, mine)
    if not mine and source.skip_empty:
      row, why = None, 'an image without objects, skipped (--skip_empty)'
    else:
      row, rejected = detection_steps.coco_row(found[0][1].get('id'), found, mine, source)
      why = _why(rejected)
    for _, image in found:
      name = image.get('file_name')
      if isinstance(name, str) and name in keys and name not in reads:
        reads[name] = _Read(row if row is not None and row.key == name else None,
                            why or 'another image record of its id is kept', fingerprint)
  return reads


def _why(rejected: list) -> str:
  return f'{rejected[-1].code}: {rejected[-1].reason}' if rejected else ''


def _file_reads(detection, split, keys: set, files: filesystem.FileAccess) -> dict:
  """{key: _Read} of the sampled keys of a VOC or YOLO dataset, their files
  listed again as convert lists them (pipeline/configuration/detection_files)."""
  source = detection_steps.file_source(detection, split)
  reads = {}
  for listed in detection.files:
    image, path, listed_split, ordinal, problem = listed
    if image not in keys or image in reads:
      continue
    try:
      data = read_capped(files, path) if path and not problem else b''
      row, rejected = file_row(listed, data, source)
    except (OSError, yolo.YoloFormatError) as error:
      reads[image] = _Read(None, f'cannot read {path}: {error}', '')
      continue
    mask = None
    if row is None and source.annotation_format == 'voc' and source.include_masks:
      mask = filesystem.join(source.mask_dir, image.rsplit('/', 1)[-1].rsplit('.', 1)[0]
                             + '.png')
      mask = files.read_at_most(mask, MAX_ANNOTATION_FILE_BYTES) if files.exists(mask) else None
    fingerprint = row.annotation.fingerprint if row is not None else (
        annotation_versions.file_fingerprint(source.annotation_format, image, listed_split,
                                             ordinal, data, mask))
    if row is not None and source.skip_empty and not row.annotation.objects and (
        not rejected):
      row, rejected = None, []
      why = 'an image without objects, skipped (--skip_empty)'
    else:
      why = _why(rejected)
    reads[image] = _Read(row, why, fingerprint)
  return reads


def findings(input_dir: str, info: dict, config, sampled: list, files) -> tuple:
  """-> ([Problem], [warning Problem], records compared, records skipped) of
  the sampled (split, key, PreviousRecord)s of a detection dataset; config:
  the run's ConvertConfig, from the options dataset_info.json records."""
  _require_fingerprints(input_dir, sampled)
  detection = _recorded(config, info)
  keys = {key for _, key, _ in sampled}
  try:
    reads = (_coco_reads if detection.annotation_format == 'coco' else _file_reads)(
        detection, config.split, keys, files)
  except (OSError, ValueError, ijson.JSONError) as error:  # gone or cut short since the run
    raise UsageError(f'--recompute: the annotations {detection.annotations} cannot be read '
                     f'again: {error}')
  prepare_pillow(config.image.max_pixels)
  digest = fingerprints.options_digest(config.image, config.example)
  http = http_fetch.client(config.http)
  reader = copies.ShardReader()
  problems, warnings = [], []
  found_at = [([], [])] * len(sampled)  # each record's (problems, warnings), by index
  try:
    for index, (split, key, record) in recompute.in_shard_order(sampled, reader):
      found_at[index] = mine = ([], [])
      found = _one(split, record, reads.get(key), config, detection, digest, reader, files,
                   http)
      recompute.add_finding(found, (os.path.basename(record.shard_path), record.ordinal),
                            key, *mine)
  finally:
    reader.close()
  recompute.in_sample_order(found_at, problems, warnings)
  return recompute.findings(problems, warnings, len(sampled))


def _as_read(detection) -> bool:
  """Whether the COCO file is at the version the run recorded (its size and
  modification time: dataset_info.json's detection.annotations_version)."""
  recorded = detection.annotations_version
  return bool(recorded) and fingerprints.file_version(detection.annotations) == recorded


def _one(split: str, record, read: Optional[_Read], config, detection, digest: str,
         reader, files, http) -> Optional[tuple]:
  """(kind, what) of one record against its sources converted again, or None."""
  recorded = record.option_digest.partition('-')[0]
  if recorded and recorded != digest:
    return recompute.OTHER_VERSION, (
        f'its record was encoded under options digest {recorded}; this version of '
        f'img2tfrecord, Pillow and its codecs gives {digest} for the same options: not '
        f'compared')
  if read is None and _as_read(detection):
    return recompute.RECOMPUTE_MISMATCH, (
        f"no image record of the run's annotations {detection.annotations} gives it, and "
        f'the file is unchanged since the run: the run wrote no such record')
  if read is None:
    return recompute.SOURCE_CHANGED, (
        f"no image record of the run's annotations {detection.annotations} gives it now")
  if read.fingerprint != record.fingerprint:
    return recompute.SOURCE_CHANGED, (
        f'its annotations in {detection.annotations} changed since the run (or are gone): '
        f'not compared')
  if read.row is None:
    return recompute.RECOMPUTE_MISMATCH, (
        f'its unchanged annotations give no record now: {read.why}')
  row = read.row
  result = convert_sources([row.path], config.image,
                           read=lambda path, spec: read_bytes(path, files, spec, http))[0]
  sha256 = None if isinstance(result, Exception) else result[1]
  shown = shown_url(row.path)
  if sha256 != record.source_sha256:
    return recompute.SOURCE_CHANGED, (
        f'its image {shown} changed since the run (or is gone): not compared')
  if config.split_by == 'content' and config.split.fractions:
    row = dataclasses.replace(row, split=splits.hash_split(
        sha256, config.split.fractions, config.split.seed))
  loaded = LoadedImage(LabelledRow(row, 0, ''), result[0], sha256, result[2])
  read_png = functools.partial(detection_steps.read_png, max_pixels=config.image.max_pixels)
  try:
    expected = build_example(detect(loaded, detection.names, config.image, detection.options,
                                    read_png), config.example)
  except RowError as error:
    return recompute.RECOMPUTE_MISMATCH, (
        f'its unchanged image {shown} and annotations do not convert again: {error.code}: '
        f'{error.reason}')
  try:
    found, _ = reader.data(record)
  except copies.COPY_ERRORS as error:
    return recompute.RECOMPUTE_MISMATCH, f'its record cannot be read: {error}'
  differ = recompute.record_differences(found, expected, split, row.split,
                                       'its annotations give')
  if not differ:
    return None
  return recompute.RECOMPUTE_MISMATCH, (
      f'{", ".join(differ)} differ from its unchanged image {shown} and annotations '
      f'converted again')
