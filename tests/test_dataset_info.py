"""transforms/core/dataset_info.py's plain functions not covered elsewhere:
how_changed, the one wording of validate's and export's "changed while read"
finding (tests/test_export_overlap.py and the validate overlap tests run it
end to end); over_budget and its reason (tests/test_coco_ids.py end to end)."""

from __future__ import annotations

import pytest

from transforms.core import dataset_info
from transforms.core.dataset_info import how_changed

READ = {'run_id': 'a', 'splits': {'train': {'num_examples': 3}}}


def test_the_same_dataset_info_is_no_change():
  assert how_changed(READ, {'run_id': 'a', 'splits': {'train': {'num_examples': 3}}}) is None


def test_a_dataset_info_gone_is_named_so():
  assert how_changed(READ, None) == 'its dataset_info.json is gone'


def test_any_difference_is_a_rewrite():
  assert how_changed(READ, {**READ, 'run_id': 'b'}) == 'its dataset_info.json was rewritten'
  assert how_changed(READ, {}) == 'its dataset_info.json was rewritten'


@pytest.mark.parametrize('detection, budget, over, reason', [
    (None, 0.0, False, ''),  # classification: rows alone
    ({'num_rejected_annotations': 3, 'num_objects': 0,
      'dropped_boxes': {'crop_visibility': 0}}, 0.0, True,
     'Every one of the 3 annotation(s) was rejected (rejected.jsonl), so no image has an '
     'object (--max_error_rate 1 accepts that)'),
    ({'num_rejected_annotations': 3, 'num_objects': 0,
      'dropped_boxes': {'crop_visibility': 0}}, 1.0, False, ''),  # accepted
    ({'num_rejected_annotations': 3, 'num_objects': 1,
      'dropped_boxes': {'crop_visibility': 0}}, 0.0, False, ''),  # one object kept
    ({'num_rejected_annotations': 3, 'num_objects': 0,
      'dropped_boxes': {'crop_visibility': 2}}, 0.0, False, ''),  # kept, then cropped away
    ({'num_rejected_annotations': 0, 'num_objects': 0,
      'dropped_boxes': {'crop_visibility': 0}}, 0.0, False, ''),  # no annotation at all
])
def test_every_annotation_rejected_is_over_budget(detection, budget, over, reason):
  """A detection set whose every annotation was rejected is over its budget
  (exit 3), as rows rejected above --max_error_rate are."""
  info = {'error_rate': 0.0, 'max_error_rate': budget,
          **({'detection': detection} if detection else {})}
  assert dataset_info.over_budget(info) is over
  assert dataset_info.over_budget_reason(info) == reason
  rows_over = {**info, 'error_rate': 0.5, 'max_error_rate': 0.25}
  assert dataset_info.over_budget(rows_over) is True
  assert dataset_info.over_budget_reason(rows_over) == (
      'Error rate 50.00% is above --max_error_rate 25.00%')
