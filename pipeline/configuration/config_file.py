"""--config FILE: a YAML or JSON file of options, keyed by flag name without
dashes, read on the launcher into the command-line tokens a user would type
(command_line.py parses them with the command line's own parser)."""

from __future__ import annotations

import argparse
import json
import re

from pipeline.configuration.preflight import read_flag_text
from pipeline.errors import UsageError

CONFIG_FLAG = '--config'
# Lists and mappings nested deeper than this in a --config file are refused: an
# option's value is at most a mapping of lists (--beam_services, --labels).
MAX_CONFIG_DEPTH = 32
_TOO_DEEP = f'nested deeper than {MAX_CONFIG_DEPTH} levels'


def read_config(path: str) -> dict:
  """--config FILE -> its mapping of option names to values; UsageError if it
  cannot be read, does not parse, or holds no mapping."""
  data = _load(read_flag_text(CONFIG_FLAG, path), path)
  if data is None:
    raise UsageError(f'--config {path} is empty: expected one "name: value" per option')
  if not isinstance(data, dict):
    kind = 'a list' if isinstance(data, list) else type(data).__name__
    raise UsageError(f'--config {path} must hold a mapping of option names to values, '
                     f'not {kind}')
  return data


def _load(text: str, path: str):
  """The file's text -> its data; UsageError with the line of a parse error.

  A config is a flat mapping, a value at most a small mapping or list, so the
  file is held to that: a key given twice is an error (never "last wins"),
  nesting stops at MAX_CONFIG_DEPTH (deeper blew Python's recursion limit: a
  traceback), and YAML anchors and aliases are refused. An alias is a
  reference, and a value is passed on as JSON, which writes out every
  reference: nine levels of nine aliases each (the "billion laughs") took
  55 s and 3.6 GB before failing. The checks run while the YAML is composed,
  so such a file is refused at its first anchor, before anything expands.
  """
  if path.lower().endswith('.json'):
    def pairs(items):
      data = {}
      for key, value in items:
        if key in data:
          raise UsageError(f'--config {path}: key {key!r} is given twice')
        data[key] = value
      return data
    try:
      data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as error:
      raise UsageError(f'--config {path} does not parse: line {error.lineno}: {error.msg}')
    except RecursionError:  # json's own recursion, on input nested thousands deep
      raise UsageError(f'--config {path}: {_TOO_DEEP}') from None
    if _deeper_than(data, MAX_CONFIG_DEPTH):
      raise UsageError(f'--config {path}: {_TOO_DEEP}')
    return data
  import yaml  # only a run with --config pays for it

  class Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false. YAML 1.1 also reads yes/no/on/off as
    booleans, and `progress: off` means the value 'off', as on the command line.
    No anchors or aliases, no key twice in a mapping, nesting at most
    MAX_CONFIG_DEPTH (see _load)."""
    depth = 0

    def compose_node(self, parent, index):
      event = self.peek_event()
      if isinstance(event, yaml.AliasEvent) or getattr(event, 'anchor', None) is not None:
        raise UsageError(f'--config {path}: line {event.start_mark.line + 1}: YAML anchors '
                         'and aliases (&name, *name) are not accepted; write the value out')
      if self.depth >= MAX_CONFIG_DEPTH and isinstance(
          event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
        raise UsageError(f'--config {path}: line {event.start_mark.line + 1}: {_TOO_DEEP}')
      self.depth += 1
      try:
        return super().compose_node(parent, index)
      finally:
        self.depth -= 1

    def compose_mapping_node(self, anchor):
      node = super().compose_mapping_node(anchor)
      first = {}
      for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode):
          seen = first.setdefault((key.tag, key.value), key)
          if seen is not key:
            raise UsageError(f'--config {path}: key {key.value!r} is given twice (lines '
                             f'{seen.start_mark.line + 1} and {key.start_mark.line + 1})')
      return node

  bool_tag = 'tag:yaml.org,2002:bool'
  Loader.yaml_implicit_resolvers = {
      first: [(tag, regexp) for tag, regexp in resolvers if tag != bool_tag]
      for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
  Loader.add_implicit_resolver(bool_tag, re.compile(r'^(?:true|True|TRUE|false|False|FALSE)$'),
                               list('tTfF'))
  try:
    return yaml.load(text, Loader)  # a SafeLoader: builds plain data only
  except yaml.YAMLError as error:
    problem = getattr(error, 'problem', None) or str(error).splitlines()[0]
    mark = getattr(error, 'problem_mark', None)
    where = f'line {mark.line + 1}: ' if mark is not None else ''
    context, started = getattr(error, 'context', None), getattr(error, 'context_mark', None)
    if context and started is not None and (mark is None or started.line != mark.line):
      problem += f' ({context} started at line {started.line + 1})'
    raise UsageError(f'--config {path} does not parse: {where}{problem}')


def _deeper_than(data, limit: int) -> bool:
  """Whether lists and mappings nest more than `limit` levels (the top one counts)."""
  level = [data]
  for _ in range(limit):
    level = [child for value in level if isinstance(value, (dict, list))
             for child in (value.values() if isinstance(value, dict) else value)]
  return any(isinstance(value, (dict, list)) for value in level)


def tokens(key: str, value, action, where: str) -> list:
  """One --config key or pipeline.api keyword (`where`, for messages) as the
  command-line tokens a user would type."""
  flag = '--' + key

  def wrong(expected):
    raise UsageError(f'{where} takes {expected}, not {value!r}')

  if value is None:  # e.g. a recorded option that was not set
    return []
  if action.nargs == 0:  # --overwrite and other switches
    if not isinstance(value, bool):
      wrong('true or false')
    return [flag] if value else []
  if isinstance(value, dict):
    return [f'{flag}={json.dumps(value)}']
  if isinstance(value, list):
    if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
      wrong('a list of plain values')
    if isinstance(action, argparse._AppendAction) or action.nargs in ('*', '+'):
      return [f'{flag}={v}' for v in value]
    if action.type not in (None, str) or action.choices:
      wrong('one value')
    return [f'{flag}={",".join(str(v) for v in value)}']  # a comma list
  if isinstance(value, bool):
    return [f'{flag}={value}']
  if not isinstance(value, (str, int, float)):
    wrong('a value')
  return [f'{flag}={value}']
