"""A command line run reads file names as UTF-8, whatever the locale.

Python decodes file names, argv and the environment in the locale's
encoding. Under a locale that is not UTF-8 (en_US.ISO-8859-1 on an old
server or CI image, or LC_ALL=C with PYTHONUTF8=0) that changed the dataset:
the --image_dir folder `café/` became the class 'cafÃ©' and a file named in
bytes that are not UTF-8 a row instead of a manifest/bad_encoding rejection
(Latin-1 decodes every byte), a UTF-8 manifest's `café.jpg` was read/
missing_file (opened as the Latin-1 bytes b'caf\\xe9.jpg'), ASCII's decoding
rejected every non-ASCII name. Python's UTF-8 mode (PEP 540) is the
locale-free reading, and it can only be chosen as the interpreter starts: so
such a run starts itself again in it, once, before it reads anything.
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Optional

# PYTHONUTF8 for the processes the run starts (image and check workers, Beam's
# SDK workers: `sys.executable -m ...`), -X utf8 for this one (PYTHONUTF8 is
# ignored under -E or -I).
ENV = 'PYTHONUTF8'
# The C library's locale too: UTF-8 mode leaves LC_CTYPE as it was, and under
# tr_TR.ISO-8859-9 C's toupper('i') is 0xDD ('İ'), so protobuf's JSON parser
# failed on TFDS's own dataset_info.json ("version": export exited 1,
# "can't decode byte 0xdd in position 4"). Python sets only LC_CTYPE from
# it: messages, dates and numbers are untouched. A system without C.UTF-8
# falls back to C, which -X utf8 reads as UTF-8 as well.
LOCALE = 'C.UTF-8'


def reads_names_as_utf8() -> bool:
  """True when this interpreter decodes file names as UTF-8 (its locale's
  encoding is UTF-8, or UTF-8 mode is on)."""
  return bool(sys.flags.utf8_mode) or codecs.lookup(sys.getfilesystemencoding()).name == 'utf-8'


def restart_command(executable: str, orig_argv: list, environ: dict,
                    stdout_encoding: Optional[str]) -> tuple:
  """(argv, environment) of the same command in UTF-8 mode. The terminal
  keeps its encoding (PYTHONIOENCODING, unless the user set one): UTF-8
  mode would otherwise print UTF-8 to a Latin-1 terminal."""
  env = dict(environ)
  env[ENV] = '1'
  env['LC_ALL'] = LOCALE
  if stdout_encoding and not env.get('PYTHONIOENCODING'):
    env['PYTHONIOENCODING'] = stdout_encoding
  return [executable, '-X', 'utf8', *orig_argv[1:]], env


def in_utf8_mode() -> None:
  """A command line run's first call: nothing when file names are read as
  UTF-8 already (a UTF-8 locale: the common case costs nothing); otherwise
  the process becomes the same command in UTF-8 mode (os.execve: the same
  process id, signals and streams). Without an interpreter to start again
  (an embedded Python), it goes on as it is."""
  orig_argv = getattr(sys, 'orig_argv', None)
  if reads_names_as_utf8() or not sys.executable or not orig_argv:
    return
  stdout = getattr(sys, 'stdout', None)
  argv, env = restart_command(sys.executable, orig_argv, os.environ,
                              getattr(stdout, 'encoding', None))
  for stream in (sys.stdout, sys.stderr):
    if stream is not None:
      stream.flush()
  os.execve(sys.executable, argv, env)
