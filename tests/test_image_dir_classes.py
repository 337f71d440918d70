"""--image_dir: every class folder is a class of the label map, empty or not
(a folder of no file, of no image, of broken images), with the id Keras'
image_dataset_from_directory gives it (every subfolder, sorted): a run's
ids, dataset_info.json's counts, the summary, validate, a nightly run, split
folders and --label_map."""

import pathlib
import shutil
import unicodedata

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import feature
from tests.conftest import noise_png
from tests.conftest import read_examples
from tests.conftest import read_info
from transforms import sources
from transforms.beam_util import CLASSES
from transforms.core import image_dir
from transforms.core.labels import FolderClasses

SIZE = ('--height', '8', '--width', '8', '--progress', 'off')
# (folder, files): b holds nothing, d no image, e only a broken one, .git is hidden
TREE = (('a', ('0.png', '1.png')), ('b', ()), ('c', ('0.png', '1.png')),
        ('d', ('readme.txt',)), ('e', ('x.jpg',)), ('f', ('0.png',)), ('.git', ('0.png',)))
KERAS_NAMES = ['a', 'b', 'c', 'd', 'e', 'f']


def _tree(root: pathlib.Path, tree=TREE) -> pathlib.Path:
  seed = 0
  for folder, files in tree:
    (root / folder).mkdir(parents=True)
    for name in files:
      seed += 1
      data = noise_png(seed) if name.endswith('.png') else b'not an image'
      (root / folder / name).write_bytes(data)
  return root


def _ids(out: pathlib.Path) -> dict:
  """{key: (label id, class text)} of every record."""
  return {feature(e, 'image/filename').decode(): (feature(e, 'image/class/label'),
                                                  feature(e, 'image/class/text').decode())
          for e in read_examples(out)}


# in order (one worker: the map made where rows are sorted) and distributed (a combine)
@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('workers', ['1', '2'])
def test_every_class_folder_has_its_keras_id_empty_or_not(tmp_path, capsys, workers):
  source = _tree(tmp_path / 'tree')
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(source), '--output_dir', str(out), *SIZE,
                       '--max_error_rate', '0.5', '--direct_num_workers', workers]) == EXIT_OK
  assert (out / 'label_map.txt').read_text() == ''.join(f'{n}\n' for n in KERAS_NAMES)
  assert _ids(out) == {'a/0.png': (0, 'a'), 'a/1.png': (0, 'a'), 'c/0.png': (2, 'c'),
                       'c/1.png': (2, 'c'), 'f/0.png': (5, 'f')}
  info = read_info(out)
  assert info['num_classes'] == 6
  assert info['splits']['train']['examples_per_class'] == {
      'a': 2, 'b': 0, 'c': 2, 'd': 0, 'e': 0, 'f': 1}
  assert info['label_warnings']['empty_classes'] == ['b', 'd', 'e']
  printed = capsys.readouterr().out
  assert 'per class: a 2, c 2, f 1, b 0, d 0, e 0; imbalance 2.0x' in printed
  assert "3 class(es) of the label map have no example (ids kept): ['b', 'd', 'e']" in printed
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK


def test_the_summary_writes_out_control_characters_of_names(tmp_path, capsys):
  """Skipped file names and class folder names were printed raw in the
  summary: a name's line break split its line, an ESC sequence coloured the
  terminal, a U+202E turned the rest of the per-class line around."""
  source = tmp_path / 'tree'
  for folder in ('cat', 'rlo\u202ex'):
    (source / folder).mkdir(parents=True)
    (source / folder / '0.png').write_bytes(noise_png(len(folder)))
  (source / 'cat' / 'two\nlines.txt').write_text('')
  (source / 'cat' / 'red\x1b[31m.txt').write_text('')
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(source), '--output_dir', str(out), *SIZE]) == EXIT_OK
  assert read_info(out)['skipped_files'] == ['cat/red\x1b[31m.txt', 'cat/two\nlines.txt']
  printed = capsys.readouterr().out.splitlines()
  assert '    per class: cat 1, rlo<U+202E>x 1; imbalance 1.0x' in printed
  assert ('  skipped 2 file(s) that are not images by name (--image_extensions): '
          'cat/red<U+001B>[31m.txt, cat/two<U+000A>lines.txt') in printed
  assert not any('\x1b' in line or '\u202e' in line for line in printed)


@pytest.mark.slow  # imports TensorFlow's Keras
def test_the_ids_are_those_of_keras_index_directory(tmp_path):
  dataset_utils = pytest.importorskip('keras.src.utils.dataset_utils')
  source = _tree(tmp_path / 'tree')
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(source), '--output_dir', str(out), *SIZE,
                       '--max_error_rate', '0.5']) == EXIT_OK
  paths, labels, names = dataset_utils.index_directory(
      str(source), 'inferred', ('.png', '.jpg'), shuffle=False, verbose=False)
  assert (out / 'label_map.txt').read_text().split() == list(names)
  keras = {str(pathlib.Path(p).relative_to(source)): int(i) for p, i in zip(paths, labels)}
  del keras['e/x.jpg']  # broken: rejected here, Keras fails when it decodes it
  assert {key: label for key, (label, _) in _ids(out).items()} == keras


# Names Keras sorts as listed: a leading space first, and an NFD 'café' (as
# macOS' HFS+ wrote names: e + U+0301) before 'caff', while its NFC label
# sorts after it (é is U+00E9). The map had the labels sorted: 'café' and
# 'caff' swapped ids against Keras', and 'zebra' went last.
LISTED_TREE = ((' zebra', ('0.png',)), ('apple', ('0.png',)),
               (unicodedata.normalize('NFD', 'café'), ('0.png', '1.png')), ('caff', ('0.png',)))


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
@pytest.mark.parametrize('workers', ['1', '2'])
def test_class_ids_follow_the_folder_names_as_listed_as_keras_sorts_them(tmp_path, workers):
  source = _tree(tmp_path / 'tree', LISTED_TREE)
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(source), '--output_dir', str(out), *SIZE,
                       '--direct_num_workers', workers]) == EXIT_OK
  assert (out / 'label_map.txt').read_text() == 'zebra\napple\ncafé\ncaff\n'
  nfd = unicodedata.normalize('NFD', 'café')
  assert _ids(out) == {' zebra/0.png': (0, 'zebra'), 'apple/0.png': (1, 'apple'),
                       f'{nfd}/0.png': (2, 'café'), f'{nfd}/1.png': (2, 'café'),
                       'caff/0.png': (3, 'caff')}
  assert read_info(out)['splits']['train']['examples_per_class'] == {
      'zebra': 1, 'apple': 1, 'café': 2, 'caff': 1}
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK


@pytest.mark.slow  # imports TensorFlow's Keras
def test_folder_names_sorted_as_listed_get_the_ids_of_keras_index_directory(tmp_path):
  dataset_utils = pytest.importorskip('keras.src.utils.dataset_utils')
  source = _tree(tmp_path / 'tree', LISTED_TREE)
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(source), '--output_dir', str(out), *SIZE]) == EXIT_OK
  paths, labels, names = dataset_utils.index_directory(
      str(source), 'inferred', ('.png',), shuffle=False, verbose=False)
  # the same classes in the same order: Keras' names as listed, ours as labels
  assert [unicodedata.normalize('NFC', name.strip()) for name in names] == (
      (out / 'label_map.txt').read_text().split('\n')[:-1])
  keras = {str(pathlib.Path(p).relative_to(source)): int(i) for p, i in zip(paths, labels)}
  assert {key: label for key, (label, _) in _ids(out).items()} == keras


def test_split_folders_share_one_map_of_every_class_folder(tmp_path):
  source = _tree(tmp_path / 'tree', (('train/a', ('0.png',)), ('train/b', ()),
                                     ('train/c', ('0.png',)), ('test/a', ('0.png',)),
                                     ('test/c', ('0.png',)), ('test/d', ())))
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(source), '--image_dir_layout', 'split/label',
                       '--split_names', 'train,test', '--output_dir', str(out), *SIZE]) == EXIT_OK
  assert (out / 'label_map.txt').read_text() == 'a\nb\nc\nd\n'
  assert _ids(out) == {'train/a/0.png': (0, 'a'), 'train/c/0.png': (2, 'c'),
                       'test/a/0.png': (0, 'a'), 'test/c/0.png': (2, 'c')}
  assert read_info(out)['splits']['test']['examples_per_class'] == {
      'a': 1, 'b': 0, 'c': 1, 'd': 0}


def test_a_label_map_given_is_the_map_whatever_the_folders(tmp_path):
  source = _tree(tmp_path / 'tree', (('a', ('0.png',)), ('b', ()), ('c', ('0.png',))))
  given = tmp_path / 'classes.txt'
  given.write_text('c\na\n')
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(source), '--label_map', str(given),
                       '--output_dir', str(out), *SIZE]) == EXIT_OK
  assert (out / 'label_map.txt').read_text() == 'c\na\n'
  assert _ids(out) == {'a/0.png': (1, 'a'), 'c/0.png': (0, 'c')}


@pytest.mark.slow  # a long system test: make test stays within 6 minutes
def test_a_night_whose_class_folder_empties_writes_the_full_runs_bytes(tmp_path):
  source = _tree(tmp_path / 'tree', (('a', ('0.png', '1.png')), ('b', ('0.png',)),
                                     ('c', ('0.png', '1.png'))))
  night1, full, inc = tmp_path / 'night1', tmp_path / 'full', tmp_path / 'inc'
  assert convert.main(['--image_dir', str(source), '--output_dir', str(night1), *SIZE]) == EXIT_OK
  (source / 'b' / '0.png').unlink()  # b stays, empty
  assert convert.main(['--image_dir', str(source), '--output_dir', str(full), *SIZE]) == EXIT_OK
  assert convert.main(['--image_dir', str(source), '--output_dir', str(inc), *SIZE,
                       '--previous_dataset', str(night1)]) == EXIT_OK
  for out in (night1, full, inc):
    assert (out / 'label_map.txt').read_text() == 'a\nb\nc\n'
  assert _ids(inc) == {'a/0.png': (0, 'a'), 'a/1.png': (0, 'a'), 'c/0.png': (2, 'c'),
                       'c/1.png': (2, 'c')}
  names = sorted(p.name for p in full.iterdir() if p.name != 'dataset_info.json')
  assert names == sorted(p.name for p in inc.iterdir() if p.name != 'dataset_info.json')
  for name in names:
    assert (full / name).read_bytes() == (inc / name).read_bytes(), name
  reuse = read_info(inc)['reuse']
  assert (reuse['reused'], reuse['num_encoded'], reuse['dropped']) == (4, 0, 1)
  assert read_info(inc)['splits']['train']['examples_per_class'] == {'a': 2, 'b': 0, 'c': 2}
  # the folder gone: the ids after it move, as Keras' do, in both runs alike
  shutil.rmtree(source / 'b')
  full3, inc3 = tmp_path / 'full3', tmp_path / 'inc3'
  assert convert.main(['--image_dir', str(source), '--output_dir', str(full3), *SIZE]) == EXIT_OK
  assert convert.main(['--image_dir', str(source), '--output_dir', str(inc3), *SIZE,
                       '--previous_dataset', str(inc)]) == EXIT_OK
  for out in (full3, inc3):
    assert (out / 'label_map.txt').read_text() == 'a\nc\n'
    assert _ids(out)['c/0.png'] == (1, 'c')
  assert read_info(inc3)['reuse']['encoded']['changed_label'] == 2


def test_folder_labels_are_the_rows_labels():
  folders = ['b/', 'a', '.git/', 'train/x/', ' spaced /', 'bad\udcff/']
  # in Keras' order: sorted as listed (' spaced ' first), then stripped
  assert image_dir.folder_labels(folders, image_dir.LAYOUT_LABEL) == ['spaced', 'a', 'b']
  assert image_dir.folder_labels(folders, image_dir.LAYOUT_SPLIT_LABEL) == ['x']
  assert image_dir.folders_of_files(['a/1.png', 'b/', 'top.png', 'c/d/2.png'],
                                    image_dir.LAYOUT_LABEL) == {'a', 'b', 'c'}
  # normalized, in the order given ('Dog' sorts before 'cafe' as listed), once each
  assert FolderClasses.of(['Dog', 'cafe\u0301', 'dog'], frozenset({'nfc', 'lower'})).names == (
      'dog', 'caf\u00e9')


def test_an_object_stores_class_folders_are_those_its_object_names_hold(monkeypatch):
  """gs:// and s3:// have no folders, only objects named below them (an empty
  folder made in a console is a `b/` object)."""
  monkeypatch.setattr(sources, 'list_tree', lambda directory: [
      ('.hidden/1.png', None), ('a/0.png', None), ('b/', None), ('c/notes.txt', None),
      ('top.png', None)])
  listed = list(sources.list_image_dir('s3://bucket/tree', ('png',)))
  assert [out.value for out in listed if getattr(out, 'tag', None) == CLASSES] == [
      FolderClasses(('a', 'b', 'c'))]
  assert [out for out in listed if not hasattr(out, 'tag')] == [
      (1, 'a/0.png', None), (2, 'top.png', None)]


@pytest.mark.parametrize('inside', ['out', 'a/out', '.'])
def test_an_output_dir_in_the_image_dir_is_a_usage_error(tmp_path, capsys, inside):
  """The folder convert made there was listed as one more class, of no
  example (label_map.txt 'a b out', num_classes 3, exit 0), and the next run
  read the dataset's files as images. Exit 2, one line, nothing written."""
  source = _tree(tmp_path / 'tree', (('a', ('0.png',)), ('b', ('0.png',))))
  out = source / inside
  before = sorted(str(p.relative_to(source)) for p in source.rglob('*'))
  assert convert.main(['--image_dir', str(source), '--output_dir', str(out), '--overwrite',
                       *SIZE]) == EXIT_USAGE
  assert capsys.readouterr().err == (
      f'error: --output_dir {out} is in --image_dir {source}, whose folders are read as '
      "classes and files as images (the dataset's own too): give an --output_dir outside "
      'it\n')
  assert sorted(str(p.relative_to(source)) for p in source.rglob('*')) == before
  # beside it, the two classes
  assert convert.main(['--image_dir', str(source), '--output_dir', str(tmp_path / 'out'),
                       *SIZE]) == EXIT_OK
  assert (tmp_path / 'out' / 'label_map.txt').read_text() == 'a\nb\n'
