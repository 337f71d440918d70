"""validate whose report step, once the report is renamed into place, waits
on the FIFO $I2T_WAIT_FIFO names: holds a run between the report being
written and its job's end (the window a signal found on Flink, measured:
about 1 s) for tests/test_interrupts.py."""

import sys
import types

from pipeline import validate
from pipeline.beam_runtime import startup
from pipeline.runs import exits
from tests.fifo_wait import wait_on_fifo
from transforms import filesystem
from transforms import validation_report


def write_then_wait(path: str, text: str, temp=None) -> None:
  filesystem.write_text(path, text, temp)
  wait_on_fifo()


if __name__ == '__main__':
  startup.end()
  # The DirectRunner runs the report step in this process: only its writes wait.
  validation_report.filesystem = types.SimpleNamespace(write_text=write_then_wait)
  exits.exit_with(lambda: validate.main(sys.argv[1:]), fast=True)
