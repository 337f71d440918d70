"""Entry point of the Flex Template image (FLEX_TEMPLATE_PYTHON_PY_FILE).

Dataflow's launcher passes every template parameter as --name=value; convert's
switches (--overwrite) take no value, so `--overwrite=true` becomes
`--overwrite` and `--overwrite=false` is dropped. Everything else goes to
convert unchanged, Beam's options included. It runs as `convert` does:
its private temp folder, SIGINT, SIGTERM and SIGHUP cleaning up before the end.
"""

import os
import sys

# Run as a script (the launcher does), sys.path[0] is pipeline/ itself: the
# project root goes first, so that `pipeline` imports from a checkout too.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline import errors

if __name__ == '__main__':
  errors.refuse_optimized_python()  # before Beam, which fails as it is imported under -OO

from pipeline import convert
from pipeline import flex_template
from pipeline.runs import exits
from pipeline.runs import interrupts


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


def main(argv=None) -> int:
  """convert's command line around run: its private temp folder, and SIGINT
  and SIGTERM (a cancelled launch) cleaning up as convert's do. Without them
  a SIGTERM left OUT's lock, its beam-temp folder and the temp files."""
  return exits.run_command(run, sys.argv[1:] if argv is None else argv,
                           *interrupts.CONVERT_LINES)


if __name__ == '__main__':
  interrupts.before_run(interrupts.CONVERT_LINES[0])
  exits.exit_with(main, fast=True)
