"""convert as users run it: flags, outputs, pixels and labels read back."""

from __future__ import annotations

import gzip
import json

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_OVER_BUDGET
from tests.conftest import COLOURS
from tests.conftest import feature
from tests.conftest import pixels
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.conftest import write_image
from tests.conftest import write_manifest


def run_convert(sample, *flags) -> int:
  return convert.main(['--manifest', str(sample.manifest), '--output_dir',
                       str(sample.out), *flags])


def test_default_conversion_pixels_labels_and_info(sample):
  assert run_convert(sample) == EXIT_OK
  info = read_info(sample.out)
  assert info['label_map'] == ['blue', 'green', 'red']
  assert (sample.out / 'label_map.txt').read_text() == 'blue\ngreen\nred\n'
  assert info['num_manifest_rows'] == 9 and info['num_examples'] == 9
  assert info['num_rejected'] == 0 and info['over_budget'] is False
  assert info['splits']['train']['num_examples'] == 9
  shards = info['splits']['train']['shards']
  assert sorted(p.name for p in sample.out.glob('*.tfrecord')) == shards
  assert all(s.startswith('train-') and '-of-' in s for s in shards)
  assert info['splits']['train']['num_bytes'] == sum(
      (sample.out / s).stat().st_size for s in shards)
  assert info['image'] == {**info['image'], 'height': 300, 'width': 300, 'channels': 3,
                           'encoding': 'raw'}
  examples = read_examples(sample.out)
  assert len(examples) == 9
  for example in examples:
    name = feature(example, 'image/class/text').decode()
    filename = feature(example, 'image/filename').decode()
    assert sample.labels[filename] == name
    assert feature(example, 'image/class/label') == ['blue', 'green', 'red'].index(name)
    assert feature(example, 'image/key').decode() == filename
    assert feature(example, 'image/format') == b'raw'
    assert (pixels(example) == COLOURS[name]).all()
    import hashlib
    digest = hashlib.sha256((sample.root / filename).read_bytes()).hexdigest()
    assert feature(example, 'image/key/sha256').decode() == digest


@pytest.mark.parametrize('encoding', ['jpeg', 'png'])
def test_encoded_images_decode_to_the_requested_size(sample, encoding):
  import io

  from PIL import Image
  assert run_convert(sample, '--encoding', encoding, '--height', '32', '--width', '48') == 0
  for example in read_examples(sample.out):
    image = Image.open(io.BytesIO(feature(example, 'image/encoded')))
    assert image.format == encoding.upper() and image.size == (48, 32)
    name = feature(example, 'image/class/text').decode()
    assert np.abs(np.asarray(image.convert('RGB'), int) - COLOURS[name]).max() <= 3


def test_grey_channel_and_gzip_shards(sample):
  assert run_convert(sample, '--channels', '1', '--compression', 'gzip',
                     '--height', '8', '--width', '8') == 0
  info = read_info(sample.out)
  assert all(s.endswith('.tfrecord.gz') for s in info['splits']['train']['shards'])
  with gzip.open(sample.out / info['splits']['train']['shards'][0]) as stream:
    assert stream.read(1)  # really gzip
  for example in read_examples(sample.out):
    grey = pixels(example, 8, 8, 1)
    name = feature(example, 'image/class/text').decode()
    r, g, b = COLOURS[name]
    assert abs(int(grey[0, 0, 0]) - round(0.299 * r + 0.587 * g + 0.114 * b)) <= 1


def test_rejections_are_listed_with_reasons_and_strict_budget_exits_3(sample):
  (sample.root / 'images/empty.png').write_bytes(b'')
  (sample.root / 'images/text.png').write_text('not an image')
  (sample.root / 'images/dir.png').mkdir()
  noise = np.random.default_rng(0).integers(0, 255, (120, 160, 3), dtype=np.uint8)
  Image.fromarray(noise).save(sample.root / 'images/noise.jpg', quality=90)
  good = (sample.root / 'images/noise.jpg').read_bytes()
  (sample.root / 'images/cut.png').write_bytes(good[:len(good) // 2])
  rows = list(sample.labels.items()) + [
      ('images/missing.png', 'red'), ('images/empty.png', 'red'),
      ('images/text.png', 'red'), ('images/dir.png', 'red'), ('images/cut.png', 'red'),
      ('images/red_0.png', 'red'),  # duplicate key
      ('images/red_3.png', ''),  # empty label (and a duplicate key of a kept row)
  ]
  write_manifest(sample.manifest, rows)
  with open(sample.manifest, 'a') as handle:
    handle.write('"unclosed,red\n')
    handle.write('a,b,c\n')
    handle.write('\n')  # blank lines are not rows
  assert run_convert(sample) == EXIT_OVER_BUDGET
  info = read_info(sample.out)
  assert info['num_manifest_rows'] == len(rows) + 2
  assert info['num_examples'] == 9
  assert info['num_examples'] + info['num_rejected'] == info['num_manifest_rows']
  assert info['over_budget'] is True
  rejected = rejected_lines(sample.out)
  by_code = {(r['stage'], r['code']) for r in rejected}
  assert by_code == {('read', 'missing_file'), ('decode', 'empty_file'),
                     ('decode', 'not_an_image'), ('read', 'is_directory'),
                     ('decode', 'truncated'), ('duplicate', 'duplicate_key'),
                     ('manifest', 'bad_quoting'), ('manifest', 'wrong_field_count')}
  assert len(rejected) == info['num_rejected'] == 9
  assert info['rejected_by_reason']['duplicate/duplicate_key'] == 2
  missing = next(r for r in rejected if r['code'] == 'missing_file')
  assert missing['row'] == {'image': 'images/missing.png', 'label': 'red'}
  assert 'missing.png' in missing['reason'] and missing['line'] == 11
  bad_line = next(r for r in rejected if r['code'] == 'wrong_field_count')
  assert bad_line['row'] == 'a,b,c' and '3 fields' in bad_line['reason']
  truncated = next(r for r in rejected if r['code'] == 'truncated')
  assert 'truncated' in truncated['reason']


def test_error_budget_allows_some_rejections(sample):
  write_manifest(sample.manifest, list(sample.labels.items()) + [('images/nope.png', 'red')])
  assert run_convert(sample, '--max_error_rate', '0.2') == EXIT_OK
  info = read_info(sample.out)
  assert (info['num_rejected'], info['over_budget']) == (1, False)


def test_empty_label_and_unknown_label_with_label_map(sample, tmp_path):
  label_map = tmp_path / 'classes.txt'
  label_map.write_text('red\ngreen\nblue\npurple\n')
  rows = list(sample.labels.items()) + [('images/red_0.png', '')]
  rows[-1] = ('images/red_0.png?dup', '')
  write_manifest(sample.manifest, rows + [('images/blue_2.png', 'cyan')],
                 header=('image', 'label'))
  assert run_convert(sample, '--label_map', str(label_map), '--max_error_rate', '1') == 0
  info = read_info(sample.out)
  assert info['label_map'] == ['red', 'green', 'blue', 'purple']
  assert (sample.out / 'label_map.txt').read_text() == 'red\ngreen\nblue\npurple\n'
  codes = sorted(r['code'] for r in rejected_lines(sample.out))
  assert codes == ['duplicate_key', 'empty_label']
  for example in read_examples(sample.out):
    name = feature(example, 'image/class/text').decode()
    assert feature(example, 'image/class/label') == ['red', 'green', 'blue', 'purple'].index(name)


def test_a_rejected_rows_label_is_in_no_map_and_shifts_no_id(sample):
  # the duplicate key's label sorts first: counted, it would shift every id
  rows = list(sample.labels.items()) + [('images/red_0.png', 'aardvark')]
  write_manifest(sample.manifest, rows)
  assert run_convert(sample, '--max_error_rate', '1') == EXIT_OK
  names = (sample.out / 'label_map.txt').read_text().split()
  assert names == ['blue', 'green', 'red'] == read_info(sample.out)['label_map']
  examples = read_examples(sample.out)
  assert len(examples) == len(sample.labels)
  for example in examples:
    name = feature(example, 'image/class/text').decode()
    assert feature(example, 'image/class/label') == names.index(name)
    assert name == sample.labels[feature(example, 'image/filename').decode()]


def test_integer_labels_are_used_as_given(sample):
  rows = [(image, {'red': 7, 'green': 0, 'blue': 3}[name]) for image, name in sample.labels.items()]
  write_manifest(sample.manifest, rows)
  assert run_convert(sample) == 0
  info = read_info(sample.out)
  assert info['num_classes'] == 8 and info['label_map'][7] == '7'
  for example in read_examples(sample.out):
    image = feature(example, 'image/filename').decode()
    assert feature(example, 'image/class/label') == dict(rows)[image]


@pytest.mark.slow
def test_hash_split_is_deterministic_and_each_split_has_its_shards(sample):
  split = 'train=0.5,validation=0.25,test=0.25'
  assert run_convert(sample, '--split', split) == 0
  first = read_info(sample.out)
  assert sum(s['num_examples'] for s in first['splits'].values()) == 9
  for name, split_info in first['splits'].items():
    assert all(s.startswith(f'{name}-') for s in split_info['shards'])
  assert run_convert(sample, '--split', split, '--overwrite') == 0
  assert {n: s['num_examples'] for n, s in read_info(sample.out)['splits'].items()} == {
      n: s['num_examples'] for n, s in first['splits'].items()}
  assert run_convert(sample, '--split', split, '--overwrite', '--seed', '5',
                     '--num_shards', '2') == 0
  for split_info in read_info(sample.out)['splits'].values():
    assert len(split_info['shards']) == 2


def test_split_column_and_extra_features(sample):
  rows = []
  for i, (image, name) in enumerate(sample.labels.items()):
    rows.append((image, name, 'test' if i < 3 else 'train', f'{i / 2}', f'{i} {i + 1}',
                 f'src{i}'))
  write_manifest(sample.manifest, rows,
                 header=('image', 'label', 'split', 'weight', 'box', 'source'))
  assert run_convert(sample, '--extra_features',
                     'weight:float,box:int64[],source:bytes') == 0
  info = read_info(sample.out)
  assert {n: s['num_examples'] for n, s in info['splits'].items()} == {'train': 6, 'test': 3}
  assert info['feature_spec']['weight'] == {'dtype': 'float32', 'shape': []}
  assert info['feature_spec']['box'] == {'dtype': 'int64', 'shape': [None]}
  assert info['feature_spec']['source'] == {'dtype': 'string', 'shape': []}
  assert info['format_version'] == 2
  by_image = {r[0]: r for r in rows}
  for example in read_examples(sample.out):
    row = by_image[feature(example, 'image/filename').decode()]
    assert example['weight'] == ('float_list', [float(row[3])])
    assert example['box'] == ('int64_list', [int(v) for v in row[4].split()])
    assert example['source'] == ('bytes_list', [row[5].encode()])


def test_two_manifests_joined_on_key(sample, tmp_path):
  images = [(f'k{i}', image) for i, image in enumerate(sample.labels)]
  labels = [(f'k{i}', name) for i, name in enumerate(sample.labels.values())]
  write_manifest(sample.manifest, images + [('orphan_image', 'images/red_0.png')],
                 header=('key', 'image'))
  label_manifest = write_manifest(
      tmp_path / 'labels.csv', labels + [('orphan_label', 'red'), ('k1', 'blue')],
      header=('key', 'label'))
  assert run_convert(sample, '--label_manifest', str(label_manifest),
                     '--max_error_rate', '1') == 0
  info = read_info(sample.out)
  assert info['num_manifest_rows'] == 10 and info['num_examples'] == 9
  assert info['num_rejected'] == 1
  assert info['num_label_manifest_rows'] == 11
  assert info['num_label_manifest_rows_rejected'] == 2
  assert info['label_manifest_rejected_by_reason'] == {
      'label_manifest/duplicate_key': 1, 'label_manifest/no_image': 1}
  stages = sorted((r['stage'], r['code']) for r in rejected_lines(sample.out))
  assert stages == [('label', 'no_label'), ('label_manifest', 'duplicate_key'),
                    ('label_manifest', 'no_image')]
  for example in read_examples(sample.out):
    key = feature(example, 'image/key').decode()
    assert feature(example, 'image/class/text').decode() == dict(labels)[key]


@pytest.mark.parametrize('fmt', ['tsv', 'jsonl', 'csv.gz', 'jsonl.gz'])
def test_manifest_formats(sample, fmt):
  rows = list(sample.labels.items())
  if fmt.startswith('jsonl'):
    text = '\n'.join(json.dumps({'image': i, 'label': n}) for i, n in rows) + '\n\n'
  else:
    sep = '\t' if fmt == 'tsv' else ','
    text = '\n'.join([f'image{sep}label'] + [f'{i}{sep}{n}' for i, n in rows]) + '\n'
  path = sample.root / f'manifest.{fmt}'
  if fmt.endswith('.gz'):
    path.write_bytes(gzip.compress(text.encode()))
  else:
    path.write_text(text)
  sample.manifest = path
  assert run_convert(sample) == 0
  assert read_info(sample.out)['num_examples'] == 9


def test_image_dir_layout(tmp_path):
  for name, colour in COLOURS.items():
    write_image(tmp_path / 'data' / name / 'a.png', colour)
    write_image(tmp_path / 'data' / name / 'b.jpg', colour, fmt='PNG')  # PNG named .jpg
  (tmp_path / 'data' / 'red' / '.DS_Store').write_text('x')
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(tmp_path / 'data'), '--output_dir', str(out),
                       '--height', '4', '--width', '4']) == 0
  info = read_info(out)
  assert info['num_examples'] == 6 and info['label_map'] == ['blue', 'green', 'red']
  for example in read_examples(out):
    name = feature(example, 'image/class/text').decode()
    assert feature(example, 'image/filename').decode().startswith(name + '/')
    assert (pixels(example, 4, 4) == COLOURS[name]).all()


def test_unicode_and_comma_file_names(tmp_path):
  out = tmp_path / 'out'
  write_image(tmp_path / 'imgs' / 'café, ☕.png', (10, 20, 30))
  (tmp_path / 'm.csv').write_text('image,label\n"imgs/café, ☕.png",drink\n')
  assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                       '--height', '2', '--width', '2']) == 0
  (example,) = read_examples(out)
  assert feature(example, 'image/filename').decode() == 'imgs/café, ☕.png'
  assert (pixels(example, 2, 2) == (10, 20, 30)).all()


def test_an_output_folder_named_with_glob_characters_is_written_and_replaced(tmp_path):
  # Beam's local delete takes a path as a glob: 'runs [v2]' named nothing,
  # so the run failed (exit 1) on its own temp folder, shards left behind.
  from pipeline import validate
  write_image(tmp_path / 'imgs' / 'a[1].png', (10, 20, 30))
  (tmp_path / 'm.csv').write_text('image,label\nimgs/a[1].png,x\n')
  out = tmp_path / 'runs [v2]' / 'out*'
  flags = ['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
           '--height', '2', '--width', '2']
  assert convert.main(flags) == EXIT_OK
  assert convert.main(flags + ['--overwrite']) == EXIT_OK
  assert sorted(p.name for p in out.iterdir()) == [
      'dataset_info.json', 'label_map.txt', 'rejected.jsonl', 'train-00000-of-00001.tfrecord',
      'train.sources.jsonl.gz']
  (example,) = read_examples(out)
  assert feature(example, 'image/filename').decode() == 'imgs/a[1].png'
  assert (pixels(example, 2, 2) == (10, 20, 30)).all()
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK


@pytest.mark.parametrize('mode,size', [('pad', (300, 300)), ('crop', (300, 300)),
                                       ('none', None)])
def test_resize_modes_record_their_sizes(sample, mode, size):
  assert run_convert(sample, '--resize_mode', mode, '--encoding', 'png') == 0
  info = read_info(sample.out)
  assert info['image']['resize_mode'] == mode
  import io

  from PIL import Image
  for example in read_examples(sample.out):
    image = Image.open(io.BytesIO(feature(example, 'image/encoded')))
    source = Image.open(sample.root / feature(example, 'image/filename').decode())
    expected = size or source.size
    assert image.size == expected
    assert (feature(example, 'image/width'), feature(example, 'image/height')) == expected


def test_decompression_bomb_is_rejected_from_its_header(sample):
  write_image(sample.root / 'images/big.png', (1, 2, 3), size=(400, 300))
  write_manifest(sample.manifest, list(sample.labels.items()) + [('images/big.png', 'red')])
  assert run_convert(sample, '--max_pixels', '100000', '--max_error_rate', '0.5') == EXIT_OK
  (rejected,) = rejected_lines(sample.out)
  assert (rejected['stage'], rejected['code']) == ('decode', 'too_many_pixels')
  assert '400x300 = 120000 pixels' in rejected['reason']
  assert read_info(sample.out)['rejected_by_reason'] == {'decode/too_many_pixels': 1}


def test_progress_line_and_final_summary(sample, capsys):
  assert run_convert(sample, '--progress', 'on') == EXIT_OK
  out = capsys.readouterr().out
  assert 'Converted 9 of 9 rows in' in out and 'train: 9 examples' in out


def test_image_dir_nested_folders_and_top_level_files(tmp_path):
  write_image(tmp_path / 'data' / 'red' / 'deep' / 'a.png', COLOURS['red'])
  write_image(tmp_path / 'data' / 'blue' / 'b.png', COLOURS['blue'])
  write_image(tmp_path / 'data' / 'stray.png', COLOURS['green'])
  out = tmp_path / 'out'
  assert convert.main(['--image_dir', str(tmp_path / 'data'), '--output_dir', str(out),
                       '--height', '2', '--width', '2', '--max_error_rate', '1']) == 0
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['label_map']) == (
      3, 2, ['blue', 'red'])
  (stray,) = rejected_lines(out)
  assert (stray['row']['image'], stray['code']) == ('stray.png', 'empty_label')


def test_jsonl_rows_without_a_split_when_train_is_not_a_split_name(sample):
  rows = [{'image': image, 'label': name, **({'split': 'dev'} if i % 2 else {})}
          for i, (image, name) in enumerate(sample.labels.items())]
  sample.manifest = sample.root / 'm.jsonl'
  sample.manifest.write_text(''.join(json.dumps(r) + '\n' for r in rows))
  assert run_convert(sample, '--split_names', 'dev,eval', '--max_error_rate', '1') == 0
  info = read_info(sample.out)
  assert {n: s['num_examples'] for n, s in info['splits'].items()} == {'dev': 4}
  assert info['rejected_by_reason'] == {'manifest/unknown_split': 5}


def test_a_jsonl_null_or_nan_split_is_an_empty_cell_not_train(sample):
  """`"split": null` (pandas' gap, api.convert's None) and `NaN` are empty
  cells, rejected as a CSV's empty split cell and a JSONL "" are: they went to
  train, every row whose split was missing trained on. A row without the
  member at all has no split column: train, as before."""
  cells = [('test',), (None,), (float('nan'),), ('',), (), ('validation',), (None,),
           ('train',), ()]
  rows = [{'image': image, 'label': name, **({'split': cell[0]} if cell else {})}
          for (image, name), cell in zip(sample.labels.items(), cells)]
  sample.manifest = sample.root / 'm.jsonl'
  sample.manifest.write_text(''.join(json.dumps(r) + '\n' for r in rows))  # NaN as NaN
  assert run_convert(sample, '--max_error_rate', '1') == EXIT_OK
  images = list(sample.labels)
  splits = {}
  for name in ('train', 'validation', 'test'):
    for example in read_examples(sample.out, name):
      splits[feature(example, 'image/key').decode()] = name
  assert splits == {images[0]: 'test', images[4]: 'train', images[5]: 'validation',
                    images[7]: 'train', images[8]: 'train'}
  rejected = {line['row']['image']: (line['code'], line['reason'])
              for line in rejected_lines(sample.out)}
  empty = ('unknown_split', 'the split cell is empty; give one of train, validation, test')
  assert rejected == {images[i]: empty for i in (1, 2, 3, 6)}
  info = read_info(sample.out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (9, 5, 4)


def test_shard_size_caps_each_shard(sample):
  assert run_convert(sample, '--shard_size_mb', '1') == EXIT_OK  # 9 x 270 KB raw
  info = read_info(sample.out)
  shards = info['splits']['train']['shards']
  sizes = [(sample.out / s).stat().st_size for s in shards]
  assert len(shards) >= 3 and sum(sizes) == info['splits']['train']['num_bytes']
  assert max(sizes) < 1024 * 1024 + 300_000  # rolled over once past 1 MiB
  assert len(read_examples(sample.out)) == 9


@pytest.mark.parametrize('threads', ['1', '4'])
def test_image_threads_and_check_threads_do_not_change_the_output(sample, threads):
  from pipeline import validate
  assert run_convert(sample, '--image_threads', threads, '--encoding', 'png',
                     '--resize_filter', 'nearest', '--background', '0,0,0') == EXIT_OK
  by_name = {feature(e, 'image/filename').decode(): feature(e, 'image/encoded')
             for e in read_examples(sample.out)}
  assert len(by_name) == 9
  import io

  from PIL import Image
  for filename, data in by_name.items():
    colour = COLOURS[sample.labels[filename]]
    assert (np.asarray(Image.open(io.BytesIO(data))) == colour).all()
  assert validate.main(['--input_dir', str(sample.out), '--check_threads', threads]) == 0


@pytest.mark.slow
def test_jpeg_quality_changes_the_encoding(tmp_path):
  noise = np.random.default_rng(3).integers(0, 255, (64, 64, 3), dtype=np.uint8)
  Image.fromarray(noise).save(tmp_path / 'noise.png')
  write_manifest(tmp_path / 'm.csv', [('noise.png', 'x')])
  sizes = {}
  for quality in ('10', '95'):
    out = tmp_path / f'q{quality}'
    assert convert.main(['--manifest', str(tmp_path / 'm.csv'), '--output_dir', str(out),
                         '--encoding', 'jpeg', '--jpeg_quality', quality]) == EXIT_OK
    (example,) = read_examples(out)
    sizes[quality] = len(feature(example, 'image/encoded'))
    assert read_info(out)['image']['jpeg_quality'] == int(quality)
  assert sizes['10'] * 3 < sizes['95']


def _messy_images(folder) -> list:
  """Awkward but valid images (CMYK, EXIF-rotated, alpha, 16-bit, palette) and
  a truncated one; -> their file names."""
  rng = np.random.default_rng(5)
  pixels = rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)
  Image.fromarray(pixels).convert('CMYK').save(folder / 'cmyk.jpg')
  exif = Image.Exif()
  exif[0x0112] = 6
  Image.fromarray(pixels).save(folder / 'rotated.jpg', exif=exif)
  Image.fromarray(np.dstack([pixels, pixels[..., :1]])).save(folder / 'alpha.png')
  Image.fromarray(pixels[..., 0].astype(np.uint16) * 257).save(folder / 'deep.png')
  Image.fromarray(pixels).convert('P').save(folder / 'palette.gif')
  Image.fromarray(pixels).save(folder / 'whole.jpg')
  whole = (folder / 'whole.jpg').read_bytes()
  (folder / 'truncated.jpg').write_bytes(whole[:len(whole) * 2 // 3])
  return ['cmyk.jpg', 'rotated.jpg', 'alpha.png', 'deep.png', 'palette.gif',
          'truncated.jpg']


@pytest.mark.slow
def test_image_processes_write_the_same_bytes_as_threads(sample, tmp_path):
  """Worker processes and threads differ only in where images are converted."""
  (sample.root / 'images' / 'broken.jpg').write_bytes(b'\xff\xd8 not really a jpeg')
  with open(sample.manifest, 'a') as manifest:
    manifest.write('images/broken.jpg,red\nimages/missing.png,red\n')
    for name in _messy_images(sample.root / 'images'):
      manifest.write(f'images/{name},green\n')
  shards = {}
  for mode, flags in (('threads', ['--image_threads', '3']),
                      ('processes', ['--image_processes', '2'])):
    out = tmp_path / mode
    code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(out),
                         '--encoding', 'jpeg', '--height', '8', '--width', '8',
                         '--max_error_rate', '0.5', *flags])
    assert code == EXIT_OK
    info = read_info(out)
    assert (info['num_examples'], info['rejected_by_reason']) == (
        14, {'decode/not_an_image': 1, 'decode/truncated': 1, 'read/missing_file': 1})
    shards[mode] = [(out / name).read_bytes() for name in info['splits']['train']['shards']]
    shards[mode].append(sorted((out / 'rejected.jsonl').read_text().splitlines()))
  assert shards['threads'] == shards['processes']


def test_image_workers_that_cannot_start_fail_the_job(sample, monkeypatch, capsys):
  """Not one rejected row per image: a set-up problem is a crash (exit 1)."""
  # Child interpreters die on start-up (an unknown stdio encoding), as in a
  # broken worker environment; this process started long before.
  monkeypatch.setenv('PYTHONIOENCODING', 'no-such-codec')
  code = convert.main(['--manifest', str(sample.manifest), '--output_dir', str(sample.out),
                       '--encoding', 'png', '--height', '4', '--width', '4',
                       '--image_processes', '2'])
  assert code == EXIT_FAILED
  assert 'image worker process failed to start' in capsys.readouterr().err
  assert not (sample.out / 'dataset_info.json').exists()
