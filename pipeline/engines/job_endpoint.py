"""The job service a portable runner submits to (--job_endpoint): checked
before anything is written, instead of Beam's silent wait (its
--job_server_timeout, 300 s by default, bounds every job-service call,
staging included, and is left as it is)."""

from __future__ import annotations

import os

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.options.pipeline_options import PrismRunnerOptions
from apache_beam.options.pipeline_options import StandardOptions

from pipeline.beam_runtime import runner_class_name
from pipeline.errors import UsageError

# Runners that submit to a job service at --job_endpoint when it is given
# (Beam's PortableRunner and the runners built on it).
PORTABLE_RUNNERS = ('PortableRunner', 'FlinkRunner', 'SparkRunner', 'PrismRunner')
EMBEDDED = 'embed'  # Beam starts a job server in this process: nothing to reach


def check_answers(options: PipelineOptions, timeout_s: float) -> None:
  """UsageError unless the job service at --job_endpoint answers (a gRPC
  channel becomes ready: connected, and the server has spoken HTTP/2)
  within timeout_s seconds; 0: no check. A closed port, a host that drops
  packets and a listener that is no gRPC server all look the same: no answer.
  PortableRunner without --job_endpoint has nowhere to submit: a UsageError;
  PrismRunner without it starts a Prism job server: check_prism_binary."""
  runner = runner_class_name(options.view_as(StandardOptions).runner)
  if runner not in PORTABLE_RUNNERS:
    return
  endpoint = options.view_as(PortableOptions).job_endpoint
  if not endpoint:
    if runner == 'PortableRunner':
      raise UsageError('--runner PortableRunner needs --job_endpoint host:port (a Flink or '
                       'Spark job server, or any Beam job service)')
    if runner == 'PrismRunner':
      check_prism_binary(options)
    return  # Flink and Spark start or find their own job server
  if endpoint == EMBEDDED or not timeout_s:
    return
  import grpc  # deferred: only portable runs talk gRPC from the launcher
  channel = grpc.insecure_channel(endpoint)
  try:
    grpc.channel_ready_future(channel).result(timeout=timeout_s)
  except grpc.FutureTimeoutError:
    raise UsageError(f'job endpoint {endpoint} did not answer in {timeout_s:g} s') from None
  finally:
    channel.close()


def check_prism_binary(options: PipelineOptions) -> None:
  """UsageError unless a PrismRunner that starts its own job server has a
  Prism binary here: Beam fetches one from GitHub as the job starts unless
  --prism_location names it (a local run never downloads; offline, the run
  failed after OUT was made, exit 1 and a traceback, leaving Beam's cache
  folder in ~/.apache_beam). A URL given as --prism_location is the user's
  own choice of download, left to Beam."""
  location = options.view_as(PrismRunnerOptions).prism_location
  if not location:
    raise UsageError("--runner PrismRunner would download Beam's Prism binary from GitHub "
                     'as the job starts, and a run never downloads anything: give '
                     '--prism_location, the path of a Prism binary (or its zip) on this '
                     'machine, or --job_endpoint of a running job service; or leave '
                     '--runner out (the DirectRunner runs the job here)')
  if '://' not in location and not os.path.isfile(location):
    raise UsageError(f'--prism_location {location} is not a file here: give the path of a '
                     'Prism binary (or its zip), or leave --runner PrismRunner out')
