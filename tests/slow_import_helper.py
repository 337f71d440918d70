"""A module whose import takes 3 s in an image worker process (as Pillow's
and the project's modules take a fraction of a second on a busy machine), and
none in the test itself."""

import os
import time

from transforms.workers.child_process import PARENT_PID_ENV

if os.environ.get(PARENT_PID_ENV):
  time.sleep(3)


def answer(items: list) -> list:
  return [item * 2 for item in items]
