"""One parse of a command line (and its --config file) into our options and Beam's.

Every flag is parsed once, by one parser that knows our options and every
options class Beam ships: a flag nobody knows is a usage error (with a "did you
mean"), never silently dropped. Flags on the command line override the same
flags in a --config file. Our options come back as a namespace for the
command's typed config; Beam's as PipelineOptions with the local defaults
(runners.local_defaults) applied.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
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

from pipeline import errors
from pipeline.configuration import config_file
from pipeline.configuration.config_file import CONFIG_FLAG
from pipeline.configuration.locations import check_inputs_given_once
from pipeline.configuration.locations import check_location
from pipeline.configuration.locations import check_locations
from pipeline.configuration.locations import check_reachable
from pipeline.configuration.locations import check_reachable_location
from pipeline.engines import runner_flags
from pipeline.engines import runners
from pipeline.errors import UsageError
from transforms.core import redact

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


@dataclasses.dataclass(frozen=True)
class Parsed:
  """A parsed command line: our options, Beam's, and what the run records."""
  args: argparse.Namespace  # our options, defaults filled in
  pipeline_options: PipelineOptions  # Beam's, local defaults applied
  effective: dict  # every option in effect, by flag name (for dataset_info.json)
  config_file: Optional[str] = None
  given: frozenset = frozenset()  # dests of our options given (command line or --config)
  from_config: frozenset = frozenset()  # those of them the --config file gave, not the line


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


class _UsageParser(errors.UsageParser, _BeamArgumentParser):
  """errors.UsageParser that also takes Beam's value-provider arguments (Beam's
  options classes declare some)."""


class _OneConfigFile(argparse.Action):
  """--config given once: a second one was taken and the first file ignored
  whole (`--config base.yaml --config nightly.yaml` ran without base.yaml's
  options, exit 0), where a user may expect them layered."""

  def __call__(self, parser, namespace, value, option_string=None):
    first = getattr(namespace, self.dest, None)
    if first is not None:
      raise UsageError(f'{CONFIG_FLAG} is given twice ({redact.shown_url(first)}, then '
                       f'{redact.shown_url(value)}): only one file is read; merge them into '
                       'one (flags on the command line override it)')
    setattr(namespace, self.dest, value)


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
  """A parser of our options only (--help, defaults, generated docs); its usage
  line names the console script's subcommand (options_cls.COMMAND)."""
  parser = _UsageParser(prog=errors.command_prog(options_cls.COMMAND), allow_abbrev=False,
                        description=description,
                        epilog='Any Beam pipeline option is accepted too (--runner, '
                        '--direct_num_workers, --temp_location, ...).')
  parser.add_argument(CONFIG_FLAG, metavar='FILE', action=_OneConfigFile,
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
  """Parses argv: {dest: value} of the flags it holds; UsageError otherwise.
  A long flag given one dash (-height) is reported before parsing: argparse
  read it as -h with an argument (`argument -h/--help: ignored explicit
  argument 'eight'`)."""
  flags = (own_flags, list(_flags_of(parser)))
  for arg in itertools.takewhile(lambda a: a != '--', argv):
    name = arg.split('=', 1)[0]
    if name not in parser._option_string_actions and errors.one_dash_hint(name, *flags):
      raise UsageError(f'unrecognized argument {arg!r}{errors.one_dash_hint(name, *flags)}')
  namespace, unknown = parser.parse_known_args(argv, argparse.Namespace())
  if unknown:
    name = unknown[0].split('=', 1)[0]
    hint = errors.did_you_mean(name, *flags) if name.startswith('--') else ''
    raise UsageError(f'unrecognized argument {unknown[0]!r}{hint}')
  return vars(namespace)


def parse(argv: list, options_cls, description: str, switched_off=()) -> Parsed:
  """Command line (+ --config FILE) -> Parsed; UsageError names the first problem.

  `--help` prints our options and exits 0. switched_off: the flags of switches
  pipeline.api was given False, which no token says: left out, as on the line,
  over a --config file's `true`.
  """
  argv = list(argv)
  own = own_parser(options_cls, description)
  if any(arg in ('-h', '--help') for arg in argv):
    own.print_help()
    raise SystemExit(errors.EXIT_OK)
  own_dests = {a.dest for a in own._actions} - {'help', 'config'}
  own_flags = [s for s in _flags_of(own) if s not in ('--help', CONFIG_FLAG)]
  parser = _full_parser(options_cls)
  check_inputs_given_once(argv, getattr(options_cls, 'INPUTS', ()))
  given = _given(parser, argv, own_flags)
  flags = _flags_of(parser)
  given.update({flags[f].dest: not flags[f].const for f in switched_off
                if f in flags and isinstance(flags[f].const, bool)})
  config_file = given.pop('config', None)
  on_line = set(given)
  check_location(CONFIG_FLAG, config_file)
  if config_file:
    # The file may be on s3:// or gs://: the command line's Beam options
    # (endpoint, keys, project) reach the filesystems before it is read.
    FileSystems.set_options(PipelineOptions([], **runners.local_defaults(
        {k: v for k, v in given.items() if k not in own_dests})))
    check_reachable_location(CONFIG_FLAG, config_file)  # Beam's S3 read retries for minutes
    given = {**read_config_file(config_file, parser, own_flags), **given}
  check_locations(given, options_cls.LOCATIONS)
  args = own.parse_args([])  # our defaults, typed as argparse types them
  for dest in own_dests & set(given):
    setattr(args, dest, given[dest])
  delattr(args, 'config')
  beam = runners.local_defaults({k: v for k, v in given.items() if k not in own_dests})
  runner_flags.check_runner(beam.get('runner'))
  runner_flags.check_local_workers(beam)
  runner_flags.check_type_checks(beam)
  pipeline_options = ViewCachingOptions([], **beam)
  # The launcher reads the manifest header, lists the output folder and reads
  # dataset_info.json before any Pipeline exists (which is what normally hands
  # the options to the filesystems): s3:// needs its endpoint and keys here.
  FileSystems.set_options(pipeline_options)
  check_reachable(given, options_cls.LOCATIONS)
  effective = dict(sorted({**_by_flag_name(parser, beam, secrets=True),
                           **_by_flag_name(own, vars(args))}.items()))
  return Parsed(args, pipeline_options, effective, config_file, frozenset(own_dests & set(given)),
                frozenset(own_dests & set(given) - on_line))


def _by_flag_name(parser, values: dict, secrets: bool = False) -> dict:
  """{dest: value} -> {flag name without dashes: JSON-safe value}; with
  `secrets`, the credentials in them replaced (transforms/core/redact.py). Beam's
  options carry credentials; ours are paths and settings."""
  names, inverted = {}, set()
  for flag, action in _flags_of(parser).items():
    if action.dest not in names and action.const is False and action.nargs == 0:
      inverted.add(action.dest)  # named by a store_false switch: true when it was given
    names.setdefault(action.dest, flag[2:])
  out = {}
  for dest, value in values.items():
    name = names.get(dest, dest)
    if dest in inverted and isinstance(value, bool):
      value = not value
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


# --- --config FILE (read by config_file.py) -------------------------------------


def read_config_file(path: str, parser, own_flags: list) -> dict:
  """--config FILE -> {dest: value} of the options it holds (not yet merged)."""
  data = config_file.read_config(path)
  flags = _flags_of(parser)
  given = {}
  for key, value in data.items():
    action = flags.get(f'--{key}') if isinstance(key, str) else None
    if action is not None and f'--{key}' in ('--help', CONFIG_FLAG):  # no "did you mean" itself
      raise UsageError(f'--config {path}: key {key!r} is a command-line flag only, not an '
                       'option a config file sets')
    if action is None:
      hint = errors.did_you_mean(f'--{key}', own_flags, list(flags)).replace('--', '')
      raise UsageError(f'--config {path}: unknown key {key!r}{hint}')
    try:
      given.update(_given(parser, config_file.tokens(key, value, action,
                                                     f'--config {path}: key {key!r}'),
                          own_flags))
    except UsageError as error:
      message = re.sub(r'^argument [^:]+: ', '', str(error))
      if message.startswith(f'--config {path}'):
        raise
      raise UsageError(f'--config {path}: key {key!r}: {message}')
  return given
