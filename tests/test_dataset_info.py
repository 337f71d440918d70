"""transforms/core/dataset_info.py's plain functions not covered elsewhere:
how_changed, the one wording of validate's and export's "changed while read"
finding (tests/test_export_overlap.py and the validate overlap tests run it
end to end)."""

from __future__ import annotations

from transforms.core.dataset_info import how_changed

READ = {'run_id': 'a', 'splits': {'train': {'num_examples': 3}}}


def test_the_same_dataset_info_is_no_change():
  assert how_changed(READ, {'run_id': 'a', 'splits': {'train': {'num_examples': 3}}}) is None


def test_a_dataset_info_gone_is_named_so():
  assert how_changed(READ, None) == 'its dataset_info.json is gone'


def test_any_difference_is_a_rewrite():
  assert how_changed(READ, {**READ, 'run_id': 'b'}) == 'its dataset_info.json was rewritten'
  assert how_changed(READ, {}) == 'its dataset_info.json was rewritten'
