"""convert and validate from Python (a notebook, a script, a test).

  from pipeline import api
  result = api.convert(output_dir='out/', rows=df, height=224, width=224, encoding='jpeg')
  result.num_examples, result.num_rejected, result.splits, result.rejected, result.info
  report = api.validate(input_dir='out/', expected_count=1000)
  report.ok, report.counts, report.problems

Keywords are the command line's flags without their dashes, Beam's options
too (runner=, direct_num_workers=, ...), read by the command line's own
parser: the same defaults, checks and config= files. True/False set a switch
(overwrite=True), a list or tuple stands for a comma list, None for the
default. An unknown keyword is a TypeError naming the closest flag.

Errors are exceptions, never exit codes: UsageError (a ValueError) where the
command line exits 2, ErrorBudgetExceeded (carrying .result) where it exits 3,
and a failed job raises its own exception. A run prints nothing but its
progress, installs no signal handler (Ctrl-C raises KeyboardInterrupt once the
run has cleaned up) and leaves the process as it found it (in_process.py).
"""

from __future__ import annotations

from collections.abc import Mapping
import contextlib
import dataclasses
import json
import math
import os
import sys
from typing import Optional

from pipeline import errors

if sys.flags.optimize >= 2:
  # Beam's modules fail as they are imported (a TypeError from inside
  # apache_beam.io.textio, with its traceback): the reason in one line instead.
  raise ImportError(errors.OPTIMIZED_PYTHON)

from pipeline import convert as convert_command
from pipeline import validate as validate_command
from pipeline.configuration import command_line
from pipeline.configuration import config as opts
from pipeline.configuration import config_file
from pipeline.configuration import configs
from pipeline.configuration.flags import ConvertOptions
from pipeline.configuration.flags import ValidateOptions
from pipeline.configuration.preflight import Rows
from pipeline.runs import in_process
from pipeline.runs import in_process_errors
from pipeline.runs import progress as progress_display
from pipeline.runs import run_temp
from transforms import filesystem
from transforms.core.dataset_info import over_budget_reason
from transforms.core.spec import REJECTED_FILE

# The public names (docs/api.md); the module's other functions are its own
# helpers (tests call some).
__all__ = ('ConvertResult', 'ErrorBudgetExceeded', 'UsageError', 'ValidationReport', 'convert',
           'validate')

# What rows= is called where a manifest's path would be: the source of its
# rejected rows (their line: the row's position, from 1) and the manifest
# dataset_info.json records.
ROWS_SOURCE = '<rows>'
_ROWS_FILE = 'rows.jsonl'


class UsageError(errors.UsageError, ValueError):
  """Bad keywords or unusable input (the command line's exit 2): nothing was written."""


class ErrorBudgetExceeded(Exception):
  """More rows were rejected than max_error_rate allows, or every annotation
  of a detection set (the command line's exit 3); everything is written all
  the same. .result: the ConvertResult."""

  def __init__(self, result: ConvertResult):
    info = result.info
    if info['error_rate'] > info['max_error_rate']:
      why = (f'{info["num_rejected"]} of {info["num_manifest_rows"]} rows rejected '
             f'({info["error_rate"]:.2%}), above max_error_rate {info["max_error_rate"]:.2%}')
    else:
      why = over_budget_reason(info) or 'over its error budget'
    super().__init__(f'{why}: see .result.rejected')
    self.result = result


@dataclasses.dataclass(frozen=True)
class ConvertResult:
  """What a convert wrote. info: its dataset_info.json ({} for a dry run);
  rejected: rejected.jsonl, one dict per rejected row."""
  output_dir: str
  info: dict
  rejected: list

  @property
  def num_examples(self) -> int:
    return self.info.get('num_examples', 0)

  @property
  def num_rejected(self) -> int:
    return self.info.get('num_rejected', 0)

  @property
  def splits(self) -> dict:
    """{split: {num_examples, num_bytes, shards, ...}} as dataset_info.json has them."""
    return self.info.get('splits', {})

  def rejected_frame(self):
    """The rejected rows as a pandas DataFrame (pandas must be installed)."""
    try:
      import pandas
    except ImportError as error:
      raise ImportError('rejected_frame() needs pandas (pip install pandas); '
                        '.rejected holds the same rows as dicts') from error
    return pandas.DataFrame(self.rejected, columns=['source', 'line', 'stage', 'code',
                                                    'reason', 'row'])


@dataclasses.dataclass(frozen=True)
class ValidationReport:
  """What a validate found. report: the JSON report it wrote, at report_path."""
  report: dict
  report_path: str
  strict: bool = False

  @property
  def ok(self) -> bool:
    """Every record checked and sound (with strict=True: no warning either)."""
    return bool(self.report.get('valid')) and not (
        self.strict and self.report.get('num_warnings'))

  @property
  def counts(self) -> dict:
    """{split: examples read}."""
    return {name: split['num_examples'] for name, split in self.report.get('splits', {}).items()}

  @property
  def num_examples(self) -> int:
    return self.report.get('num_examples', 0)

  @property
  def problems(self) -> list:
    """The first problems found (max_problems of them), as dicts."""
    return self.report.get('problems', [])

  @property
  def warnings(self) -> list:
    return self.report.get('warnings', [])


def convert(*, rows=None, progress=None, **keywords) -> ConvertResult:
  """Converts as `img2tfrecord convert` would with these flags.

  rows: instead of manifest= or image_dir=, the manifest's rows themselves: a
  pandas DataFrame or any iterable of dicts of its columns (image, label,
  key, split, extra features, or those image_column= etc. name). They are
  written once to a JSONL file in the run's temp folder, one row at a time,
  and converted from there; relative image paths resolve against the current
  folder. progress: 'auto' (the default: shown in a notebook, as a tqdm bar,
  or in a terminal), 'on', 'off', True or False.
  """
  with in_process.restored_process_state(), run_temp.private_temp_dir() as temp:
    rows_path = None
    if rows is not None:
      given = [name for name in ('manifest', 'image_dir', 'manifest_format') if keywords.get(name)]
      if given:
        raise UsageError(f'give rows or {given[0]}, not both')
      rows_path = keywords['manifest'] = os.path.join(temp, _ROWS_FILE)
    if progress is not None:  # True/False as well as the flag's words
      keywords['progress'] = ('on' if progress else 'off') if isinstance(progress, bool) else (
          progress)
    argv = keyword_argv(keywords, ConvertOptions, 'convert')
    given_rows = Rows(rows_path, *write_rows(rows, rows_path)) if rows_path else None
    with _usage_errors(rows_path):
      config, pipeline_options = opts.parse_convert(
          argv, rows=given_rows, switched_off=config_file.switched_off(keywords))
    if rows_path:
      config = _from_rows(config)
    notebook = progress_display.in_notebook()
    if config.progress == 'auto':  # the command line's auto, and notebooks
      terminal = sys.stderr is not None and sys.stderr.isatty()  # None: started closed
      config = dataclasses.replace(config, progress='on' if notebook or terminal else 'off')
    display = progress_display.BarDisplay if notebook and _has_tqdm() else None
    with _usage_errors(rows_path), in_process_errors.interruptible(), in_process_errors.worker_errors_only():
      info = convert_command.convert(config, pipeline_options, display)
    result = ConvertResult(config.output_dir, info or {},
                           read_rejected(config.output_dir) if info else [])
  if info and info['over_budget']:
    raise ErrorBudgetExceeded(result)
  return result


def validate(**keywords) -> ValidationReport:
  """Validates as `img2tfrecord validate` would with these flags; report.ok
  says whether the dataset holds (the command line's exit 0)."""
  with in_process.restored_process_state(), run_temp.private_temp_dir():
    argv = keyword_argv(keywords, ValidateOptions, 'validate')
    with _usage_errors():
      config, pipeline_options = opts.parse_validate(
          argv, switched_off=config_file.switched_off(keywords))
      with in_process_errors.interruptible(), in_process_errors.worker_errors_only():
        report = validate_command.validate(config, pipeline_options)
  return ValidationReport(report or {}, config.report_path, config.strict)


def keyword_argv(keywords: dict, options_cls, command: str) -> list:
  """Keywords -> the command line's tokens (see the module docstring);
  TypeError for a keyword that is no flag, UsageError for a value a flag
  cannot take."""
  parser = command_line._full_parser(options_cls)
  flags = command_line._flags_of(parser)
  own = [f for f in command_line._flags_of(command_line.own_parser(options_cls))
         if f != '--help']
  argv = []
  for name, value in keywords.items():
    action = flags.get(f'--{name}')
    if action is None or name == 'help':
      hint = errors.did_you_mean(f'--{name}', own, [f for f in flags if f != '--help'])
      hint = hint.replace('--', '')
      raise TypeError(f'{command}() got an unexpected keyword argument {name!r}{hint}')
    value = _plain_value(value)
    with _usage_errors():
      argv += config_file.tokens(name, value, action, f'keyword {name!r}')
  return argv


def _plain_value(value):
  """Paths as text, tuples as lists: what a --config file would hold."""
  if isinstance(value, os.PathLike):
    return os.fspath(value)
  if isinstance(value, (list, tuple)):
    return [_plain_value(v) for v in value]
  return value


def _has_tqdm() -> bool:
  try:
    import tqdm  # noqa: F401
  except ImportError:
    return False
  return True


@contextlib.contextmanager
def _usage_errors(rows_path: Optional[str] = None):
  """The command line's UsageError raised as api.UsageError, the rows' temp
  file named ROWS_SOURCE in its message."""
  try:
    yield
  except UsageError:
    raise
  except errors.UsageError as error:
    message = str(error)
    if rows_path:
      message = message.replace(rows_path, ROWS_SOURCE)
    raise UsageError(message) from error


def _from_rows(config: configs.ConvertConfig) -> configs.ConvertConfig:
  """The config reading rows= from its temp file: rows named ROWS_SOURCE,
  their relative paths resolved against the current folder."""
  rows = dataclasses.replace(config.manifests[0], source_name=ROWS_SOURCE,
                             relative_to=os.getcwd())
  return dataclasses.replace(config, manifests=(rows, *config.manifests[1:]),
                             options={**config.options, 'manifest': ROWS_SOURCE})


def _records(rows):
  """rows= one dict at a time: a DataFrame's rows (by duck typing: pandas is
  not imported), or the iterable's items as they are."""
  if hasattr(rows, 'itertuples') and hasattr(rows, 'columns'):
    columns = [str(column) for column in rows.columns]
    repeated = sorted({column for column in columns if columns.count(column) > 1})
    if repeated:  # dict(zip()) would keep the last silently: a CSV header is refused
      raise UsageError(f"rows= repeats column(s) {repeated}: no copy's value would win; "
                       f'drop or rename the copies')
    for values in rows.itertuples(index=False, name=None):
      yield dict(zip(columns, values))
  else:
    try:  # a path (a str, a pathlib.Path) or a number: no rows
      items = None if isinstance(rows, (str, bytes, Mapping)) else iter(rows)
    except TypeError:
      items = None
    if items is None:
      raise UsageError(f'rows takes a DataFrame or an iterable of dicts, not a '
                       f'{type(rows).__name__}')
    yield from items


def _missing(value) -> bool:
  """None, NaN (pandas' empty cell of a number column), pandas' NA and NaT."""
  if value is None or type(value).__name__ in ('NAType', 'NaTType'):
    return True
  kind = getattr(getattr(value, 'dtype', None), 'kind', None)  # numpy scalars
  if isinstance(value, float) or (kind == 'f' and getattr(value, 'ndim', None) == 0):
    return math.isnan(value)
  return False


def _json_value(value):
  """json.dumps's default=: numpy values as plain ones."""
  if hasattr(value, 'tolist'):  # numpy scalars and arrays
    return value.tolist()
  if isinstance(value, os.PathLike):
    return os.fspath(value)
  raise TypeError(f'a {type(value).__name__} is not a manifest value')


def _unwritable(fields: dict) -> str:
  """The first column of a row json.dumps refused whose value it refuses."""
  for name, value in fields.items():
    try:
      json.dumps(value, allow_nan=False, default=_json_value)
    except (TypeError, ValueError):
      return name
  return ''


def write_rows(rows, path: str) -> tuple:
  """rows= -> a JSONL manifest at `path`, in one pass; -> (the number of rows,
  the columns any row has, in the order first seen). A missing value (None,
  NaN, pandas' NA) is written as null: an empty cell."""
  count, columns = 0, {}
  with open(path, 'w', encoding='utf-8') as handle:
    for count, row in enumerate(_records(rows), start=1):
      if not isinstance(row, Mapping):
        raise UsageError(f'rows: row {count} is a {type(row).__name__}, not a dict of '
                         f'column values')
      fields = {str(k): None if _missing(v) else v for k, v in row.items()}
      if len(fields) < len(row):  # 1 and '1': one column, whose value would be the last's
        named = sorted(k for k in fields if sum(str(n) == k for n in row) > 1)
        raise UsageError(f'rows: row {count} names column {named[0]!r} twice '
                         f'({", ".join(repr(n) for n in row if str(n) == named[0])})')
      columns.update(dict.fromkeys(fields))
      try:
        text = json.dumps(fields, ensure_ascii=False, allow_nan=False, default=_json_value)
      except (TypeError, ValueError) as error:
        raise UsageError(f'rows: row {count} cannot be written as a manifest row: {error} '
                         f'(column {_unwritable(fields)!r})') from None
      handle.write(text + '\n')
  return count, tuple(columns)


def read_rejected(output_dir: str) -> list:
  """OUT/rejected.jsonl as dicts ([] when there is none: an object store gets
  no object when nothing was rejected)."""
  path = filesystem.join(output_dir, REJECTED_FILE)
  files = filesystem.FileAccess()
  if not files.exists(path):
    return []
  return [json.loads(line) for line in files.read_text(path).splitlines() if line.strip()]
