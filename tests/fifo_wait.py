"""What the FIFO-held runs of tests/test_interrupts.py wait in."""

import os
import select

# How often the wait comes back to Python: a signal sent to the process may
# be taken by any of its threads, and Python runs its handler in the main
# thread only when that thread next runs Python. A read() blocked on a FIFO
# never came back: 1 run in 2 to 5 of validate held mid-check, under load, never
# ended after SIGINT (the kernel gave the signal to one of Beam's threads).
POLL_S = 0.05


def wait_on_fifo() -> None:
  """Waits for a writer to open the FIFO $I2T_WAIT_FIFO names, then for a
  byte from it, coming back to Python every POLL_S so that a signal's
  handler runs in this (the main) thread."""
  with open(os.environ['I2T_WAIT_FIFO'], 'rb') as fifo:  # returns once a writer opens it
    while not select.select([fifo], [], [], POLL_S)[0]:
      pass
    fifo.read(1)
