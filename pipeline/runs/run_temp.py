"""One private temp folder per command line run, removed when the run ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile

_PREFIX = 'img2tfrecord-run-'


@contextlib.contextmanager
def private_temp_dir():
  """Points every temp file of this run, ours and Beam's, into one fresh folder
  under the system temp dir, and removes that folder on success and failure.

  Why not clean up after each maker: Beam's runners call tempfile.mkdtemp()
  and never remove the result (e.g. its environments' dependency staging, a
  job server's beam-temp* root, the stager's beam-requirements-cache), and so
  can any runner or filesystem we do not control. Child processes inherit the
  folder through TMPDIR. Both settings are restored afterwards (tests call
  main() in-process).
  """
  # Read before mkdtemp, which caches the system's folder in tempfile.tempdir.
  previous_tempdir, previous_env = tempfile.tempdir, os.environ.get('TMPDIR')
  directory = tempfile.mkdtemp(prefix=_PREFIX)
  tempfile.tempdir = directory
  os.environ['TMPDIR'] = directory
  try:
    yield directory
  finally:
    tempfile.tempdir = previous_tempdir
    if previous_env is None:
      os.environ.pop('TMPDIR', None)
    else:
      os.environ['TMPDIR'] = previous_env
    try:
      shutil.rmtree(directory)
    except OSError as error:  # e.g. a child still writing: say so, the run stands
      print(f'note: could not remove the temp folder {directory}: {error}', file=sys.stderr)
