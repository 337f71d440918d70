"""The layers the folders promise: core and workers never import Beam or
TensorFlow; transforms never imports pipeline; each room of pipeline/ imports
only what its docstring allows, and the rooms import down only."""

import ast
import json
import os
import pathlib
import re
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
  # All started at once: they run side by side instead of one after another.
  script = ('import importlib, json, sys\n'
            'importlib.import_module(sys.argv[1])\n'
            'print(json.dumps([m for m in ("apache_beam", "tensorflow") if m in sys.modules]))')
  children = {module: subprocess.Popen([sys.executable, '-c', script, module], cwd=ROOT,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
              for module in PLAIN_MODULES}
  for module, child in children.items():
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, f'importing {module} failed:\n{err[-2000:]}'
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


# --- pipeline/ in rooms: each sub-package says what it may import, and keeps to it ---

TOP_MODULES = {'api', 'cli', 'convert', 'validate', 'look', 'export', 'demo', 'demo_detection',
               'demo_sources', 'flex_template', 'flex_launch', 'read', 'errors'}


def _rooms() -> dict:
  """{room: the packages and modules its __init__'s docstring lets it import
  (its `May import:` paragraph)} for every sub-package of pipeline/."""
  rooms = {}
  for init in sorted((ROOT / 'pipeline').glob('*/__init__.py')):
    doc = ast.get_docstring(ast.parse(init.read_text())) or ''
    match = re.search(r'^May import:(.*?)(?:\n\n|\Z)', doc, re.M | re.S)
    assert match, f'{init.relative_to(ROOT)}: the docstring has no "May import:" paragraph'
    allowed = [name.strip(' .') for name in match.group(1).replace('\n', ' ').split(',')]
    rooms[f'pipeline.{init.parent.name}'] = [name for name in allowed if name]
  return rooms


def _project_imports(path: pathlib.Path) -> set:
  """The modules of the project the file imports, each by its own name
  (`from pipeline import errors` imports pipeline.errors)."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
      names = [f'{node.module}.{alias.name}' for alias in node.names]
      names = [n if _is_module(n) else node.module for n in names]
    else:
      continue
    found.update(n for n in names if n.split('.')[0] in ('pipeline', 'transforms'))
  return found


def _is_module(dotted: str) -> bool:
  path = ROOT / dotted.replace('.', '/')
  return path.with_suffix('.py').is_file() or (path / '__init__.py').is_file()


def _within(module: str, packages) -> bool:
  return any(module == p or module.startswith(p + '.') for p in packages)


def test_pipeline_holds_rooms_and_the_entry_points():
  """pipeline/ itself holds the entry points and errors.py; everything else is
  in a room."""
  assert set(_rooms()) == {'pipeline.validating', 'pipeline.configuration', 'pipeline.runs',
                           'pipeline.engines', 'pipeline.looking', 'pipeline.reading',
                           'pipeline.beam_runtime'}
  top = {p.stem for p in (ROOT / 'pipeline').glob('*.py')} - {'__init__'}
  assert top == TOP_MODULES


@pytest.mark.parametrize('room', sorted(_rooms()))
def test_a_room_imports_only_what_its_docstring_allows(room):
  """A module of the room imports, of the project, only its own room, the
  rooms and packages its docstring names and pipeline.errors (a room's
  __main__.py is an entry point: the commands' rules apply to it)."""
  allowed = [room, 'pipeline.errors', *_rooms()[room]]
  folder = ROOT / room.replace('.', '/')
  wrong = []
  for path in sorted(folder.glob('*.py')):
    if path.name == '__main__.py':
      continue
    wrong += [f'{path.name}: {m}' for m in sorted(_project_imports(path))
              if not _within(m, allowed)]
  assert wrong == []


def test_rooms_import_down_only():
  """What the rooms may import draws no circle: an order runs from the
  commands down to errors.py, and no import points back up."""
  rooms = _rooms()
  order, left = [], dict(rooms)
  while left:  # peel off the rooms nothing left may import
    free = [r for r in left if not any(_within(r, other) for other in left.values()
                                       if other is not left[r])]
    assert free, f'the rooms may import each other in a circle: {sorted(left)}'
    order += sorted(free)
    for room in free:
      del left[room]
  ranks = {room: order.index(room) for room in rooms}
  assert (ranks['pipeline.validating'] < ranks['pipeline.configuration'] < ranks['pipeline.runs']
          < ranks['pipeline.engines'] < ranks['pipeline.beam_runtime']), order
  assert ranks['pipeline.looking'] < ranks['pipeline.reading'], order


def test_a_room_init_holds_no_import():
  """A room's __init__.py is its docstring (and at most constants): no
  re-export, so that importing one module of a room loads no other."""
  for init in sorted((ROOT / 'pipeline').glob('*/__init__.py')):
    assert _imported_modules(init) == set(), init


@pytest.mark.parametrize('room', sorted(_rooms()))
def test_a_room_docstring_names_each_of_its_modules(room):
  """A room's docstring says what it holds: each module of the room is
  named in it (`name.py`, or first on a line of its list, as beam_runtime's).
  runs/ and validating/ left out modules added to them later."""
  init = ROOT / room.replace('.', '/') / '__init__.py'
  doc = ast.get_docstring(ast.parse(init.read_text())) or ''
  named = set(re.findall(r'(?<![\w/])(\w+)\.py\b', doc)) | set(
      re.findall(r'^ +(\w+) {2,}', doc, re.M))
  present = {p.stem for p in init.parent.glob('*.py')} - {'__init__'}
  assert sorted(present - named) == [], f'{init.relative_to(ROOT)} does not name them'


def test_errors_imports_nothing_of_the_project():
  imported = _imported_modules(ROOT / 'pipeline' / 'errors.py')
  assert not {m for m in imported if m.split('.')[0] in ('pipeline', 'transforms')}


MAX_LINES = 400


def test_no_module_over_400_lines():
  long = {str(p.relative_to(ROOT)): n for top in ('pipeline', 'transforms')
          for p in (ROOT / top).rglob('*.py')
          if (n := len(p.read_text().splitlines())) > MAX_LINES}
  assert long == {}


def test_startup_imports_no_beam():
  """startup runs before Beam is imported: importing it must not import Beam."""
  script = ('import json, sys\n'
            'import pipeline.beam_runtime.startup\n'
            'print(json.dumps("apache_beam" in sys.modules))')
  done = subprocess.run([sys.executable, '-c', script], cwd=ROOT, capture_output=True,
                        text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  assert json.loads(done.stdout) is False


@pytest.mark.parametrize('path', sorted((ROOT / 'transforms').glob('*/*.py')),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_plain_layers_never_import_beam_steps(path):
  """core/ and workers/ import only core/ and workers/ of this project."""
  imported = {m for m in _imported_modules(path) if m.split('.')[0] == 'transforms'}
  allowed = ('transforms.core', 'transforms.workers')
  assert all(m.startswith(allowed) for m in imported), imported
  if path.parent.name == 'core':
    assert not any(m.startswith('transforms.workers') for m in imported), imported


# --- docs/ARCHITECTURE.md's Layout block names every module, and the page only modules that exist ---

ARCHITECTURE = ROOT / 'docs' / 'ARCHITECTURE.md'


def _layout_section() -> str:
  text = ARCHITECTURE.read_text()
  start = text.index('\n## Layout\n')
  end = text.find('\n## ', start + 1)
  return text[start:end if end != -1 else len(text)]


def _layout_blocks() -> dict:
  """The Layout code block as {folder: its text}: a folder starts a line, and
  indented lines continue it."""
  section = _layout_section()
  code = section.split('```')[1]
  blocks, folder = {}, None
  for line in code.splitlines():
    match = re.match(r'([\w/]+/)\s', line + ' ')
    if match:
      folder = match.group(1).rstrip('/')
      blocks[folder] = line[match.end():]
    elif folder and line.startswith(' '):
      blocks[folder] += ' ' + line.strip()
  return blocks


def _package_folders() -> list:
  """Every folder under pipeline/ and transforms/ that holds Python modules."""
  folders = set()
  for top in ('pipeline', 'transforms'):
    folders.update(p.parent for p in (ROOT / top).rglob('*.py') if '__pycache__' not in p.parts)
  return sorted(str(f.relative_to(ROOT)) for f in folders)


def test_layout_section_has_the_package_folders():
  folders = _package_folders()
  assert {'pipeline', 'transforms', 'transforms/core', 'transforms/workers'} <= set(folders)
  assert set(folders) <= set(_layout_blocks()), 'docs/ARCHITECTURE.md Layout misses a folder'


@pytest.mark.parametrize('folder', _package_folders())
def test_layout_section_names_each_module_and_no_other(folder):
  named = set(re.findall(r'(?<![\w/])(\w+)\.py\b', _layout_blocks()[folder])) - {'__init__'}
  present = {p.stem for p in (ROOT / folder).glob('*.py')} - {'__init__'}
  assert not present - named, (
      f'docs/ARCHITECTURE.md Layout ({folder}/) does not name {sorted(present - named)}')
  assert not named - present, (
      f'docs/ARCHITECTURE.md Layout ({folder}/) names missing {sorted(named - present)}')


def test_architecture_paths_exist():
  """Every path the page names (pipeline/, transforms/, tests/, bench/), in
  the Layout block or in the prose, is a file of the project."""
  paths = re.findall(r'(?<![\w/])((?:pipeline|transforms|tests|bench)/[\w/]*\w\.py)\b',
                     ARCHITECTURE.read_text())
  assert len(paths) > 20, 'docs/ARCHITECTURE.md points at (almost) no file'
  assert [p for p in paths if not (ROOT / p).is_file()] == []


def test_architecture_names_no_missing_module():
  """A bare `name.py` on the page is a module somewhere in the project."""
  named = set(re.findall(r'(?<![\w/.])(\w+)\.py\b', ARCHITECTURE.read_text()))
  present = set()
  for _, subfolders, files in os.walk(ROOT):
    # not into the venvs (ROOT.rglob walked them: ~5 s)
    subfolders[:] = [s for s in subfolders if s not in {'.venv', '.peers', '.git', '__pycache__'}]
    present.update(name[:-3] for name in files if name.endswith('.py'))
  assert named and sorted(named - present) == []


DOC_PAGES = ['README.md', 'bench/RESULTS.md'] + sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / 'docs').glob('*.md'))


def _links(path: pathlib.Path) -> list:
  """(target, anchor) of the page's markdown links ([text](target#anchor)),
  other schemes (https:, mailto:) left out; target '' is the page itself."""
  found = []
  for link in re.findall(r'\]\(([^)\s]+)\)', path.read_text()):
    if not re.match(r'[a-z]+:', link):
      target, _, anchor = link.partition('#')
      found.append((target, anchor))
  return found


def _relative_links(path: pathlib.Path) -> list:
  """Targets of the page's markdown links to files, anchors dropped."""
  return [target for target, _ in _links(path) if target]


def _anchors(path: pathlib.Path) -> set:
  """The anchors GitHub gives the page's headings: lower case, punctuation
  but '-' and '_' dropped, spaces as '-', a repeated one suffixed -1, -2..."""
  text = re.sub(r'^```.*?^```', '', path.read_text(), flags=re.M | re.S)
  anchors, seen = set(), {}
  for heading in re.findall(r'^#{1,6} +(.+?) *$', text, re.M):
    slug = re.sub(r'[^\w\- ]', '', heading.lower()).replace(' ', '-')
    anchors.add(f'{slug}-{seen[slug]}' if slug in seen else slug)
    seen[slug] = seen.get(slug, 0) + 1
  return anchors


def test_anchors_are_githubs():
  assert {'7-read-it-back', 'dataset_infojson', 'the-seeds-tf1-recipe',
          'one-run-per-output-folder', 'training-ready-shuffled-on-disk-no-leakage'} <= (
              _anchors(ROOT / 'README.md') | _anchors(ROOT / 'docs/output.md')
              | _anchors(ROOT / 'docs/reading.md') | _anchors(ROOT / 'docs/convert.md'))


@pytest.mark.parametrize('page', DOC_PAGES)
def test_doc_links_point_at_files_that_exist(page):
  """Every relative link of the page reaches a file, and its #anchor a
  heading of that file."""
  path = ROOT / page
  broken = []
  for target, anchor in _links(path):
    resolved = (path.parent / target) if target else path
    if not resolved.exists():
      broken.append(target)
    elif anchor and resolved.suffix == '.md' and anchor not in _anchors(resolved):
      broken.append(f'{target}#{anchor}')
  assert broken == []


def test_readme_links_every_page_of_docs():
  """No reference page is an orphan: README links each one, and the
  benchmark history."""
  links = {str((ROOT / t).resolve().relative_to(ROOT)) for t in _relative_links(ROOT / 'README.md')}
  assert set(DOC_PAGES) - {'README.md'} <= links
