"""SIGINT and SIGTERM stop convert and validate cleanly: the real command
line in a subprocess, the real signal, sent to its process group (as Ctrl-C
in a terminal and `timeout` do: the image worker processes get it too) at a
moment the test makes sure of:

- reading the manifest: a .txt.gz manifest whose rows are followed by
  millions of blank lines (read and skipped for tens of seconds), signalled
  once the run holds the lock and has the manifest open (/proc/PID/fd);
- mid-encode: many rows of large JPEGs, signalled once the writer's first
  temp shard has bytes; with two SDK workers, once a record waits in a
  file of the distributed writer (transforms/spill.py);
- renaming shards into place: tests/signal_helpers.py holds the second
  rename (no outside means can).

(Marked slow; the handlers' own tests at the end are not.)

Then: exit status 128 + signal (the process ends by the signal), exactly
one line on stderr, nothing left in OUT (no lock, no temp folder, no shard,
no dataset_info.json) or in the temp folder, validate finds no dataset there
(a usage error, no report written), and a rerun without --overwrite converts.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from typing import Optional
import zlib

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.beam_runtime import sdk_workers
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.runs import interrupts
from pipeline.runs import locked_run
from tests.conftest import make_sample
from tests.conftest import read_info

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONVERT_LINE, CONVERT_AGAIN = interrupts.CONVERT_LINES
VALIDATE_LINE = interrupts.VALIDATE_LINES[0]
WAIT_S = 180.0  # a cold start of Beam on a busy 2-core machine can take long
SIGNALS = [pytest.param(signal.SIGINT, id='SIGINT'), pytest.param(signal.SIGTERM, id='SIGTERM')]
# Small output: a run that failed to stop would not fill the disk.
SMALL = ['--height', '64', '--width', '64']


# --- corpora (made once) -------------------------------------------------------


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """The nine-image sample (for reruns and validate), plus:
  big_jpegs: 1,500 rows over 12 JPEGs of 1600x1200 (seconds of decoding);
  many_rows: 300 rows over the sample's PNGs (4 shards at --shard_size_mb 1);
  slow_manifest: the sample's rows, then 40 million blank lines (.txt.gz)."""
  root = tmp_path_factory.mktemp('interrupt-corpus')
  sample = make_sample(root)
  rng = np.random.default_rng(0)
  jpegs = []
  for i in range(12):
    path = root / 'big' / f'{i}.jpg'
    path.parent.mkdir(exist_ok=True)
    Image.fromarray(rng.integers(0, 255, (1200, 1600, 3), dtype=np.uint8)).save(
        path, quality=90)
    jpegs.append(path)
  big = root / 'big_jpegs.csv'
  big.write_text('image,label,key\n' + ''.join(
      f'{jpegs[i % 12]},c{i % 2},k{i}\n' for i in range(1500)))
  images = sorted(sample.labels.items())
  many = root / 'many_rows.csv'
  many.write_text('image,label,key\n' + ''.join(
      f'{root / images[i % 9][0]},{images[i % 9][1]},k{i}\n' for i in range(300)))
  slow = root / 'slow_manifest.txt.gz'
  packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: a gzip stream
  parts = [packer.compress(''.join(f'{root / path} {label}\n'
                                   for path, label in images).encode())]
  blank = b'\n' * (1 << 20)
  parts += [packer.compress(blank) for _ in range(40)]
  parts.append(packer.flush())
  slow.write_bytes(b''.join(parts))
  assert gzip.decompress(slow.read_bytes()).count(b'\n') == 9 + 40 * (1 << 20)
  return {'sample': sample, 'big_jpegs': big, 'many_rows': many, 'slow_manifest': slow}


# --- running and signalling --------------------------------------------------------


def start(args: list, temp: pathlib.Path, module: str = 'pipeline.convert',
          env: Optional[dict] = None) -> subprocess.Popen:
  """`python -m module args`, in its own session (its process group is its
  own to signal), with TMPDIR = temp (and `env` over the environment)."""
  env = {**os.environ, 'TMPDIR': str(temp), 'PYTHONPATH': str(ROOT), **(env or {})}
  return subprocess.Popen([sys.executable, '-m', module, *map(str, args)], cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(condition, process: subprocess.Popen, what: str) -> None:
  deadline = time.monotonic() + WAIT_S
  while not condition():
    if process.poll() is not None:
      out, err = process.communicate()
      pytest.fail(f'the run ended (exit {process.returncode}) before {what}:\n{out}\n{err}')
    if time.monotonic() > deadline:
      process.kill()
      pytest.fail(f'no {what} in {WAIT_S:.0f} s:\n{process.communicate()[1]}')
    time.sleep(0.01)


def signal_and_finish(process: subprocess.Popen, signum: int) -> tuple:
  """Signals the run's process group; -> (returncode, stdout, stderr)."""
  os.killpg(process.pid, signum)
  try:
    out, err = process.communicate(timeout=WAIT_S)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    out, err = process.communicate()
    pytest.fail(f'still running {WAIT_S:.0f} s after {signum.name}:\n{err}')
  return process.returncode, out, err


def has_lock(out: pathlib.Path) -> bool:
  return out.is_dir() and any(n.startswith('.convert.lock.') for n in os.listdir(out))


def has_open(pid: int, path: pathlib.Path) -> bool:
  """Whether process `pid` has `path` open (Linux: /proc/PID/fd)."""
  with contextlib.suppress(OSError):
    for fd in os.listdir(f'/proc/{pid}/fd'):
      with contextlib.suppress(OSError):
        if os.readlink(f'/proc/{pid}/fd/{fd}') == str(path):
          return True
  return False


def temp_shard_has_bytes(out: pathlib.Path) -> bool:
  with contextlib.suppress(OSError):
    return any(p.stat().st_size > 0 for p in (out / 'beam-temp-train-shards').iterdir())
  return False


def assert_interrupted(code: int, err: str, signum: int, line: str) -> None:
  assert code == -signum, err  # the shell shows 128 + signum: 130 / 143
  assert err == line + '\n', err  # the one line: no traceback, no worker's


def assert_nothing_left(out: pathlib.Path, temp: pathlib.Path, corpus, tmp_path,
                        capsys) -> None:
  """OUT is empty, the temp folder too; validate finds no dataset there; a
  rerun without --overwrite converts the sample into it."""
  assert os.listdir(out) == []  # no lock, beam-temp-*, shard, label map, dataset_info.json
  assert os.listdir(temp) == []  # no img2tfrecord-run-*
  capsys.readouterr()
  assert validate.main(['--input_dir', str(out)]) == EXIT_USAGE  # no trace of a run
  assert 'nothing else convert writes is there' in capsys.readouterr().err
  assert os.listdir(out) == []  # no report: the rerun needs OUT empty
  sample = corpus['sample']
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out),
                       *SMALL]) == EXIT_OK
  assert read_info(out)['num_examples'] == 9


@pytest.fixture
def temp(tmp_path) -> pathlib.Path:
  folder = tmp_path / 'system_temp'
  folder.mkdir()
  return folder


# --- convert -------------------------------------------------------------------


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
@pytest.mark.parametrize('signum', SIGNALS)
def test_interrupted_while_reading_the_manifest(signum, corpus, temp, tmp_path, capsys):
  out = tmp_path / 'out'
  manifest = corpus['slow_manifest']
  run = start(['--manifest', manifest, '--output_dir', out, *SMALL], temp)
  wait_for(lambda: has_lock(out) and has_open(run.pid, manifest), run,
           'the manifest open under the lock')
  code, _, err = signal_and_finish(run, signum)
  assert_interrupted(code, err, signum, CONVERT_LINE)
  assert_nothing_left(out, temp, corpus, tmp_path, capsys)


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
@pytest.mark.parametrize('signum', SIGNALS)
def test_interrupted_mid_encode(signum, corpus, temp, tmp_path, capsys):
  out = tmp_path / 'out'
  run = start(['--manifest', corpus['big_jpegs'], '--output_dir', out, *SMALL], temp)
  wait_for(lambda: temp_shard_has_bytes(out), run, 'a temp shard with records')
  code, _, err = signal_and_finish(run, signum)
  assert_interrupted(code, err, signum, CONVERT_LINE)
  assert_nothing_left(out, temp, corpus, tmp_path, capsys)


def spilled_record_has_bytes(out: pathlib.Path) -> bool:
  with contextlib.suppress(OSError):
    return any(p.stat().st_size > 0 for p in (out / 'beam-temp-train-records').iterdir())
  return False


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
@pytest.mark.parametrize('signum', SIGNALS)
def test_interrupted_while_records_wait_in_files(signum, corpus, temp, tmp_path, capsys):
  """Two SDK worker processes (the distributed writer): records wait in
  OUT/beam-temp-train-records/ (transforms/spill.py) when the signal comes,
  and none is left."""
  out = tmp_path / 'out'
  run = start(['--manifest', corpus['big_jpegs'], '--output_dir', out, *SMALL,
               '--direct_num_workers', '2', '--direct_running_mode', 'multi_processing'],
              temp)
  wait_for(lambda: spilled_record_has_bytes(out), run, 'a spilled record')
  code, _, err = signal_and_finish(run, signum)
  assert code == -signum, err
  # Beam's SDK worker processes get the signal too, and may print their own
  # traceback (or the launcher's threads theirs, when a worker dies first):
  # the launcher's line is still there.
  assert CONVERT_LINE in err.splitlines(), err
  assert_nothing_left(out, temp, corpus, tmp_path, capsys)


# A sitecustomize for the run's processes: an SDK worker (its command line
# names Beam's module) writes $HOLD_MARKER and waits there, before it could
# connect to the run. A worker still starting, for as long as the test needs.
_HOLD_SDK_WORKERS = """
import os, time
with open('/proc/self/cmdline', 'rb') as cmdline:
  if b'{module}' in cmdline.read() and os.environ.get('HOLD_MARKER'):
    open(os.environ['HOLD_MARKER'], 'w').close()
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
  """Whether `pid` runs (a zombie waiting for its parent does not)."""
  try:
    with open(f'/proc/{pid}/stat', encoding='ascii', errors='replace') as stat:
      return stat.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except OSError:
    return False


def _argv0(pid: int) -> bytes:
  """The program `pid` runs now, as its command line names it (b'' if gone)."""
  try:
    return pathlib.Path(f'/proc/{pid}/cmdline').read_bytes().split(b'\0')[0]
  except OSError:
    return b''


def sdk_worker_pids(group: int) -> list:
  """Beam's SDK worker processes (`python -m ...sdk_worker_main`, not the
  `sh -c` around each) in process group `group`."""
  pids = []
  for entry in filter(str.isdigit, os.listdir('/proc')):
    with contextlib.suppress(OSError):
      argv = pathlib.Path(f'/proc/{entry}/cmdline').read_bytes().split(b'\0')
      if (os.getpgid(int(entry)) == group
          and b'apache_beam.runners.worker.sdk_worker_main' in argv):
        pids.append(int(entry))
  return pids


def _held_sdk_workers(corpus, temp, tmp_path, *flags) -> tuple:
  """(run, its output folder, its SDK worker processes) of a `--direct_num_workers
  2` convert whose SDK workers are held as they start (_HOLD_SDK_WORKERS)."""
  site, marker = tmp_path / 'site', tmp_path / 'sdk-worker-started'
  site.mkdir()
  (site / 'sitecustomize.py').write_text(
      _HOLD_SDK_WORKERS.format(module=sdk_workers.SDK_WORKER_MODULE))
  out = tmp_path / 'out'
  run = start(['--manifest', corpus['many_rows'], '--output_dir', out, *SMALL,
               '--direct_num_workers', '2', *flags],
              temp, env={'PYTHONPATH': f'{site}{os.pathsep}{ROOT}', 'HOLD_MARKER': str(marker)})
  wait_for(marker.exists, run, 'an SDK worker process starting')
  workers = sdk_workers.sdk_worker_processes(run.pid)
  assert workers  # Beam's sh -c and the Python under it
  return run, out, workers


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
@pytest.mark.parametrize('signum', SIGNALS)
def test_a_signal_to_the_launcher_alone_while_its_sdk_workers_start(signum, corpus, temp,
                                                                     tmp_path, capsys):
  """SIGINT or SIGTERM to the launcher alone (`kill PID`, Kubernetes, systemd's
  KillMode=mixed), not its process group, while the SDK worker processes of a
  multi_processing run still start: the run stops them, cleans up and ends
  by the signal. It waited for them for ever: Beam closes a worker's control
  connection before the worker opens it, and the worker is never told to end."""
  run, out, workers = _held_sdk_workers(corpus, temp, tmp_path,
                                        '--direct_running_mode', 'multi_processing')
  os.kill(run.pid, signum)
  try:
    code, err = run.wait(timeout=WAIT_S), run.stderr.read()
  except subprocess.TimeoutExpired:
    os.killpg(run.pid, signal.SIGKILL)
    pytest.fail(f'still running {WAIT_S:.0f} s after {signum.name} to the launcher alone')
  assert_interrupted(code, err, signum, CONVERT_LINE)
  deadline = time.monotonic() + WAIT_S  # an orphan's end is its new parent's to collect
  while any(map(_alive, workers)) and time.monotonic() < deadline:
    time.sleep(0.05)
  assert not [pid for pid in workers if _alive(pid)]
  assert_nothing_left(out, temp, corpus, tmp_path, capsys)


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
def test_ctrl_c_while_its_sdk_workers_start_prints_the_one_line(corpus, temp, tmp_path,
                                                                 capsys):
  """A terminal's Ctrl-C (SIGINT to the whole process group) while the SDK
  worker processes of `--direct_num_workers 2` still start (importing Beam):
  each worker printed its KeyboardInterrupt traceback under the run's line.
  They ignore SIGINT now; the run stops them with SIGTERM, quietly."""
  run, out, workers = _held_sdk_workers(corpus, temp, tmp_path)
  code, _, err = signal_and_finish(run, signal.SIGINT)
  assert_interrupted(code, err, signal.SIGINT, CONVERT_LINE)
  deadline = time.monotonic() + WAIT_S  # an orphan's end is its new parent's to collect
  while any(map(_alive, workers)) and time.monotonic() < deadline:
    time.sleep(0.05)
  assert not [pid for pid in workers if _alive(pid)]
  assert_nothing_left(out, temp, corpus, tmp_path, capsys)


_SHOW_SIGINT = (f'{sys.executable} -c "import signal; '
                f'print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"').encode()


def _worker_sigint() -> str:
  return subprocess.run(['/bin/sh', '-c', sdk_workers.worker_command(_SHOW_SIGINT)],
                        capture_output=True, text=True, check=True).stdout.strip()


def test_sdk_workers_ignore_sigint_only_under_the_command_lines_handlers():
  """Under the command line's handlers an SDK worker's command line starts
  it with SIGINT ignored (a Ctrl-C to the process group: the launcher stops
  it with SIGTERM); from Python, without them, Python's own SIGINT."""
  assert _worker_sigint() == 'False'
  handlers = interrupts.Handlers('line', 'again').install()
  try:
    assert _worker_sigint() == 'True'
    command = sdk_workers.worker_command(b'python -m ' + sdk_workers.SDK_WORKER_MODULE.encode())
    assert sdk_workers.SDK_WORKER_MODULE.encode() in command  # still found by stop()
  finally:
    handlers.finish()
  assert _worker_sigint() == 'False'


_LAUNCHER = """
import subprocess, sys, threading
from pipeline.beam_runtime import sdk_workers
def start():  # as Beam's SubprocessSdkWorker.run: start, then wait, on one thread
  worker = subprocess.Popen(sdk_workers.worker_command(sys.argv[1].encode()), shell=True)
  print(worker.pid, flush=True)
  worker.wait()
threading.Thread(target=start).start()
"""


@pytest.mark.skipif(not shutil.which('setpriv'), reason='no setpriv (util-linux)')
def test_an_sdk_worker_ends_with_a_launcher_killed_outright(tmp_path):
  """A launcher killed with SIGKILL (the OOM killer, a scheduler's last
  resort) runs no clean-up: its multi_processing SDK workers, waiting on
  their control stream, ran on for ever, one set per killed night."""
  worker_line = f'{sys.executable} -c "import time; time.sleep(300)" {sdk_workers.SDK_WORKER_MODULE}'
  launcher = subprocess.Popen([sys.executable, '-c', _LAUNCHER, worker_line],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              start_new_session=True)  # its group: whatever is left, at the end
  worker = int(launcher.stdout.readline())
  try:
    deadline = time.monotonic() + WAIT_S  # found by stop() once sh has exec'd
    while worker not in sdk_workers.sdk_worker_processes(launcher.pid):
      assert time.monotonic() < deadline
      time.sleep(0.05)
    # ... and once setpriv has set the parent-death signal and exec'd Python:
    # killed while still setpriv (it matches too), the launcher was gone
    # before the signal was set, and the worker lived (a clean clone's make test).
    while _argv0(worker) != sys.executable.encode():
      assert time.monotonic() < deadline
      time.sleep(0.05)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + WAIT_S
    while _alive(worker) and time.monotonic() < deadline:
      time.sleep(0.05)
    assert not _alive(worker)
  finally:
    launcher.stdout.close()
    with contextlib.suppress(ProcessLookupError):
      os.killpg(launcher.pid, signal.SIGKILL)


def test_an_sdk_worker_starting_after_the_signal_is_stopped_too():
  """keep_stopping() goes on stopping SDK workers for a while: one Beam starts a
  moment after the first signal was held for ever by a single stop() (the
  SIGTERM case of the test above hung its run, 1 CI run of 4)."""
  done = sdk_workers.keep_stopping(seconds=WAIT_S, every=0.05)
  sleeper = f'{sys.executable} -c "import time; time.sleep(120)"'
  late = subprocess.Popen(['/bin/sh', '-c', f'{sleeper}; : {sdk_workers.SDK_WORKER_MODULE}'])
  other = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
  try:
    assert late.wait(timeout=WAIT_S) == -signal.SIGTERM
    assert other.poll() is None  # not an SDK worker: left alone
  finally:
    done.set()
    for process in (late, other):
      process.kill()
      process.wait()


def test_stopping_sdk_workers_ends_them_and_what_they_started_only():
  """sdk_workers.stop() sends SIGTERM to each child whose command line names
  Beam's SDK worker module and to the processes under it (the Python under
  Beam's `sh -c`), and to no other child."""
  sleeper = f'{sys.executable} -c "import time; time.sleep(120)"'
  worker = subprocess.Popen(['/bin/sh', '-c', f'{sleeper}; : {sdk_workers.SDK_WORKER_MODULE}'])
  other = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
  try:
    deadline = time.monotonic() + WAIT_S
    while len(sdk_workers.sdk_worker_processes(os.getpid())) < 2:  # the sh, then its Python
      assert time.monotonic() < deadline, 'the sh -c never started its Python'
      time.sleep(0.01)
    found = sdk_workers.sdk_worker_processes(os.getpid())
    assert found[0] == worker.pid and other.pid not in found
    assert sorted(sdk_workers.stop()) == sorted(found)
    assert worker.wait(timeout=WAIT_S) == -signal.SIGTERM
    while _alive(found[1]) and time.monotonic() < deadline:
      time.sleep(0.01)
    assert not _alive(found[1])
    assert other.poll() is None  # not an SDK worker: left alone
  finally:
    for process in (worker, other):
      process.kill()
      process.wait()


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
def test_a_killed_sdk_worker_fails_the_run(corpus, temp, tmp_path):
  """An SDK worker process killed as it starts (the OOM killer, kill -9): the
  job fails (exit 1, saying why) and removes what it wrote. Beam alone waited for
  that worker's bundle for ever, the lock held (pipeline/beam_runtime/local_runner.py
  _run_worker)."""
  out = tmp_path / 'out'
  run = start(['--manifest', corpus['big_jpegs'], '--output_dir', out, *SMALL,
               '--direct_num_workers', '2', '--direct_running_mode', 'multi_processing'],
              temp)
  wait_for(lambda: sdk_worker_pids(run.pid), run, 'an SDK worker process')
  os.kill(sdk_worker_pids(run.pid)[0], signal.SIGKILL)
  try:
    _, err = run.communicate(timeout=WAIT_S)
  except subprocess.TimeoutExpired:
    os.killpg(run.pid, signal.SIGKILL)
    pytest.fail(f'still running {WAIT_S:.0f} s after an SDK worker was killed:\n'
                f'{run.communicate()[1]}')
  assert run.returncode == EXIT_FAILED, err
  # Above it, Beam's own words on the lost worker: the `sh -c` around it says
  # `Killed`, the launcher's thread reading its control stream its RpcError.
  assert any(line.startswith('error: the job failed: RuntimeError: an SDK worker died: '
                             'RuntimeError: Worker subprocess exited with return code ')
             for line in err.splitlines()), err
  assert os.listdir(out) == []  # no lock, beam-temp-*, shard
  assert os.listdir(temp) == []  # no img2tfrecord-run-*


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
@pytest.mark.parametrize('signum', [*SIGNALS, pytest.param(signal.SIGHUP, id='SIGHUP')])
def test_interrupted_while_renaming_shards_into_place(signum, corpus, temp, tmp_path,
                                                      capsys):
  out, marker = tmp_path / 'out', tmp_path / 'renaming'
  out.mkdir()  # an empty OUT given: it stays, empty
  run = start(['renaming', marker, '--', '--manifest', corpus['many_rows'], '--output_dir',
               out, *SMALL, '--shard_size_mb', '1'], temp, module='tests.signal_helpers')
  wait_for(marker.exists, run, 'the second shard rename')
  assert 'train-00000-of-00004.tfrecord' in os.listdir(out)  # one shard in place
  code, _, err = signal_and_finish(run, signum)
  assert_interrupted(code, err, signum, CONVERT_LINE)
  assert_nothing_left(out, temp, corpus, tmp_path, capsys)


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
def test_second_signal_during_clean_up_ends_the_run_at_once(corpus, temp, tmp_path, capsys):
  """SIGTERM, then SIGINT while the clean-up deletes: the process ends by
  the second signal there, saying so; what is left is a killed run's (the
  lock): a rerun needs --overwrite, as after SIGKILL."""
  out, marker = tmp_path / 'out', tmp_path / 'renaming'
  run = start(['cleaning', marker, '--', '--manifest', corpus['many_rows'], '--output_dir',
               out, *SMALL, '--shard_size_mb', '1'], temp, module='tests.signal_helpers')
  wait_for(marker.exists, run, 'the second shard rename')
  os.killpg(run.pid, signal.SIGTERM)
  cleaning = tmp_path / 'renaming.cleaning'
  wait_for(cleaning.exists, run, 'the clean-up')
  started = time.monotonic()
  code, _, err = signal_and_finish(run, signal.SIGINT)
  assert time.monotonic() - started < 10  # not the helper's 120 s wait
  assert_interrupted(code, err, signal.SIGINT, CONVERT_AGAIN)
  assert has_lock(out)
  sample = corpus['sample']
  flags = ['--manifest', str(sample.manifest), '--output_dir', str(out), *SMALL]
  capsys.readouterr()
  assert convert.main(flags) == EXIT_USAGE
  assert 'holds the lock of a run that is no longer running' in capsys.readouterr().err
  assert convert.main(flags + ['--overwrite']) == EXIT_OK
  assert sorted(p.name for p in out.iterdir()) == [
      'dataset_info.json', 'label_map.txt', 'rejected.jsonl', 'train-00000-of-00001.tfrecord',
      'train.sources.jsonl.gz']


# --- validate ------------------------------------------------------------------


@pytest.fixture(scope='module')
def dataset(corpus, tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp('interrupt-dataset') / 'out'
  assert convert.main(['--manifest', str(corpus['sample'].manifest), '--output_dir', str(out),
                       *SMALL]) == EXIT_OK
  return out


def _reader_waits(fifo: pathlib.Path) -> Optional[int]:
  """A write end of `fifo` once a reader has it open (None before): held
  open and silent, the reader then waits in read()."""
  try:
    return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
  except OSError as error:
    if error.errno != errno.ENXIO:  # ENXIO: no reader yet
      raise
    return None


def _validate_signalled_while_held(module: str, what: str, signum, dataset, temp, tmp_path,
                                   monkeypatch, old_report: bool = False, held=None) -> tuple:
  """validate of a copy of `dataset` run by `module`, which holds the run on
  the FIFO $I2T_WAIT_FIFO names, signalled once `what` happened (held(out)
  called first): it ends with its one line and leaves no temp folder. ->
  (the copy, its file names before the run)."""
  out = tmp_path / 'out'
  out.mkdir()
  for path in dataset.iterdir():
    (out / path.name).write_bytes(path.read_bytes())
  if old_report:
    (out / 'validation_report.json').write_text('{"valid": false}\n')
  fifo = tmp_path / 'wait.fifo'
  os.mkfifo(fifo)
  monkeypatch.setenv('I2T_WAIT_FIFO', str(fifo))
  before = sorted(os.listdir(out))
  run = start(['--input_dir', out], temp, module=module)
  writer = []

  def reading() -> bool:
    writer.append(_reader_waits(fifo))
    return writer[-1] is not None

  try:
    wait_for(reading, run, what)
    if held is not None:
      held(out)
    code, _, err = signal_and_finish(run, signum)
  finally:
    for fd in writer:
      if fd is not None:
        os.close(fd)
  assert_interrupted(code, err, signum, VALIDATE_LINE)
  assert os.listdir(temp) == []
  return out, before


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
@pytest.mark.parametrize('signum', SIGNALS)
def test_validate_interrupted_mid_check(signum, dataset, temp, tmp_path, monkeypatch):
  """A record check waiting on a FIFO holds validate mid-check: the signal
  there ends it with its one line, no report written, no temp folder left.
  (A shard that is a FIFO is reported unread now: it cannot hold it.)"""
  out, before = _validate_signalled_while_held('tests.validate_waiting_check', 'the shard opened',
                                               signum, dataset, temp, tmp_path, monkeypatch)
  assert sorted(os.listdir(out)) == before  # no validation_report.json(.tmp)


@pytest.mark.integration  # a long system test: make test stays within 6 minutes
@pytest.mark.slow
@pytest.mark.parametrize('signum', SIGNALS)
@pytest.mark.parametrize('old_report', [False, True], ids=['no_report', 'old_report'])
def test_validate_interrupted_after_its_job_wrote_the_report(signum, old_report, dataset,
                                                             temp, tmp_path, monkeypatch):
  """The job renames its report into place as its last step, before the job
  ends: a signal then (found on Flink and the DirectRunner) takes that report
  back, so that its line, nothing was checked, holds. An older report with
  other bytes goes too (this run replaced it); nothing else in OUT."""
  def written(out):
    assert json.loads((out / 'validation_report.json').read_text())['num_examples'] == 9

  out, before = _validate_signalled_while_held(
      'tests.validate_waiting_report', 'the report written', signum, dataset, temp, tmp_path,
      monkeypatch, old_report=old_report, held=written)
  assert sorted(os.listdir(out)) == sorted(set(before) - {'validation_report.json'})


# --- who installs handlers -------------------------------------------------------


def _handlers_now() -> dict:
  return {signum: signal.getsignal(signum) for signum in interrupts.SIGNALS}


def test_only_the_command_line_installs_signal_handlers(sample, tmp_path, monkeypatch):
  """convert.run (what a Python caller calls) leaves the process's handlers
  alone; convert.main has its own while it runs, and puts the previous ones
  back."""
  before = _handlers_now()
  during = []
  prepare = locked_run.prepare_output_dir

  def recording(*args, **kwargs):
    during.append(_handlers_now())
    return prepare(*args, **kwargs)

  monkeypatch.setattr(locked_run, 'prepare_output_dir', recording)
  flags = ['--manifest', str(sample.manifest), *SMALL]
  assert convert.run(flags + ['--output_dir', str(tmp_path / 'api')]) == EXIT_OK
  assert during.pop() == before
  assert convert.main(flags + ['--output_dir', str(tmp_path / 'cli')]) == EXIT_OK
  handlers = during.pop()
  assert all(getattr(h, '__self__', None).__class__ is interrupts.Handlers
             for h in handlers.values()), handlers
  assert _handlers_now() == before


def test_a_signal_ignored_at_start_stays_ignored():
  """A background job of a non-interactive shell (`cmd &`) or nohup starts
  with SIGINT ignored: Ctrl-C in that terminal is not for it."""
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    handlers = interrupts.Handlers('line', 'again').install()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) == handlers._handle
    handlers.finish()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
  finally:
    signal.signal(signal.SIGINT, previous)


def _run_script(script: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-c', script], cwd=ROOT, capture_output=True,
                        text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _stderr_ending_by(signum: int, script: str) -> str:
  """The stderr of `script`, run in a process of its own, which must end by `signum`."""
  done = _run_script(script)
  assert done.returncode == -signum, done.stderr
  return done.stderr

def test_ctrl_c_in_a_command_without_handlers_is_one_line_not_a_traceback(tmp_path):
  """inspect and export install no handlers of their own: a Ctrl-C was
  Python's KeyboardInterrupt traceback. It is one line and the end by
  SIGINT, after what the KeyboardInterrupt unwound (export's half-written
  folder removed) has run."""
  cleaned = tmp_path / 'cleaned-up'
  script = f"""
import os, signal, time
from pipeline.runs import exits
def main():
  try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(60)
  finally:
    open({str(cleaned)!r}, 'w').close()
exits.exit_with(main)
"""
  assert _stderr_ending_by(signal.SIGINT, script) == 'interrupted\n'
  assert cleaned.exists()


def test_after_the_signal_only_the_main_thread_writes_to_stderr():
  """Beam's SDK harness threads (a Flink or Spark run's LOOPBACK workers, in
  the launcher) print each broken call's traceback straight to sys.stderr as
  the job goes away; the run's own notes, from the main thread, still show,
  then the one line."""
  script = """
import os, signal, sys, threading
from pipeline.runs import interrupts
handlers = interrupts.Handlers('the one line', 'again').install()
print('before the signal, any thread', file=sys.stderr)
gone = threading.Event()
def harness():
  gone.wait()
  print('Traceback (most recent call last): a broken call', file=sys.stderr)
thread = threading.Thread(target=harness)
thread.start()
try:
  with handlers.running():
    os.kill(os.getpid(), signal.SIGINT)
except interrupts.Interrupted:
  gone.set()
  thread.join()
  print('note: from the clean-up', file=sys.stderr)
handlers.finish()
"""
  assert _stderr_ending_by(signal.SIGINT, script) == ('before the signal, any thread\nnote: from the clean-up\n'
                         'the one line\n')


def test_main_thread_only_passes_on_the_main_threads_writes():
  import io
  import threading
  kept = io.StringIO()
  stream = interrupts.MainThreadOnly(kept)
  assert stream.write('main\n') == 5
  thread = threading.Thread(target=lambda: stream.write('other\n'))
  thread.start()
  thread.join()
  stream.flush()
  assert kept.getvalue() == 'main\n'


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_signal_swallowed_on_the_way_still_stops_the_run_before_it_counts_as_done():
  """Beam swallows exceptions in places (a bare `except:` around its IPython
  import, while the pipeline is built): the run's job then ends well, but
  RunGuard raises Interrupted before the run counts as done, so its clean-up
  takes back what it wrote and the one line is true."""
  script = """
import os, signal, sys
from pipeline.runs import interrupts
from pipeline.runs.run_guard import RunGuard
from tests.conftest import SubmittedPipeline

class Done:
  state = 'DONE'
  def wait_until_finish(self):
    return 'DONE'

handlers = interrupts.Handlers('the one line', 'again').install()
try:
  with handlers.running():
    try:
      os.kill(os.getpid(), signal.SIGTERM)
    except:  # as Beam's is_in_ipython: re-raises only KeyboardInterrupt, SystemExit
      print('swallowed', file=sys.stderr)
    with RunGuard(lambda: print('cleaned up', file=sys.stderr)) as guard:
      guard.run(SubmittedPipeline(Done()))
      print('published', file=sys.stderr)
except interrupts.Interrupted:
  pass
handlers.finish()
"""
  assert _stderr_ending_by(signal.SIGTERM, script) == 'swallowed\ncleaned up\nthe one line\n'


@pytest.mark.parametrize('signum', SIGNALS)
def test_one_signal_sent_twice_at_once_is_one_interruption(signum):
  """GNU `timeout` signals the process, then its whole process group, which
  the process is in: 2 of 7 runs under `timeout -s INT|TERM 3` said `interrupted
  again` and left its lock and beam-temp folder. A repeat of the same signal
  at once is the same interruption; the clean-up runs whole."""
  script = f"""
import os, sys, time
from pipeline.runs import interrupts
handlers = interrupts.Handlers('the one line', 'again').install()
try:
  with handlers.running():
    os.kill(os.getpid(), {int(signum)})
    time.sleep(30)
except interrupts.Interrupted:
  os.kill(os.getpid(), {int(signum)})
  print('cleaned up', file=sys.stderr)
handlers.finish()
"""
  assert _stderr_ending_by(signum, script) == 'cleaned up\nthe one line\n'


def test_a_different_second_signal_at_once_still_cuts_the_clean_up_short():
  script = """
import os, signal, sys, time
from pipeline.runs import interrupts
handlers = interrupts.Handlers('the one line', 'again').install()
try:
  with handlers.running():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
except interrupts.Interrupted:
  os.kill(os.getpid(), signal.SIGINT)
  print('cleaned up', file=sys.stderr)
handlers.finish()
"""
  assert _stderr_ending_by(signal.SIGINT, script) == 'again\n'


def test_signals_after_publishing_let_the_run_finish_and_say_so():
  """Any number of them (Ctrl-C pressed twice): the run's last steps still run."""
  script = """
import os, signal, sys
from pipeline.runs import interrupts
handlers = interrupts.Handlers('nothing was published', 'again').install()
with handlers.running():
  interrupts.published('published, complete')
  os.kill(os.getpid(), signal.SIGTERM)
  os.kill(os.getpid(), signal.SIGINT)
  print('the summary', file=sys.stderr)
handlers.finish()
"""
  assert _stderr_ending_by(signal.SIGTERM, script) == 'the summary\npublished, complete\n'


def test_a_signal_once_the_run_is_over_says_what_it_published():
  """`python -m pipeline.convert` has before_run's handlers back once the run
  is over (its last flush and exit): they too say the dataset is complete."""
  script = """
import os, signal, sys
from pipeline.runs import interrupts
interrupts.before_run('nothing was published')
handlers = interrupts.Handlers('nothing was published', 'again').install()
with handlers.running():
  interrupts.published('published, complete')
handlers.finish()
print('the summary', file=sys.stderr, flush=True)
os.kill(os.getpid(), signal.SIGTERM)
"""
  assert _stderr_ending_by(signal.SIGTERM, script) == 'the summary\npublished, complete\n'


def test_without_the_command_lines_handlers_neither_hook_does_anything():
  interrupts.raise_if_interrupted()
  interrupts.published('unused')


def test_a_command_line_run_is_kept_out_of_interactive_beam():
  """Beam asks whether it runs in IPython on each transform applied: a command
  line run never is, and the question (an import of IPython, in a bare
  `except:`) is skipped."""
  from apache_beam import pipeline as beam_pipeline

  from pipeline.runs import exits
  seen = []
  before = beam_pipeline.is_in_ipython
  assert exits.run_command(lambda argv: seen.append(
      (beam_pipeline.is_in_ipython is before, beam_pipeline.is_in_ipython())) or 0,
      [], 'line', 'again') == 0
  assert seen == [(False, False)]  # not Beam's own, during the run
  assert beam_pipeline.is_in_ipython is before


_SWALLOWED_THEN_RUN = """
import os, signal, sys
from pipeline import convert, validate
from pipeline.runs import interrupts
handlers = interrupts.Handlers({line!r}, 'again').install()
try:
  with handlers.running():
    try:
      os.kill(os.getpid(), signal.SIGTERM)
    except:  # as Beam's is_in_ipython, while a pipeline is built
      pass
    {module}.run({argv!r})
except interrupts.Interrupted:
  pass
handlers.finish()
"""


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_swallowed_signal_writes_no_report(tmp_path):
  """End to end: the job runs to its end, then validate takes back its
  report and its line is true."""
  sample = make_sample(tmp_path / 'sample')
  out = tmp_path / 'out'
  assert convert.run(['--manifest', str(sample.manifest), '--output_dir', str(out),
                      *SMALL]) == EXIT_OK
  before = sorted(os.listdir(out))
  done = _run_script(_SWALLOWED_THEN_RUN.format(line=VALIDATE_LINE, module='validate',
                                                argv=['--input_dir', str(out)]))
  assert (done.returncode, done.stderr) == (-signal.SIGTERM, VALIDATE_LINE + '\n')
  assert sorted(os.listdir(out)) == before


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_swallowed_signal_after_which_the_job_published_keeps_the_dataset(tmp_path):
  """A local job runs whole inside Beam's run(): by the time the run learns
  of a signal Beam swallowed, the job has written dataset_info.json, which
  readers take as the dataset being complete. It stays, and the line says so
  (before, the run deleted it and said nothing was published)."""
  sample = make_sample(tmp_path / 'sample')
  out = tmp_path / 'out'
  argv = ['--manifest', str(sample.manifest), '--output_dir', str(out), *SMALL,
          '--progress', 'off']
  done = _run_script(_SWALLOWED_THEN_RUN.format(line=CONVERT_LINE, module='convert',
                                                argv=argv))
  assert (done.returncode, done.stderr) == (-signal.SIGTERM,
                                            interrupts.CONVERT_PUBLISHED_LINE + '\n')
  assert read_info(out)['num_examples'] == 9
  assert validate.run(['--input_dir', str(out)]) == EXIT_OK


def test_an_interrupted_that_python_cannot_raise_prints_nothing_and_still_stops_the_run():
  """A signal inside a __del__ or a weakref callback: Python prints what the
  handler raises there as "Exception ignored in ..." with a traceback (2 of
  14 SIGTERMs as a job ended) and goes on. The hook keeps stderr to the one
  line; the run still learns of the signal before it counts as done."""
  script = """
import os, signal, sys
from pipeline.runs import interrupts

class Dropped:
  def __del__(self):
    os.kill(os.getpid(), signal.SIGTERM)

handlers = interrupts.Handlers('the one line', 'again').install()
try:
  with handlers.running():
    Dropped()
    print('went on', file=sys.stderr)
    interrupts.raise_if_interrupted()
except interrupts.Interrupted:
  print('unwound', file=sys.stderr)
handlers.finish()
"""
  assert _stderr_ending_by(signal.SIGTERM, script) == 'went on\nunwound\nthe one line\n'


def test_other_unraisable_exceptions_are_still_printed():
  script = """
import sys
from pipeline.runs import interrupts

class Broken:
  def __del__(self):
    raise ValueError('a bug in a __del__')

handlers = interrupts.Handlers('the one line', 'again').install()
Broken()
handlers.finish()
assert sys.unraisablehook is sys.__unraisablehook__
"""
  done = _run_script(script)
  assert done.returncode == 0, done.stderr
  assert 'ValueError: a bug in a __del__' in done.stderr


_SIGNAL_ONCE_PUBLISHED = """
import os, signal, sys
from pipeline import convert
from pipeline.runs import exits, interrupts
from transforms import write_metadata

process = write_metadata.WriteInfoFn.process
def process_then_signal(self, *args, **kwargs):
  yield from process(self, *args, **kwargs)
  # dataset_info.json is in OUT: a scheduler waiting for it has started
  os.kill(os.getpid(), signal.SIGTERM)
write_metadata.WriteInfoFn.process = process_then_signal
sys.exit(exits.run_command(convert.run, {argv!r}, *interrupts.CONVERT_LINES))
"""


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_signal_once_dataset_info_is_written_keeps_the_dataset(tmp_path):
  """dataset_info.json is written last and its presence means the dataset is
  complete: a signal between the job writing it and the run learning its job
  ended must not take the dataset back (it did, saying nothing was published,
  in about half of the tries)."""
  sample = make_sample(tmp_path / 'sample')
  out, night = tmp_path / 'out', tmp_path / 'nights' / 'n2'
  argv = ['--manifest', str(sample.manifest), '--output_dir', str(out), *SMALL,
          '--progress', 'off']
  assert convert.run(argv) == EXIT_OK
  full = {name: (out / name).read_bytes() for name in os.listdir(out)
          if name.endswith('.tfrecord')}
  done = _run_script(_SIGNAL_ONCE_PUBLISHED.format(
      argv=[*argv[:3], str(night), *argv[4:], '--previous_dataset', str(out)]))
  assert done.returncode == -signal.SIGTERM, done.stderr
  assert done.stderr == interrupts.CONVERT_PUBLISHED_LINE + '\n'
  assert 'Converted' in done.stdout  # the run finished: its summary
  info = read_info(night)
  assert info['num_examples'] == len(sample.labels) == 9
  assert {name: (night / name).read_bytes() for name in full} == full
  assert sorted(os.listdir(night)) == sorted(os.listdir(out))  # its lock released too
  # the nightly's last step too: `latest` names the new dataset
  assert (night.parent / 'latest').exists()
  assert validate.run(['--input_dir', str(night)]) == EXIT_OK


def test_image_worker_processes_start_with_sigint_blocked():
  """A terminal's Ctrl-C reaches the whole process group: an image worker
  still importing printed its KeyboardInterrupt traceback above the run's
  one line. The pool's spawner thread blocks SIGINT, and its children start
  so, until process_worker's main() ignores it."""
  from transforms.workers.child_process import _SPAWNER
  child = _SPAWNER.popen([sys.executable, '-c', 'print(open("/proc/self/status").read())'],
                         stdout=subprocess.PIPE, text=True)
  status, _ = child.communicate(timeout=60)
  blocked = int(next(line for line in status.splitlines()
                     if line.startswith('SigBlk:')).split()[1], 16)
  assert blocked & (1 << (signal.SIGINT - 1))
  assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # not this thread


_SIGHUP_BEFORE_PUBLISHING = """
import os, signal, sys
from pipeline import convert
from pipeline.runs import exits, interrupts
from transforms import write_metadata

if {ignored!r}:
  signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts the run
process = write_metadata.WriteInfoFn.process
def hang_up_then_process(self, *args, **kwargs):
  # the shards and the lock are in OUT, dataset_info.json not yet: the
  # terminal the run was started from goes away
  os.kill(os.getpid(), signal.SIGHUP)
  yield from process(self, *args, **kwargs)
write_metadata.WriteInfoFn.process = hang_up_then_process
sys.exit(exits.run_command(convert.run, {argv!r}, *interrupts.CONVERT_LINES))
"""


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('ignored', [False, True], ids=['plain', 'nohup'])
def test_sighup_cleans_up_as_sigterm_does_and_nohup_keeps_the_run_going(ignored, tmp_path):
  """A closed terminal or ssh session sends SIGHUP. Its default action ended
  the run where it stood, as SIGKILL does: no line, its shards, lock and temp
  folder left, and the rerun refused without --overwrite. Now it is one of
  the run's signals: the run cleans up, says so and ends by SIGHUP (a shell
  shows 129). Started under nohup (SIGHUP ignored), the run goes on and
  publishes its dataset."""
  sample = make_sample(tmp_path / 'sample')
  out, temp = tmp_path / 'out', tmp_path / 'temp'
  temp.mkdir()
  argv = ['--manifest', str(sample.manifest), '--output_dir', str(out), *SMALL,
          '--progress', 'off']
  done = subprocess.run([sys.executable, '-c', _SIGHUP_BEFORE_PUBLISHING.format(
      ignored=ignored, argv=argv)], cwd=ROOT, capture_output=True, text=True, timeout=120,
      env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(temp)))
  assert os.listdir(temp) == []  # no img2tfrecord-run-*
  if ignored:
    assert (done.returncode, done.stderr) == (EXIT_OK, '')
    assert read_info(out)['num_examples'] == 9
    return
  assert (done.returncode, done.stderr) == (-signal.SIGHUP, CONVERT_LINE + '\n')
  assert os.listdir(out) == []  # no lock, shard, label map or dataset_info.json
  assert convert.main(argv) == EXIT_OK  # the rerun needs no --overwrite
  assert read_info(out)['num_examples'] == 9


def test_sighup_is_one_of_the_run_s_signals_unless_ignored_at_start():
  assert signal.SIGHUP in interrupts.SIGNALS
  previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
  try:
    handlers = interrupts.Handlers('line', 'again').install()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    handlers.finish()
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    handlers = interrupts.Handlers('line', 'again').install()
    assert signal.getsignal(signal.SIGHUP) == handlers._handle
    handlers.finish()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
  finally:
    signal.signal(signal.SIGHUP, previous)
