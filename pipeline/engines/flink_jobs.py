"""A run's job on a Flink cluster outlives its launcher's wait: when the job
server dies (or the launcher is stopped with Ctrl-C), the job goes on running
on the cluster, writing into OUT after the launcher has failed and cleared
it. The launcher names the job (--job_name, unless given) and, when its wait
ends in an error, cancels a job of that name still running there through
Flink's REST API. (Its dataset_info.json is refused anyway: WriteInfoFn
checks the run lock. Spark's driver is its job server: its jobs end with it.)
A job the job server was still submitting when the launcher gave up lands on
the cluster after the job server has stopped (its upload complete, the
JobManager still taking it in): when no job of the name is there yet, the
cluster is asked again for SUBMIT_SETTLE_S.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from typing import Optional
import urllib.error
import urllib.request
import uuid

from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions

from pipeline.engines import runners

REST_TIMEOUT_S = 10.0
# How long a job not on the cluster yet is looked for: interrupted while its
# job server uploaded it, a job appeared RUNNING 1-3 s after the launcher had
# asked, found nothing and exited (and would have written into OUT).
SUBMIT_SETTLE_S = 10.0
_POLL_S = 0.5
ENDED = ('FINISHED', 'FAILED', 'CANCELED', 'CANCELLING', 'SUSPENDED')


def cluster_address(options: PipelineOptions) -> Optional[str]:
  """Flink's REST base URL when the run goes to a Flink cluster, else None."""
  runner = runners.runner_name(options.view_as(StandardOptions).runner)
  if runner != 'FlinkRunner':
    return None
  given = options.get_all_options(drop_default=True)
  master, embedded, addresses = runners.master_of(runner, given)
  if embedded or not addresses:
    return None
  scheme = 'https' if master.startswith('https://') else 'http'
  host, port = addresses[0]
  return f'{scheme}://{host}:{port}'


@contextlib.contextmanager
def cancelled_if_abandoned(options: PipelineOptions):
  """Around the launch and wait of a job: on a Flink cluster, the job gets
  a name of its own (unless --job_name), and if the block ends in an error
  the job of that name still running there is cancelled (a note says so)."""
  base = cluster_address(options)
  cloud = options.view_as(GoogleCloudOptions)
  if base and not cloud.job_name:
    cloud.job_name = f'img2tfrecord-{uuid.uuid4().hex[:12]}'
  try:
    yield
  except BaseException:
    if base:
      for line in cancel_running(base, cloud.job_name):
        print(line, file=sys.stderr)
    raise


def cancel_running(base: str, name: str) -> list:
  """Cancels every job named `name` that has not ended on the Flink cluster at
  `base`, asking again for up to SUBMIT_SETTLE_S while none of that name is
  there (one still being submitted); -> note lines (what was cancelled, or
  why nothing could be)."""
  deadline = time.monotonic() + SUBMIT_SETTLE_S
  while True:
    try:
      jobs = [job for job in _request(f'{base}/jobs/overview').get('jobs', [])
              if job.get('name') == name]
    except (OSError, ValueError, AttributeError) as error:
      return [f'note: could not ask the Flink cluster at {base} for job {name} '
              f'({_why(error)}); if it still runs, cancel it there']
    if jobs or time.monotonic() >= deadline:
      break
    time.sleep(_POLL_S)
  notes = []
  for job in jobs:
    if job.get('state') in ENDED:
      continue
    jid = job.get('jid', '')
    if not re.fullmatch(r'[0-9a-f]{32}', jid):
      continue
    try:
      _request(f'{base}/jobs/{jid}?mode=cancel', method='PATCH')
      notes.append(f'note: cancelled Flink job {jid} ({name}) on {base}: its launcher '
                   f'stopped waiting for it')
    except (OSError, ValueError) as error:
      notes.append(f'note: could not cancel Flink job {jid} ({name}) on {base} '
                   f'({_why(error)}); cancel it there')
  return notes


def _request(url: str, method: str = 'GET'):
  request = urllib.request.Request(url, method=method)
  with urllib.request.urlopen(request, timeout=REST_TIMEOUT_S) as response:
    body = response.read()
  return json.loads(body) if body.strip() else {}


def _why(error: Exception) -> str:
  if isinstance(error, urllib.error.HTTPError):
    return f'HTTP {error.code}'
  return f'{type(error).__name__}: {error}'
