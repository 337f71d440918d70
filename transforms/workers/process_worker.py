"""The child side of ProcessPool: reads (fn, args), writes (status, value).

Runs until its stdin closes. Its replies go to the stdout it was started
with; everything else that writes to stdout (Python code, C libraries, a
program Pillow runs) lands on stderr, so it cannot garble a reply.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import BinaryIO

from transforms.workers.process_pool import OK
from transforms.workers.process_pool import RAISED
from transforms.workers.process_pool import READY
from transforms.workers.process_pool import picklable_error


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
  """Answers every (fn, args) request with (OK, result) or (RAISED, error)."""
  _send(replies, READY)
  while True:
    try:
      fn, args = pickle.load(requests)
    except EOFError:
      return
    try:
      reply = _dumps((OK, fn(*args)))
    except Exception as error:
      reply = _dumps((RAISED, picklable_error(error)))
    replies.write(reply)
    replies.flush()


def _send(replies: BinaryIO, value) -> None:
  replies.write(_dumps(value))
  replies.flush()


def _dumps(reply) -> bytes:
  return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)


def main() -> None:
  replies = os.fdopen(os.dup(1), 'wb')
  os.dup2(2, 1)  # from here on, anything printed goes to stderr
  sys.stdout = sys.stderr
  # Ctrl-C is for the parent, which stops its children by closing their input.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  serve(sys.stdin.buffer, replies)
  # Every reply is flushed; the interpreter's teardown (Pillow's modules)
  # only delayed the parent's shutdown of the pool.
  sys.stderr.flush()
  os._exit(0)


if __name__ == '__main__':
  main()
