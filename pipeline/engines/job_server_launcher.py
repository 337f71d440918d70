"""The Java a Flink or Spark job server is started with, made to end with
the process that started it.

The run stops the job server it started when the job ends or is interrupted
(engine_runners.py). A launcher killed outright (SIGKILL: an OOM kill, a
scheduler's last resort, `kill -9`) runs no clean-up, and its job server's
JVM went on running with its memory and port. On Linux, util-linux's
`setpriv --pdeathsig TERM` sets the JVM's parent-death signal before it
execs Java: the JVM gets SIGTERM when the thread that started it ends, and
shuts down as on any other stop. Beam starts the job server from the
thread that runs the job and waits for it. Without setpriv (not Linux, or
no util-linux), Java is started directly and outlives a launcher killed
outright.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import tempfile
from typing import Optional

WRAPPER = 'java-ends-with-launcher'


def dying_with_launcher(java: str, folder: Optional[str] = None,
                        setpriv: Optional[str] = None) -> str:
  """-> what to give Beam as --job_server_java_launcher: a script in `folder`
  (default: this run's temp folder, removed with it) that runs `java` with
  SIGTERM as its parent-death signal; `java` itself where there is no
  setpriv (setpriv: its path, default the one on PATH; '': none)."""
  if setpriv is None:
    setpriv = shutil.which('setpriv')
  if not setpriv:
    return java
  path = os.path.join(folder or tempfile.gettempdir(), WRAPPER)
  with open(path, 'w') as script:
    script.write(f'#!/bin/sh\nexec {shlex.quote(setpriv)} --pdeathsig TERM -- '
                 f'{shlex.quote(java)} "$@"\n')
  os.chmod(path, stat.S_IRWXU)
  return path
