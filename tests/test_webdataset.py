"""WebDataset tars as a manifest: tars written by webdataset's own TarWriter
and by tarfile (.tar and .tar.gz), brace ranges against the braceexpand
package, samples grouped as webdataset groups them, every broken sample one
rejected line naming the tar and the member, and whole conversions against a
CSV manifest listing the same images (the same shards, byte for byte)."""

from __future__ import annotations

import gzip
import io
import json
import pathlib
import tarfile

from braceexpand import braceexpand
from PIL import Image
import pytest
import webdataset as wds

from pipeline import convert
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_OVER_BUDGET
from pipeline.errors import EXIT_USAGE
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.test_manifest_ranges import digests
from transforms.core import webdataset
from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.workers import source_refs

NAMES = ['zebra', 'ant', 'cat']
FLAGS = ('--height', '8', '--width', '8', '--progress', 'off', '--num_shards', '2')


def png(seed: int) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (7 + seed % 4, 6), (seed * 30 % 256, 90, 200)).save(buffer, 'PNG')
  return buffer.getvalue()


def jpeg(seed: int) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (9, 5 + seed % 3), (20, seed * 40 % 256, 60)).save(buffer, 'JPEG')
  return buffer.getvalue()


def write_tar(path: pathlib.Path, members: list) -> pathlib.Path:
  """A tar (gzipped for .tar.gz) of (name, bytes) in this order, by tarfile."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with tarfile.open(path, 'w:gz' if path.name.endswith('.gz') else 'w') as tar:
    for name, data in members:
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return path


@pytest.mark.parametrize('pattern', ['s-{000000..000011}.tar', 'a{b,c{1..3}}d{08..10}',
                                     'plain.tar', '{x}y', 'r{5..2}', 'n{1,2}{a,b}'])
def test_brace_ranges_expand_as_braceexpand_does(pattern):
  assert webdataset.expand_braces(pattern) == list(braceexpand(pattern))


@pytest.mark.parametrize('name, key, suffix', [
    ('0001.jpg', '0001', 'jpg'), ('dir/a.b/0001.Seg.PNG', 'dir/a.b/0001', 'seg.png'),
    ('noext', None, None), ('__key__', None, None), ('.hidden', None, None)])
def test_member_keys_are_webdatasets(name, key, suffix):
  assert webdataset.member_key(name) == (key, suffix)
  if key is not None:
    assert wds.tariterators.base_plus_ext(name) == (key, name[len(key) + 1:])


class Shards:
  """Two shards written by webdataset's TarWriter (.png + .cls + .json), and
  the same images as files under csv/<tar name>/ with a CSV listing them."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self.rows = []  # (key, image, label name) in tar order
    for shard in range(2):
      name = f'train-{shard:06d}.tar'
      with wds.TarWriter(str(root / name)) as writer:
        for i in range(4):
          seed, cls = shard * 4 + i, (shard * 4 + i) % 3
          writer.write({'__key__': f'{i:04d}', 'png': png(seed), 'cls': cls,
                        'json': {'weight': seed / 2}})
          (root / 'csv' / name).mkdir(parents=True, exist_ok=True)
          (root / 'csv' / name / f'{i:04d}.png').write_bytes(png(seed))
          self.rows.append((f'{name}/{i:04d}', f'{name}/{i:04d}.png', NAMES[cls]))
    (root / 'names.txt').write_text(''.join(f'{n}\n' for n in NAMES))

  def csv(self) -> pathlib.Path:
    path = self.root / 'csv' / 'same.csv'
    path.write_text('key,image,label\n' + ''.join(f'{k},{i},{l}\n' for k, i, l in self.rows))
    return path


@pytest.mark.parametrize('shuffle', ['on', 'off'])
def test_tarwriter_shards_convert_to_the_bytes_of_a_csv_of_their_images(tmp_path, shuffle):
  shards = Shards(tmp_path)
  names = ['--label_map', str(tmp_path / 'names.txt'), '--shuffle', shuffle, *FLAGS]
  out = tmp_path / 'tars'
  assert convert.main(['--manifest', str(tmp_path / 'train-{000000..000001}.tar'),
                       '--output_dir', str(out), *names]) == EXIT_OK
  same = tmp_path / 'same'
  assert convert.main(['--manifest', str(shards.csv()), '--output_dir', str(same),
                       *names]) == EXIT_OK
  assert digests(out) == digests(same)
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(out)}
  for key, image, label in shards.rows:
    assert examples[key]['image/class/text'][1] == [label.encode()]  # .cls id -> its name
    assert examples[key]['image/filename'][1] == [image.encode()]
  assert (read_info(out)['num_examples'], read_info(out)['num_rejected']) == (8, 0)


def test_cls_ids_without_a_label_map_are_the_ids(tmp_path):
  Shards(tmp_path)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'train-*.tar'), '--output_dir', str(out),
                       '--extra_features', 'weight:float', *FLAGS]) == EXIT_OK
  assert (out / 'label_map.txt').read_text() == '0\n1\n2\n'
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(out)}
  assert examples['train-000001.tar/0002']['image/class/label'][1] == [0]  # seed 6 % 3
  assert examples['train-000001.tar/0002']['weight'][1] == [3.0]


def test_a_pattern_that_names_no_format_reads_its_tars(tmp_path):
  # 'shards/*': the files' names give the format. The tars were taken for a
  # line manifest: the launch crashed, exit 1 ("TypeError: replace() should
  # be called on dataclass instances").
  write_tar(tmp_path / 'shards' / 'a.tar', [('s0.png', png(1)), ('s0.cls', b'1'),
                                            ('s1.jpg', jpeg(2)), ('s1.cls', b'0')])
  write_tar(tmp_path / 'shards' / 'b.tar.gz', [('s0.png', png(3)), ('s0.cls', b'2')])
  outs = {}
  for pattern in ('*', '{a.tar,b.tar.gz}'):
    outs[pattern] = tmp_path / f'out{len(outs)}'
    assert convert.main(['--manifest', str(tmp_path / 'shards' / pattern), '--output_dir',
                         str(outs[pattern]), *FLAGS]) == EXIT_OK
  assert digests(outs['*']) == digests(outs['{a.tar,b.tar.gz}'])
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(outs['*'])}
  assert {key: e['image/class/label'][1] for key, e in examples.items()} == {
      'a.tar/s0': [1], 'a.tar/s1': [0], 'b.tar.gz/s0': [2]}
  want = Image.open(io.BytesIO(png(3))).resize((8, 8), Image.BILINEAR).tobytes()
  assert examples['b.tar.gz/s0']['image/encoded'][1] == [want]


def test_tars_of_one_name_in_sibling_folders_keep_their_samples_apart(tmp_path):
  # train/000.tar and val/000.tar, samples keyed alike: webdataset yields all 4.
  for folder, seeds in (('train', [1, 2]), ('val', [3, 4])):
    path = tmp_path / folder / '000.tar'
    path.parent.mkdir()
    with wds.TarWriter(str(path)) as writer:
      for i, seed in enumerate(seeds):
        writer.write({'__key__': f'{i:04d}', 'png': png(seed), 'cls': seed % 3})
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / '{train,val}' / '000.tar'),
                       '--output_dir', str(out), *FLAGS]) == EXIT_OK
  assert (read_info(out)['num_examples'], read_info(out)['num_rejected']) == (4, 0)
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(out)}
  assert sorted(examples) == ['train/000.tar/0000', 'train/000.tar/0001',
                              'val/000.tar/0000', 'val/000.tar/0001']
  assert examples['val/000.tar/0001']['image/filename'][1] == [b'val/000.tar/0001.png']
  assert examples['val/000.tar/0001']['image/class/label'][1] == [1]  # seed 4 % 3
  # each folder's split, as datasets reads them (every row had gone to train)
  assert {split: sorted(e['image/key'][1][0].decode() for e in read_examples(out, split))
          for split in read_info(out)['splits']} == {
      'train': ['train/000.tar/0000', 'train/000.tar/0001'],
      'validation': ['val/000.tar/0000', 'val/000.tar/0001']}


def test_tars_named_by_split_keywords_give_those_splits_a_json_split_winning(tmp_path):
  write_tar(tmp_path / 'train-000.tar', [('a.png', png(1)), ('a.cls', b'0'),
                                         ('b.png', png(2)), ('b.cls', b'1'),
                                         ('b.json', b'{"split": "test"}')])
  write_tar(tmp_path / 'test-000.tar', [('c.png', png(3)), ('c.cls', b'2')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / '*.tar'), '--output_dir', str(out),
                       '--split_column', 'split', *FLAGS]) == EXIT_OK
  assert {split: sorted(e['image/key'][1][0].decode() for e in read_examples(out, split))
          for split in read_info(out)['splits']} == {
      'train': ['train-000.tar/a'], 'test': ['test-000.tar/c', 'train-000.tar/b']}


def test_split_fractions_over_tars_naming_two_splits_exit_2(tmp_path, capsys):
  for name in ('train-000.tar', 'test-000.tar'):
    write_tar(tmp_path / name, [('a.png', png(1)), ('a.cls', b'0')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / '*.tar'), '--output_dir', str(out),
                       '--split', 'train=0.5,test=0.5', *FLAGS]) == EXIT_USAGE
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and 'gives each row its split (the paths of ' in err[0], err
  assert 'test-000.tar (test)' in err[0] and not out.exists()


def test_a_tar_gz_with_txt_labels_and_one_with_json_labels(tmp_path):
  gz = write_tar(tmp_path / 'a.tar.gz', [
      ('x/1.jpg', jpeg(1)), ('x/1.txt', b'cat\n'), ('x/2.jpg', jpeg(2)), ('x/2.txt', b'dog')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(gz), '--output_dir', str(out), '--label_column',
                       'txt', *FLAGS]) == EXIT_OK
  assert sorted((e['image/key'][1][0], e['image/class/text'][1][0])
                for e in read_examples(out)) == [(b'a.tar.gz/x/1', b'cat'),
                                                 (b'a.tar.gz/x/2', b'dog')]
  meta = write_tar(tmp_path / 'b.tar', [
      ('1.JPG', jpeg(3)), ('1.json', json.dumps({'kind': 'owl', 'split': 'test'}).encode()),
      ('2.jpeg', jpeg(4)), ('2.json', json.dumps({'kind': 'bat', 'split': 'train'}).encode())])
  out = tmp_path / 'out2'
  assert convert.main(['--manifest', str(meta), '--output_dir', str(out), '--label_column',
                       'kind', '--split_column', 'split', *FLAGS]) == EXIT_OK
  info = read_info(out)
  assert {s: d['num_examples'] for s, d in info['splits'].items()} == {'train': 1, 'test': 1}
  assert (out / 'label_map.txt').read_text() == 'bat\nowl\n'


def test_txt_and_json_labels_with_surrounding_spaces_are_warned_as_a_csv_s(tmp_path):
  """A label cell's surrounding spaces are stripped in every format and listed
  in label_warnings; a .txt's one line ending is no padding."""
  txt = write_tar(tmp_path / 'a.tar', [
      ('1.png', png(1)), ('1.txt', b'cat\n'), ('2.png', png(2)), ('2.txt', b' dog\r\n'),
      ('3.png', png(3)), ('3.txt', b'dog')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(txt), '--output_dir', str(out), '--label_column',
                       'txt', *FLAGS]) == EXIT_OK
  assert sorted((e['image/key'][1][0], e['image/class/text'][1][0])
                for e in read_examples(out)) == [
      (b'a.tar/1', b'cat'), (b'a.tar/2', b'dog'), (b'a.tar/3', b'dog')]
  assert read_info(out)['label_warnings']['surrounding_spaces'] == {'dog': 1}
  meta = write_tar(tmp_path / 'b.tar', [
      ('1.png', png(4)), ('1.json', json.dumps({'kind': 'owl '}).encode()),
      ('2.png', png(5)), ('2.json', json.dumps({'kind': 'bat'}).encode())])
  out = tmp_path / 'out2'
  assert convert.main(['--manifest', str(meta), '--output_dir', str(out), '--label_column',
                       'kind', *FLAGS]) == EXIT_OK
  assert (out / 'label_map.txt').read_text() == 'bat\nowl\n'
  assert read_info(out)['label_warnings']['surrounding_spaces'] == {'owl': 1}


def test_a_sample_without_its_label_member_says_which_member_and_how_to_read_a_json_s(
    tmp_path):
  """Tars whose labels are in a .json member (as many writers put them) were
  every sample 'label is empty', with the label right there: the reason now
  names the member looked for, the sample's members and --label_column."""
  write_tar(tmp_path / 'a.tar', [('0.png', png(0)), ('0.json', b'{"label": "cat"}'),
                                 ('1.png', png(1)), ('1.json', b'{"label": "dog"}'),
                                 ('1.cls', b'0')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'a.tar'), '--output_dir', str(out),
                       '--max_error_rate', '1', *FLAGS]) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['stage'], line['code'], line['reason']) == (
      'label', 'empty_label', 'sample 0 has no .cls member, the label (its members: 0.png, '
      '0.json; a label in its .json: --label_column NAME)')
  out = tmp_path / 'out_json'
  assert convert.main(['--manifest', str(tmp_path / 'a.tar'), '--output_dir', str(out),
                       '--label_column', 'label', *FLAGS]) == EXIT_OK
  assert sorted(e['image/class/text'][1][0] for e in read_examples(out)) == [b'cat', b'dog']


def test_a_json_member_naming_a_field_twice_rejects_its_sample(tmp_path):
  """A sample's .json with two `kind` fields: no value of the two wins
  (json.loads kept the last, a bat, without a word)."""
  tar = write_tar(tmp_path / 'a.tar', [
      ('1.jpg', jpeg(1)), ('1.json', b'{"kind": "owl"}'),
      ('2.jpg', jpeg(2)), ('2.json', b'{"kind": "owl", "kind": "bat"}')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tar), '--output_dir', str(out), '--label_column',
                       'kind', '--max_error_rate', '1', *FLAGS]) == EXIT_OK
  assert [(e['image/key'][1][0], e['image/class/text'][1][0])
          for e in read_examples(out)] == [(b'a.tar/1', b'owl')]
  [line] = rejected_lines(out)
  assert (line['line'], line['stage'], line['code'], line['reason']) == (
      1, 'manifest', 'bad_json', "member 2.json is not JSON: member 'kind' is given twice "
      '(which value is meant?)')



def test_a_json_member_no_jsonl_line_could_be_rejects_its_sample_alone(tmp_path):
  """What rejects a JSONL line rejects a sample's .json too: a lone surrogate
  in the label, the key or a feature (had failed the whole job, exit 1, when
  the Example was written), arrays nested past json's recursion limit (had
  been manifest/unexpected_error), a field over the cap (had made a class of
  200,000 characters); and a .txt label over the cap."""
  deep = b'[' * 50_000 + b']' * 50_000
  tar = write_tar(tmp_path / 'a.tar', [
      ('0.jpg', jpeg(0)), ('0.json', b'{"kind": "owl", "id": "k0", "w": "x"}'),
      ('1.jpg', jpeg(1)), ('1.json', b'{"kind": "\\ud800", "id": "k1", "w": "x"}'),
      ('2.jpg', jpeg(2)), ('2.json', b'{"kind": "owl", "id": "\\udfff", "w": "x"}'),
      ('3.jpg', jpeg(3)), ('3.json', b'{"kind": "owl", "id": "k3", "w": "\\ud800"}'),
      ('4.jpg', jpeg(4)), ('4.json', b'{"kind": "owl", "id": "k4", "w": ' + deep + b'}'),
      ('5.jpg', jpeg(5)), ('5.json', json.dumps({'kind': 'o' * 200_000, 'id': 'k5',
                                                 'w': 'x'}).encode())])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tar), '--output_dir', str(out), '--label_column',
                       'kind', '--key_column', 'id', '--extra_features', 'w:bytes',
                       '--max_error_rate', '1', *FLAGS]) == EXIT_OK
  assert [(e['image/key'][1][0], e['image/class/text'][1][0])
          for e in read_examples(out)] == [(b'k0', b'owl')]
  found = [(line['line'], line['code'], line['reason']) for line in rejected_lines(out)]
  unicode = 'holds text that is not valid Unicode: surrogates not allowed'
  assert found[:3] == [(n, 'bad_encoding', f'member {n}.json {unicode}') for n in (1, 2, 3)]
  assert found[3][:2] == (4, 'bad_json') and 'maximum recursion depth' in found[3][2]
  assert found[4] == (5, 'field_too_long', 'member 5.json has a field over 131072 '
                      'characters (no path, label or feature is that long)')
  txt = write_tar(tmp_path / 'b.tar', [('0.jpg', jpeg(0)), ('0.txt', b'o' * 200_000),
                                       ('1.jpg', jpeg(1)), ('1.txt', b'owl')])
  out = tmp_path / 'out_txt'
  assert convert.main(['--manifest', str(txt), '--output_dir', str(out), '--label_column',
                       'txt', '--max_error_rate', '1', *FLAGS]) == EXIT_OK
  assert [(line['line'], line['code']) for line in rejected_lines(out)] == [
      (0, 'field_too_long')]
  assert (out / 'label_map.txt').read_text() == 'owl\n'


def test_each_broken_sample_is_one_rejected_line_naming_the_tar_and_member(tmp_path):
  write_tar(tmp_path / 'tars' / 'a.tar', [
      ('0.png', png(0)), ('0.cls', b'1'),  # sample 0: converts
      ('1.cls', b'0'),  # sample 1: no image
      ('2.png', png(2)), ('2.jpg', jpeg(2)), ('2.cls', b'0'),  # sample 2: two images
      ('3.png', png(3)), ('3.cls', b'x'),  # sample 3: a class that is no id
      ('0.json', b'{}'),  # sample 4: key 0 comes back
      ('5.png', png(5)), ('5.cls', b'2')])  # sample 5: converts
  cut = tmp_path / 'tars' / 'b.tar'
  write_tar(cut, [('0.png', png(6)), ('0.cls', b'0'), ('1.png', png(7) * 20), ('1.cls', b'0')])
  whole = cut.read_bytes()
  member = whole.index(png(7) * 20)  # cut in the middle of 1.png's data
  cut.write_bytes(whole[:member + 100])
  (tmp_path / 'tars' / 'c.tar').write_bytes(b'this is no tar at all' * 100)
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / 'tars' / '*.tar'), '--output_dir',
                       str(out), '--max_error_rate', '1', *FLAGS]) == EXIT_OK
  found = {(pathlib.Path(line['source']).name, line['line']): (line['stage'], line['code'])
           for line in rejected_lines(out)}
  assert found == {('a.tar', 1): ('manifest', 'no_image'),
                   ('a.tar', 2): ('manifest', 'two_images'),
                   ('a.tar', 3): ('label', 'bad_label'),
                   ('a.tar', 4): ('manifest', 'split_sample'),
                   ('b.tar', 1): ('read', 'truncated'),
                   ('c.tar', 0): ('read', 'not_a_tar')}
  lines = {pathlib.Path(line['source']).name + str(line['line']): line
           for line in rejected_lines(out)}
  assert '1.png' in lines['b.tar1']['reason'] and '2.jpg' in lines['a.tar2']['reason']
  keys = sorted(e['image/key'][1][0] for e in read_examples(out))
  assert keys == [b'a.tar/0', b'a.tar/5', b'b.tar/0']
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (9, 3, 6)


def test_a_tar_cut_inside_a_header_says_so(tmp_path):
  path = write_tar(tmp_path / 'a.tar', [('0.png', png(0)), ('0.cls', b'0'),
                                        ('1.png', png(1)), ('1.cls', b'0')])
  whole = path.read_bytes()
  path.write_bytes(whole[:whole.index(b'1.png') + 200])  # inside 1.png's header
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--max_error_rate',
                       '1', *FLAGS]) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['stage'], line['code'], line['line']) == ('read', 'truncated', 1)
  assert [e['image/key'][1][0] for e in read_examples(out)] == [b'a.tar/0']


def _cut(path: pathlib.Path, members: list, name: str, past_data: int) -> int:
  """Writes `members` as a .tar, cut `past_data` bytes after member `name`'s
  data ends (negative: inside it), gzipped for .tar.gz; the cut's byte."""
  plain = write_tar(path.parent / 'plain.tar', members)
  with tarfile.open(plain) as tar:
    info = tar.getmember(name)
  end = info.offset_data + info.size + past_data
  data = plain.read_bytes()[:end]
  plain.unlink()
  path.write_bytes(gzip.compress(data) if path.name.endswith('.gz') else data)
  return end


@pytest.mark.parametrize('name', ['a.tar', 'a.tar.gz'])
@pytest.mark.parametrize('last', ['1.png', '1.cls'])
def test_a_tar_cut_inside_its_last_member_s_padding_keeps_that_sample(tmp_path, name, last):
  members = [('0.png', png(0)), ('0.cls', b'0'), ('1.cls', b'2'), ('1.png', png(1))]
  if last == '1.cls':
    members[2:] = members[:1:-1]
  path = tmp_path / name
  end = _cut(path, members, last, 100)  # every byte of every member is there
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--max_error_rate',
                       '1', *FLAGS]) == EXIT_OK
  [line] = rejected_lines(out)  # the cut, apart: no sample lost
  size = dict(members)[last]
  assert (line['stage'], line['code'], line['line'], line['reason']) == (
      'read', 'truncated', 2, f'{path} is cut short at byte {end}, inside the padding after '
      f'member {last}, whose {len(size)} bytes are all there: the members after it, if '
      f'any, are lost')
  examples = {e['image/key'][1][0].decode(): e for e in read_examples(out)}
  assert sorted(examples) == [f'{name}/0', f'{name}/1']
  assert examples[f'{name}/1']['image/class/text'][1] == [b'2']  # its .cls id
  pixels = Image.frombytes('RGB', (8, 8), examples[f'{name}/1']['image/encoded'][1][0])
  assert pixels.getpixel((4, 4)) == (30, 90, 200)  # png(1)'s colour
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (3, 2, 1)


def test_a_one_sample_tar_cut_in_its_padding_is_published_over_budget(tmp_path):
  path = tmp_path / 's.tar'
  _cut(path, [('0001.jpg', jpeg(1)), ('0001.cls', b'0')], '0001.cls', 100)
  (tmp_path / 'classes.txt').write_text('zero\n')
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--label_map',
                       str(tmp_path / 'classes.txt'), *FLAGS]) == EXIT_OVER_BUDGET
  [example] = read_examples(out)
  assert (example['image/key'][1], example['image/class/text'][1]) == (
      [b's.tar/0001'], [b'zero'])
  [line] = rejected_lines(out)
  assert (line['code'], line['line'], 'after member 0001.cls' in line['reason']) == (
      'truncated', 1, True)


@pytest.mark.parametrize('name', ['a.tar', 'a.tar.gz'])
def test_a_tar_cut_inside_its_last_member_s_data_rejects_that_sample(tmp_path, name):
  members = [('0.png', png(0)), ('0.cls', b'0'), ('1.cls', b'1'), ('1.png', png(1))]
  path = tmp_path / name
  _cut(path, members, '1.png', -1)  # one byte short
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--max_error_rate',
                       '1', *FLAGS]) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['stage'], line['code'], line['line'], line['row']['members']) == (
      'read', 'truncated', 1, ['1.cls', '1.png'])
  assert '1.png' in line['reason'], line['reason']
  assert [e['image/key'][1][0] for e in read_examples(out)] == [f'{name}/0'.encode()]


@pytest.mark.parametrize('available, expected', [
    (1000, False),  # inside the data (1000 < 1024)
    (1024, True), (1500, True), (1535, True),  # the data whole, the padding cut
    (1536, False),  # up to the next header: not cut there
    (None, False)])  # not known: cut short, as before
def test_a_cut_in_the_padding(available, expected):
  last = webdataset.Member('1.png', 512, 512)
  assert webdataset.ends_in_padding(last, available, 1536) is expected
  assert webdataset.ends_in_padding(last._replace(error='cut'), 1500, 1536) is False


def test_the_image_step_reads_members_by_offset_in_any_order(tmp_path):
  members = [(f'{i}.png', png(i)) for i in range(4)]
  for name in ('a.tar', 'a.tar.gz'):
    path = write_tar(tmp_path / name, members)
    mode = 'r:gz' if name.endswith('.gz') else 'r:'
    with tarfile.open(path, mode) as tar:
      refs = [webdataset.TarMember(str(path), info.offset_data, info.size, info.name, i)
              for i, info in enumerate(tar.getmembers())]
    source_refs.clear_cache()
    for i in (2, 3, 0, 1, 1):  # backwards reopens a .tar.gz stream
      assert source_refs.read_ref(refs[i], ImageSpec()) == png(i)
    with pytest.raises(RowError) as error:
      source_refs.read_ref(refs[0], ImageSpec(max_image_bytes=10))
    assert (error.value.code, 'member 0.png' in error.value.reason) == ('too_large', True)
    source_refs.clear_cache()


def test_a_tar_gz_rewritten_in_place_is_read_anew_by_a_thread_that_read_it(tmp_path):
  # A process outlives a run (a notebook calling api.convert each night): the
  # thread's .tar.gz stream, still open on the old file, gave the next run the
  # old members' bytes at the new offsets.
  path = tmp_path / 'a.tar.gz'

  def refs(members):
    write_tar(path, members)
    with tarfile.open(path, 'r:gz') as tar:
      return [webdataset.TarMember(str(path), info.offset_data, info.size, info.name, i)
              for i, info in enumerate(tar.getmembers())]

  source_refs.clear_cache()
  first = refs([(f'{i}.png', png(i)) for i in range(3)])
  assert source_refs.read_ref(first[0], ImageSpec()) == png(0)
  second = refs([(f'{i}.jpg', jpeg(i)) for i in range(3)])  # rewritten in place
  assert [source_refs.read_ref(ref, ImageSpec()) for ref in second[1:]] == [jpeg(1), jpeg(2)]
  source_refs.clear_cache()


def test_an_image_column_is_a_usage_error(tmp_path, capsys):
  path = write_tar(tmp_path / 'a.tar', [('0.png', png(0))])
  assert convert.main(['--manifest', str(path), '--output_dir', str(tmp_path / 'out'),
                       '--image_column', 'png']) == EXIT_USAGE
  assert 'drop --image_column' in capsys.readouterr().err


def test_a_brace_range_naming_a_missing_tar_is_a_usage_error(tmp_path, capsys):
  write_tar(tmp_path / 's-0.tar', [('0.png', png(0))])
  assert convert.main(['--manifest', str(tmp_path / 's-{0..1}.tar'), '--output_dir',
                       str(tmp_path / 'out')]) == EXIT_USAGE
  assert 's-1.tar does not exist' in capsys.readouterr().err


def test_a_cut_tar_gz_rejects_the_sample_it_cuts_and_keeps_the_rest(tmp_path):
  path = write_tar(tmp_path / 'a.tar.gz', [('0.png', png(0)), ('0.cls', b'0'),
                                           ('1.png', png(1) * 50), ('1.cls', b'1')])
  whole = path.read_bytes()
  path.write_bytes(whole[:len(whole) * 2 // 3])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(path), '--output_dir', str(out), '--max_error_rate',
                       '1', *FLAGS]) == EXIT_OK
  [line] = rejected_lines(out)
  assert (line['stage'], line['code'], line['line']) == ('read', 'truncated', 1)
  assert [e['image/key'][1][0] for e in read_examples(out)] == [b'a.tar.gz/0']


def test_a_member_name_not_utf8_rejects_its_sample_every_night(tmp_path):
  """tarfile gives a name's bytes that are not UTF-8 as surrogate escapes:
  such a sample failed the whole job (UnicodeEncodeError hashing its key)."""
  path = tmp_path / 'a.tar'
  with tarfile.open(path, 'w', format=tarfile.GNU_FORMAT) as tar:
    for name, data in [('ok.png', png(0)), ('ok.cls', b'0'),
                       ('bad\udcff.png', png(1)), ('bad\udcff.cls', b'1'),
                       ('u\u00fc.png', png(2)), ('u\u00fc.cls', b'1')]:
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  assert b'bad\xff.png' in path.read_bytes()
  night1, night2 = tmp_path / 'n1', tmp_path / 'n2'
  for out, more in ((night1, ()), (night2, ('--previous_dataset', str(night1)))):
    assert convert.main(['--manifest', str(path), '--output_dir', str(out),
                         '--max_error_rate', '0.5', *FLAGS, *more]) == EXIT_OK
    [line] = rejected_lines(out)
    assert (line['stage'], line['code'], line['line']) == ('manifest', 'bad_encoding', 1)
    assert line['reason'] == 'member name is not UTF-8: bad\\xff.png'
    assert line['row'] == {'sample': 'bad\\xff', 'members': ['bad\\xff.png', 'bad\\xff.cls']}
    assert sorted(e['image/key'][1][0] for e in read_examples(out)) == [
        b'a.tar/ok', 'a.tar/u\u00fc'.encode()]
  reuse = read_info(night2)['reuse']
  assert (reuse['reused'], reuse['num_encoded'], reuse['rejected']) == (2, 0, 0)
  assert (night1 / 'rejected.jsonl').read_bytes() == (night2 / 'rejected.jsonl').read_bytes()


def test_a_null_json_split_is_rejected_where_no_path_names_a_split(tmp_path):
  """A `.json` split member of null is an empty cell (docs/manifests.md:
  rejected manifest/unknown_split, never train), as a JSONL null; it went to
  train. No member: the tar's split, else train. A tar naming a split gives
  its split to a null member."""
  write_tar(tmp_path / 'shards-000.tar', [('a.png', png(1)), ('a.cls', b'0'),
                                          ('b.png', png(2)), ('b.cls', b'1'),
                                          ('b.json', b'{"split": null}')])
  write_tar(tmp_path / 'test-000.tar', [('c.png', png(3)), ('c.cls', b'2'),
                                        ('c.json', b'{"split": null}')])
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(tmp_path / '*.tar'), '--output_dir', str(out),
                       '--split_column', 'split', '--max_error_rate', '1', *FLAGS]) == EXIT_OK
  assert {split: sorted(e['image/key'][1][0].decode() for e in read_examples(out, split))
          for split in read_info(out)['splits']} == {
      'train': ['shards-000.tar/a'], 'test': ['test-000.tar/c']}
  assert [(r['code'], r['source'].rsplit('/', 1)[-1]) for r in rejected_lines(out)] == [
      ('unknown_split', 'shards-000.tar')]
