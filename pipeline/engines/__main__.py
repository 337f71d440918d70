"""python -m pipeline.engines fetch {flink,spark}: fetches the engine's job
server ahead of time (into the cache pipeline/engines/job_servers.py keeps)
and prints its jar. An entry point: it may import what the commands import."""

from __future__ import annotations

from pipeline import errors
from pipeline.engines import job_servers
from pipeline.errors import UsageError
from pipeline.runs import exits


def _fetch(argv: list) -> int:
  usage = 'usage: python -m pipeline.engines fetch {' + ','.join(job_servers.ENGINES) + '}'
  if argv in (['-h'], ['--help']):
    print(usage)
    return errors.EXIT_OK
  if len(argv) != 2 or argv[0] != 'fetch' or argv[1] not in job_servers.ENGINES:
    raise UsageError(usage)
  engine = job_servers.ENGINES[argv[1]]
  try:  # Maven runs on any Java; a suitable one is preferred
    java_home = job_servers.choose_java(engine, job_servers.java_candidates()).home
  except UsageError:
    java_home = None
  print(job_servers.fetch(engine, java_home=java_home)['jar'])
  return errors.EXIT_OK


def main(argv=None) -> int:
  return exits.main_with_exit_codes(_fetch, argv)


if __name__ == '__main__':
  exits.exit_with(main)
