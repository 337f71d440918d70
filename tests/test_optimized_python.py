"""Under -OO (or PYTHONOPTIMIZE=2, which some container images set) the
docstrings Beam builds its options from are gone: every command's --help
and parse raised AttributeError with a traceback. Each command says so in
one line instead (pipeline/runs/exits.py exit_with), exit 2, nothing made."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from pipeline.errors import EXIT_USAGE
from pipeline.errors import OPTIMIZED_PYTHON

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize('flags, env, command', [
    (['-OO'], {}, ['pipeline.convert', '--help']),
    (['-OO'], {}, ['pipeline.cli', 'validate', '--input_dir', 'x']),
    ([], {'PYTHONOPTIMIZE': '2'}, ['pipeline.convert', '--manifest', 'm.csv',
                                   '--output_dir', 'out']),
    ([], {'PYTHONOPTIMIZE': '2'}, ['pipeline.export', '--input_dir', 'x']),
    # Beam imported before exit_with: a TypeError from apache_beam.io.textio
    # with its traceback, exit 1 (an s3:// location or an engine's runner
    # makes convert and validate import Beam's io as they start; the demos
    # and the Flex Template's launch import convert)
    (['-OO'], {}, ['pipeline.convert', '--manifest', 's3://b/m.csv', '--output_dir', 'out']),
    (['-OO'], {}, ['pipeline.validate', '--input_dir', 'x', '--runner', 'FlinkRunner']),
    ([], {'PYTHONOPTIMIZE': '2'}, ['pipeline.flex_launch']),
    (['-OO'], {}, ['pipeline.demo']),
])
def test_a_command_under_oo_says_so_in_one_line(tmp_path, flags, env, command):
  done = subprocess.run([sys.executable, *flags, '-m', *command], capture_output=True,
                        text=True, cwd=tmp_path, timeout=120,
                        env=dict(os.environ, PYTHONPATH=str(ROOT), **env))
  assert (done.returncode, done.stderr, done.stdout) == (
      EXIT_USAGE, f'error: {OPTIMIZED_PYTHON}\n', '')
  assert list(tmp_path.iterdir()) == []  # no output folder, no temp left


def test_plain_o_is_no_refusal(tmp_path):
  """-O drops asserts only: the commands run (their --help here)."""
  done = subprocess.run([sys.executable, '-O', '-m', 'pipeline.convert', '--help'],
                        capture_output=True, text=True, cwd=tmp_path, timeout=120,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert done.returncode == 0 and '--manifest' in done.stdout, done.stderr


def test_importing_the_api_under_oo_says_why():
  """`import pipeline.api` under -OO raised a TypeError from inside
  apache_beam.io.textio (a docstring that is None), with no word of -OO."""
  script = ('try:\n'
            '  from pipeline import api\n'
            'except ImportError as error:\n'
            '  print(error)\n')
  done = subprocess.run([sys.executable, '-OO', '-c', script], capture_output=True, text=True,
                        timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert (done.returncode, done.stdout, done.stderr) == (0, OPTIMIZED_PYTHON + '\n', '')
