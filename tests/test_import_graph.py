"""No import cycle in pipeline/ or transforms/: the graph of imports, built
from the source (every import statement, those inside functions too: an
import deferred to a function still closes a cycle when it runs), has none.
A cycle fails the test, named module by module with the line of each import."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ('pipeline', 'transforms')


def project_modules() -> dict:
  """{dotted module name: its file} of pipeline/ and transforms/ (a package
  under its own name: pipeline.engines for pipeline/engines/__init__.py)."""
  modules = {}
  for package in PACKAGES:
    for path in (ROOT / package).rglob('*.py'):
      if '__pycache__' in path.parts:
        continue
      parts = list(path.relative_to(ROOT).with_suffix('').parts)
      if parts[-1] == '__init__':
        parts.pop()
      modules['.'.join(parts)] = path
  return modules


def _imported_names(module: str, path: pathlib.Path):
  """(dotted name, line) of each name an import statement of the file reads:
  the module of `import a.b`, and of `from a.b import c` both a.b and a.b.c
  (a module or an attribute: the caller keeps what is a module)."""
  package = module if path.name == '__init__.py' else module.rpartition('.')[0]
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name, node.lineno
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:  # relative: from . import x, from ..a import b
        parts = package.split('.')
        parts = parts[:len(parts) - node.level + 1]
        base = '.'.join(parts + ([base] if base else []))
      yield base, node.lineno
      for alias in node.names:
        yield f'{base}.{alias.name}', node.lineno


def import_graph() -> dict:
  """{module: {imported project module: line of the first such import}}.
  Importing a.b.c runs the packages a and a.b first: they count as imported."""
  modules = project_modules()
  graph = {}
  for module, path in modules.items():
    edges = {}
    for name, line in _imported_names(module, path):
      while name and name not in modules:
        name = name.rpartition('.')[0]
      while name:
        if name != module:
          edges.setdefault(name, line)
        name = name.rpartition('.')[0]
    graph[module] = edges
  return graph


def cycles(graph: dict) -> list:
  """One cycle (a list of modules, the first repeated at the end) for each
  strongly connected component of more than one module (Tarjan)."""
  index, low, stack, on_stack, components = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for nxt in graph[node]:
      if nxt not in index:
        visit(nxt)
        low[node] = min(low[node], low[nxt])
      elif nxt in on_stack:
        low[node] = min(low[node], index[nxt])
    if low[node] == index[node]:
      component = set()
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.add(member)
        if member == node:
          break
      if len(component) > 1:
        components.append(component)

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return [_one_cycle(graph, component) for component in components]


def _one_cycle(graph: dict, component: set) -> list:
  """The shortest way from the component's first module back to itself."""
  start = min(component)
  paths = {start: [start]}
  frontier = [start]
  while frontier:
    nxt_frontier = []
    for node in frontier:
      for nxt in sorted(graph[node]):
        if nxt == start:
          return paths[node] + [start]
        if nxt in component and nxt not in paths:
          paths[nxt] = paths[node] + [nxt]
          nxt_frontier.append(nxt)
    frontier = nxt_frontier
  raise AssertionError(f'no cycle through {start}')


def describe(graph: dict, cycle: list) -> str:
  return ' -> '.join(
      f'{a} (line {graph[a][b]})' for a, b in zip(cycle, cycle[1:])) + f' -> {cycle[-1]}'


def test_the_graph_sees_imports_inside_functions():
  graph = import_graph()
  assert 'pipeline.convert' in graph and 'transforms.core.spec' in graph
  # pipeline/cli.py imports the commands inside main(): the graph has them.
  assert {'pipeline.convert', 'pipeline.validate', 'pipeline.look'} <= set(graph['pipeline.cli'])


def test_a_cycle_is_found_and_named():
  graph = {'a': {'b': 3}, 'b': {'c': 5}, 'c': {'a': 7, 'd': 1}, 'd': {}}
  found = cycles(graph)
  assert found == [['a', 'b', 'c', 'a']]
  assert describe(graph, found[0]) == 'a (line 3) -> b (line 5) -> c (line 7) -> a'


def test_no_import_cycle():
  graph = import_graph()
  found = [describe(graph, cycle) for cycle in cycles(graph)]
  assert found == [], 'import cycles:\n' + '\n'.join(found)
