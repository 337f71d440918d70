"""--image_dir's check for "no image files" before the run follows symlinked
folders as the run's own listing does (docs/manifests.md): a DIR whose class
folders are all links to folders elsewhere exited 2, "has no image files",
though the run would have read every image. Links that loop back, or lead to
a parent, are not entered by either."""

from __future__ import annotations

import os

from pipeline import convert
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import read_info
from tests.conftest import write_image


def run(argv: list, capsys) -> tuple:
  capsys.readouterr()
  code = convert.main([str(a) for a in argv])
  return code, capsys.readouterr().err


def test_class_folders_that_are_all_symlinks_are_read(tmp_path, capsys):
  store = tmp_path / 'store'
  for label, count in (('cats', 2), ('dogs', 3)):
    for i in range(count):
      write_image(store / label / f'{i}.png')
  photos = tmp_path / 'photos'
  photos.mkdir()
  for label in ('cats', 'dogs'):
    os.symlink(store / label, photos / label)
  out = tmp_path / 'out'
  code, err = run(['--image_dir', photos, '--output_dir', out], capsys)
  assert code == EXIT_OK, err
  info = read_info(out)
  assert info['num_examples'] == 5 and info['num_rejected'] == 0
  assert (out / 'label_map.txt').read_text().split() == ['cats', 'dogs']


def test_links_that_loop_or_lead_up_are_not_entered(tmp_path, capsys):
  write_image(tmp_path / 'above.png')  # in DIR's parent: never a row of DIR
  photos = tmp_path / 'photos'
  (photos / 'cats').mkdir(parents=True)
  os.symlink(photos, photos / 'cats' / 'loop')
  os.symlink(tmp_path, photos / 'up')
  out = tmp_path / 'out'
  code, err = run(['--image_dir', photos, '--output_dir', out], capsys)
  assert (code, err) == (EXIT_USAGE, f'error: --image_dir {photos} has no image files\n')
  assert not out.exists()
