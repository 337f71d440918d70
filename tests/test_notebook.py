"""examples/notebook.ipynb runs top to bottom in a Jupyter kernel of this venv
(nbclient), and its outputs show what it promises."""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# a long system test: make test stays within 6 minutes
pytestmark = [pytest.mark.slow,
              pytest.mark.integration]


def _text(output) -> str:
  return output.get('text', '') + output.get('data', {}).get('text/plain', '')


def test_the_notebook_runs_and_shows_its_results(monkeypatch, tmp_path):
  nbformat = pytest.importorskip('nbformat')
  nbclient = pytest.importorskip('nbclient')
  monkeypatch.setenv('PYTHONPATH', str(ROOT))  # the kernel imports this checkout
  monkeypatch.setenv('TMPDIR', str(tmp_path))  # the notebook's temp folder, checked at the end
  monkeypatch.setenv('IPYTHONDIR', str(tmp_path / 'ipython'))
  monkeypatch.setenv('JUPYTER_RUNTIME_DIR', str(tmp_path / 'runtime'))
  notebook = nbformat.read(ROOT / 'examples' / 'notebook.ipynb', as_version=4)
  assert all(not cell.get('outputs') for cell in notebook.cells)  # kept without outputs
  nbclient.NotebookClient(notebook, timeout=600, kernel_name='python3',
                          resources={'metadata': {'path': str(ROOT / 'examples')}}).execute()
  outputs = [[output for output in cell.outputs] for cell in notebook.cells
             if cell.cell_type == 'code']
  assert not [o for cell in outputs for o in cell if o.output_type == 'error']
  text = [''.join(_text(o) for o in cell) for cell in outputs]
  convert, rejected, validate, look, load = text[2], text[3], text[4], text[5], text[6]
  assert '12 examples, 1 rejected\n' in convert
  assert "{'train': 10, 'validation': 2}" in convert
  assert '<rows>' in rejected and 'missing_file' in rejected and ' 13 ' in rejected
  assert "valid {'train': 10, 'validation': 2} []" in validate
  assert 'Exported 10 images' in look
  assert any('image/png' in o.get('data', {}) for o in outputs[5])  # the contact sheet, inline
  assert "'image': ((4, 32, 32, 3), 'uint8')" in load
  assert "'label': ((4,), 'int64')" in load
  # the notebook's last cell removes its folder: nothing of it is left in TMPDIR
  assert {p.name for p in tmp_path.iterdir()} <= {'ipython', 'runtime'}
