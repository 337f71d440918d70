"""The seven places where the project leans on Beam's internals, each checked
against the pinned Beam by tests/test_beam_runtime.py:

  beam_signatures  Beam's DoFn method inspection, remembered per function
  startup          Beam imported without the cloud packages a local run never uses
  local_runner     the DirectRunner's batch mode without its detour through Prism
  fast_exit        the end of a command line run without the interpreter's teardown
  not_interactive  pipeline.api's pipelines kept out of Interactive Beam in a notebook
  job_server_sigint  the run's own SIGINT handling kept when Beam starts a Flink or Spark job server
  sdk_workers      a multi_processing run's SDK worker processes stopped when the run is interrupted

Nothing here imports Beam at import time: startup runs before Beam is imported.

May import: transforms.core.
"""

# The local runners, by the last dotted part of --runner: the one list
# (pipeline/engines/runners.py and the hooks here read it). 'direct' too: Beam and
# local_runner.for_options accept it for the DirectRunner. Beam's own
# StandardOptions.LOCAL_RUNNERS is not it: it holds PrismRunner and lacks 'direct'.
LOCAL_RUNNERS = ('DirectRunner', 'FnApiRunner', 'SwitchingDirectRunner', 'direct')
