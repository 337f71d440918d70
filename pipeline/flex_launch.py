"""Entry point of the Flex Template image (FLEX_TEMPLATE_PYTHON_PY_FILE).

Dataflow's launcher passes every template parameter as --name=value; convert's
switches (--overwrite) take no value, so `--overwrite=true` becomes
`--overwrite` and `--overwrite=false` is dropped. Everything else goes to
convert unchanged, Beam's options included.
"""

import os
import sys

# Run as a script (the launcher does), sys.path[0] is pipeline/ itself: the
# project root goes first, so that `pipeline` imports from a checkout too.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline import convert
from pipeline import errors
from pipeline import flex_template
from pipeline.runs import exits


def convert_argv(argv: list) -> list:
  """Template arguments -> convert's command line; UsageError for a switch
  whose value is not true or false."""
  switches = {a.option_strings[0] for a in flex_template.convert_flags()
              if flex_template.is_switch(a)}
  result = []
  for arg in argv:
    flag, sep, value = arg.partition('=')
    if flag in switches and sep:
      if value.lower() not in (flex_template.TRUE, flex_template.FALSE):
        raise errors.UsageError(f'{flag}={value}: give {flex_template.TRUE} or '
                                f'{flex_template.FALSE}')
      if value.lower() == flex_template.TRUE:
        result.append(flag)
    else:
      result.append(arg)
  return result


def run(argv: list) -> int:
  return convert.run(convert_argv(argv))


if __name__ == '__main__':
  exits.exit_with(lambda: exits.main_with_exit_codes(run), fast=True)
