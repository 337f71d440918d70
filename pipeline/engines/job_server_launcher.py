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

util-linux's `setsid` also starts the JVM in a session of its own, so a
terminal's Ctrl-C reaches the launcher alone, which cancels the job through
the job server and then stops it. A JVM that got the SIGINT too died at
once, and the harness threads' broken calls raced the launcher's one line
to stderr (seen in CI, the interrupted Flink run's test). Beam starts Java
in the launcher's process group, never as a group leader, so setsid does
not fork: the pid Beam waits for stays the JVM's.

The JVM's own temp files go to the wrapper's folder too (`-Djava.io.tmpdir`:
Java ignores TMPDIR), which a command line run removes when it ends. Flink's
job server unpacks a 21 MB `flink-rpc-akka*.jar` there on every start and
deletes it only when its JVM exits cleanly, which a stopped job server does
not: a day's CI and bench runs had left 38 of them, 804 MB, in /tmp.
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
                        setpriv: Optional[str] = None, setsid: Optional[str] = None) -> str:
  """-> what to give Beam as --job_server_java_launcher: a script in `folder`
  (default: this run's temp folder, removed with it) that runs `java` with
  SIGTERM as its parent-death signal, in a session of its own, its temp
  files in `folder`; `java` itself where there is no setpriv (setpriv,
  setsid: their paths, default the ones on PATH; '': none)."""
  if setpriv is None:
    setpriv = shutil.which('setpriv')
  if not setpriv:
    return java
  if setsid is None:
    setsid = shutil.which('setsid')
  own_session = f'{shlex.quote(setsid)} ' if setsid else ''
  folder = folder or tempfile.gettempdir()
  path = os.path.join(folder, WRAPPER)
  with open(path, 'w') as script:
    script.write(f'#!/bin/sh\nexec {own_session}{shlex.quote(setpriv)} --pdeathsig TERM -- '
                 f'{shlex.quote(java)} {shlex.quote("-Djava.io.tmpdir=" + folder)} "$@"\n')
  os.chmod(path, stat.S_IRWXU)
  return path
