"""Records that wait in files on a distributed runner (transforms/spill.py):
each record written once, framed, and read back checked; only its place goes
through the shard shuffle; the folder gone once the shards are written."""

from __future__ import annotations

import os
import pathlib
import shutil

import apache_beam as beam
import pytest

from tests.conftest import local_pipeline
from transforms.batches import chunks
from transforms.core.example import BuiltExample
from transforms.core.shuffle import Ordering
from transforms.core.shuffle import SizeCappedShards
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import frame
from transforms.spill import SpilledReader
from transforms.spill import SpillRecordsFn
from transforms.spill import remove_spilled
from transforms.spill import spill_folder
from transforms.write_shards import WriteShards

ORDERING = Ordering(seed=5)


def _examples(count: int) -> list:
  return [BuiltExample('train', ORDERING.key(f'k{i}', i), 0, f'k{i}', i + 2, 'ab' * 32,
                       f'record {i}'.encode() * (i + 1), f'f{i}', 'cat', 'd', '', f'{i}.png')
          for i in range(count)]


def _spilled(examples: list, folder: str, bundles: int = 1) -> list:
  """SpillRecordsFn over the examples in `bundles` bundles -> its outputs."""
  spill = SpillRecordsFn(folder)
  spill.setup()
  out = []
  for bundle in chunks(examples, -(-len(examples) // bundles)):
    spill.start_bundle()
    for batch in chunks(bundle, 2):
      for spilled in spill.process(batch):
        out += spilled
    spill.finish_bundle()
  spill.teardown()
  return out


def test_spilled_records_read_back_as_framed_with_nothing_else_changed(tmp_path):
  examples = _examples(5)
  copied = examples[4]._replace(framed=frame(examples[4].data), reuse='reused')
  examples[4] = copied
  spilled = _spilled(examples, str(tmp_path / 'records'), bundles=2)
  assert len(os.listdir(tmp_path / 'records')) == 2  # a file a bundle
  assert [e.data for e in spilled] == [b''] * 5 and [e.framed for e in spilled] == [b''] * 5
  assert [e._replace(spilled=()) for e in spilled] == [
      e._replace(data=b'', framed=b'') for e in examples]
  with SpilledReader() as reader:
    assert [reader.framed(e.spilled) for e in spilled] == [frame(e.data) for e in examples]
  first, last = spilled[0].spilled, spilled[2].spilled
  assert first.offset == 0 and first.length == len(examples[0].data) + 16
  assert last.path == first.path and last.offset == first.length + spilled[1].spilled.length


def test_a_damaged_or_missing_spilled_record_fails_with_its_file(tmp_path):
  spilled = _spilled(_examples(2), str(tmp_path / 'records'))
  path = spilled[1].spilled.path
  data = bytearray(pathlib.Path(path).read_bytes())
  data[spilled[1].spilled.offset + 14] ^= 1  # a byte of the second record's data
  pathlib.Path(path).write_bytes(bytes(data))
  with SpilledReader() as reader:
    assert reader.framed(spilled[0].spilled) == frame(_examples(2)[0].data)
    with pytest.raises(ShardError, match=f'spilled record in {path}: data CRC mismatch'):
      reader.framed(spilled[1].spilled)
    short = spilled[1].spilled._replace(length=spilled[1].spilled.length + 9)
    with pytest.raises(ShardError, match='shard ends before'):
      reader.framed(short)
  os.remove(path)
  with SpilledReader() as reader, pytest.raises(FileNotFoundError):
    reader.framed(spilled[0].spilled)


def test_the_spill_folder_is_beside_the_split_and_removed_if_there(tmp_path):
  folder = spill_folder(f'{tmp_path}/train')
  assert folder == f'{tmp_path}/beam-temp-train-records'
  assert remove_spilled(None, folder, []) == []  # none: nothing to remove
  _spilled(_examples(3), folder)
  assert remove_spilled(None, folder, ['a shard']) == [] and not os.path.exists(folder)


def _labels(pipeline: beam.Pipeline) -> list:
  """The labels of a pipeline built, never run (its temp folder removed)."""
  labels = [t.unique_name for t in pipeline.to_runner_api().components.transforms.values()]
  shutil.rmtree(pipeline.local_tempdir)
  return labels


@pytest.mark.parametrize('prefix, in_order, spills', [
    ('/out/train', False, True), ('gs://bucket/out/train', False, False),
    ('/out/train', True, False)])
def test_only_a_distributed_writer_of_local_shards_spills(prefix, in_order, spills):
  p = beam.Pipeline()
  _ = (p | beam.Create([]) | WriteShards(prefix, '.tfrecord', 'none', 2, None, in_order,
                                         sources=True))
  labels = _labels(p)
  assert any(label.endswith('/SpillRecords') for label in labels) == spills
  assert any(label.endswith('/RemoveSpilled') for label in labels) == spills


@pytest.mark.parametrize('num_shards', [2, 0])
def test_shards_written_from_spilled_records_leave_no_folder(tmp_path, num_shards):
  examples = _examples(9)
  out = tmp_path / 'out'
  out.mkdir()
  with local_pipeline('--direct_num_workers=2', '--direct_running_mode=multi_threading') as p:
    _ = (p | beam.Create(list(chunks(examples, 2))) | beam.Reshuffle()
         | WriteShards(str(out / 'train'), '.tfrecord', 'none', num_shards, 60, False,
                       sources=True))
  names = sorted(os.listdir(out))
  assert not [name for name in names if name.startswith('beam-temp-')]
  shards = [name for name in names if name.endswith('.tfrecord')]
  in_order = sorted(examples, key=lambda e: e.order)
  cuts = SizeCappedShards(60)
  assert len(shards) == (num_shards or [cuts.add(len(e.data) + 16) for e in in_order][-1] + 1)
  assert len(shards) == (num_shards or 6)
  written = b''.join((out / name).read_bytes() for name in shards)
  if num_shards:
    expected = b''.join(frame(e.data) for e in in_order[0::2]) + b''.join(
        frame(e.data) for e in in_order[1::2])
  else:
    expected = b''.join(frame(e.data) for e in in_order)
  assert written == expected


def test_a_spill_torn_down_without_a_bundle_or_given_an_empty_batch(tmp_path):
  spill = SpillRecordsFn(str(tmp_path / 'records'))
  spill.setup()
  spill.teardown()  # no bundle ran: nothing to close
  spill.setup()
  spill.start_bundle()
  assert list(spill.process([])) == []  # nothing out, no file made
  spill.finish_bundle()
  assert not (tmp_path / 'records').exists()

