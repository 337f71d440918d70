"""A run's dataset whatever the locale: file names are read as UTF-8
(pipeline/runs/utf8_mode.py)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from pipeline.runs import utf8_mode
from tests.conftest import write_image

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_command_starts_again_in_utf8_mode_keeping_the_terminal_s_encoding():
  argv, env = utf8_mode.restart_command(
      '/venv/bin/python', ['python', '-m', 'pipeline.convert', '--image_dir', 'caf\xc3\xa9'],
      {'LC_ALL': 'en_US.ISO-8859-1', 'PYTHONUTF8': '0', 'HOME': '/h'}, 'iso8859-1')
  assert argv == ['/venv/bin/python', '-X', 'utf8', '-m', 'pipeline.convert', '--image_dir',
                  'caf\xc3\xa9']
  assert env == {'LC_ALL': 'C.UTF-8', 'PYTHONUTF8': '1', 'HOME': '/h',
                 'PYTHONIOENCODING': 'iso8859-1'}
  _, env = utf8_mode.restart_command('py', ['py'], {'PYTHONIOENCODING': 'ascii'}, 'iso8859-1')
  assert env['PYTHONIOENCODING'] == 'ascii'  # the user's own is kept


def test_class_folders_named_in_utf8_are_read_as_utf8_under_an_ascii_locale(tmp_path):
  """LC_ALL=C without UTF-8 mode decodes file names as ASCII: the folder
  café/ was rejected as manifest/bad_encoding (exit 3); under a Latin-1
  locale it became the class 'cafÃ©'."""
  images = tmp_path / 'images'
  write_image(images / 'caf\u00e9' / 'a.png')
  write_image(images / 'dog' / 'b.png', colour=(0, 0, 255))
  out = tmp_path / 'out'
  env = dict(os.environ, LC_ALL='C', PYTHONUTF8='0', PYTHONCOERCECLOCALE='0',
             PYTHONPATH=str(ROOT))
  done = subprocess.run([sys.executable, '-m', 'pipeline.convert', '--image_dir', str(images),
                         '--output_dir', str(out), '--height', '8', '--width', '8',
                         '--runner', 'DirectRunner'],
                        capture_output=True, cwd=ROOT, env=env, timeout=300)
  assert done.returncode == 0, done.stderr.decode()
  info = json.loads((out / 'dataset_info.json').read_bytes())
  assert info['label_map'] == ['caf\u00e9', 'dog']
  assert (out / 'rejected.jsonl').read_bytes() == b''
  assert 'caf\\xe9' in done.stdout.decode('ascii')  # ASCII terminal: escaped, as before
