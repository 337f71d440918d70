"""--annotation_format yolo: where the images and label files are found.
Ultralytics lists images/<split>/ at any depth and labels images/<split>/a/b.jpg
with labels/<split>/a/b.txt; before, only the files directly in images/<split>/
were rows, and an image one folder deeper vanished without a word."""

import pathlib

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_OVER_BUDGET
from pipeline.errors import EXIT_USAGE
from tests.conftest import feature
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines

pytestmark = pytest.mark.xdist_group('detection')


def _dataset(root: pathlib.Path) -> pathlib.Path:
  """images/train/a.jpg, images/train/cam1/day/b.png (nested), images/val/c.jpg,
  a macOS `._a.jpg` beside a.jpg and in a hidden folder, and a nested label
  file without its image."""
  for folder in ('images/train/cam1/day', 'images/train/.thumbs', 'images/val',
                 'labels/train/cam1/day', 'labels/train/cam2', 'labels/val'):
    (root / folder).mkdir(parents=True)
  (root / 'data.yaml').write_text('names: [cat, dog]\n')
  Image.new('RGB', (64, 48), (90, 120, 60)).save(root / 'images/train/a.jpg')
  Image.new('RGB', (80, 40), (20, 40, 200)).save(root / 'images/train/cam1/day/b.png')
  Image.new('RGB', (32, 32), (200, 40, 20)).save(root / 'images/val/c.jpg')
  (root / 'images/train/._a.jpg').write_bytes(b'\x00\x05\x16\x07 AppleDouble')
  Image.new('RGB', (8, 8)).save(root / 'images/train/.thumbs/a.jpg')
  (root / 'labels/train/a.txt').write_text('0 0.5 0.5 0.25 0.5\n')
  (root / 'labels/train/cam1/day/b.txt').write_text('1 0.25 0.5 0.5 1\n0 0.75 0.25 0.1 0.1\n')
  (root / 'labels/val/c.txt').write_text('1 0.5 0.5 0.5 0.5\n')
  (root / 'labels/train/cam2/lost.txt').write_text('0 0.5 0.5 0.1 0.1\n')
  return root


def test_images_in_nested_folders_are_rows_with_their_labels(tmp_path):
  root = _dataset(tmp_path / 'yolo')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'yolo',
                       '--resize_mode', 'none', '--encoding', 'png', '--shuffle', 'off',
                       '--progress', 'off', '--output_dir', str(out)]) == EXIT_OVER_BUDGET
  info = read_info(out)
  assert {s: d['num_examples'] for s, d in info['splits'].items()} == {'train': 2, 'val': 1}
  assert info['rejected_by_reason'] == {'annotation/missing_image': 1}
  (lost,) = rejected_lines(out)
  label = f'{root}/labels/train/cam2/lost.txt'
  assert (lost['code'], lost['row']['split'], lost['reason']) == (
      'missing_image', 'train', f'label file {label} has no image: no lost.* image in '
      f'{root}/images/train/cam2')
  examples = {feature(e, 'image/filename'): e for e in read_examples(out, 'train')}
  assert sorted(examples) == [b'train/a.jpg', b'train/cam1/day/b.png']
  nested = examples[b'train/cam1/day/b.png']
  assert (feature(nested, 'image/width'), feature(nested, 'image/height')) == (80, 40)
  assert feature(nested, 'image/object/class/label') == [2, 1]
  assert feature(nested, 'image/object/class/text') == [b'dog', b'cat']
  assert np.allclose(feature(nested, 'image/object/bbox/xmin'), [0, 0.7])
  assert np.allclose(feature(nested, 'image/object/bbox/ymax'), [1, 0.3])
  assert feature(examples[b'train/a.jpg'], 'image/object/bbox/xmin') == 0.375


@pytest.mark.parametrize('text', ['', '\n \r\n', '\ufeff'])
def test_an_empty_classes_txt_exits_2(tmp_path, capsys, text):
  # before: exit 0, every box an unknown_category line, a dataset of no object
  (tmp_path / 'images').mkdir()
  (tmp_path / 'labels').mkdir()
  Image.new('RGB', (64, 48)).save(tmp_path / 'images' / 'a.jpg')
  (tmp_path / 'labels' / 'a.txt').write_text('0 0.5 0.5 0.2 0.2\n')
  (tmp_path / 'classes.txt').write_text(text, encoding='utf-8')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path), '--annotation_format', 'yolo',
                       '--progress', 'off', '--output_dir', str(out)]) == EXIT_USAGE
  assert capsys.readouterr().err == (f'error: {tmp_path}/classes.txt names no class '
                                     f'(it is empty)\n')
  assert not out.exists()


@pytest.mark.parametrize('flags, box', [
    ((), [0, 0, 0.5, 0.5]),  # Ultralytics' frame: the photo turned upright
    (('--annotation_orientation', 'stored'), [0.5, 0, 1, 0.5]),
])
def test_yolo_boxes_are_on_the_upright_photo_unless_told_stored(tmp_path, flags, box):
  # A phone photo stored 64x32 with EXIF orientation 6 (upright 32x64), its box
  # drawn on the upright photo, as Ultralytics reads and trains on it. The
  # default had been `stored`: the box came out turned, without a word.
  for folder in ('images', 'labels'):
    (tmp_path / folder).mkdir()
  exif = Image.Exif()
  exif[0x0112] = 6
  Image.new('RGB', (64, 32), (90, 120, 60)).save(tmp_path / 'images' / 'a.jpg', exif=exif)
  (tmp_path / 'labels' / 'a.txt').write_text('0 0.25 0.25 0.5 0.5\n')
  (tmp_path / 'classes.txt').write_text('cat\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path), '--annotation_format', 'yolo',
                       '--resize_mode', 'none', '--progress', 'off', '--output_dir', str(out),
                       *flags]) == 0
  (example,) = read_examples(out)
  assert (feature(example, 'image/width'), feature(example, 'image/height')) == (32, 64)
  assert np.allclose([feature(example, f'image/object/bbox/{side}')
                      for side in ('xmin', 'ymin', 'xmax', 'ymax')], box)
  orientation = read_info(out)['detection']['annotation_orientation']
  assert orientation == ('stored' if flags else 'exif')


@pytest.mark.parametrize('images, unread', [
    # Roboflow's name for the validation split: every image of it was lost, exit 0
    (['train/a.jpg', 'valid/b.jpg', 'valid/c.jpg'],
     'images/valid/ holds 2 image(s) below it, which would not be read; only images/train, '
     'images/val and images/test are read, as its splits: move them into one'),
    (['train/a.jpg', 'stray.jpg'],
     'images holds 1 image(s) directly in it, beside its split folders, which would not be '
     'read; only images/train, images/val and images/test are read, as its splits: move '
     'them into one'),
    (['a.jpg', 'training/b.jpg', 'training/day/c.jpg'],
     'images/training/ holds 2 image(s) below it, which would not be read; images/ has no '
     'train, val or test folder, so only the files directly in it are read: rename the '
     'folder train, val or test if it is a split, or move it out of images/'),
])
def test_an_image_outside_the_folders_read_exits_2_naming_it(tmp_path, capsys, images, unread):
  # before: exit 0, those images neither examples nor rejected rows
  for relative in images:
    (tmp_path / 'images' / relative).parent.mkdir(parents=True, exist_ok=True)
    Image.new('RGB', (16, 16)).save(tmp_path / 'images' / relative)
  (tmp_path / 'labels').mkdir()
  (tmp_path / 'data.yaml').write_text('names: [cat]\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(tmp_path), '--annotation_format', 'yolo',
                       '--progress', 'off', '--output_dir', str(out)]) == EXIT_USAGE
  assert capsys.readouterr().err == f'error: --annotations {tmp_path}: {tmp_path}/{unread}\n'
  assert not out.exists()


def test_a_label_file_whose_image_is_not_read_names_the_image(tmp_path):
  """labels/train/cam1/b.txt beside images/train/cam1/b.mpo (a JPEG, named as
  cameras and Ultralytics name a multi-picture one) and b.json: b.mpo is no
  extension the run reads, and the rejected line said "no b.* image" of the
  folder holding it."""
  root = tmp_path / 'yolo'
  for folder in ('images/train/cam1', 'labels/train/cam1'):
    (root / folder).mkdir(parents=True)
  (root / 'data.yaml').write_text('names: [cat]\n')
  Image.new('RGB', (64, 48), (90, 120, 60)).save(root / 'images/train/a.jpg')
  Image.new('RGB', (64, 48), (20, 40, 200)).save(root / 'images/train/cam1/b.mpo', 'JPEG')
  (root / 'images/train/cam1/b.json').write_text('{}')
  (root / 'labels/train/a.txt').write_text('0 0.5 0.5 0.25 0.5\n')
  (root / 'labels/train/cam1/b.txt').write_text('0 0.5 0.5 0.1 0.1\n')
  out = tmp_path / 'out'
  assert convert.main(['--annotations', str(root), '--annotation_format', 'yolo',
                       '--resize_mode', 'none', '--progress', 'off',
                       '--output_dir', str(out)]) == EXIT_OVER_BUDGET
  (unread,) = rejected_lines(out)
  assert (unread['code'], unread['reason']) == (
      'missing_image', f'label file {root}/labels/train/cam1/b.txt has no image: '
      f'{root}/images/train/cam1 holds b.json, b.mpo, but only files ending .jpg, .jpeg, .png, '
      '.gif, .bmp, .tif, .tiff, .webp, .ppm, .pgm are read as images (rename it if it is one)')
  assert read_info(out)['num_examples'] == 1


def test_no_label_file_for_any_image_exits_2_unless_allow_empty(tmp_path, capsys):
  """Roboflow's layout (train/images, train/labels, data.yaml beside them)
  given as --image_dir train/images: label files are read from labels/
  beside data.yaml, which is not there, and every image was written without
  objects, exit 0, validate OK."""
  root = tmp_path / 'rf'
  for folder in ('train/images', 'train/labels'):
    (root / folder).mkdir(parents=True)
  (root / 'data.yaml').write_text("train: ../train/images\nnc: 1\nnames: ['cat']\n")
  for name in ('a', 'b'):
    Image.new('RGB', (64, 48), (90, 120, 60)).save(root / f'train/images/{name}.jpg')
    (root / f'train/labels/{name}.txt').write_text('0 0.5 0.5 0.25 0.5\n')
  out = tmp_path / 'out'
  flags = ['--annotations', str(root / 'data.yaml'), '--annotation_format', 'yolo',
           '--image_dir', str(root / 'train/images'), '--progress', 'off']
  assert convert.main([*flags, '--output_dir', str(out)]) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --annotations {root}/data.yaml: no label file in {root}/labels for any of the '
      f'2 image(s) in {root}/train/images: each would be written without objects (label '
      'files are read there, whatever --image_dir says; --allow_empty converts them so)\n')
  assert not out.exists()
  assert convert.main([*flags, '--output_dir', str(out), '--allow_empty']) == EXIT_OK
  info = read_info(out)
  assert (info['num_examples'], info['detection']['num_objects']) == (2, 0)
