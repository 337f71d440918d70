"""An object store that stopped answering, known by its type without Beam.

transforms/s3_client.py raises StoreNotAnswering, a Beam PermanentException
(Beam's retries let it through) and a NotAnswering. The command's exit code
(pipeline/runs/exits.py: one line, exit 4) and the clean-up's note
(pipeline/runs/output_dir.py) must know it without importing Beam: both
matched the class's name, which a subclass does not have and any other
library's class of that name has. They ask line_of here instead.
"""

from __future__ import annotations

from typing import Optional

# The class's name as a step's error re-raised by Beam shows it, in text only
# ("transforms.s3_client.StoreNotAnswering: LINE [while running 'Read']").
NAME = 'StoreNotAnswering'


class NotAnswering(Exception):
  """The mark of an object store that gave no answer; its text is one line."""


def line_of(error: Optional[BaseException]) -> str:
  """The line of the NotAnswering that `error` is or was raised from (or
  whose text it holds: Beam re-raises a step's error as a RuntimeError naming
  it); '' when it is none."""
  seen = 0
  while error is not None and seen < 20:
    if isinstance(error, NotAnswering):
      return str(error)
    text = str(error)
    if f'{NAME}: ' in text:
      line = text.split(f'{NAME}: ', 1)[1].splitlines()[0]
      return line.split(' [while running', 1)[0].strip()  # Beam's note of the step
    error, seen = error.__cause__ or (
        None if error.__suppress_context__ else error.__context__), seen + 1
  return ''
