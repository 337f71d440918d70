"""Sorting more entries than memory should hold: runs sorted in memory,
spilled to temp files beyond a size, then merged. rejected.jsonl's order
(rejects.sorted_lines) and validate's look for rows with two lines of it
(rejected_rows.repeated_rows) both sort one entry per line of a file that
may hold millions."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator
import heapq
import os
import pickle
import tempfile


def sorted_entries(entries: Iterable[tuple], run_len: int,
                   prefix: str = 'sorted-') -> Iterator[tuple]:
  """`entries` (tuples of comparable values) in sorted order. At most
  `run_len` are held in memory: each full run is sorted and written to a
  file of a temp folder (`prefix`...), removed once the generator is done or
  closed; the runs and the last one, in memory, are merged."""
  run, spilled = [], []
  with tempfile.TemporaryDirectory(prefix=prefix) as folder:
    for entry in entries:
      run.append(entry)
      if len(run) >= run_len:
        spilled.append(_spill(sorted(run), os.path.join(folder, f'run-{len(spilled)}')))
        run = []
    yield from heapq.merge(*map(_read_run, spilled), sorted(run))


# Entries pickled together on a run's file, and held per run while merging:
# one pickle.dump and load per entry cost 1.35 s a million (3 fields), one per
# chunk of 1024 0.28 s (256: 0.30 s, 4096: 0.32 s).
SPILL_CHUNK = 1024


def _spill(run: list, path: str) -> str:
  with open(path, 'wb') as handle:
    for start in range(0, len(run), SPILL_CHUNK):
      pickle.dump(run[start:start + SPILL_CHUNK], handle, protocol=pickle.HIGHEST_PROTOCOL)
  return path


def _read_run(path: str) -> Iterator[tuple]:
  with open(path, 'rb') as handle:
    while True:
      try:
        chunk = pickle.load(handle)
      except EOFError:
        return
      yield from chunk
