"""--schema detection's settings, and what it adds to dataset_info.json and
beside it (per-class object counts, dropped boxes, rejected annotations, the
category shift; label_map.txt as `id<TAB>name`, label_map.pbtxt): plain
functions."""

from __future__ import annotations

import dataclasses

from transforms.core import annotations as objects
from transforms.core import coco
from transforms.core import tally
from transforms.core.dataset_info import over_budget
from transforms.core.detect import DetectionOptions
from transforms.core.spec import LABEL_MAP
from transforms.core.spec import LABEL_MAP_PBTXT
from transforms.core.splits import SplitConfig

# Tally keys of what detection counts (summed with the others, tally.py).
DROPPED_BY_CROP = ('detection', 'dropped', 'crop_visibility')
SKIPPED_EMPTY = ('detection', 'skipped_empty')


@dataclasses.dataclass(frozen=True)
class DetectionConfig:
  """--annotations and the flags around it, checked (pipeline.configuration.detection_config)."""
  annotation_format: str  # coco | voc | yolo
  annotations: str  # the COCO file, the VOC Annotations folder, the YOLO labels root
  image_dir: str
  names: tuple  # the label map by id ('' where no class has the id; 0 the background)
  options: DetectionOptions = DetectionOptions()  # noqa: RUF009  (frozen)
  category_shift: int = 0
  category_labels: tuple = ()  # ((the file's category id, label id), ...) for COCO
  # VOC/YOLO: (relative image path, annotation file, split, ordinal, problem), listed by
  # the launcher; problem: () or (code, why) of a YOLO label file without its image
  # or a listed VOC id without its XML, a row rejected as it is read
  files: tuple = ()
  mask_dir: str = ''  # VOC SegmentationObject
  # VOC: how many XMLs no ImageSets/Main split file lists (left out, as VOC's
  # tools leave them out), and the first tally.SHOWN_SKIPPED_FILES names
  num_unlisted: int = 0
  unlisted: tuple = ()
  # COCO: the file's fingerprints.file_version before it was read ('' remote):
  # validate --recompute tells by it that the file is the one the run read
  annotations_version: str = ''
  # YOLO pose (data.yaml's kpt_shape): keypoint values after each row's box
  keypoint_values: int = 0

  def coco_source(self, split: SplitConfig) -> coco.CocoSource:
    return coco.CocoSource(self.annotations, self.image_dir, split,
                           dict(self.category_labels), self.options.include_masks,
                           self.options.on_bad_box, self.options.skip_empty,
                           self.options.max_pixels)

  def split_names(self) -> tuple:
    """The splits the files name (VOC ImageSets, YOLO folders), in order;
    not those only a rejected entry (its problem) names."""
    return tuple(dict.fromkeys(split for _, _, split, _, problem in self.files
                               if split and not problem))

  def to_json(self) -> dict:
    options = self.options
    data = {'annotation_format': self.annotation_format, 'annotations': self.annotations,
            'image_dir': self.image_dir, 'include_masks': options.include_masks,
            'min_box_visibility': options.min_box_visibility,
            'annotation_orientation': options.annotation_orientation,
            'on_bad_box': options.on_bad_box, 'skip_empty': options.skip_empty,
            'on_size_mismatch': options.on_size_mismatch}
    if self.annotation_format == 'yolo':  # validate --recompute reads the rows as this run did
      data['keypoint_values'] = self.keypoint_values
    return data


def _per_class(per_id: dict, names: tuple) -> dict:
  per_name = objects.objects_per_name(per_id, names)
  return {name: per_name.get(name, 0) for name in dict.fromkeys(names) if name}


def finish_info(info: dict, sums: dict, config: DetectionConfig) -> dict:
  """dataset_info.json of a detection dataset: classification's, with object
  counts per class instead of example counts, num_classes the largest id, and
  a `detection` section."""
  counts = tally.read_counts(sums)
  names = tuple(info['label_map'])
  total = {}
  for split, entry in info['splits'].items():
    entry.pop('examples_per_class', None)
    entry.pop('imbalance_ratio', None)
    per_id = counts.class_counts.get(split, {})
    entry['objects_per_class'] = _per_class(per_id, names)
    entry['num_objects'] = sum(per_id.values())
    for label, n in per_id.items():
      total[label] = total.get(label, 0) + n
  rejected_annotations = dict(sorted(counts.label_rows_rejected.items()))
  info['num_classes'] = len(names) - 1
  info['rejected_annotations_by_reason'] = rejected_annotations
  info['label_warnings'] = {'empty_classes': [n for i, n in enumerate(names)
                                              if n and not total.get(i)]}
  info['label_warnings']['num_empty_classes'] = len(info['label_warnings']['empty_classes'])
  info['detection'] = {
      **config.to_json(),
      'category_shift': config.category_shift,
      'num_objects': sum(total.values()),
      'objects_per_class': _per_class(total, names),
      'num_rejected_annotations': sum(rejected_annotations.values()),
      'dropped_boxes': {'crop_visibility': sums.get(DROPPED_BY_CROP, 0),
                        **{reason.split('/', 1)[1]: n for reason, n
                           in rejected_annotations.items()
                           if config.options.on_bad_box == 'drop'}},
      'num_skipped_empty': sums.get(SKIPPED_EMPTY, 0),
  }
  info['over_budget'] = over_budget(info)  # with its annotations counted
  if config.annotations_version:
    info['detection']['annotations_version'] = config.annotations_version
  if config.annotation_format == 'voc':
    info['detection']['num_skipped_unlisted'] = config.num_unlisted
    info['detection']['skipped_unlisted'] = list(config.unlisted)
  return info


def label_files(names: tuple) -> dict:
  """{file name: text} of the label map files beside the shards."""
  return {LABEL_MAP: objects.label_map_text(names),
          LABEL_MAP_PBTXT: objects.label_map_pbtxt(names)}
