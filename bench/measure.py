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
"""

import os
import resource
import signal
import subprocess
import threading
import time

SAMPLE_INTERVAL_S = 0.1
EARLY_SAMPLE_INTERVAL_S = 0.02
EARLY_PERIOD_S = 2.0
STDERR_TAIL_LINES = 20


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
    self._done = threading.Event()

  def run(self):
    start = time.perf_counter()
    while not self._done.is_set():
      tree = process_tree(self.root_pid)
      for other in self.other_roots:
        tree += process_tree(other)
      self.peak_kib = max(self.peak_kib, sum(pss_kib(pid) for pid in tree))
      self.max_processes = max(self.max_processes, len(tree))
      early = time.perf_counter() - start < EARLY_PERIOD_S
      self._done.wait(EARLY_SAMPLE_INTERVAL_S if early else SAMPLE_INTERVAL_S)

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
    (the tree's), `other_cpu_seconds` (the rest of the machine's, including
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
      'other_cpu_seconds': round(max(0.0, other_cpu), 2),
      'stdout_tail': tail(out_path, 5),
      'logs': [out_path, err_path],
  }
  if returncode != 0:
    result['stderr_tail'] = tail(err_path)
  return result
