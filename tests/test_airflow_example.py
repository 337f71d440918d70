"""examples/airflow/: the nightly DAG run by a real Apache Airflow (its own
venv, .peers/airflow, pinned in tests/peers/requirements-airflow.txt; make
test-integration builds it) for two consecutive logical dates on the demo
corpus, the manifest changed in between: the second night reuses the first
night's records and is validated."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from pipeline import demo

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = pathlib.Path(__file__).resolve().parent.parent
AIRFLOW = REPO / '.peers' / 'airflow' / 'bin' / 'airflow'


def _airflow(env: dict, *args: str) -> subprocess.CompletedProcess:
  done = subprocess.run([str(AIRFLOW), *args], env=env, capture_output=True, text=True,
                        timeout=900)
  assert done.returncode == 0, f'airflow {" ".join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}'
  return done


def test_two_nights_of_the_dag_reuse_the_first_nights_records(tmp_path):
  if not AIRFLOW.exists():
    raise RuntimeError('.peers/airflow is not built: run `make .peers/airflow/.installed`')
  manifest = pathlib.Path(demo.make_sample(str(tmp_path / 'demo_data')))
  out = tmp_path / 'nightly'
  env = {**os.environ,
         'AIRFLOW_HOME': str(tmp_path / 'airflow'),
         'AIRFLOW__CORE__DAGS_FOLDER': str(REPO / 'examples' / 'airflow'),
         'AIRFLOW__CORE__LOAD_EXAMPLES': 'False',
         'IMG2TFRECORD_PYTHON': sys.executable,
         'IMG2TFRECORD_MANIFEST': str(manifest),
         'IMG2TFRECORD_OUT': str(out),
         'IMG2TFRECORD_FLAGS': '--encoding jpeg --height 64 --width 64',
         'PYTHONPATH': str(REPO)}
  _airflow(env, 'db', 'migrate')
  _airflow(env, 'dags', 'test', 'img2tfrecord_nightly', '2026-11-30')
  first = json.loads((out / '2026-11-30' / 'dataset_info.json').read_text())
  assert first['reuse']['previous_dataset_missing'] is True
  assert (out / 'latest').read_text() == f'{out / "2026-11-30"}\n'
  assert (out / '2026-11-30' / 'validation_report.json').exists()

  lines = manifest.read_text().splitlines()
  header, rows = lines[0], lines[1:]
  changed = rows[2:]  # two rows deleted
  path, label = changed[0].rsplit(',', 1)
  changed[0] = f'{path},{"square" if label == "circle" else "circle"}'  # one relabelled
  manifest.write_text('\n'.join([header, *changed]) + '\n')

  _airflow(env, 'dags', 'test', 'img2tfrecord_nightly', '2026-12-01')
  second = json.loads((out / '2026-12-01' / 'dataset_info.json').read_text())
  assert second['reuse']['previous_dataset'] == str(out / '2026-11-30')
  assert second['reuse']['reused'] == len(changed) - 1
  assert second['reuse']['encoded']['changed_label'] == 1
  assert second['reuse']['dropped'] == 2
  assert (out / 'latest').read_text() == f'{out / "2026-12-01"}\n'
  report = json.loads((out / '2026-12-01' / 'validation_report.json').read_text())
  assert report['valid'] is True
  # the night's copies converted again from their sources (validate --recompute 100)
  assert report['num_recomputed'] == min(100, len(changed))
  assert report['num_warnings'] == 0
