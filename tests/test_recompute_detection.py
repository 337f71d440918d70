"""validate --recompute N of --schema detection datasets (COCO, VOC, YOLO):
each sampled record converted again from its image and its annotations and
compared byte for byte. A record rewritten as a converter bug would write it
(x and y swapped, every CRC, sidecar line and count made to match) passes
every other check and is a recompute_mismatch; an annotation file or image
changed since the run is a warning, not compared."""

import gzip
import io
import json
import os
import pathlib

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_FAILED
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from tests.conftest import noise_png
from tests.test_validate_cli import rewrite_first_record
from transforms.core import annotation_versions
from transforms.core import fingerprints
from transforms.core import recompute
from transforms.core.example_proto import parse_example
from transforms.core.tfrecord import read_records

pytestmark = pytest.mark.xdist_group('recompute_detection')

FLAGS = ('--encoding', 'png', '--height', '8', '--width', '12', '--resize_mode', 'pad',
         '--include_masks', '--progress', 'off')
# (x, y, width, height) of each image's one object, in pixels of its 16x16 image
BOXES = [(1, 2, 5, 3), (2, 6, 7, 4), (3, 1, 9, 8), (0, 4, 6, 10)]
NAMES = [f'a{i}.png' for i in range(len(BOXES))]


def _images(folder: pathlib.Path) -> None:
  folder.mkdir(parents=True, exist_ok=True)
  for i, name in enumerate(NAMES):
    (folder / name).write_bytes(noise_png(i, (16, 16)))


def _coco(root: pathlib.Path) -> list:
  _images(root / 'images')
  document = {'images': [], 'annotations': [], 'categories': [{'id': 1, 'name': 'cat'},
                                                              {'id': 2, 'name': 'dog'}]}
  for i, (name, (x, y, w, h)) in enumerate(zip(NAMES, BOXES)):
    document['images'].append({'id': 10 + i, 'file_name': name, 'width': 16, 'height': 16})
    document['annotations'].append({
        'id': 100 + i, 'image_id': 10 + i, 'category_id': 1 + i % 2, 'bbox': [x, y, w, h],
        'area': float(w * h - 1), 'iscrowd': 0,
        'segmentation': [[x, y, x + w, y, x + w, y + h, x, y + h]]})
  (root / 'instances.json').write_text(json.dumps(document))
  return ['--annotations', str(root / 'instances.json'), '--annotation_format', 'coco',
          '--image_dir', str(root / 'images')]


def _voc(root: pathlib.Path) -> list:
  _images(root / 'JPEGImages')
  (root / 'Annotations').mkdir()
  (root / 'ImageSets' / 'Main').mkdir(parents=True)
  (root / 'SegmentationObject').mkdir()
  for i, (name, (x, y, w, h)) in enumerate(zip(NAMES, BOXES)):
    (root / 'Annotations' / f'{name[:-4]}.xml').write_text(
        f'<annotation><filename>{name}</filename><size><width>16</width><height>16</height>'
        f'<depth>3</depth></size><object><name>{"cat" if i % 2 else "dog"}</name>'
        f'<difficult>0</difficult><truncated>{i % 2}</truncated><bndbox><xmin>{x + 1}</xmin>'
        f'<ymin>{y + 1}</ymin><xmax>{x + w}</xmax><ymax>{y + h}</ymax></bndbox></object>'
        f'</annotation>')
    pixels = np.zeros((16, 16), np.uint8)
    pixels[y:y + h, x:x + w] = 1
    Image.fromarray(pixels, 'P').save(root / 'SegmentationObject' / f'{name[:-4]}.png')
  (root / 'ImageSets' / 'Main' / 'train.txt').write_text(
      ''.join(f'{name[:-4]}\n' for name in NAMES))
  return ['--annotations', str(root), '--annotation_format', 'voc',
          '--image_dir', str(root / 'JPEGImages')]


def _yolo(root: pathlib.Path) -> list:
  _images(root / 'images' / 'train')
  (root / 'labels' / 'train').mkdir(parents=True)
  (root / 'data.yaml').write_text('train: images/train\nnames:\n  - cat\n  - dog\n')
  for i, (name, (x, y, w, h)) in enumerate(zip(NAMES, BOXES)):
    (root / 'labels' / 'train' / f'{name[:-4]}.txt').write_text(
        f'{i % 2} {(x + w / 2) / 16:.6f} {(y + h / 2) / 16:.6f} {w / 16:.6f} {h / 16:.6f}\n')
  return ['--annotations', str(root / 'data.yaml'), '--annotation_format', 'yolo']


FORMATS = {'coco': _coco, 'voc': _voc, 'yolo': _yolo}
# The annotation file of NAMES[1] in each format's tree, and one change to it.
ANNOTATION_OF = {'coco': 'instances.json', 'voc': 'Annotations/a1.xml',
                 'yolo': 'labels/train/a1.txt'}


def _convert(root: pathlib.Path, fmt: str) -> pathlib.Path:
  flags = FORMATS[fmt](root)
  assert convert.main([*flags, '--output_dir', str(root / 'out'), *FLAGS]) == EXIT_OK
  return root / 'out'


def _validate(out: pathlib.Path, *flags: str):
  code = validate.main(['--input_dir', str(out), *flags])
  return code, json.loads((out / 'validation_report.json').read_text())


def _first_key(out: pathlib.Path) -> str:
  shard = out / json.loads((out / 'dataset_info.json').read_text())['splits']['train'][
      'shards'][0]
  with open(shard, 'rb') as stream:
    first = next(data for _, data in read_records(stream))
  return parse_example(first)['image/filename'][1][0].decode()


@pytest.mark.parametrize('fmt', sorted(FORMATS))
def test_a_converted_dataset_recomputes_to_the_same_bytes(tmp_path, fmt, capsys):
  out = _convert(tmp_path, fmt)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['valid'], report['num_warnings']) == (EXIT_OK, True, 0)
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (4, 0)
  assert '--recompute: 4 record(s) converted again from their sources and compared byte ' \
      'for byte.' in capsys.readouterr().out
  lines = [json.loads(line) for line in gzip.open(out / 'train.sources.jsonl.gz')]
  assert all(line['fingerprint'].startswith(annotation_versions.PREFIX) for line in lines)
  assert len({line['fingerprint'] for line in lines}) == 4


def _swap_x_and_y(features: dict) -> None:
  """A converter that swapped x and y: xmin and ymin exchanged (both boxes stay valid)."""
  xmin, ymin = features['image/object/bbox/xmin'], features['image/object/bbox/ymin']
  features['image/object/bbox/xmin'], features['image/object/bbox/ymin'] = ymin, xmin


def _no_letterbox_offset(features: dict) -> None:
  """A converter that scaled the boxes but left out the pad's offset (16x16
  into 12x8: 8x8 pixels 2 columns in, 2/12 of the width)."""
  for name in ('image/object/bbox/xmin', 'image/object/bbox/xmax'):
    kind, values = features[name]
    features[name] = (kind, [v - 2 / 12 for v in values])


def _unscaled_area(features: dict) -> None:
  """A converter that did not scale the recorded area by the resize."""
  kind, values = features['image/object/area']
  features['image/object/area'] = (kind, [v * 4 for v in values])


def _flipped_mask(features: dict) -> None:
  """A converter that moved the mask otherwise than the pixels (here: mirrored)."""
  kind, values = features['image/object/mask']
  flipped = []
  for data in values:
    buffer = io.BytesIO()
    Image.open(io.BytesIO(data)).transpose(Image.FLIP_LEFT_RIGHT).save(buffer, format='PNG')
    flipped.append(buffer.getvalue())
  assert flipped != values
  features['image/object/mask'] = (kind, flipped)


def _other_source_id(features: dict) -> None:
  kind, values = features['image/source_id']
  features['image/source_id'] = (kind, [values[0] + b'7'])


@pytest.mark.parametrize('fmt', sorted(FORMATS))
@pytest.mark.parametrize('damage, feature', [
    (_swap_x_and_y, 'feature image/object/bbox/xmin, feature image/object/bbox/ymin'),
    (_no_letterbox_offset, 'feature image/object/bbox/xmax, feature image/object/bbox/xmin'),
    (_unscaled_area, 'feature image/object/area'),
    (_flipped_mask, 'feature image/object/mask'),
    (_other_source_id, 'feature image/source_id')])
def test_a_record_a_converter_bug_wrote_is_a_mismatch(tmp_path, fmt, damage, feature):
  out = _convert(tmp_path, fmt)
  key = _first_key(out)
  shard = rewrite_first_record(out, damage)
  code, report = _validate(out)  # every other check passes: the gap --recompute closes
  assert (code, report['num_problems']) == (EXIT_OK, 0)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['problems_by_kind']) == (EXIT_FAILED, {recompute.RECOMPUTE_MISMATCH: 1})
  problem = report['problems'][0]
  assert (problem['file'], problem['record']) == (shard, 0)
  assert problem['detail'].startswith(f"key '{key}': {feature} differ from its unchanged "
                                     f'image {tmp_path}/')
  assert problem['detail'].endswith(f"/{key.split('/')[-1]} and annotations converted again")
  assert report['num_recomputed'] == 4


def _change_annotation(root: pathlib.Path, fmt: str) -> None:
  path = root / ANNOTATION_OF[fmt]
  if fmt == 'coco':
    document = json.loads(path.read_text())
    document['annotations'][1]['bbox'] = [1, 1, 4, 4]
    path.write_text(json.dumps(document))
  elif fmt == 'voc':
    path.write_text(path.read_text().replace('<xmin>3</xmin>', '<xmin>2</xmin>'))
  else:
    path.write_text('0 0.5 0.5 0.25 0.25\n')


@pytest.mark.parametrize('fmt', sorted(FORMATS))
def test_an_annotation_changed_since_the_run_is_a_warning(tmp_path, fmt):
  out = _convert(tmp_path, fmt)
  _change_annotation(tmp_path, fmt)
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['valid'], report['warnings_by_kind']) == (
      EXIT_OK, True, {recompute.SOURCE_CHANGED: 1})
  key = 'train/a1.png' if fmt == 'yolo' else 'a1.png'
  assert report['warnings'][0]['detail'].startswith(f"key '{key}': its annotations in ")
  assert report['warnings'][0]['detail'].endswith('changed since the run (or are gone): '
                                                  'not compared')
  assert (report['num_recomputed'], report['num_recompute_skipped']) == (3, 1)


def test_an_image_changed_since_the_run_is_a_warning(tmp_path):
  out = _convert(tmp_path, 'coco')
  (tmp_path / 'images' / 'a2.png').write_bytes(noise_png(9, (16, 16)))
  code, report = _validate(out, '--recompute', '1.0')
  assert (code, report['warnings_by_kind']) == (EXIT_OK, {recompute.SOURCE_CHANGED: 1})
  assert report['warnings'][0]['detail'] == (
      f"key 'a2.png': its image {tmp_path / 'images' / 'a2.png'} changed since the run (or "
      f'is gone): not compared')


def test_a_dataset_without_annotation_fingerprints_is_refused(tmp_path, capsys):
  """Written before convert fingerprinted a record's annotations: nothing
  tells a changed annotation from a converter bug; exit 2, one line."""
  out = _convert(tmp_path, 'yolo')
  sidecar = out / 'train.sources.jsonl.gz'
  lines = [json.loads(line) for line in gzip.open(sidecar)]
  for line in lines:
    line['fingerprint'] = ''
  sidecar.write_bytes(gzip.compress(b''.join(json.dumps(line).encode() + b'\n'
                                             for line in lines), mtime=0))
  capsys.readouterr()
  assert validate.main(['--input_dir', str(out), '--recompute', '2']) == EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith(f'error: --recompute: the sidecars of {out} record no fingerprint of '
                        'the annotations of 2 sampled record(s)') and len(err.splitlines()) == 1


def test_a_key_no_image_record_gives_is_a_mismatch_while_the_coco_file_is_unchanged(tmp_path):
  """A record renamed (its filename and its sidecar line's key): no image
  record gives it. The COCO file at the size and time the run recorded
  (detection.annotations_version): the run wrote no such record, a problem;
  changed since (an image taken out), a warning."""
  out = _convert(tmp_path, 'coco')
  assert json.loads((out / 'dataset_info.json').read_text())['detection'][
      'annotations_version'] == fingerprints.file_version(str(tmp_path / 'instances.json'))
  key = _first_key(out)

  def rename(features):
    features['image/filename'] = (features['image/filename'][0], [b'zz.png'])
  shard = rewrite_first_record(out, rename)
  sidecar = out / 'train.sources.jsonl.gz'
  lines = [json.loads(line) for line in gzip.open(sidecar)]
  for line in lines:
    if line['key'] == key:
      line['key'] = 'zz.png'
  sidecar.write_bytes(gzip.compress(b''.join(json.dumps(line).encode() + b'\n'
                                             for line in lines), mtime=0))
  code, report = _validate(out, '--recompute', '1.0')
  assert code == EXIT_FAILED and report['problems_by_kind'][recompute.RECOMPUTE_MISMATCH] == 1
  problem = next(p for p in report['problems'] if p['kind'] == recompute.RECOMPUTE_MISMATCH)
  assert (problem['file'], problem['record'], problem['detail']) == (
      shard, 0, f"key 'zz.png': no image record of the run's annotations "
      f"{tmp_path / 'instances.json'} gives it, and the file is unchanged since the run: the "
      f'run wrote no such record')
  os.utime(tmp_path / 'instances.json', ns=(1, 1))  # changed since, as far as anyone can tell
  code, report = _validate(out, '--recompute', '1.0')
  assert recompute.RECOMPUTE_MISMATCH not in report['problems_by_kind']
  assert report['warnings_by_kind'] == {recompute.SOURCE_CHANGED: 1}


@pytest.mark.parametrize('fmt', sorted(FORMATS))
def test_a_moved_detection_dataset_is_not_told_to_pass_manifest(tmp_path, fmt, capsys):
  """--manifest does not apply to a --schema detection run (it has none):
  the error of a moved dataset named --manifest as the way out, and --manifest
  then failed on '--manifest does not go with --annotations'."""
  out = _convert(tmp_path, fmt)
  moved = tmp_path / 'moved'
  moved.mkdir()
  for name in os.listdir(tmp_path):
    if name not in ('out', 'moved'):
      os.rename(tmp_path / name, moved / name)
  capsys.readouterr()
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0']) == EXIT_USAGE
  error = capsys.readouterr().err
  assert '--manifest' not in error
  assert 'a --schema detection run has no manifest: its annotations' in error
  assert validate.main(['--input_dir', str(out), '--recompute', '1.0',
                        '--manifest', str(moved)]) == EXIT_USAGE
  error = capsys.readouterr().err
  assert f'--recompute: --manifest does not apply to {out}' in error
  assert 'does not go with --annotations' not in error
