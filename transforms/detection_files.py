"""VOC and YOLO in Beam: the annotation files the launcher listed, each read
and parsed by whichever worker gets it, into one row per image."""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from transforms import filesystem
from transforms.batches import Batch
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.core import annotation_versions
from transforms.core import annotations as objects
from transforms.core import detection_info
from transforms.core import paths
from transforms.core import voc
from transforms.core import yolo
from transforms.core.coco import reject_row_if_bad
from transforms.core.manifest import ManifestRow
from transforms.core.manifest import resolve_path
from transforms.core.rejects import STAGE_READ
from transforms.core.splits import SplitConfig
from transforms.core.tally import lines_key

# What an image's path is called in each format's files.
_NAMED = {'voc': '<filename>', 'yolo': 'image path'}


@dataclasses.dataclass(frozen=True)
class FileSource:
  """What turns one listed annotation file into a row."""
  annotation_format: str  # voc | yolo
  image_dir: str
  split: SplitConfig
  ids: tuple  # ((name, label id), ...) (VOC) or the label ids (YOLO)
  mask_dir: str = ''
  include_masks: bool = False
  on_bad_box: str = 'drop'
  skip_empty: bool = False
  keypoint_values: int = 0  # YOLO pose: keypoint values after each row's box


def file_row(listed: tuple, data: bytes, source: FileSource) -> tuple:
  """(image path relative to image_dir, annotation file, split, ordinal,
  problem) and the file's bytes -> (ManifestRow or None, [Rejection]).
  problem: () or the (code, why) the launcher found (a YOLO label file
  without its image, a listed VOC id without its XML): the row is rejected,
  nothing read."""
  image, path, split, ordinal, problem = listed
  mask_bytes = None
  fields = {'image': image, 'annotations': path, 'split': split}
  if problem:
    return None, [ManifestRow(fields, path, ordinal, image=image, key=image).reject(
        objects.STAGE_ANNOTATION, *problem)]
  row = ManifestRow(fields, path, ordinal,
                    image=image, path=resolve_path(image, source.image_dir), key=image,
                    split=source.split.assign(image, split or None))
  if not paths.stays_inside(image):  # never read: not even its first bytes are shown
    return None, [row.reject(objects.STAGE_ANNOTATION, objects.PATH_OUTSIDE_IMAGE_DIR,
                             f'{_NAMED[source.annotation_format]} {image!r} is outside '
                             f'--image_dir (an absolute path, or .. climbing out)')]
  if source.annotation_format == 'voc':
    parsed = voc.parse_xml(data, path)
    if parsed.problem:
      return None, [row.reject(objects.STAGE_ANNOTATION, objects.BAD_IMAGE_RECORD,
                               parsed.problem)]
    mask = filesystem.join(source.mask_dir, image.rsplit('/', 1)[-1].rsplit('.', 1)[0]
                           + '.png') if source.mask_dir and source.include_masks else None
    if mask and not filesystem.FileAccess().exists(mask):
      mask = None
    if mask:  # fingerprinted with the row (validate --recompute)
      mask_bytes = filesystem.FileAccess().read_at_most(mask, MAX_ANNOTATION_FILE_BYTES)
    annotation, rejected = voc.image_annotation(parsed, ordinal, dict(source.ids), path, mask)
  else:
    annotation, rejected = yolo.parse_labels(yolo.decode_text(data, path), ordinal, path,
                                             source.keypoint_values)
  known = {label for _, label in source.ids} if source.annotation_format == 'voc' else set(
      source.ids)
  kept, bad = objects.checked_objects(annotation, known, source.include_masks, image)
  row = dataclasses.replace(row, annotation=dataclasses.replace(
      annotation, objects=kept, fingerprint=annotation_versions.file_fingerprint(
          source.annotation_format, image, split, ordinal, data, mask_bytes)))
  return reject_row_if_bad(row, rejected + bad, source.on_bad_box)


# The most bytes one image's annotation file (a VOC XML, a YOLO label file)
# may hold: a few KB in practice; a larger one is read no further (a 4 GB file
# was read whole into memory).
MAX_ANNOTATION_FILE_BYTES = 16 << 20


def read_capped(files: filesystem.FileAccess, path: str) -> bytes:
  """The file's bytes; OSError (the row's unreadable_annotations) past the cap."""
  data = files.read_at_most(path, MAX_ANNOTATION_FILE_BYTES)
  if len(data) > MAX_ANNOTATION_FILE_BYTES:
    raise OSError(f'it holds more than {MAX_ANNOTATION_FILE_BYTES} bytes, more than any '
                  f"image's annotations need: not read")
  return data


class _FileRowFn(beam.DoFn):
  """A listed VOC or YOLO annotation file (image, path, split, ordinal,
  problem) -> its image's row (file_row) and rejections, and a line tally (a
  skipped empty image: its own tally); a file that cannot be read or parsed
  now: its row rejected as read/unreadable_annotations."""

  def __init__(self, source: FileSource):
    self._source = source

  def setup(self):
    self._files = filesystem.FileAccess()

  def process(self, listed):
    image, path, _split, ordinal, problem = listed
    data = b''
    try:
      if path and not problem:  # a YOLO image without a label file has no objects
        data = read_capped(self._files, path)
      row, rejected = file_row(listed, data, self._source)
    except (OSError, yolo.YoloFormatError, voc.VocFormatError) as error:
      # gone since listed; not UTF-8; an XML that no longer parses (cut short
      # by an editor saving it since the launcher parsed it: it failed the job)
      row = ManifestRow({'image': image, 'annotations': path}, path, ordinal, image=image)
      reason = str(error) if isinstance(error, ValueError) else (
          f'cannot read {path}: {error.strerror or error}')  # str(): the path again
      yield beam.pvalue.TaggedOutput(REJECTED, row.reject(
          STAGE_READ, 'unreadable_annotations', reason))
      yield beam.pvalue.TaggedOutput(TALLIES, (lines_key(False), 1))
      return
    if row is not None and self._source.skip_empty and not row.annotation.objects and (
        not rejected):
      yield beam.pvalue.TaggedOutput(TALLIES, (detection_info.SKIPPED_EMPTY, 1))
      return
    yield beam.pvalue.TaggedOutput(TALLIES, (lines_key(False), 1))
    for rejection in rejected:
      yield beam.pvalue.TaggedOutput(REJECTED, rejection)
    if row is not None:
      yield row


class ReadAnnotationFiles(beam.PTransform):
  """The listed files -> {ROWS, REJECTED, TALLIES}: one row per image."""

  def __init__(self, source: FileSource, files: tuple):
    super().__init__()
    self._source = source
    self._files = files

  def expand(self, pbegin):
    read = (pbegin | 'ListedFiles' >> beam.Create(self._files, reshuffle=True)
            | 'FileRows' >> beam.ParDo(_FileRowFn(self._source)).with_outputs(
                REJECTED, TALLIES, main=ROWS))
    return {ROWS: read[ROWS] | 'BatchRows' >> Batch(), REJECTED: read[REJECTED],
            TALLIES: read[TALLIES]}
