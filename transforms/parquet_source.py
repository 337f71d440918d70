"""ReadParquet: a Parquet manifest's files -> one ManifestRow per row, read
by row group on every worker.

The launcher read each file's footer (pipeline/configuration/preflight_parquet.py): the
row groups and their rows are known, so every row's index in its file and
place in the manifest is computed from them, and a row group is one work
item, spread over the workers by a Reshuffle. A worker reads only the light
columns of its row group (label, key, split, extra features, an image's
path); image bytes stay in the file, and the row carries where they are
(core/parquet.ParquetCell), for the image step to read.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import apache_beam as beam

from transforms.batches import Batch
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.beam_util import counter
from transforms.core import line_caps
from transforms.core import manifest
from transforms.core import parquet
from transforms.core.line_ranges import ManifestChangedError
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import Rejection
from transforms.core.rejects import RowError
from transforms.core.tally import lines_key
from transforms.filesystem import FileAccess
from transforms.workers.progress_file import write_total


def row_groups(layout: parquet.ParquetLayout) -> list:
  """(file index, row group, first row in the file) of every row group."""
  items = []
  for index, file in enumerate(layout.files):
    first = 0
    for group, rows in enumerate(file.row_groups):
      items.append((index, group, first))
      first += rows
  return items


class ReadRowGroupFn(beam.DoFn):
  """(file index, row group, first row) -> a ManifestRow per row, or its
  Rejection under REJECTED, and (lines tally, rows) under TALLIES."""

  def __init__(self, config: manifest.ManifestConfig, progress_dir: Optional[str] = None):
    self._config = config
    self._progress_dir = progress_dir
    self._rows = counter('manifest_rows')

  def setup(self):
    self._files = FileAccess()
    # The progress line's total, known from the footers before any row is read.
    write_total(self._progress_dir, self._config.layout.num_rows)

  def process(self, item):
    index, group, first = item
    layout = self._config.layout
    file = layout.files[index]
    config = dataclasses.replace(self._config, path=file.path, files=(), layout=None)
    rows = file.row_groups[group]
    yield beam.pvalue.TaggedOutput(TALLIES, (lines_key(False), rows))
    self._rows.inc(rows)
    try:
      cells = self._read(file, group, layout)
    except ManifestChangedError:
      raise  # the job fails, one line naming the file, as a CSV's does
    except Exception as error:  # OSError, ArrowInvalid (a damaged page), a store's own
      for i in range(rows):
        yield self._reject({}, file, first + i, RowError(
            STAGE_READ, 'unreadable', f'cannot read row group {group} of {file.path}: '
            f'{type(error).__name__}: {error}'))
      return
    for i in range(rows):
      row_cells = {name: values[i] for name, values in cells.items()}
      try:
        yield parquet.row_from_cells(row_cells, config, layout, file, group, i, first + i)
      except RowError as error:
        yield self._reject(row_cells, file, first + i, error)
      except Exception as error:  # a row nobody foresaw is that row's problem, not the job's
        yield self._reject(row_cells, file, first + i, RowError(
            STAGE_MANIFEST, 'unexpected_error', f'{type(error).__name__}: {error}'))

  def _read(self, file: parquet.ParquetFile, group: int, layout: parquet.ParquetLayout
            ) -> dict:
    """{column: [value of each row]} of the row group's light columns;
    ManifestChangedError when the file is not the one the launcher listed."""
    import pyarrow.parquet as pq
    columns = list(layout.light_columns)
    hf_path = parquet.image_path_column(self._config, layout)
    if hf_path:
      columns.append(hf_path)
    with self._open(file.path) as stream:
      size = stream.seek(0, os.SEEK_END)
      found = pq.ParquetFile(stream)
      groups = tuple(found.metadata.row_group(i).num_rows
                     for i in range(found.metadata.num_row_groups))
      # Rewritten since its footer was read: its rows are not those counted
      # and placed (a row group of fewer rows failed on an IndexError).
      if size != file.size or groups != file.row_groups:
        raise ManifestChangedError(
            f'manifest {file.path}: it is {size} bytes in row groups of {list(groups)} rows, '
            f'not the {file.size} bytes in row groups of {list(file.row_groups)} it was '
            f'listed with: it changed while the run read it')
      table = found.read_row_group(group, columns=columns)
    table = table.flatten()  # an HF Image's path: the column 'image.path'
    return {name: table.column(name).to_pylist() for name in table.column_names}

  def _open(self, path: str):
    return self._files.open(path) if '://' in path else open(path, 'rb')

  def _reject(self, cells: dict, file: parquet.ParquetFile, row: int, error: RowError):
    return beam.pvalue.TaggedOutput(REJECTED, Rejection(
        line_caps.shown_fields(cells), error.stage, error.code, error.reason, file.path, row))


class ReadParquet(beam.PTransform):
  """A Parquet manifest (config.layout: its files, read on the launcher)
  -> {ROWS: batches of ManifestRows, REJECTED: Rejection, TALLIES: row tallies}."""

  def __init__(self, config: manifest.ManifestConfig, progress_dir: Optional[str] = None):
    super().__init__()
    self._config = config
    self._progress_dir = progress_dir

  def expand(self, pbegin):
    items = row_groups(self._config.layout)
    read = (pbegin
            | 'Once' >> beam.Impulse()
            | 'RowGroups' >> beam.FlatMap(lambda _, items: items, items)
            | 'Spread' >> beam.Reshuffle()
            | 'ReadRowGroups' >> beam.ParDo(ReadRowGroupFn(self._config, self._progress_dir))
            .with_outputs(REJECTED, TALLIES, main=ROWS))
    return {ROWS: read[ROWS] | 'BatchRows' >> Batch(), REJECTED: read[REJECTED],
            TALLIES: read[TALLIES]}
