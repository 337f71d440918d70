"""What --setup_file ships to Dataflow/Flink workers must install there."""

import pathlib
import subprocess
import sys
import tarfile

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_sdist_carries_both_packages_and_the_files_setup_py_reads(tmp_path):
  done = subprocess.run([sys.executable, 'setup.py', '-q', 'sdist', '-d', str(tmp_path)],
                        cwd=REPO, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  (archive,) = tmp_path.glob('img2tfrecord-*.tar.gz')
  with tarfile.open(archive) as sdist:
    names = {name.split('/', 1)[1] for name in sdist.getnames() if '/' in name}
    sdist.extractall(tmp_path / 'unpacked', filter='data')
  assert {'setup.py', 'requirements.txt', 'requirements-test.txt', 'README.md',
          'pipeline/convert.py', 'transforms/encode_rows.py'} <= names
  unpacked = next((tmp_path / 'unpacked').iterdir())
  info = subprocess.run([sys.executable, 'setup.py', '-q', 'egg_info'], cwd=unpacked,
                        capture_output=True, text=True)
  assert info.returncode == 0, info.stderr
  requires = (next(unpacked.glob('*.egg-info')) / 'requires.txt').read_text()
  assert 'apache-beam[aws,gcp]==2.77.0' in requires and 'Pillow==12.3.0' in requires
