"""Records that wait in files rather than in the runner's shuffle: the ordered
writer on a distributed runner, writing to a local --output_dir.

A record's shard is known only once every record of its split is known (the
shard plan, a side input), so the records wait somewhere between the image
step and the shard writers. In the runner's shuffle, on Flink and Spark, every
byte crosses the Fn API data plane (gRPC, protobuf copies, the JVM, its
network stack) at each stage boundary. Measured on Spark `local[2]`, 8,000
JPEGs to 224x224: 1.28 GB crossed the harness's data plane for 251 MB of
records (written once by the image step; read twice, as the side input made
the runner keep them for two stages; then the shard shuffle's write and read).

SpillRecords writes each record once, framed, to a file of its bundle in
`OUT/beam-temp-<split>-records/` (removed once the shards are written; a
failed run's goes with Beam's temp folders); what goes on is its place
(Spilled). The shard writer reads it there (SpilledReader), both CRCs
checked. A local output folder is one every worker sees, as the shards
themselves require; object stores keep the records in the shuffle.
"""

from __future__ import annotations

import os
import shutil
from typing import NamedTuple
import uuid

import apache_beam as beam

from transforms.batches import RowBatch
from transforms.core.tfrecord import ShardError
from transforms.core.tfrecord import frame
from transforms.core.tfrecord import unframe


class Spilled(NamedTuple):
  """Where a spilled record's framed bytes are."""
  path: str
  offset: int
  length: int  # framed: length, its CRC, data, data CRC


def spill_folder(prefix: str) -> str:
  """The folder a split's spilled records wait in (PREFIX: OUT/SPLIT)."""
  folder, split = prefix.rsplit('/', 1)
  return f'{folder}/beam-temp-{split}-records'


class SpillRecordsFn(beam.DoFn):
  """Batches of BuiltExamples -> the same batches, each record's bytes moved to
  a file of this bundle (data and framed b'', spilled set)."""

  def __init__(self, folder: str):
    self._folder = folder

  def setup(self):
    self._file = None  # teardown may come without a bundle

  def start_bundle(self):
    self._file = None
    self._path = ''
    self._offset = 0

  def process(self, batch):
    spilled = RowBatch()
    for example in batch:
      if self._file is None:
        os.makedirs(self._folder, exist_ok=True)
        # A bundle run again (a retry, a recomputed partition) writes a file
        # of its own: its outputs point there, a failed attempt's are dropped.
        self._path = f'{self._folder}/{uuid.uuid4().hex}.tfrecord'
        self._file = open(self._path, 'xb')  # closed in finish_bundle
      framed = example.framed or frame(example.data)
      self._file.write(framed)
      spilled.append(example._replace(
          data=b'', framed=b'', spilled=Spilled(self._path, self._offset, len(framed))))
      self._offset += len(framed)
    if spilled:
      yield spilled

  def finish_bundle(self):
    # Before any reader: the shard writers run after the shuffle, which
    # takes this bundle's outputs only once the bundle is done.
    self._close()

  def teardown(self):
    self._close()

  def _close(self) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None


class SpilledReader:
  """Reads spilled records back, each checked (length and both CRCs): a
  temp file that is not what SpillRecords wrote fails the job (ShardError)."""

  def __init__(self):
    self._descriptors = {}

  def framed(self, spilled: Spilled) -> bytes:
    descriptor = self._descriptors.get(spilled.path)
    if descriptor is None:
      descriptor = self._descriptors[spilled.path] = os.open(
          spilled.path, os.O_RDONLY | getattr(os, 'O_CLOEXEC', 0))
    framed = os.pread(descriptor, spilled.length, spilled.offset)
    try:
      unframe(framed, spilled.length, spilled.offset)
    except ShardError as error:
      raise ShardError(error.index, error.kind,
                       f'spilled record in {spilled.path}: {error.detail}') from error
    return framed

  def close(self) -> None:
    for descriptor in self._descriptors.values():
      os.close(descriptor)
    self._descriptors = {}

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()


def remove_spilled(_, folder: str, written: list) -> list:
  """Removes the split's spill folder once `written` (every shard's path, a
  side input: the writers are done) is known; outputs nothing."""
  del written
  if os.path.exists(folder):  # none when the split had no record
    shutil.rmtree(folder)
  return []
