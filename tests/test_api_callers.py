"""pipeline.api called from where programs embedding it call it: a worker
thread, a process forked while another thread runs a convert, a process whose
sys.stderr a notebook or an IDE replaced or closed. What each call leaves
behind (threads, a held lock) and what it raises."""

from __future__ import annotations

import functools
import io
import threading

import pytest

from pipeline import api
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
