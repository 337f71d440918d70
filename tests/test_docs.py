"""The pages say what runs: the flag reference of docs/convert.md and
docs/validate.md is what the flag table generates, and every shell and
Python snippet of README.md and docs/*.md runs as pasted after `make demo`.

A fence's tag after the language says where a snippet runs: ```sh norun for
what cannot run here (gcloud, Dataflow, cluster daemons, Airflow), ```sh
integration for Flink and Spark (make test-integration, which fetches their
job servers first). Every page's snippets run in make test-integration, the
README's too (Beam in subprocesses: ~55 s that make test leaves out).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from pipeline.configuration import flag_reference

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = ['README.md'] + sorted(f'docs/{p.name}' for p in (ROOT / 'docs').glob('*.md'))
SHELLS = ('sh', 'bash', 'shell')
LANGUAGES = SHELLS + ('python',)
TAGS = ('norun', 'integration')
TIMEOUT = 900


# --- the flag reference -----------------------------------------------------------------


@pytest.mark.parametrize('page', sorted(flag_reference.PAGES))
def test_the_flag_reference_is_the_flag_table_s(page):
  """Regenerate with `make docs-flags` after changing pipeline/configuration/flags.py."""
  text = (ROOT / page).read_text()
  assert flag_reference.page_with_reference(text, flag_reference.PAGES[page]) == text, (
      f'{page} differs from the flag table: run make docs-flags')


def test_the_reference_lists_every_flag_with_its_default():
  text = (ROOT / 'docs/convert.md').read_text()
  assert '| `--height N` | `300` | output height in pixels (not with --resize_mode none) |' in text
  assert '| `--sink ordered\\|tfrecordio` | `ordered` |' in text
  assert '| `--overwrite` | off |' in text
  # an empty default is shown as '' (`` showed two backticks)
  assert "| `--http_user_agent_token HTTP_USER_AGENT_TOKEN` | `''` |" in text
  for flag in ('--manifest', '--previous_dataset', '--annotations', '--config',
               '--job_endpoint_connect_timeout'):
    assert f'| `{flag}' in text, flag
  assert '| `--check_processes N` | `0` |' in (ROOT / 'docs/validate.md').read_text()


# --- the snippets ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Snippet:
  page: str
  line: int  # of its opening fence
  language: str
  tags: tuple
  code: str

  @property
  def name(self) -> str:
    return f'{self.page}:{self.line}'


def snippets(page: str) -> list:
  """The page's fenced shell and Python blocks, in order."""
  text = (ROOT / page).read_text()
  found = []
  for match in re.finditer(r'^```(\w*)([^\n]*)\n(.*?)^```', text, re.S | re.M):
    language, tags = match.group(1), tuple(match.group(2).split())
    if language in LANGUAGES:
      assert set(tags) <= set(TAGS), f'{page}: unknown fence tag {tags}'
      found.append(Snippet(page, text.count('\n', 0, match.start()) + 1, language, tags,
                           match.group(3)))
  return found


def test_fences_are_read_with_their_tags():
  found = snippets('README.md')
  assert [s.language for s in found[:2]] == ['sh', 'sh']
  assert found[0].tags == ('norun',) and 'make demo' in found[0].code
  assert any(s.tags == ('integration',) and 'FlinkRunner' in s.code for s in found)
  assert any(s.language == 'python' and 'read.load' in s.code for s in found)


def _made(folder: pathlib.Path, code: str) -> pathlib.Path:
  (folder / '.venv').symlink_to(ROOT / '.venv')
  done = subprocess.run([sys.executable, '-c', code], cwd=folder, capture_output=True,
                        text=True, timeout=TIMEOUT, env=_env())
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  return folder


@pytest.fixture(scope='session')
def demo_folder(tmp_path_factory) -> pathlib.Path:
  """A folder as `make demo` leaves it: demo_data/, demo_output/, and .venv."""
  return _made(tmp_path_factory.mktemp('made-demo'),
               'import sys; from pipeline import demo; sys.exit(demo.main([]))')


@pytest.fixture(scope='session')
def demo_inputs(tmp_path_factory) -> pathlib.Path:
  """make demo's inputs alone (demo_data/): what the README's tour reads."""
  return _made(tmp_path_factory.mktemp('demo-inputs'),
               'from pipeline import demo; demo.make_sample(demo.DATA_DIR)')


def _env() -> dict:
  return dict(os.environ, PYTHONPATH=str(ROOT))


def _run(snippet: Snippet, folder: pathlib.Path) -> None:
  if snippet.language in SHELLS:
    argv = ['bash', '-e', '-o', 'pipefail', '-c', snippet.code]
  else:
    argv = [str(folder / '.venv/bin/python'), '-c', snippet.code]
  done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=TIMEOUT,
                        env=_env())
  assert done.returncode == 0, (
      f'{snippet.name} exited {done.returncode}:\n{snippet.code}\n--- stdout\n'
      f'{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}')


def _run_page(page: str, demo_folder: pathlib.Path, tmp_path: pathlib.Path,
              integration: bool) -> list:
  """The page's snippets in order, in a copy of the demo folder (a snippet may
  read what one before it wrote); -> the names of those run."""
  folder = tmp_path / 'work'
  shutil.copytree(demo_folder, folder, symlinks=True)
  ran = []
  for snippet in snippets(page):
    if 'norun' in snippet.tags or ('integration' in snippet.tags and not integration):
      continue
    _run(snippet, folder)
    ran.append(snippet.name)
  return ran


@pytest.mark.integration  # make demo and the tour: Beam in subprocesses, ~55 s of make test
def test_the_readme_s_snippets_run_as_pasted(demo_inputs, tmp_path):
  ran = _run_page('README.md', demo_inputs, tmp_path, integration=False)
  assert len(ran) == 8, ran  # the tour but make demo, URLs, Flink and Spark, Dataflow


@pytest.mark.integration  # the engines' snippets, and every page's
@pytest.mark.parametrize('page', PAGES)
def test_every_page_s_snippets_run_as_pasted(page, demo_folder, tmp_path):
  _run_page(page, demo_folder, tmp_path, integration=True)
