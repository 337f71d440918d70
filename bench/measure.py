"""Run a command as a user would and measure it: wall-clock time and peak PSS.

Peak memory is the largest sum, over one sample, of the PSS of the launched
process and all its descendants (found by scanning /proc for parent pids),
sampled from /proc/<pid>/smaps_rollup by a background thread every ~0.1 s
(every 0.02 s during the first 2 s, so short runs get samples too).
PSS splits shared pages between the processes that map them, so the sum over
a tree counts shared libraries and copy-on-write pages once.

To tell whether a figure was disturbed, it also reports the CPU time the tree
used (rusage of waited-for descendants) and the CPU time the rest of the
machine used meanwhile (busy time from /proc/stat minus the tree's).

And where the CPU went: the same sampler reads each process's own user +
system time (/proc/<pid>/stat) and keeps the last value seen, summed by role
(`launcher`: the command itself; `java`: a JVM, e.g. a job server;
`python children`: image worker processes, SDK workers; else the program's
name). A process that ends between two samples loses at most one interval.
"""

import os
import platform
import resource
import signal
import subprocess
import threading
import time

SAMPLE_INTERVAL_S = 0.1
EARLY_SAMPLE_INTERVAL_S = 0.02
EARLY_PERIOD_S = 2.0
STDERR_TAIL_LINES = 20


def cpu_model() -> str:
  """The CPU's model name from /proc/cpuinfo: the VM this project is measured
  on has landed on AMD EPYC and Intel Xeon hosts, whose figures differ."""
  with open('/proc/cpuinfo') as f:
    for line in f:
      if line.startswith('model name'):
        return line.split(':', 1)[1].strip()
  return platform.processor() or 'unknown'


def parent_pids():
  """Map every live pid to its parent pid, from /proc/<pid>/stat."""
  parents = {}
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat') as f:
        stat = f.read()
    except OSError:
      continue  # exited meanwhile
    # the command name is in parentheses and may contain spaces
    fields = stat[stat.rindex(')') + 2:].split()
    parents[int(entry)] = int(fields[1])
  return parents


def process_tree(root):
  """Pids of `root` and all its live descendants."""
  children = {}
  for pid, ppid in parent_pids().items():
    children.setdefault(ppid, []).append(pid)
  tree, todo = [], [root]
  while todo:
    pid = todo.pop()
    tree.append(pid)
    todo.extend(children.get(pid, ()))
  return tree


_CLOCK_TICKS = os.sysconf('SC_CLK_TCK')


def own_cpu_seconds(pid):
  """User + system CPU seconds of one process, without its children (None if
  it has exited)."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      stat = f.read()
  except OSError:
    return None
  fields = stat[stat.rindex(')') + 2:].split()  # fields[0] is field 3, state
  return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


def process_role(pid, root):
  """What a process of the tree is: launcher, java, python children, or its
  program's name ('' if it has exited)."""
  if pid == root:
    return 'launcher'
  try:
    with open(f'/proc/{pid}/cmdline', 'rb') as f:
      program = f.read().split(b'\0', 1)[0].decode(errors='replace')
  except OSError:
    return ''
  name = os.path.basename(program)
  if name == 'java':
    return 'java'
  if name.startswith('python'):
    return 'python children'
  return name


def pss_kib(pid):
  """PSS of one process in KiB (0 if it has exited)."""
  try:
    with open(f'/proc/{pid}/smaps_rollup') as f:
      for line in f:
        if line.startswith('Pss:'):
          return int(line.split()[1])
  except (OSError, ValueError):
    pass
  return 0


class PeakPssSampler(threading.Thread):
  """Background thread recording the peak tree PSS and process count."""

  def __init__(self, root_pid, other_roots=()):
    """other_roots: pids of processes the command works through (a job
    service, a cluster's JVMs) whose trees count too."""
    super().__init__(daemon=True)
    self.root_pid = root_pid
    self.other_roots = tuple(other_roots)
    self.peak_kib = 0
    self.max_processes = 0
    self._cpu = {}  # pid -> [role, own CPU seconds at its first sample or 0, at its last]
    self._done = threading.Event()

  def run(self):
    start = time.perf_counter()
    while not self._done.is_set():
      own = process_tree(self.root_pid)
      others = [pid for other in self.other_roots for pid in process_tree(other)]
      tree = own + others
      self.peak_kib = max(self.peak_kib, sum(pss_kib(pid) for pid in tree))
      self.max_processes = max(self.max_processes, len(tree))
      self._sample_cpu(own, '')
      self._sample_cpu(others, 'cluster ')  # running before: only what this run adds
      early = time.perf_counter() - start < EARLY_PERIOD_S
      self._done.wait(EARLY_SAMPLE_INTERVAL_S if early else SAMPLE_INTERVAL_S)

  def _sample_cpu(self, pids, prefix):
    """prefix '': processes the command started (all their CPU is the run's);
    else processes that may predate it (only CPU after the first sample)."""
    for pid in pids:
      seconds = own_cpu_seconds(pid)
      if seconds is None:
        continue
      if pid in self._cpu:
        self._cpu[pid][2] = seconds
        continue
      role = process_role(pid, self.root_pid)
      if role:
        self._cpu[pid] = [prefix + role, seconds if prefix else 0.0, seconds]

  def cpu_by_role(self):
    """{role: CPU seconds its processes spent in the run, as last sampled}."""
    roles = {}
    for role, first, last in self._cpu.values():
      roles[role] = round(roles.get(role, 0.0) + last - first, 2)
    return dict(sorted(roles.items()))

  def stop(self):
    self._done.set()
    self.join()


def system_busy_seconds():
  """CPU seconds all cores have spent busy (not idle or iowait) since boot."""
  with open('/proc/stat') as f:
    ticks = [int(x) for x in f.readline().split()[1:9]]  # user..steal
  busy = sum(ticks) - ticks[3] - ticks[4]
  return busy / os.sysconf('SC_CLK_TCK')


def children_cpu_seconds():
  """User + system CPU seconds of this process's waited-for descendants."""
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def tail(path, lines=STDERR_TAIL_LINES):
  """The last `lines` lines of a text file."""
  try:
    with open(path, errors='replace') as f:
      return f.read().splitlines()[-lines:]
  except OSError:
    return []


def run_measured(cmd, log_prefix, cwd=None, timeout=None, env=None, other_roots=()):
  """Run `cmd`, wait for it, and return a dict of its measurements.

    stdout and stderr go to `<log_prefix>.out` / `.err`. The dict holds
    `seconds` (launch to exit), `peak_pss_mib`, `max_processes`, `cpu_seconds`
    (the tree's), `cpu_by_process` (the tree's by role, see above), `other_cpu_seconds` (the rest of the machine's, including
    the sampler's), `returncode`, `stdout_tail` and, on failure, `stderr_tail`.
    other_roots: pids of processes outside the tree (a job service, a
    cluster's JVMs) whose trees' PSS counts too (their CPU time does not).
    On timeout the process is killed (with its process group) and `returncode`
    is None.
    """
  out_path, err_path = f'{log_prefix}.out', f'{log_prefix}.err'
  with open(out_path, 'w') as out, open(err_path, 'w') as err:
    busy_before, cpu_before = system_busy_seconds(), children_cpu_seconds()
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
        env=env)
    sampler = PeakPssSampler(proc.pid, other_roots)
    sampler.start()
    try:
      returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      returncode = None
    finally:  # on timeout or Ctrl-C, end the process group we started
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    seconds = time.perf_counter() - start
    sampler.stop()
    cpu = children_cpu_seconds() - cpu_before
    other_cpu = system_busy_seconds() - busy_before - cpu
  result = {
      'command': cmd,
      'returncode': returncode,
      'seconds': round(seconds, 3),
      'peak_pss_mib': round(sampler.peak_kib / 1024, 1),
      'max_processes': sampler.max_processes,
      'cpu_seconds': round(cpu, 2),
      'cpu_by_process': sampler.cpu_by_role(),
      'other_cpu_seconds': round(max(0.0, other_cpu), 2),
      'stdout_tail': tail(out_path, 5),
      'logs': [out_path, err_path],
  }
  if returncode != 0:
    result['stderr_tail'] = tail(err_path)
  return result
