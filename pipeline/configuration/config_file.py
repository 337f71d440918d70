"""--config FILE: a YAML or JSON file of options, keyed by flag name without
dashes, read on the launcher into the command-line tokens a user would type
(command_line.py parses them with the command line's own parser)."""

from __future__ import annotations

import argparse
import json

from pipeline.configuration.flag_files import read_flag_text
from pipeline.errors import UsageError
from transforms.core import plain_yaml

CONFIG_FLAG = '--config'
# Lists and mappings nested deeper than this in a --config file are refused: an
# option's value is at most a mapping of lists (--beam_services, --labels).
MAX_CONFIG_DEPTH = plain_yaml.MAX_DEPTH
_TOO_DEEP = plain_yaml.TOO_DEEP
# The most bytes a --config file may hold: it names options, one a line; a
# real one is a few KB (its longest values are lists of --beam_services or
# --labels). Read whole and parsed on the launcher, a larger file is no config.
MAX_CONFIG_BYTES = 1 << 20


def read_config(path: str) -> dict:
  """--config FILE -> its mapping of option names to values; UsageError if it
  cannot be read, does not parse, or holds no mapping."""
  data = _load(read_flag_text(CONFIG_FLAG, path, MAX_CONFIG_BYTES), path)
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
  file is held to that: a key given twice is an error (never "last wins") and
  nesting stops at MAX_CONFIG_DEPTH (deeper blew Python's recursion limit: a
  traceback); a YAML file is read by transforms.core.plain_yaml, which also
  refuses anchors and aliases (a value is passed on as JSON, which writes out
  every reference).
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
  try:
    return plain_yaml.load(text, f'--config {path}')
  except plain_yaml.PlainYamlError as error:
    raise UsageError(str(error)) from None


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


def switched_off(keywords: dict) -> tuple:
  """pipeline.api's keywords given False, as flags: no token stands for a
  switch left out, and command_line.parse must apply them over a --config
  file's `true` (keywords override the file)."""
  return tuple(f'--{name}' for name, value in keywords.items() if value is False)
