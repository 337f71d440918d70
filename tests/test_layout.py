"""The layers the folders promise: core and workers never import Beam or
TensorFlow; transforms never imports pipeline."""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _modules(package: str) -> list:
  folder = ROOT / package.replace('.', '/')
  return sorted(f'{package}.{p.stem}' for p in folder.glob('*.py') if p.stem != '__init__')


PLAIN_MODULES = _modules('transforms.core') + _modules('transforms.workers')


def test_plain_layers_are_not_empty():
  assert 'transforms.core.spec' in PLAIN_MODULES
  assert 'transforms.workers.process_worker' in PLAIN_MODULES


def test_core_and_workers_import_neither_beam_nor_tensorflow():
  # One fresh interpreter per module: a module must not lean on another's imports.
  script = ('import importlib, json, sys\n'
            'importlib.import_module(sys.argv[1])\n'
            'print(json.dumps([m for m in ("apache_beam", "tensorflow") if m in sys.modules]))')
  for module in PLAIN_MODULES:
    out = subprocess.run([sys.executable, '-c', script, module], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [], f'{module} imports {out.strip()}'


def _imported_modules(path: pathlib.Path) -> set:
  tree = ast.parse(path.read_text())
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      names.add(node.module)
  return names


@pytest.mark.parametrize('path', sorted((ROOT / 'transforms').rglob('*.py')),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_transforms_never_import_pipeline(path):
  imported = _imported_modules(path)
  assert not {m for m in imported if m == 'pipeline' or m.startswith('pipeline.')}


@pytest.mark.parametrize('path', sorted((ROOT / 'transforms').glob('*/*.py')),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_plain_layers_never_import_beam_steps(path):
  """core/ and workers/ import only core/ and workers/ of this project."""
  imported = {m for m in _imported_modules(path) if m.split('.')[0] == 'transforms'}
  allowed = ('transforms.core', 'transforms.workers')
  assert all(m.startswith(allowed) for m in imported), imported
  if path.parent.name == 'core':
    assert not any(m.startswith('transforms.workers') for m in imported), imported
