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


_SETTINGS_LOCK = threading.Lock()
_runs_in_settings = [0, []]  # runs inside harness_settings now, and what gives them back


@contextlib.contextmanager
def harness_settings():
  """What a run whose SDK harness is this process runs under: fewer
  collections and prompt bundle ends. Runs at once (pipeline.api on
  threads) share them: the first sets them, the last gives the caller's
  back (each giving back its own let the last to end keep them set)."""
  with _SETTINGS_LOCK:
    if _runs_in_settings[0] == 0:
      _runs_in_settings[1] = [_fewer_collections(), _prompt_bundle_ends()]
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
  runner = str(options.view_as(StandardOptions).runner or '')
  return LocalRunner() if runner.rsplit('.', maxsplit=1)[-1] in _DIRECT_RUNNERS else None
