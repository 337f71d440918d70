"""One parse of a command line (and its --config file) into our options and Beam's.

Every flag is parsed once, by one parser that knows our options and every
options class Beam ships: a flag nobody knows is a usage error (with a "did you
mean"), never silently dropped. Flags on the command line override the same
flags in a --config file. Our options come back as a namespace for the
command's typed config; Beam's as PipelineOptions with the local defaults
(engines.local_defaults) applied.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import types
import typing
from typing import Optional

import apache_beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import _BeamArgumentParser

from pipeline import cli
from pipeline import engines
from pipeline import redact
from pipeline.cli import UsageError
from transforms import filesystem

CONFIG_FLAG = '--config'
# Options classes Beam ships outside apache_beam.options.pipeline_options, in
# modules a launch does not import: DaskRunner's needs dask (not installed),
# render's pulls in Beam's interactive stack (seconds). Their flags are read
# from the source (_outlying_option_classes). tests/test_command_line.py checks
# this list against the installed Beam, so an upgrade cannot leave one out.
OUTLYING_BEAM_OPTION_MODULES = (
    'apache_beam.runners.dask.dask_runner',
    'apache_beam.runners.render',
    'apache_beam.yaml.options',
)
# Lists and mappings nested deeper than this in a --config file are refused: an
# option's value is at most a mapping of lists (--beam_services, --labels).
MAX_CONFIG_DEPTH = 32
_TOO_DEEP = f'nested deeper than {MAX_CONFIG_DEPTH} levels'


@dataclasses.dataclass(frozen=True)
class Parsed:
  """A parsed command line: our options, Beam's, and what the run records."""
  args: argparse.Namespace  # our options, defaults filled in
  pipeline_options: PipelineOptions  # Beam's, local defaults applied
  effective: dict  # every option in effect, by flag name (for dataset_info.json)
  config_file: Optional[str] = None
  given: frozenset = frozenset()  # dests of our options given (command line or --config)


class ViewCachingOptions(PipelineOptions):
  """PipelineOptions whose view_as(cls) parses each view once.

  Beam calls view_as a few times per transform while building and running a
  pipeline (~330 calls for a convert), and each call builds an argparse parser
  of that class's flags and parses the flags again: 0.3 s of a 10-image
  convert's start-up (measured on 2 cores). A cached view behaves as a new
  one: views share this object's option values, and the fill-in of unset
  options that view_as does is repeated on every call. Copies and pickles
  leave the cache out.
  """

  def view_as(self, cls):
    views = self.__dict__.setdefault('_views', {})
    view = views.get(cls)
    if view is None or view._all_options is not self._all_options:
      view = views[cls] = super().view_as(cls)
      return view
    for name in view._visible_option_list():
      if name not in self._all_options:
        self._all_options[name] = getattr(view._visible_options, name)
    return view

  def __getstate__(self):
    state = dict(super().__getstate__())
    state.pop('_views', None)
    return state


class _UsageParser(_BeamArgumentParser):

  def error(self, message):
    raise UsageError(message)


class _StubOptions:
  """Base for options classes read from source: collects flags, registers nothing."""

  @classmethod
  def _add_argparse_args(cls, parser):
    pass


_OPTIONS_CLASS = re.compile(r'^class (\w+)\((?:[\w.]+\.)?PipelineOptions\):', re.MULTILINE)
_TOP_LEVEL = re.compile(r'^(?=[^\s#])', re.MULTILINE)


def _option_classes_in(module: str) -> list:
  """The PipelineOptions subclasses `module` defines, built from their source
  alone (only their argparse definitions are used): the module's imports are
  never run, and only the class statements are compiled."""
  # By path: finding a module's spec imports its packages (apache_beam.yaml's
  # needs pandas).
  path = os.path.join(os.path.dirname(apache_beam.__file__), *module.split('.')[1:]) + '.py'
  with open(path, encoding='utf-8') as handle:
    source = handle.read()
  found = []
  for match in _OPTIONS_CLASS.finditer(source):
    following = _TOP_LEVEL.search(source, match.end())
    statement = source[match.start():following.start() if following else len(source)]
    namespace = {'__name__': module, 'argparse': argparse, 'typing': typing, 't': typing,
                 'PipelineOptions': _StubOptions,
                 'pipeline_options': types.SimpleNamespace(PipelineOptions=_StubOptions)}
    exec(compile(statement, path, 'exec'), namespace)
    found.append(namespace[match.group(1)])
  return found


def beam_option_classes() -> list:
  """Every options class Beam ships (one per name), imported or not."""
  classes = {str(cls): cls for cls in PipelineOptions.__subclasses__()
             if cls.__module__.startswith('apache_beam')}
  for module in OUTLYING_BEAM_OPTION_MODULES:
    if module not in sys.modules:  # imported: its classes are subclasses above
      for cls in _option_classes_in(module):
        classes.setdefault(f"<class '{module}.{cls.__name__}'>", cls)
  return list(classes.values())


def own_parser(options_cls, description: str = '') -> argparse.ArgumentParser:
  """A parser of our options only (--help, defaults, generated docs)."""
  parser = _UsageParser(allow_abbrev=False, description=description,
                        epilog='Any Beam pipeline option is accepted too (--runner, '
                        '--direct_num_workers, --temp_location, ...).')
  parser.add_argument(CONFIG_FLAG, metavar='FILE',
                      help='YAML or JSON file of options (local, gs:// or s3://), '
                      'keyed by flag name without dashes; command-line flags win')
  options_cls._add_argparse_args(parser)
  return parser


def _full_parser(options_cls) -> argparse.ArgumentParser:
  """Our options and every Beam options class; no defaults: a parse returns
  exactly what was given."""
  parser = own_parser(options_cls)
  for cls in beam_option_classes():
    cls._add_argparse_args(parser)
  for action in parser._actions:
    action.default = argparse.SUPPRESS
  return parser


def _flags_of(parser) -> dict:
  """--flag -> its argparse action."""
  return {s: a for s, a in parser._option_string_actions.items()
          if s.startswith('--')}


def _given(parser, argv: list, own_flags: list) -> dict:
  """Parses argv: {dest: value} of the flags it holds; UsageError otherwise."""
  namespace, unknown = parser.parse_known_args(argv, argparse.Namespace())
  if unknown:
    name = unknown[0].split('=', 1)[0]
    hint = cli.did_you_mean(name, own_flags, list(_flags_of(parser))) if name.startswith(
        '--') else ''
    raise UsageError(f'unrecognized argument {unknown[0]!r}{hint}')
  return vars(namespace)


def parse(argv: list, options_cls, description: str) -> Parsed:
  """Command line (+ --config FILE) -> Parsed; UsageError names the first problem.

  `--help` prints our options and exits 0.
  """
  argv = list(argv)
  own = own_parser(options_cls, description)
  if any(arg in ('-h', '--help') for arg in argv):
    own.print_help()
    raise SystemExit(cli.EXIT_OK)
  own_dests = {a.dest for a in own._actions} - {'help', 'config'}
  own_flags = [s for s in _flags_of(own) if s not in ('--help', CONFIG_FLAG)]
  parser = _full_parser(options_cls)
  given = _given(parser, argv, own_flags)
  config_file = given.pop('config', None)
  if config_file:
    # The file may be on s3:// or gs://: the command line's Beam options
    # (endpoint, keys, project) reach the filesystems before it is read.
    FileSystems.set_options(PipelineOptions([], **engines.local_defaults(
        {k: v for k, v in given.items() if k not in own_dests})))
    given = {**read_config_file(config_file, parser, own_flags), **given}
  args = own.parse_args([])  # our defaults, typed as argparse types them
  for dest in own_dests & set(given):
    setattr(args, dest, given[dest])
  delattr(args, 'config')
  beam = engines.local_defaults({k: v for k, v in given.items() if k not in own_dests})
  engines.check_runner(beam.get('runner'))
  pipeline_options = ViewCachingOptions([], **beam)
  # The launcher reads the manifest header, lists the output folder and reads
  # dataset_info.json before any Pipeline exists (which is what normally hands
  # the options to the filesystems): s3:// needs its endpoint and keys here.
  FileSystems.set_options(pipeline_options)
  effective = dict(sorted({**_by_flag_name(parser, beam, secrets=True),
                           **_by_flag_name(own, vars(args))}.items()))
  return Parsed(args, pipeline_options, effective, config_file, frozenset(own_dests & set(given)))


def _by_flag_name(parser, values: dict, secrets: bool = False) -> dict:
  """{dest: value} -> {flag name without dashes: JSON-safe value}; with
  `secrets`, the credentials in them replaced (pipeline/redact.py). Beam's
  options carry credentials; ours are paths and settings."""
  names = {}
  for flag, action in _flags_of(parser).items():
    names.setdefault(action.dest, flag[2:])
  out = {}
  for dest, value in values.items():
    name = names.get(dest, dest)
    out[name] = redact.redact_option(name, _json_safe(value)) if secrets else _json_safe(value)
  return out


def _json_safe(value):
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  if isinstance(value, (list, tuple)):
    return [_json_safe(v) for v in value]
  if isinstance(value, dict):
    return {str(k): _json_safe(v) for k, v in value.items()}
  return str(value)


# --- --config FILE ---------------------------------------------------------------


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


def _tokens(key: str, value, action, where: str) -> list:
  """One --config key or pipeline.api keyword (`where`) as the tokens a user would type."""
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


def read_config_file(path: str, parser, own_flags: list) -> dict:
  """--config FILE -> {dest: value} of the options it holds (not yet merged)."""
  try:
    text = filesystem.read_text(path)
  except filesystem.read_errors() as error:
    raise UsageError(f'--config {path} cannot be read: {type(error).__name__}: {error}')
  except UnicodeDecodeError as error:
    raise UsageError(f'--config {path} is not UTF-8 text: {error}')
  data = _load(text, path)
  if data is None:
    raise UsageError(f'--config {path} is empty: expected one "name: value" per option')
  if not isinstance(data, dict):
    kind = 'a list' if isinstance(data, list) else type(data).__name__
    raise UsageError(f'--config {path} must hold a mapping of option names to values, '
                     f'not {kind}')
  flags = _flags_of(parser)
  given = {}
  for key, value in data.items():
    action = flags.get(f'--{key}') if isinstance(key, str) else None
    if action is None or f'--{key}' in ('--help', CONFIG_FLAG):
      hint = cli.did_you_mean(f'--{key}', own_flags, list(flags)).replace('--', '')
      raise UsageError(f'--config {path}: unknown key {key!r}{hint}')
    try:
      tokens = _tokens(key, value, action, f'--config {path}: key {key!r}')
      given.update(_given(parser, tokens, own_flags))
    except UsageError as error:
      message = re.sub(r'^argument [^:]+: ', '', str(error))
      if message.startswith(f'--config {path}'):
        raise
      raise UsageError(f'--config {path}: key {key!r}: {message}')
  return given
