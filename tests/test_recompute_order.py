"""validate --recompute checks the manifest order sink.record_order
'manifest' (--shuffle off) promises: records swapped within or across
shards, their index and sidecar lines made to match, passed every check,
--recompute 1.0 too (each record is still its row's), and a reader that does
not shuffle got them in another order than the manifest's."""

from __future__ import annotations

import pytest

from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from tests.conftest import copy_dataset
from tests.test_validate_cli import RAW_16
from tests.test_validate_cli import run_validate
from tests.test_validate_placement import _records
from tests.test_validate_placement import _rewrite

pytestmark = pytest.mark.xdist_group('converted_sample')

IN_MANIFEST_ORDER = (*RAW_16, '--shuffle', 'off', '--num_shards', '2', '--write_index')
SHARDS = ['train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord']
PROMISE = ("dataset_info.json's sink.record_order says 'manifest' (--shuffle off: records "
           'in the order of their rows)')


@pytest.fixture
def out(converted_sample, tmp_path):
  return copy_dataset(converted_sample(*IN_MANIFEST_ORDER)[1], tmp_path)


def test_the_written_order_is_no_problem(out):
  code, report = run_validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind'], report['num_recomputed']) == (EXIT_OK, {}, 9)


def test_records_swapped_in_a_shard(out):
  records = _records(out, SHARDS)
  records[0][0], records[0][1] = records[0][1], records[0][0]
  _rewrite(out, SHARDS, records)
  assert run_validate(out)[0] == EXIT_OK  # nothing but the manifest says the order
  code, report = run_validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'wrong_record_order': 1})
  # the sample's manifest: images/red_0.png is line 2, images/blue_2.png line 4
  assert [(p['file'], p['record'], p['detail']) for p in report['problems']] == [
      (SHARDS[0], 1, "record 1 (key 'images/red_0.png', line 2 of the manifest) comes after "
                     "record 0 (key 'images/blue_2.png', line 4): " + PROMISE)]


def test_records_swapped_between_shards(out):
  records = _records(out, SHARDS)
  records[0][0], records[1][0] = records[1][0], records[0][0]
  _rewrite(out, SHARDS, records)
  assert run_validate(out)[0] == EXIT_OK
  code, report = run_validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {'wrong_record_order': 1})
  assert [(p['file'], p['record']) for p in report['problems']] == [(SHARDS[1], 0)]
  assert report['problems'][0]['detail'].startswith(
      "record 0 (key 'images/red_0.png', line 2 of the manifest) is record 0 of split "
      f"'train' in manifest order, which --num_shards 2 deals to {SHARDS[0]} as its record 0")
