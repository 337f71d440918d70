"""The flag reference of docs/convert.md and docs/validate.md, generated from
the flag table (flags.py) through the parser --help prints: one table per
group of flags, between two markers in each page.

  python -m pipeline.configuration.flag_reference   # rewrites both pages (make docs-flags)

tests/test_docs.py fails when a page differs from what this writes.
"""

from __future__ import annotations

import argparse
import os
import sys

from pipeline.configuration import command_line
from pipeline.configuration.flags import ConvertOptions
from pipeline.configuration.flags import ValidateOptions

BEGIN = ('<!-- flag reference: generated from pipeline/configuration/flags.py by '
         '`make docs-flags`; do not edit by hand -->')
END = '<!-- end of the flag reference -->'
PAGES = {'docs/convert.md': ConvertOptions, 'docs/validate.md': ValidateOptions}


def _value(action: argparse.Action) -> str:
  """What follows the flag: its choices, its metavar, or its type."""
  if action.nargs == 0:
    return ''
  if action.choices:
    return ' ' + '\\|'.join(str(c) for c in action.choices)
  if action.metavar:
    return ' ' + action.metavar
  return ' ' + _TYPE_VALUES.get(getattr(action.type, '__name__', None), action.dest.upper())


# The value a flag of each type takes, as --help would name it but shorter.
_TYPE_VALUES = {'int': 'N', 'positive integer': 'N', 'non-negative integer': 'N',
                'non-negative number': 'X', 'rate (0..1)': 'R'}


def _default(action: argparse.Action) -> str:
  if action.nargs == 0:
    return 'off'
  if action.default is None or action.default == argparse.SUPPRESS:
    return '—'
  if action.default == '':  # `` would show as two backticks, not as empty text
    return "`''`"
  return f'`{action.default}`'


def _cell(text: str) -> str:
  return ' '.join(text.split()).replace('|', '\\|')


def reference(options_cls) -> str:
  """The markdown tables of options_cls's flags, a heading per group."""
  parser = command_line.own_parser(options_cls)
  lines = []
  for group in parser._action_groups:
    actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS
               and '--help' not in a.option_strings]
    if not actions:
      continue
    title = 'general' if group.title in ('options', 'optional arguments') else group.title
    lines += [f'### {title[0].upper()}{title[1:]}', '',
              '| flag | default | meaning |', '| --- | --- | --- |']
    for action in actions:
      flag = action.option_strings[-1]
      lines.append(f'| `{flag}{_value(action)}` | {_default(action)} | '
                   f'{_cell(action.help or "")} |')
    lines.append('')
  return '\n'.join(lines)


def page_with_reference(text: str, options_cls) -> str:
  """The page's text with the part between the markers generated anew."""
  start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
  return text[:start] + '\n\n' + reference(options_cls) + '\n' + text[end:]


def main() -> int:
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  for page, options_cls in PAGES.items():
    path = os.path.join(root, page)
    with open(path, encoding='utf-8') as handle:
      text = handle.read()
    new = page_with_reference(text, options_cls)
    if new != text:
      with open(path, 'w', encoding='utf-8') as handle:
        handle.write(new)
      print(f'{page}: flag reference rewritten')
  return 0


if __name__ == '__main__':
  sys.exit(main())
