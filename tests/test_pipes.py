"""Every command, its stdout closed before it writes (`... | head -1` once
head has gone): exit 141, as `yes | head -1`, and no traceback. A run whose
summary finds no reader has still written its dataset."""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from pipeline import convert
from pipeline import errors
from pipeline.runs import exits
from pipeline.runs import std_streams
from tests.conftest import make_sample
from tests.conftest import noise_png
from tests.conftest import read_examples
from tests.conftest import rejected_lines
from tests.conftest import write_manifest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
CONSOLE_SCRIPT = shutil.which('img2tfrecord', path=os.path.dirname(PY))


def _started(argv: list, cwd) -> subprocess.Popen:
  """argv started with a stdout whose reader is already gone."""
  read, write = os.pipe()
  os.close(read)
  try:
    return subprocess.Popen(argv, stdout=write, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
  finally:
    os.close(write)


@pytest.mark.slow  # Beam in subprocesses
@pytest.mark.integration  # a long system test: make test stays within 6 minutes
def test_every_command_exits_141_without_a_traceback_when_stdout_is_gone(tmp_path):
  sample = make_sample(tmp_path / 'sample')
  done = subprocess.run([PY, '-m', 'pipeline.convert', '--manifest', str(sample.manifest),
                         '--output_dir', str(sample.out)], capture_output=True, text=True,
                        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
  assert done.returncode == 0, done.stderr
  out = str(sample.out)
  commands = {
      'convert': [PY, '-m', 'pipeline.convert', '--manifest', str(sample.manifest),
                  '--output_dir', str(tmp_path / 'again')],
      'convert --help': [PY, '-m', 'pipeline.convert', '--help'],
      'validate': [PY, '-m', 'pipeline.validate', '--input_dir', out, '--report',
                   str(tmp_path / 'report.json')],
      'look': [PY, '-m', 'pipeline.look', '--input_dir', out],
      'export --help': [PY, '-m', 'pipeline.export', '--help'],
      'engines --help': [PY, '-m', 'pipeline.engines', '--help'],
      'demo --help': [PY, '-m', 'pipeline.demo', '--help'],
      'demo_detection --help': [PY, '-m', 'pipeline.demo_detection', '--help'],
      'demo_sources --help': [PY, '-m', 'pipeline.demo_sources', '--help'],
      'flex_template --help': [PY, '-m', 'pipeline.flex_template', '--help'],
      'flex_launch --help': [PY, str(ROOT / 'pipeline' / 'flex_launch.py'), '--help'],
      'cli inspect': [PY, '-m', 'pipeline.cli', 'inspect', '--input_dir', out],
      'cli --help': [PY, '-m', 'pipeline.cli', '--help'],
  }
  if CONSOLE_SCRIPT:
    commands['img2tfrecord inspect'] = [CONSOLE_SCRIPT, 'inspect', '--input_dir', out]
  # All at once: each mostly waits on its imports.
  started = {name: _started(argv, ROOT) for name, argv in commands.items()}
  ended = {}
  for name, child in started.items():
    _, err = child.communicate(timeout=300)
    ended[name] = (child.returncode, err)
  assert {name: code for name, (code, _) in ended.items()} == {
      name: errors.EXIT_STDOUT_CLOSED for name in commands}, ended
  assert {name: err for name, (_, err) in ended.items() if 'Traceback' in err} == {}
  # convert's summary found no reader; its dataset is whole all the same
  check = subprocess.run([PY, '-m', 'pipeline.validate', '--input_dir', str(tmp_path / 'again'),
                          '--expected_count', '9'], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
  assert check.returncode == 0, check.stdout + check.stderr


def test_a_broken_pipe_that_is_not_stdout_is_the_job_s_failure(capsys):
  """A socket of the job's closed under it raises BrokenPipeError too: that is
  a failed run (exit 1, its reason), not a reader gone."""
  def run(argv):
    raise BrokenPipeError(32, 'Broken pipe')

  assert exits.main_with_exit_codes(run, []) == errors.EXIT_FAILED
  assert 'error: the job failed: BrokenPipeError: [Errno 32] Broken pipe' in (
      capsys.readouterr().err)


def test_stdout_closed_tells_a_pipe_without_reader(monkeypatch):
  read, write = os.pipe()
  with open(write, 'w') as stream:
    monkeypatch.setattr(sys, 'stdout', stream)
    assert not std_streams.stdout_closed()
    os.close(read)
    assert std_streams.stdout_closed()
    monkeypatch.undo()


def test_a_command_started_with_stdout_closed_ends_as_it_would(tmp_path):
  """`cmd >&-`: Python's sys.stdout is None and print writes nothing. The run
  ends with its own exit code, no traceback (was AttributeError: 'NoneType'
  object has no attribute 'flush', exit 1, its dataset written)."""
  sample = make_sample(tmp_path / 'sample')
  done = subprocess.run(['bash', '-c', 'exec "$@" >&-', 'bash', PY, '-m', 'pipeline.convert',
                         '--manifest', str(sample.manifest), '--output_dir', str(sample.out)],
                        capture_output=True, text=True, cwd=ROOT, timeout=300,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert (done.returncode, done.stderr) == (errors.EXIT_OK, '')
  assert (sample.out / 'dataset_info.json').is_file()


def test_over_budget_with_stdout_closed_exits_3(tmp_path, monkeypatch, capsys):
  from pipeline import convert
  sample = make_sample(tmp_path)
  with open(sample.manifest, 'a') as handle:
    handle.write('images/missing.png,red\n')
  monkeypatch.setattr(sys, 'stdout', None)  # as Python starts with fd 1 closed
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out)])
  monkeypatch.undo()
  err = capsys.readouterr().err
  assert code == errors.EXIT_OVER_BUDGET and 'Traceback' not in err, err
  assert err.strip().endswith('exit code 3.'), err


def test_over_budget_with_stderr_s_reader_gone_exits_3(tmp_path):
  """`convert ... 2>&1 >log | head -1` once head has gone: the over-budget
  line finds no reader on stderr. The run's code stands (3, its dataset
  published); it was exit 1, as if the job had failed."""
  sample = make_sample(tmp_path / 'sample')
  with open(sample.manifest, 'a') as handle:
    handle.write('images/missing.png,red\n')
  read, write = os.pipe()
  os.close(read)
  try:
    done = subprocess.run([PY, '-m', 'pipeline.convert', '--manifest', str(sample.manifest),
                           '--output_dir', str(sample.out)], stdout=subprocess.PIPE,
                          stderr=write, text=True, cwd=ROOT, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
  finally:
    os.close(write)
  assert done.returncode == errors.EXIT_OVER_BUDGET, done.stdout
  assert 'rejected read/missing_file: 1' in done.stdout
  assert len(read_examples(sample.out)) == 9


def test_exit_with_and_stdout_none(monkeypatch):
  monkeypatch.setattr(sys, 'stdout', None)
  with pytest.raises(SystemExit) as done:
    exits.exit_with(lambda: errors.EXIT_OVER_BUDGET)
  assert done.value.code == errors.EXIT_OVER_BUDGET


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='no /dev/full here')
def test_stdout_on_a_full_disk_keeps_the_run_s_exit_code(tmp_path):
  """`convert ... > log` with the log's disk full (/dev/full: every write
  fails with ENOSPC): the dataset is written, so exit 0 and one warning;
  validate's own verdict too. It was exit 1, `error: the job failed`."""
  sample = make_sample(tmp_path / 'sample')
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  with open('/dev/full', 'w') as full:
    done = subprocess.run([PY, '-m', 'pipeline.convert', '--manifest', str(sample.manifest),
                           '--output_dir', str(sample.out)], stdout=full, stderr=subprocess.PIPE,
                          text=True, cwd=ROOT, timeout=300, env=env)
    assert done.returncode == errors.EXIT_OK, done.stderr
    assert done.stderr == ('warning: stdout could not be written (OSError: [Errno 28] No '
                           'space left on device): what the command printed there is '
                           'incomplete; its exit code (0) stands\n')
    assert (sample.out / 'dataset_info.json').is_file()
    (sample.out / 'label_map.txt').write_text('tampered\n')
    done = subprocess.run([PY, '-m', 'pipeline.validate', '--input_dir', str(sample.out)],
                          stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          timeout=300, env=env)
  assert done.returncode == errors.EXIT_FAILED, done.stderr
  assert done.stderr.endswith('its exit code (1) stands\n') and 'Traceback' not in done.stderr


def test_a_write_error_on_stdout_is_remembered_and_a_closed_pipe_still_raised(monkeypatch,
                                                                               capsys):
  class Failing:
    def __init__(self, error):
      self.error = error

    def write(self, text):
      raise self.error

    def flush(self):
      raise self.error

    def fileno(self):
      return 1

  full = Failing(OSError(28, 'No space left on device'))
  monkeypatch.setattr(sys, 'stdout', full)
  monkeypatch.setattr(os, 'dup2', lambda *_: None)  # the test's own stdout stays
  with pytest.raises(SystemExit) as done:
    exits.exit_with(lambda: print('a summary') or errors.EXIT_OVER_BUDGET)
  assert done.value.code == errors.EXIT_OVER_BUDGET and sys.stdout is full
  assert 'its exit code (3) stands' in capsys.readouterr().err
  monkeypatch.setattr(sys, 'stdout', Failing(BrokenPipeError(32, 'Broken pipe')))
  monkeypatch.setattr(exits, 'stdout_closed', lambda: True)
  monkeypatch.setattr(std_streams, 'stdout_closed', lambda: True)
  with pytest.raises(SystemExit) as done:
    exits.exit_with(lambda: print('a summary') or errors.EXIT_OK)
  assert done.value.code == errors.EXIT_STDOUT_CLOSED


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='no /dev/full here')
def test_stdout_and_stderr_on_a_full_disk_keep_the_run_s_exit_code(tmp_path):
  """`convert ... > log 2>&1` with the log's disk full: what goes to stderr
  (the over-budget line, the stdout warning) cannot be written either; the
  run's own code stands (it was exit 1, from that line's own OSError).
  inspect: the interpreter's teardown path (no exit 120)."""
  sample = make_sample(tmp_path / 'sample')
  with open(sample.manifest, 'a') as handle:
    handle.write('images/missing.png,red\n')
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  with open('/dev/full', 'w') as full:
    for command, code in (
        (['pipeline.convert', '--manifest', str(sample.manifest), '--output_dir'],
         errors.EXIT_OVER_BUDGET),
        (['pipeline.look', '--input_dir'], errors.EXIT_OK)):
      done = subprocess.run([PY, '-m', *command, str(sample.out)], stdout=full, stderr=full,
                            cwd=ROOT, timeout=300, env=env)
      assert done.returncode == code, command
  assert (sample.out / 'dataset_info.json').is_file()


def test_a_convert_started_with_stdin_and_stdout_closed_converts_as_it_would(tmp_path):
  """`cmd <&- >&-`: the tick pipe of the image processes' time limit got fds
  0 and 1, and a child's reply stream took its write end's number: ticks went
  into stderr, the reply stream was non-blocking, and a reply over a pipe's
  64 KiB failed (BlockingIOError: rows decode/unexpected_error WorkerDied,
  exit 3). Now the records are those of a run with its stdio open."""
  rows = []
  for n in range(3):
    (tmp_path / f'{n}.png').write_bytes(noise_png(n, (200, 200)))  # ~120 KB a reply
    rows.append((f'{n}.png', 'ab'[n % 2]))
  manifest = write_manifest(tmp_path / 'm.csv', rows)
  flags = ['--manifest', str(manifest), '--height', '200', '--width', '200', '--encoding',
           'png', '--image_processes', '1', '--image_timeout_s', '60', '--progress', 'off']
  done = subprocess.run(['bash', '-c', 'exec "$@" <&- >&-', 'bash', PY, '-m', 'pipeline.convert',
                         *flags, '--output_dir', str(tmp_path / 'closed')],
                        stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert (done.returncode, done.stderr) == (errors.EXIT_OK, '')
  assert convert.main([*flags, '--output_dir', str(tmp_path / 'open')]) == errors.EXIT_OK
  shard = 'train-00000-of-00001.tfrecord'
  assert (tmp_path / 'closed' / shard).read_bytes() == (tmp_path / 'open' / shard).read_bytes()
  assert rejected_lines(tmp_path / 'closed') == []
  assert len(read_examples(tmp_path / 'closed')) == 3


@pytest.mark.parametrize('closed', ['2>&-', '<&- >&- 2>&-'])
def test_a_convert_started_with_stderr_closed_converts_as_it_would(tmp_path, closed):
  """`cmd 2>&-` (a crontab line discarding errors): Python's sys.stderr is
  None, and the run crashed on sys.stderr.isatty() before anything was
  written (exit 1, "the job failed: AttributeError" on stdout; every
  descriptor closed: exit 1 and not a word). Now it converts as with its
  stdio open, the closed descriptors on /dev/null."""
  sample = make_sample(tmp_path / 'sample')
  done = subprocess.run(['bash', '-c', f'exec "$@" {closed}', 'bash', PY, '-m',
                         'pipeline.convert', '--manifest', str(sample.manifest), '--output_dir',
                         str(tmp_path / 'closed')],
                        stdout=subprocess.PIPE, text=True, cwd=ROOT, timeout=300,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert done.returncode == errors.EXIT_OK
  assert done.stdout.startswith('Converted 9 of 9 rows') if closed == '2>&-' else (
      done.stdout == '')
  assert convert.main(['--manifest', str(sample.manifest), '--output_dir',
                       str(sample.out)]) == errors.EXIT_OK
  shard = 'train-00000-of-00001.tfrecord'
  assert (tmp_path / 'closed' / shard).read_bytes() == (sample.out / shard).read_bytes()
  assert len(read_examples(tmp_path / 'closed')) == 9


def test_the_tick_pipe_is_above_stdio_when_stdin_and_stdout_are_closed():
  code = ('import os; os.close(0); os.close(1); '
          'from transforms.workers import progress_ticks; '
          'ends = progress_ticks.pipe(); '
          'os.write(ends[1], b"."); '
          'assert os.read(ends[0], 1) == b"."; '
          'assert not os.get_inheritable(ends[0]) and not os.get_inheritable(ends[1]); '
          'os.write(2, repr([fd >= 3 for fd in ends]).encode())')
  done = subprocess.run([PY, '-c', code], stderr=subprocess.PIPE, text=True, cwd=ROOT,
                        timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert (done.returncode, done.stderr) == (0, '[True, True]')


def test_a_spark_context_stopped_before_the_job_is_one_line_saying_why(capsys):
  """A --spark_master_url that takes connections but is no Spark master: the
  job fails after Spark's tries with this text (and 55 lines of the
  launcher's traceback before): one line now, saying what it means."""
  def run(argv):
    try:
      raise OSError('the job service answered')
    except OSError as cause:
      raise RuntimeError(
          'Pipeline BeamApp-root-1 failed in state FAILED: java.lang.IllegalStateException: '
          'Cannot call methods on a stopped SparkContext.\nThis stopped SparkContext was '
          'created at:\n\norg.apache.spark.api.java.JavaSparkContext.<init>(x.scala:58)\n') \
          from cause

  assert exits.main_with_exit_codes(run, []) == errors.EXIT_FAILED
  assert capsys.readouterr().err.splitlines() == [
      'error: the job failed: RuntimeError: Pipeline BeamApp-root-1 failed in state FAILED: '
      'java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext. '
      '(Spark stopped before the job could run: no Spark master took it (one is given up on '
      'after about a minute of tries); check that --spark_master_url names a running Spark '
      'master, or leave it out to run Spark inside the job server)']


def test_a_spark_master_without_its_cluster_manager_is_one_line(capsys):
  """--spark_master_url yarn on the assembled job server (Spark's core, no
  spark-yarn): the job failed after 13 s with 21 lines and a traceback."""
  def run(argv):
    raise RuntimeError("Pipeline BeamApp-root-3 failed in state FAILED: "
                       "org.apache.spark.SparkException: Could not parse Master URL: 'yarn'")

  assert exits.main_with_exit_codes(run, []) == errors.EXIT_FAILED
  assert capsys.readouterr().err.splitlines() == [
      "error: the job failed: RuntimeError: Pipeline BeamApp-root-3 failed in state FAILED: "
      "org.apache.spark.SparkException: Could not parse Master URL: 'yarn' (the job server's "
      'Spark has no cluster manager for that --spark_master_url; the assembled job server '
      'takes local[N] and spark:// masters only: give one of those, or a '
      '--spark_job_server_jar built with that cluster manager)']


def test_a_manifest_cut_short_is_the_local_runs_line_on_an_engine(capsys):
  """Flink and Spark report a manifest that cannot be read whole inside
  their job's failure: `error: the job failed: RuntimeError: Pipeline
  BeamApp-... failed in state FAILED: java.lang.RuntimeException: Error
  received from SDK harness for instruction 3: transforms.core.line_ranges.
  ManifestCutShortError: ...` below 63 lines of two logged tracebacks; the
  DirectRunner's line is `error: the job failed: ManifestCutShortError: ...`."""
  cut = ('manifest /d/cut.csv.gz: its compressed stream breaks off after line 127: the lines '
         'after it are lost (EOFError: Compressed file ended before the end-of-stream marker '
         'was reached)')

  def run(argv):
    raise RuntimeError(
        'Pipeline BeamApp-root-4 failed in state FAILED: java.lang.RuntimeException: Error '
        'received from SDK harness for instruction 3: transforms.core.line_ranges.'
        f"ManifestCutShortError: {cut} [while running 'ReadManifest/Read']\n\tat x.y(Z.java:1)")

  assert exits.main_with_exit_codes(run, []) == errors.EXIT_FAILED
  assert capsys.readouterr().err.splitlines() == [
      f'error: the job failed: ManifestCutShortError: {cut}']
  harness = ('Error processing instruction 3. Original traceback is\nTraceback (most recent '
             'call last):\n  File "x.py", line 1, in f\ntransforms.core.line_ranges.'
             f'ManifestCutShortError: {cut}\n')
  record = logging.LogRecord('apache_beam.runners.worker.sdk_worker', logging.ERROR, __file__,
                             1, '%s', (harness,), None)
  assert exits._no_repeated_failures(record) is False


def test_another_job_failure_keeps_its_traceback(capsys):
  def run(argv):
    raise RuntimeError('Pipeline BeamApp-root-2 failed in state FAILED: a bug somewhere')

  assert exits.main_with_exit_codes(run, []) == errors.EXIT_FAILED
  err = capsys.readouterr().err
  assert err.startswith('error: the job failed: RuntimeError: Pipeline BeamApp-root-2 failed '
                        'in state FAILED: a bug somewhere\nTraceback (most recent call last):')


@pytest.mark.parametrize('message, kept', [
    ('java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.\n'
     'This stopped SparkContext was created at:\n...', False),
    ('write failed: [Errno 28] No space left on device', False),
    ('java.lang.IllegalStateException: something else', True),
], ids=['spark_stopped', 'full_disk', 'other'])
def test_the_log_leaves_out_what_the_run_s_one_line_says(message, kept):
  """Beam's job service client logs an engine's failure whole (30 lines of
  Spark's stack); a full disk is logged with its traceback by Beam's step."""
  record = logging.LogRecord('apache_beam', logging.ERROR, __file__, 1, '%s', (message,), None)
  assert exits._no_repeated_failures(record) is kept


def test_text_stdout_cannot_encode_is_escaped_and_the_exit_code_stands(tmp_path):
  """A label or path stdout's encoding cannot hold (PYTHONIOENCODING=ascii,
  a Latin-1 locale and a Chinese class name): the summary prints it escaped,
  as stderr does. Each command exited 1 with a traceback (convert, validate:
  "the job failed: UnicodeEncodeError") after a complete dataset."""
  out = tmp_path / 'out é'
  (tmp_path / 'a.png').write_bytes(noise_png(0))
  manifest = write_manifest(tmp_path / 'm.csv', [('a.png', 'café')])
  env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING='ascii')
  printed = {}
  for command in (['pipeline.convert', '--manifest', str(manifest), '--output_dir'],
                  ['pipeline.validate', '--input_dir'], ['pipeline.look', '--input_dir']):
    done = subprocess.run([PY, '-m', *command, str(out)], capture_output=True, text=True,
                          encoding='ascii', errors='strict', cwd=ROOT, timeout=300, env=env)
    assert (done.returncode, done.stderr) == (errors.EXIT_OK, ''), command
    assert 'out \\xe9' in done.stdout, command
    printed[command[0]] = done.stdout
  assert 'per class: caf\\xe9 1' in printed['pipeline.convert']
  assert len(read_examples(out)) == 1
