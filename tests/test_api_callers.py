"""pipeline.api called from where programs embedding it call it: a worker
thread, a process forked while another thread runs a convert, a process whose
sys.stderr a notebook or an IDE replaced or closed. What each call leaves
behind (threads, a held lock) and what it raises."""

from __future__ import annotations

import functools
import io
import multiprocessing
import os
import queue
import sys
import tempfile
import threading

import pytest

from pipeline import api
from pipeline import convert as convert_command
from tests.conftest import read_info
from transforms import write_shards
from transforms.workers.write_behind import WriteBehind


@pytest.mark.parametrize('shards', [{}, {'num_shards': 2}], ids=['size_capped', 'round_robin'])
def test_no_write_behind_thread_is_left_running_after_a_convert(sample, monkeypatch, shards):
  """The shard writers end their write-behind thread at the end of a bundle,
  then closed the split's sidecar, whose last lines started another thread
  that idled on after the call (IDLE_S, 2 s; here made long so it cannot end
  by itself before the check)."""
  monkeypatch.setattr(write_shards, 'WriteBehind', functools.partial(WriteBehind, idle_s=600))
  result = api.convert(manifest=str(sample.manifest), output_dir=str(sample.out), progress=False,
                       **shards)
  assert result.num_examples == 9
  assert sum(split['num_examples'] for split in read_info(sample.out)['splits'].values()) == 9
  assert [t.name for t in threading.enumerate() if t.name == 'write-behind'] == []


@pytest.mark.parametrize('given', [None, 'auto', True, 'on', False])
def test_a_convert_with_sys_stderr_closed_writes_its_dataset_and_returns(sample, monkeypatch,
                                                                          given):
  """A caller that closed sys.stderr (or the StringIO it put there, as IDEs
  and notebook kernels swap streams): the default progress='auto' raised
  ValueError (isatty of a closed file) before anything was done, and
  progress=True raised it once the dataset was written (clearing the line)."""
  closed = io.StringIO()
  closed.close()
  monkeypatch.setattr('sys.stderr', closed)
  result = api.convert(manifest=str(sample.manifest), output_dir=str(sample.out), progress=given)
  assert (result.num_examples, result.num_rejected) == (9, 0)
  assert read_info(sample.out)['splits']['train']['num_examples'] == 9
  assert api.validate(input_dir=str(sample.out), expected_count=9).counts == {'train': 9}


def _convert_in_child(manifest: str, output_dir: str, replies, go) -> None:
  """A forked child's api.convert once `go` is set -> (examples or the error,
  TMPDIR, tempfile's folder) on `replies`."""
  go.wait(timeout=120)
  try:
    outcome = api.convert(manifest=manifest, output_dir=output_dir, progress=False).num_examples
  except BaseException as error:  # reported by the parent's assert
    outcome = repr(error)
  replies.put((outcome, os.environ.get('TMPDIR'), tempfile.gettempdir()))


def _fork_during_a_run(sample, monkeypatch, parent_ends_first: bool) -> tuple:
  """Forks a child while a thread of this process runs api.convert (held
  under way until told); the child converts the sample once told. -> (its
  reply, the thread's examples)."""
  parent = os.getpid()
  running, finish = threading.Event(), threading.Event()
  real = convert_command.convert

  def held_convert(*args):
    if os.getpid() == parent:  # the parent's run stays under way until told
      running.set()
      assert finish.wait(timeout=300)
    return real(*args)
  monkeypatch.setattr(convert_command, 'convert', held_convert)
  outcome = []
  thread = threading.Thread(target=lambda: outcome.append(api.convert(
      manifest=str(sample.manifest), output_dir=str(sample.root / 'parent'),
      progress=False).num_examples))
  thread.start()
  try:
    assert running.wait(timeout=120)
    context = multiprocessing.get_context('fork')
    replies, go = context.Queue(), context.Event()
    child = context.Process(target=_convert_in_child,
                            args=(str(sample.manifest), str(sample.root / 'child'), replies, go))
    child.start()
    try:
      if parent_ends_first:
        finish.set()
        thread.join(timeout=120)
      go.set()
      reply = replies.get(timeout=120)
    except queue.Empty:
      reply = ('the child waited for the lock',)
    finally:
      child.kill()
      child.join()
  finally:
    finish.set()
    thread.join(timeout=120)
  return reply, outcome


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='the fork start method')
def test_a_child_forked_while_a_thread_runs_a_convert_can_convert(sample, monkeypatch):
  """multiprocessing's fork (Linux's default) while another thread of the
  process runs api.convert: the child inherited the one-run-at-a-time lock
  held by a thread it does not have, and its own api.convert waited for
  ever."""
  reply, outcome = _fork_during_a_run(sample, monkeypatch, parent_ends_first=False)
  assert (reply[0], outcome) == (9, [9])
  assert read_info(sample.root / 'child')['num_examples'] == 9


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='the fork start method')
def test_a_child_forked_during_a_run_has_the_caller_s_temp_folder(sample, monkeypatch):
  """The child forked while another thread ran a convert kept that run's
  private folder as TMPDIR and tempfile's folder; the run removed it when it
  ended, and the child's api.convert then raised FileNotFoundError (as would
  any temp file it made). It has the caller's folder back."""
  before = os.environ.get('TMPDIR'), tempfile.gettempdir()
  reply, outcome = _fork_during_a_run(sample, monkeypatch, parent_ends_first=True)
  assert (reply, outcome) == ((9, *before), [9])
  assert read_info(sample.root / 'child')['num_examples'] == 9
  assert (os.environ.get('TMPDIR'), tempfile.gettempdir()) == before


def test_a_note_of_a_run_with_sys_stderr_closed_does_not_fail_it(sample, monkeypatch):
  """--previous_dataset_missing full prints a warning on stderr when the
  previous dataset is missing: with the caller's sys.stderr closed, print
  raised ValueError and the convert failed before it ran. The caller's closed
  stream is sys.stderr again afterwards."""
  closed = io.StringIO()
  closed.close()
  monkeypatch.setattr('sys.stderr', closed)
  result = api.convert(manifest=str(sample.manifest), output_dir=str(sample.out), progress=False,
                       previous_dataset=str(sample.root / 'none'),
                       previous_dataset_missing='full')
  assert (result.num_examples, read_info(sample.out)['num_examples']) == (9, 9)
  assert sys.stderr is closed
