"""The child side of ProcessPool: reads (fn, args), writes (status, value).

Runs until its stdin closes. Nothing else may write to stdout.
"""

from __future__ import annotations

import pickle
import sys

from transforms.process_pool import OK
from transforms.process_pool import RAISED
from transforms.process_pool import picklable_error


def serve(requests, replies) -> None:
  while True:
    try:
      fn, args = pickle.load(requests)
    except EOFError:
      return
    try:
      reply = _dumps((OK, fn(*args)))
    except Exception as error:  # pylint: disable=broad-except
      reply = _dumps((RAISED, picklable_error(error)))
    replies.write(reply)
    replies.flush()


def _dumps(reply) -> bytes:
  return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)


if __name__ == '__main__':
  replies = sys.stdout.buffer
  sys.stdout = sys.stderr  # a stray print must not corrupt the replies
  serve(sys.stdin.buffer, replies)
