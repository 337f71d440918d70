"""Apache Airflow DAG: convert a manifest every night into a dated folder,
reusing the last good night's records, then validate it.

    OUT/2026-12-01/   written on the night of 2026-12-01, from OUT/latest
    OUT/latest        the last night that succeeded (convert writes it last)

Why BashOperator, not the Beam provider's BeamRunPythonPipelineOperator:
convert is a command line with its own exit codes (2 bad input, 3 over the
error budget), its own run lock and clean-up, and its own venv pinned to
apache-beam 2.77; the provider's operator runs a pipeline file with an
interpreter Airflow's environment provides (or a virtualenv it builds on
every run), ties that environment's Beam and protobuf to Airflow's own
constraints, and reads no exit code but 0. A BashOperator calls the
project's interpreter as a user would, and a failed night fails its task.

Settings (environment variables of the scheduler and workers):
  IMG2TFRECORD_PYTHON    the interpreter img2tfrecord is installed in (default python3)
  IMG2TFRECORD_MANIFEST  the manifest converted each night
  IMG2TFRECORD_OUT       the folder holding the dated folders and `latest`
  IMG2TFRECORD_FLAGS     more convert flags (e.g. "--encoding jpeg --height 224 --width 224")
  IMG2TFRECORD_RECOMPUTE records validate converts again from their sources and compares
                         byte for byte (validate --recompute: a count, or a fraction such
                         as 0.01; default 100): a night is mostly copies, this proves them
"""

from __future__ import annotations

import datetime
import os
import shlex

from airflow import DAG
from airflow.operators.bash import BashOperator

PYTHON = os.environ.get('IMG2TFRECORD_PYTHON', 'python3')
MANIFEST = os.environ.get('IMG2TFRECORD_MANIFEST', '/data/manifest.csv')
OUT = os.environ.get('IMG2TFRECORD_OUT', '/data/tfrecords').rstrip('/')
FLAGS = os.environ.get('IMG2TFRECORD_FLAGS', '')
RECOMPUTE = os.environ.get('IMG2TFRECORD_RECOMPUTE', '100')
NIGHT = shlex.quote(OUT) + '/{{ ds }}'  # the logical date's folder: /data/tfrecords/2026-12-01

with DAG(
    dag_id='img2tfrecord_nightly',
    schedule='@daily',
    start_date=datetime.datetime(2026, 11, 1),
    catchup=False,
    # One night at a time: each reads the `latest` the night before wrote.
    max_active_runs=1,
    default_args={'retries': 0},
    tags=['img2tfrecord'],
) as dag:
  # --previous_dataset_missing full: the first night (no `latest` yet) converts
  # everything. --overwrite: a night rerun after a failure replaces what that
  # failure left (a failed run also removes its own partial output). A night
  # that succeeded is not rerun in place: `latest` names it, and a run never
  # reads the folder it writes (exit 2).
  convert = BashOperator(
      task_id='convert',
      bash_command=(
          f'{shlex.quote(PYTHON)} -m pipeline.convert --manifest {shlex.quote(MANIFEST)} '
          f'--output_dir {NIGHT} --previous_dataset {shlex.quote(OUT)}/latest '
          f'--previous_dataset_missing full --overwrite --progress off {FLAGS}'),
  )
  # --recompute: a sample of the night's records (most of them copies of
  # earlier nights') converted again from their sources and compared byte for
  # byte; a mismatch fails the task (exit 1), a source changed since is a warning.
  validate = BashOperator(
      task_id='validate',
      bash_command=(f'{shlex.quote(PYTHON)} -m pipeline.validate --input_dir {NIGHT} '
                    f'--recompute {shlex.quote(RECOMPUTE)}'),
  )
  convert >> validate
