"""The local runner: Beam's DirectRunner without its detour through Prism."""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import gc
import threading
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.runner import PipelineResult
from apache_beam.runners.runner import PipelineRunner

from pipeline.beam_runtime import LOCAL_RUNNERS
from pipeline.beam_runtime import runner_class_name
from pipeline.beam_runtime import sdk_workers

# The local runners that name the DirectRunner; FnApiRunner, the other one, Beam makes itself.
_DIRECT_RUNNERS = tuple(r for r in LOCAL_RUNNERS if r != 'FnApiRunner')


class LocalRunner(PipelineRunner):
  """Runs a batch pipeline on Beam's FnApiRunner, as Beam 2.77's DirectRunner
  does for batch pipelines once it has given up on Prism.

  The DirectRunner first tries the PrismRunner, which starts a worker pool,
  stages dependencies and tries to download the Prism binary from GitHub
  before it falls back: a download on a local run (when the machine is
  online), ~0.3 s of CPU per run offline, and three folders left in the temp
  dir. FnApiRunner reads --direct_running_mode and --direct_num_workers itself.
  """

  def is_fnapi_compatible(self):
    return False  # as the DirectRunner: no beam_fn_api experiment added to the options

  def run_pipeline(self, pipeline, options):
    # Deferred: the runner's modules are only needed once a pipeline runs.
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    with harness_settings():
      return fn_runner.FnApiRunner(provision_info=provision).run_pipeline(pipeline, options)


# Python's cyclic collector during a local run (default (700, 10, 10)). The
# run keeps every manifest row alive, so each full collection walks them all:
# on 20,000 16x16 PNGs three full collections took 0.29 s, 11 us a row of the
# launcher's ~80. With these, 100,000 of them: the launcher 0.071-0.072
# against 0.078-0.082 ms a row, the same peak memory (350 MiB). Cycles are
# still collected, less often.
RUN_GC_THRESHOLDS = (10_000, 10, 100)


def _fewer_collections() -> Callable[[], None]:
  """RUN_GC_THRESHOLDS; -> what gives the caller's back."""
  before = gc.get_threshold()
  gc.set_threshold(*RUN_GC_THRESHOLDS)
  return lambda: gc.set_threshold(*before)


# Beam's state sampler sleeps between its samples up to 200 ms, and each
# bundle's end waits for that sleep to end (it joins the sampler's thread):
# a stage running a second or more idled up to 200 ms at its end. Measured
# on a nightly run of 12,000 rows, its 15 bundle ends waited 0.06-0.13 s in
# all, 0.02-0.03 s with 5 ms; a 10-image run 0.04-0.09 against 0.02-0.03 s.
# Nothing of ours reads the sampler's step times.
SAMPLING_PERIOD_MS = 5


def _prompt_bundle_ends() -> Callable[[], None]:
  """SAMPLING_PERIOD_MS for the state samplers made from now on (one per
  stage of the harness in this process); -> what gives Beam's default back."""
  from apache_beam.runners.worker import statesampler
  init = statesampler.StateSampler.__init__
  before = init.__defaults__
  if before != (statesampler.DEFAULT_SAMPLING_PERIOD_MS,):  # another Beam's signature
    return lambda: None
  init.__defaults__ = (SAMPLING_PERIOD_MS,)

  def give_back() -> None:
    init.__defaults__ = before
  return give_back


# How often a dead SDK worker's watcher fails the instructions sent to it.
_DEAD_WORKER_POLL_S = 0.1


def _run_worker(handler, stopping: threading.Event) -> None:
  """The thread of one --direct_running_mode multi_processing SDK worker
  process: Beam's (SubprocessSdkWorker.run), then, if the process ended
  before the runner stopped it (`stopping`), every instruction sent to it
  fails with why, until the runner does.

  Beam's thread only raises `Worker subprocess exited with return code -9`
  and ends: the runner waits for that worker's bundle for ever (a worker
  killed by the OOM killer or `kill -9`: 2 runs of 2 hung, their lock held;
  a SIGTERM to the process group, which reached the workers while the main
  thread waited on their bundle: 4 runs of 12 hung). A failed bundle fails
  the job (exit 1), or lets the run see its signal (exit 143)."""
  from apache_beam.portability.api import beam_fn_api_pb2
  ended = 'the SDK worker process ended'
  try:
    handler.worker.run()
  except Exception as error:  # Beam's RuntimeError: the process's exit status
    ended = f'{type(error).__name__}: {error}'
  futures = handler.control_conn._futures_by_id
  while not stopping.is_set():
    for instruction_id in list(futures):
      future = futures.pop(instruction_id, None)
      if future is not None:
        future.set(beam_fn_api_pb2.InstructionResponse(
            instruction_id=instruction_id, error=f'an SDK worker died: {ended}'))
    stopping.wait(_DEAD_WORKER_POLL_S)


def _dead_workers_fail_bundles() -> Callable[[], None]:
  """SubprocessSdkWorkerHandler.start_worker runs _run_worker as its thread
  (Beam's start_worker otherwise: test_beam_runtime checks its source), and
  stop_worker first queues the end of the worker's control stream: a worker
  whose handler was closed before it connected (a job failing, say on
  another worker's death, while it still started) found no end queued and
  waited for its first instruction for ever, and the run with it (3 runs of
  10 with a worker killed 0-1 s after the first appeared); one already
  told has ended its stream and reads no more. -> what gives Beam's back."""
  from apache_beam.runners.portability.fn_api_runner import worker_handlers
  handler_class = worker_handlers.SubprocessSdkWorkerHandler
  before = handler_class.start_worker, handler_class.stop_worker

  def start_worker(self) -> None:
    from apache_beam.runners.portability import local_job_service
    self.worker = local_job_service.SubprocessSdkWorker(
        sdk_workers.worker_command(self._worker_command_line), self.control_address,
        self.provision_info, self.worker_id)
    self.img2tfrecord_stopping = threading.Event()
    self.worker_thread = threading.Thread(name='run_worker', target=_run_worker,
                                          args=(self, self.img2tfrecord_stopping))
    self.worker_thread.start()

  def stop_worker(self) -> None:
    self.control_conn.push(worker_handlers.BeamFnControlServicer._DONE_MARKER)
    self.img2tfrecord_stopping.set()
    before[1](self)

  handler_class.start_worker, handler_class.stop_worker = start_worker, stop_worker

  def give_back() -> None:
    handler_class.start_worker, handler_class.stop_worker = before
  return give_back


_SETTINGS_LOCK = threading.Lock()
_runs_in_settings = [0, []]  # runs inside harness_settings now, and what gives them back


@contextlib.contextmanager
def harness_settings():
  """What a local run runs under: fewer collections and prompt bundle ends
  (for its SDK harness in this process), and bundles that fail when an SDK
  worker process dies (_run_worker). Runs at once (pipeline.api on
  threads) share them: the first sets them, the last gives the caller's
  back (each giving back its own let the last to end keep them set)."""
  with _SETTINGS_LOCK:
    if _runs_in_settings[0] == 0:
      _runs_in_settings[1] = [_fewer_collections(), _prompt_bundle_ends(),
                              _dead_workers_fail_bundles()]
    _runs_in_settings[0] += 1
  try:
    yield
  finally:
    with _SETTINGS_LOCK:
      _runs_in_settings[0] -= 1
      if _runs_in_settings[0] == 0:
        for give_back in _runs_in_settings[1]:
          give_back()


def run(pipeline) -> PipelineResult:
  """pipeline.run(); for a LocalRunner without Beam's runner-API round trip.

  Beam round-trips a pipeline (to protos and back, unpickling every DoFn)
  before running it unless the runner is Fn API compatible or the
  DirectRunner's batch mode, which skips it; LocalRunner is that batch mode
  by another name, and FnApiRunner translates the pipeline itself anyway.
  Measured on 2 shared cores: a 10-image convert used 0.6 s less CPU, a
  validate 0.15 s less.
  """
  local = isinstance(pipeline.runner, LocalRunner)
  return pipeline.run(test_runner_api=False if local else 'AUTO')


def for_options(options: PipelineOptions) -> Optional[PipelineRunner]:
  """The runner beam.Pipeline gets: a LocalRunner where the options name the
  DirectRunner (they keep saying so), else None (Beam makes the named one)."""
  runner = runner_class_name(options.view_as(StandardOptions).runner)
  return LocalRunner() if runner in _DIRECT_RUNNERS else None
