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

# Beam's runner class names (StandardOptions.KNOWN_RUNNER_NAMES of the pinned
# Beam; tests/test_beam_runtime.py checks): a bare --runner names one of them
# in any case, with or without 'Runner' (runner_class_name).
KNOWN_RUNNERS = ('DataflowRunner', 'BundleBasedDirectRunner', 'DirectRunner',
                 'SwitchingDirectRunner', 'InteractiveRunner', 'FlinkRunner', 'FnApiRunner',
                 'KafkaStreamsRunner', 'PortableRunner', 'PrismRunner', 'SparkRunner',
                 'TestDirectRunner', 'TestDataflowRunner')

# The local runners, by runner_class_name: the one list (pipeline/engines/runners.py
# and the hooks here read it). TestDirectRunner is Beam's DirectRunner too. Beam's
# own StandardOptions.LOCAL_RUNNERS is not it: it holds PrismRunner.
LOCAL_RUNNERS = ('DirectRunner', 'FnApiRunner', 'SwitchingDirectRunner', 'TestDirectRunner')


def runner_class_name(runner) -> str:
  """The class name --runner stands for, as Beam's create_runner reads it: a
  module path's last part as written; a bare name of one of KNOWN_RUNNERS in
  any case, with or without 'Runner' (`directrunner`, `DIRECT`, `portable`),
  as that class; anything else as given. Matching the bare name as written
  took `--runner directrunner` for a remote runner: Beam's own DirectRunner
  ran the job, trying Prism (a download from GitHub) first."""
  text = str(runner or '')
  if '.' in text:
    return text.rsplit('.', 1)[-1]
  for known in KNOWN_RUNNERS:
    if text.lower() in (known.lower(), known.lower().removesuffix('runner')):
      return known
  return text
