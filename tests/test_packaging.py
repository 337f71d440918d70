"""What --setup_file ships to Dataflow/Flink workers must install there, and
install no more than the workers run: no TensorFlow."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import feature
from tests.conftest import pixels
from tests.conftest import read_examples
from tests.conftest import write_image

# One worker builds the sdist (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group('packaging')

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def sdist(tmp_path_factory):
  """The sdist --setup_file stages, unpacked, with its egg-info built from it.

  Built from a copy of the project: sdist stages every file in a folder next
  to setup.py and deletes it after, and rewrites the egg-info there, which
  collides with anything else building or reading the work tree meanwhile.
  """
  tmp_path = tmp_path_factory.mktemp('sdist')
  project = tmp_path / 'project'
  # Left out: what is not the project's source, and the caches other tests and
  # tools write meanwhile (a file gone between listing and copying fails copytree).
  shutil.copytree(REPO, project, ignore=shutil.ignore_patterns(
      '.git', '.venv', '.peers', '*.egg-info', '__pycache__', 'build', 'dist',
      'demo_data', 'demo_output', 'img2tfrecord-*', '.hypothesis', '.ruff_cache',
      '.pytest_cache', '.coverage*', 'htmlcov'))
  done = subprocess.run([sys.executable, 'setup.py', '-q', 'sdist', '-d', str(tmp_path)],
                        cwd=project, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  (archive,) = tmp_path.glob('img2tfrecord-*.tar.gz')
  with tarfile.open(archive) as packed:
    names = {name.split('/', 1)[1] for name in packed.getnames() if '/' in name}
    packed.extractall(tmp_path / 'unpacked', filter='data')
  unpacked = next((tmp_path / 'unpacked').iterdir())
  info = subprocess.run([sys.executable, 'setup.py', '-q', 'egg_info'], cwd=unpacked,
                        capture_output=True, text=True)
  assert info.returncode == 0, info.stderr
  return names, (next(unpacked.glob('*.egg-info')) / 'requires.txt').read_text()


def _sections(requires: str) -> dict:
  """requires.txt -> {'': install requirements, 'tf': ..., 'test': ...}."""
  sections, name = {'': []}, ''
  for line in requires.splitlines():
    if line.startswith('['):
      name = line.strip('[]').split(':')[0]
      sections.setdefault(name, [])
    elif line.strip():
      sections[name].append(line.strip())
  return sections


def test_sdist_carries_both_packages_and_the_files_setup_py_reads(sdist):
  names, requires = sdist
  assert {'setup.py', 'requirements.txt', 'requirements-tf.txt', 'requirements-test.txt',
          'README.md', 'pipeline/convert.py', 'transforms/encode.py'} <= names
  assert 'apache-beam[aws,gcp]==2.77.0' in requires and 'Pillow==12.3.0' in requires


def test_workers_install_no_tensorflow(sdist):
  sections = _sections(sdist[1])
  assert sorted(sections['']) == sorted([
      'apache-beam[aws,gcp]==2.77.0', 'Pillow==12.3.0', 'numpy==2.4.6', 'protobuf==6.33.6',
      'google-crc32c==1.9.0', 'PyYAML==6.0.4', 'matplotlib==3.11.2', 'ijson==3.6.0',
      'pycocotools==2.0.11', 'pyarrow==25.0.1', 'urllib3==2.8.0'])
  assert not [r for r in sections[''] if 'tensorflow' in r.lower()], sections['']
  # TensorFlow is the `tf` extra (readers), and the test extra pulls it in too.
  assert any(r.startswith('tensorflow-cpu==2.21.0') for r in sections['tf']), sections
  assert any(r.startswith('tensorflow-cpu==2.21.0') for r in sections['test']), sections
  assert any(r.startswith('pytest==') for r in sections['test']), sections


def _worker_modules() -> list:
  """Every module of transforms/ (all steps a worker unpickles and runs) and
  the two entry points that build convert's and validate's pipelines."""
  modules = ['pipeline.convert', 'pipeline.validate']
  for path in sorted((REPO / 'transforms').rglob('*.py')):
    parts = path.relative_to(REPO).with_suffix('').parts
    modules.append('.'.join(parts[:-1] if parts[-1] == '__init__' else parts))
  return modules


@pytest.mark.slow  # a fresh interpreter per module
def test_worker_code_never_imports_tensorflow():
  modules = _worker_modules()
  assert {'transforms.encode', 'transforms.check_shards',
          'transforms.workers.process_worker', 'transforms.core.example_proto'} <= set(modules)
  script = ('import importlib, json, sys\n'
            'for name in sys.argv[1:]:\n'
            '  importlib.import_module(name)\n'
            'print(json.dumps({m: m in sys.modules for m in ("apache_beam", "PIL", '
            '"tensorflow")}))')
  out = subprocess.run([sys.executable, '-c', script, *modules], cwd=REPO,
                       capture_output=True, text=True, check=True).stdout
  # Beam and Pillow are loaded, so the imports really happened; TensorFlow is not.
  assert json.loads(out) == {'apache_beam': True, 'PIL': True, 'tensorflow': False}


def _requirement_version(name: str) -> str:
  text = (REPO / 'requirements.txt').read_text()
  match = re.search(rf'^{re.escape(name)}(?:\[[^\]]*\])?==(\S+)$', text, re.M)
  assert match, f'{name} is not pinned in requirements.txt'
  return match.group(1)


def _instructions(dockerfile: pathlib.Path) -> list:
  """(INSTRUCTION, arguments) per line, comments and blank lines left out."""
  lines = [line.strip() for line in dockerfile.read_text().splitlines()]
  return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith('#')]


def test_worker_dockerfile_pins_this_projects_beam_and_python():
  """The worker image must match the Beam and Python that submit the job: the
  workers unpickle code pickled by the launcher's Beam and Python."""
  steps = _instructions(REPO / 'Dockerfile')
  froms = [args for op, args in steps if op == 'FROM']
  python = f'{sys.version_info.major}.{sys.version_info.minor}'
  assert froms == [f'apache/beam_python{python}_sdk:{_requirement_version("apache-beam")}']
  copied = [part.rstrip('/') for op, args in steps if op == 'COPY'
            for part in args.split()[:-1]]
  for name in copied:
    assert (REPO / name).exists(), f'Dockerfile copies {name}, which does not exist'
  # Everything setup.py reads and both packages are in the image before pip runs.
  needed = {'setup.py', 'pipeline', 'transforms'}
  needed |= set(re.search(r'include (.*)', (REPO / 'MANIFEST.in').read_text()).group(1).split())
  assert needed <= set(copied), needed - set(copied)
  runs = [args for op, args in steps if op == 'RUN']
  assert any('pip install --no-cache-dir .' in run for run in runs), runs
  assert not [op for op, _ in steps if op in ('ENTRYPOINT', 'CMD')]  # Beam's boot stays


_USER_SCRIPT = ('import sys; from pipeline import cli; sys.argv[0] = "img2tfrecord"; '
                'cli.console_main()')


@pytest.mark.slow
def test_worker_processes_import_the_package_not_a_transforms_folder_in_the_cwd(tmp_path):
  """A user's project folder has its own `transforms/` and `pipeline/`
  packages (common names in ML code) and runs the console script there.
  Beam starts each --direct_running_mode multi_processing SDK worker as
  `python -m ...` in the current folder, first on its path: the workers
  imported the user's `transforms`, and every bundle failed
  (ModuleNotFoundError: transforms.manifest_ranges, exit 1). The console
  script itself, started elsewhere, imports the package."""
  # Each fails to import, whatever else is installed (an editable install's
  # finder found img2tfrecord's submodules under the user's package).
  for package in ('transforms', 'pipeline'):
    (tmp_path / package).mkdir()
    (tmp_path / package / '__init__.py').write_text(
        f'raise ImportError("the user\'s own {package} package was imported")\n')
  for i in range(4):
    write_image(tmp_path / 'images' / f'{i}.png', (60 * i, 0, 0), size=(6, 5))
  (tmp_path / 'm.csv').write_text('image,label\n' + ''.join(
      f'images/{i}.png,{"ab"[i % 2]}\n' for i in range(4)))
  # -P: as the console script, whose sys.path[0] is its bin folder, not the cwd.
  done = subprocess.run(
      [sys.executable, '-P', '-c', _USER_SCRIPT, 'convert', '--manifest', 'm.csv',
       '--output_dir', 'out', '--direct_num_workers', '2',
       '--direct_running_mode', 'multi_processing', '--progress', 'off'],
      cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
      text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  examples = read_examples(tmp_path / 'out')
  assert sorted((feature(e, 'image/filename'), feature(e, 'image/class/text'))
                for e in examples) == [
      (b'images/0.png', b'a'), (b'images/1.png', b'b'), (b'images/2.png', b'a'),
      (b'images/3.png', b'b')]
  for example in examples:
    i = int(feature(example, 'image/filename')[len(b'images/'):-len(b'.png')])
    assert {tuple(p) for p in pixels(example).reshape(-1, 3)} == {(60 * i, 0, 0)}
