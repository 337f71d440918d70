"""A run that does not finish leaves nothing half-done: RunGuard cancels its
job and deletes what it wrote, on any exception (an error, KeyboardInterrupt,
the command line's Interrupted). It installs no signal handler: the command
line does (pipeline/runs/interrupts.py); a Python caller gets the same clean-up
on its own KeyboardInterrupt."""

from __future__ import annotations

from collections.abc import Callable
import sys
import time
from typing import Optional

from apache_beam.runners.runner import PipelineResult
from apache_beam.runners.runner import PipelineState

from pipeline.beam_runtime import local_runner
from pipeline.runs import interrupts

# How long clean-up waits for a cancelled job to stop before deleting what it
# wrote: a runner may still be finishing a shard (Dataflow takes minutes to
# cancel; a second signal ends the wait at once).
CANCEL_WAIT_S = 30.0
_POLL_S = 0.5


class RunGuard:
  """`with RunGuard(clean_up) as guard: guard.run(pipeline)`.

  run() submits the pipeline and keeps its PipelineResult before waiting for
  it, so that when the block is left by an exception, a job still running on
  a non-local runner is cancelled first, so that it stops writing (a portable
  job service, Dataflow: PipelineResult.cancel(); Flink and Spark: by their
  own clean-up, through the job server, engine_runners.py), then clean_up()
  runs. A local run executes inside pipeline.run(): the exception
  stops it there, nothing is left to cancel.
  """

  def __init__(self, clean_up: Optional[Callable[[], None]] = None,
               cancel_wait_s: float = CANCEL_WAIT_S):
    self._clean_up = clean_up
    self._cancel_wait_s = cancel_wait_s
    self.result: Optional[PipelineResult] = None
    self.job_done = False  # the job ended well (its outputs are all written)

  def run(self, pipeline) -> PipelineResult:
    """Runs `pipeline` to its end; a job that ends in any state but DONE
    (cancelled from outside, say) is an error."""
    # Embedded Flink and Spark run their SDK harness in this process (LOOPBACK)
    # while it waits: the local runner's settings there too (8,000 JPEGs on
    # Flink: 3 full collections, 7 us a row of the harness's ~215).
    with local_runner.harness_settings():
      self.result = local_runner.run(pipeline)
      if interrupts.swallowed():
        # A signal swallowed while the job was built or submitted: the run
        # stops now, not after the whole job (hours on Dataflow). A local
        # job has run whole inside run(): its outputs are written.
        self.job_done = _ended_well(self.result)
      interrupts.raise_if_interrupted()
      # The state the wait ended in: by then a Flink or Spark run has stopped
      # its job server (engine_runners), and asking it again fails (closed channel).
      state = self.result.wait_until_finish()
    if state is None:
      state = self.result.state
    if state != PipelineState.DONE:
      raise RuntimeError(f'the job ended in state {state}')
    self.job_done = True
    interrupts.raise_if_interrupted()
    return self.result

  def __enter__(self) -> RunGuard:
    return self

  def __exit__(self, exc_type, exc, tb) -> bool:
    if exc_type is None:
      return False
    try:
      self._cancel()
    finally:
      if self._clean_up is not None:
        self._clean_up()
    return False

  def _cancel(self) -> None:
    result = self.result
    if result is None:
      return  # never submitted (or a local run, which stopped with the exception)
    if getattr(result, 'job_server_stopped', False):
      return  # Flink, Spark: cancelled with the job's clean-up (engine_runners)
    # A portable job last seen in a terminal state (failed: its job server is
    # stopped already) needs no asking.
    if PipelineState.is_terminal(getattr(result, '_state', None) or PipelineState.UNKNOWN):
      return
    try:
      if PipelineState.is_terminal(result.state):
        return
      result.cancel()
      deadline = time.monotonic() + self._cancel_wait_s
      while not PipelineState.is_terminal(result.state) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    except Exception as error:  # the job service gone too: clean up all the same
      print(f'note: could not cancel the job: {type(error).__name__}: {error}',
            file=sys.stderr)


def _ended_well(result: PipelineResult) -> bool:
  try:
    return result.state == PipelineState.DONE
  except Exception:  # a job service gone: it cannot have ended well as far as we know
    return False
