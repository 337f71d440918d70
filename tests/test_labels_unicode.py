"""Labels that look the same: one text in two Unicode forms (NFC 'café' and
NFD 'cafe' + U+0301) is one class by default; invisible and bidi control
characters are warned about, in the console summary and dataset_info.json."""

from __future__ import annotations

import pathlib
import unicodedata

import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import read_info
from tests.conftest import write_image
from tests.test_training import shard_records
from transforms.core import labels

NFC = 'caf\u00e9'
NFD = 'cafe\u0301'
assert unicodedata.normalize('NFC', NFD) == NFC != NFD


@pytest.fixture(scope='module')
def images(tmp_path_factory) -> pathlib.Path:
  root = tmp_path_factory.mktemp('unicode')
  for i, name in enumerate('abcd'):
    write_image(root / f'{name}.png', (60 * i, 0, 0), size=(3, 2))
  return root


def run(images, tmp_path, rows, *flags) -> tuple:
  """convert rows [(image, label)] -> (exit code, OUT)."""
  manifest = tmp_path / 'm.csv'
  manifest.write_text('image,label\n' + ''.join(f'{images}/{image},{label}\n'
                                                for image, label in rows), encoding='utf-8')
  out = tmp_path / 'out'
  return convert.main(['--manifest', str(manifest), '--output_dir', str(out), '--height', '2',
                       '--width', '2', '--progress', 'off', *flags]), out


def class_texts(out) -> list:
  return sorted(r['image/class/text'][1][0].decode() for shard in shard_records(out)
                for r in shard)


def test_nfc_and_nfd_spellings_are_one_class(images, tmp_path, capsys):
  code, out = run(images, tmp_path, [('a.png', NFC), ('b.png', NFD), ('c.png', 'tea')])
  assert code == EXIT_OK
  info = read_info(out)
  assert info['label_map'] == [NFC, 'tea']
  assert info['splits']['train']['examples_per_class'] == {NFC: 2, 'tea': 1}
  assert class_texts(out) == [NFC, NFC, 'tea']  # what is stored is NFC
  assert (out / 'label_map.txt').read_text(encoding='utf-8') == f'{NFC}\ntea\n'
  assert info['config']['label_normalize'] == ['nfc']  # a reader knows
  assert info['options']['label_normalize'] == 'nfc'
  assert info['label_warnings']['num_normalization_variant_groups'] == 0
  assert 'Warning' not in capsys.readouterr().out
  assert validate.main(['--input_dir', str(out), '--strict']) == EXIT_OK


def test_label_normalize_none_keeps_the_bytes_and_warns(images, tmp_path, capsys):
  code, out = run(images, tmp_path, [('a.png', NFC), ('b.png', NFD), ('c.png', NFD)],
                  '--label_normalize', 'none')
  assert code == EXIT_OK
  info = read_info(out)
  assert info['label_map'] == sorted([NFC, NFD])
  assert info['config']['label_normalize'] == []
  assert info['label_warnings']['normalization_variants'] == [{NFC: 1, NFD: 2}]
  assert info['label_warnings']['num_normalization_variant_groups'] == 1
  assert class_texts(out) == sorted([NFC, NFD, NFD])
  assert ("Warning: 1 group(s) of labels are one text in different Unicode forms, kept apart: "
          "'cafe\\u0301'/'caf\\xe9' (the default --label_normalize nfc merges them)"
          in capsys.readouterr().out.splitlines())


def test_lower_keeps_nfc(images, tmp_path):
  code, out = run(images, tmp_path, [('a.png', 'CAFE\u0301'), ('b.png', NFC)],
                  '--label_normalize', 'lower')
  assert code == EXIT_OK
  info = read_info(out)
  assert info['label_map'] == [NFC]
  assert info['config']['label_normalize'] == ['lower', 'nfc']


def test_a_multi_label_cell_is_split_as_stored(images, tmp_path):
  """NFC makes U+037E (Greek question mark, a ';' look-alike) a ';'. Applied
  after the cell was split, 'x\u037ey' was one class 'x;y', stored holding the
  separator (a reader splitting texts at ';' finds x and y). Now the cell is
  split as stored; --label_normalize none keeps the character, one class."""
  rows = [('a.png', 'x\u037ey'), ('b.png', 'x;y')]
  code, out = run(images, tmp_path, rows, '--multi_label')
  assert code == EXIT_OK
  assert read_info(out)['splits']['train']['examples_per_class'] == {'x': 2, 'y': 2}
  assert class_texts(out) == ['x', 'x']  # each record's first text
  assert validate.main(['--input_dir', str(out), '--recompute', '2']) == EXIT_OK
  code, out = run(images, tmp_path, rows, '--multi_label', '--label_normalize', 'none',
                  '--overwrite')
  assert code == EXIT_OK
  assert read_info(out)['label_map'] == ['x', 'x\u037ey', 'y']


def test_invisible_and_bidi_characters_are_warned(images, tmp_path, capsys):
  zero_width, bidi = 'cat\u200b', '\u202edog'
  code, out = run(images, tmp_path, [('a.png', 'cat'), ('b.png', zero_width),
                                     ('c.png', zero_width), ('d.png', bidi)])
  assert code == EXIT_OK
  info = read_info(out)
  assert info['label_map'] == sorted(['cat', zero_width, bidi])  # kept as written
  warnings = info['label_warnings']
  assert warnings['invisible_characters'] == [
      {'label': zero_width, 'shown': 'cat<U+200B>', 'rows': 2, 'looks_like': ['cat']},
      {'label': bidi, 'shown': '<U+202E>dog', 'rows': 1, 'looks_like': []}]
  assert warnings['num_labels_with_invisible_characters'] == 2
  assert ('Warning: 2 label(s) hold invisible or bidi control characters, kept as written: '
          'cat<U+200B> (looks like cat); <U+202E>dog (see label_warnings in dataset_info.json)'
          in capsys.readouterr().out.splitlines())


def test_a_label_map_file_is_normalised_too(images, tmp_path, capsys):
  (tmp_path / 'map.txt').write_text(f'{NFD}\ntea\n', encoding='utf-8')
  code, out = run(images, tmp_path, [('a.png', NFC), ('b.png', 'tea')],
                  '--label_map', str(tmp_path / 'map.txt'))
  assert code == EXIT_OK
  assert read_info(out)['label_map'] == [NFC, 'tea']
  (tmp_path / 'map2.txt').write_text(f'{NFD}\n{NFC}\n', encoding='utf-8')
  (tmp_path / 'again').mkdir()
  code, out = run(images, tmp_path / 'again', [('a.png', NFC)],
                  '--label_map', str(tmp_path / 'map2.txt'))
  assert code == EXIT_USAGE and not out.exists()
  assert (f"--label_map {tmp_path / 'map2.txt'}: --label_normalize nfc makes these names "
          f"one: ['{NFC}'] (none keeps them apart)") in capsys.readouterr().err


def test_none_goes_alone(images, tmp_path, capsys):
  code, _ = run(images, tmp_path, [('a.png', NFC)], '--label_normalize', 'none,lower')
  assert code == EXIT_USAGE
  assert '--label_normalize: none keeps labels as written: give it alone' in \
      capsys.readouterr().err


@pytest.mark.parametrize('text,modes', [
    (None, {'nfc'}), ('nfc', {'nfc'}), ('lower', {'nfc', 'lower'}),
    ('both', {'nfc', 'lower', 'strip'}), ('lower,strip', {'nfc', 'lower', 'strip'}),
    ('none', set())])
def test_parse_normalize(text, modes):
  assert labels.parse_normalize(text) == modes


def test_normalize_label():
  assert labels.normalize_label(NFD, frozenset()) == NFD
  assert labels.normalize_label(NFD, labels.DEFAULT_NORMALIZE) == NFC
  assert labels.normalize_label('CAFE\u0301', frozenset({'nfc', 'lower'})) == NFC
  assert labels.shown('a\u200cb\ufeff\u2066') == 'a<U+200C>b<U+FEFF><U+2066>'


@pytest.mark.parametrize('names, not_integers', [
    (['-1', '0', '01', '1', '10', '2'], ['-1']),  # a stray -1: ids by sorted text
    (['+3', '0', '1', 'n/a'], ['+3', 'n/a']),  # as many integers as not: still said
    (['0', '1', '2'], []),  # all integers: ids are their values, nothing to say
    (['cat', 'dog', '1'], []),  # mostly names: sorted text is what one expects
    (['7', 'x'], []),  # one integer is no pattern
    # pandas' integer column with a gap, written as floats: '10.0' sorts before '2.0'
    (['0.0', '1.0', '10.0', '2.0'], ['0.0', '1.0', '10.0', '2.0']),
    (['0', '1.0', '2', 'n/a'], ['1.0', 'n/a']),  # a whole decimal counts as an integer
    (['1.5', '2.5', '3'], []),  # fractions are no integers
    (['1.0'], []),  # one is no pattern
])
def test_mostly_integer_labels_name_the_labels_that_are_not(names, not_integers):
  assert labels.labels_not_integers(names) == not_integers


def test_a_stray_label_among_integers_is_warned_and_a_given_label_map_is_not(
    images, tmp_path, capsys):
  """Labels 0, 1, 2, 10 and -1 make ids by sorted text: 10 gets id 2 and 2
  id 3, silently before (found in a new-user trial of integer labels)."""
  rows = [('a.png', '0'), ('b.png', '10'), ('c.png', '2'), ('d.png', '-1')]
  code, out = run(images, tmp_path, rows)
  assert code == EXIT_OK
  info = read_info(out)
  assert info['label_map'] == ['-1', '0', '10', '2']
  assert (info['label_warnings']['labels_not_integers'],
          info['label_warnings']['num_labels_not_integers']) == (['-1'], 1)
  printed = capsys.readouterr().out
  assert ("Warning: 1 label(s) are not non-negative integers, so the class ids follow the "
          "labels sorted as text, not the integers' values ('10' before '2'; '1' and '01' "
          "two classes): ['-1'] (label_map.txt lists the ids; --label_map sets them)") in printed
  label_map = tmp_path / 'labels.txt'
  label_map.write_text('-1\n0\n10\n2\n')
  (tmp_path / 'given').mkdir()
  code, out = run(images, tmp_path / 'given', rows, '--label_map', str(label_map))
  assert code == EXIT_OK
  assert read_info(out)['label_warnings']['num_labels_not_integers'] == 0
  assert 'not non-negative integers' not in capsys.readouterr().out
