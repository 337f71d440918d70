"""A filesystem that misbehaves: inspect's export on a full disk (a real
2 MiB tmpfs: needs root, skipped otherwise)."""

from __future__ import annotations

import os
import pathlib

import pytest

from pipeline import convert
from pipeline import look
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import COLOURS
from tests.conftest import write_image
from tests.conftest import write_manifest
from tests.test_leftovers import disk  # noqa: F401  (a fixture: a 2 MiB tmpfs)
from tests.test_leftovers import fill
from tests.test_leftovers import names


@pytest.fixture(scope='module')
def data(tmp_path_factory) -> pathlib.Path:
  """manifest.csv: 4 images of two classes."""
  root = tmp_path_factory.mktemp('fs_faults')
  rows = []
  for i, name in enumerate(['red', 'green'] * 2):
    write_image(root / f'images/{name}/{i}.png', COLOURS[name], size=(20 + i, 10 + i))
    rows.append((f'{root}/images/{name}/{i}.png', name))
  write_manifest(root / 'manifest.csv', rows)
  return root


def converted(data: pathlib.Path, out: pathlib.Path, *extra) -> int:
  return convert.main(['--manifest', str(data / 'manifest.csv'), '--output_dir', str(out),
                       '--height', '8', '--width', '8', '--progress', 'off', *extra])


def test_an_export_on_a_full_disk_is_one_line_exit_2_and_no_cut_off_file(
        data, disk, tmp_path, capsys):  # noqa: F811
  out = tmp_path / 'out'
  assert converted(data, out) == EXIT_OK
  fill(disk / 'filler')
  capsys.readouterr()
  # an OSError out of look.main (a 40-line traceback), and the image's file
  # left in the folder
  assert look.main(['--input_dir', str(out), '--export_dir', str(disk / 'look')]) == EXIT_USAGE
  err = capsys.readouterr().err  # the first sample's label: the keys' order, of tmp_path's name
  assert err in [f'error: --export_dir {disk / "look"}: cannot write 0_Label_{label}.jpg: '
                 'No space left on device\n' for label in (0, 1)]
  assert names(disk / 'look') == []
  os.remove(disk / 'filler')  # space again: the same export is whole
  assert look.main(['--input_dir', str(out), '--export_dir', str(disk / 'look')]) == EXIT_OK
  assert sorted(p for p in names(disk / 'look') if not p.endswith('.jpg')) == [
      'contact_sheet.png', 'label_histogram.png', 'report.html', 'samples.csv']
  assert len([p for p in names(disk / 'look') if p.endswith('.jpg')]) == 4
