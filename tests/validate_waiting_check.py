"""validate whose record check first waits on the FIFO $I2T_WAIT_FIFO names:
holds a run mid-check for tests/test_interrupts.py. (A shard that is a FIFO
held it before; validate now reports such a shard unread.)"""

import functools
import sys

from pipeline import validate
from pipeline.beam_runtime import startup
from pipeline.runs import exits
from tests.fifo_wait import wait_on_fifo
from transforms.core import validation


def waiting_check(records: list, expected) -> list:
  wait_on_fifo()
  return validation.check_records(records, expected)


if __name__ == '__main__':
  startup.end()
  exits.exit_with(functools.partial(validate.main, sys.argv[1:], check_records=waiting_check),
                  fast=True)
