"""A Parquet manifest rewritten between the launcher's read of its footer
and a worker's read of a row group: the rows counted and placed are not the
file's. A row group of fewer rows failed the job with an IndexError and
Beam's traceback; it now fails as a CSV that changed while read does (exit
1, one line naming the file, no traceback)."""

from __future__ import annotations

import io

from PIL import Image
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import convert
from pipeline.configuration import preflight
from pipeline.errors import EXIT_FAILED
from pipeline.runs import exits
from transforms import parquet_source
from transforms.core import manifest
from transforms.core.line_ranges import ManifestChangedError
from transforms.core.splits import SplitConfig


def _png(seed: int) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (4, 3), (seed * 40 % 256, 10, 10)).save(buffer, 'PNG')
  return buffer.getvalue()


def _write(path, rows: int) -> None:
  pq.write_table(pa.table({'image': [_png(i) for i in range(rows)],
                           'label': [f'c{i % 2}' for i in range(rows)]}), path)


def test_a_row_group_read_from_a_rewritten_file_fails_naming_it(tmp_path):
  path = tmp_path / 'train.parquet'
  _write(path, 6)
  config = preflight.manifest_config(str(path), manifest.ROLE_COMBINED, SplitConfig(), ())
  read = parquet_source.ReadRowGroupFn(config)
  read.setup()
  rows = [out for out in read.process((0, 0, 0)) if isinstance(out, manifest.ManifestRow)]
  assert [row.label for row in rows] == ['c0', 'c1', 'c0', 'c1', 'c0', 'c1']
  _write(path, 3)
  with pytest.raises(ManifestChangedError) as raised:
    list(read.process((0, 0, 0)))
  assert str(raised.value).startswith(f'manifest {path}: it is ')
  assert 'in row groups of [3] rows, not the ' in str(raised.value)
  assert 'in row groups of [6] it was listed with: it changed while the run read it' in str(
      raised.value)
  assert exits.input_failure(raised.value)  # one line, no traceback


def test_a_parquet_manifest_rewritten_during_the_run_is_one_line(tmp_path, monkeypatch, capsys):
  path = tmp_path / 'train.parquet'
  _write(path, 6)
  setup = parquet_source.ReadRowGroupFn.setup

  def rewritten_first(self):  # after the launcher read the footer, before any row
    setup(self)
    _write(path, 3)
  monkeypatch.setattr(parquet_source.ReadRowGroupFn, 'setup', rewritten_first)
  assert convert.main(['--manifest', str(path), '--output_dir', str(tmp_path / 'out'),
                       '--height', '8', '--width', '8', '--progress', 'off']) == EXIT_FAILED
  err = capsys.readouterr().err
  assert 'error: the job failed: ManifestChangedError: manifest ' in err, err
  assert 'changed while the run read it' in err and 'Traceback' not in err, err
