"""--schema detection against the reference: TensorFlow Model Garden's own
official/vision/data/create_coco_tf_record.py (in the .peers/tf-models venv,
make test-integration) converts a generated COCO set, and so does
`convert --resize_mode none --encoding jpeg --include_masks`; the records are
compared one by one (matched by image/source_id): every box coordinate
exactly, labels, texts, is_crowd, area, mask pixels, the objects' order and
count. What still differs is what docs/detection.md lists ("Against the
reference"), each asserted here as such. Both outputs are then read by Model
Garden's TfExampleDecoder."""

import hashlib
import io
import json
import pathlib
import subprocess

import numpy as np
from PIL import Image
import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import read_examples
from tests.conftest import read_info
from transforms.core import masks
from transforms.core.example_proto import parse_example
from transforms.core.shuffle import Ordering
from transforms.core.tfrecord import read_records

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group('detection')]
REPO = pathlib.Path(__file__).resolve().parent.parent
PEER = REPO / '.peers' / 'tf-models' / 'bin' / 'python'
CATEGORIES = {1: 'person', 3: 'car', 7: 'train', 90: 'toothbrush'}  # not contiguous


def _rle(pixels: np.ndarray) -> dict:
  """An uncompressed COCO RLE (runs down the columns, starting with 0s)."""
  flat = np.asarray(pixels, np.uint8).T.reshape(-1)
  changes = np.flatnonzero(np.diff(flat)) + 1
  bounds = np.concatenate([[0], changes, [flat.size]])
  counts = np.diff(bounds).tolist()
  if flat[0]:
    counts = [0] + counts
  return {'size': list(pixels.shape), 'counts': counts}


def _polygon(points: list) -> dict:
  xs, ys = points[0::2], points[1::2]
  return {'segmentation': [points], 'bbox': [min(xs), min(ys), max(xs) - min(xs),
                                             max(ys) - min(ys)]}


def _image(path: pathlib.Path, size: tuple, mode: str) -> None:
  width, height = size
  ramp = np.add.outer(np.arange(height) * 5, np.arange(width) * 3) % 256
  pixels = np.stack([ramp, 255 - ramp, (ramp * 7) % 256], axis=-1).astype(np.uint8)
  if mode == 'L':
    Image.fromarray(pixels[:, :, 0], 'L').save(path, quality=90)
  elif mode == 'RGBA':
    alpha = np.where(np.arange(width) < width // 2, 0, 255).astype(np.uint8)
    Image.fromarray(np.dstack([pixels, np.broadcast_to(alpha, (height, width))]),
                    'RGBA').save(path)
  else:
    Image.fromarray(pixels, 'RGB').save(path, quality=90)


def make_set(root: pathlib.Path) -> pathlib.Path:
  """The generated COCO set: category ids 1, 3, 7, 90; crowd objects as
  uncompressed RLE; polygons, one in two parts; an image without
  annotations; a grayscale JPEG; an RGBA PNG; a box ending exactly on the
  right and bottom edges, one 0.5 px past the right edge, one at x < 0."""
  images_dir = root / 'images'
  images_dir.mkdir(parents=True)
  images = [(11, 'rgb.jpg', (64, 48), 'RGB'), (12, 'gray.jpg', (50, 40), 'L'),
            (13, 'empty.jpg', (32, 24), 'RGB'), (14, 'edges.jpg', (60, 40), 'RGB'),
            (15, 'rgba.png', (40, 40), 'RGBA')]
  for _, name, size, mode in images:
    _image(images_dir / name, size, mode)
  blob = np.zeros((40, 50), np.uint8)
  blob[5:17, 30:47] = 1
  blob[9:12, 35:40] = 0
  corner = np.zeros((48, 64), np.uint8)
  corner[30:48, 40:64] = 1
  anns = [  # (image id, category, iscrowd, area, segmentation and bbox)
      (11, 1, 0, 380.3125, _polygon([10.5, 5.25, 40.75, 8.0, 25.0, 30.5])),
      (11, 3, 0, 200.5, {'segmentation': [[2, 30, 12, 30, 12, 44, 2, 44],
                                           [15.5, 32, 24, 32, 20, 46]],
                         'bbox': [2, 30, 22, 16]}),
      (11, 90, 1, 432, {'segmentation': _rle(corner), 'bbox': [40, 30, 24, 18]}),  # the edges
      (11, 7, 0, 77.75, _polygon([44, 2, 50.2, 10.7, 60.1, 4.4, 55, 14.9, 61.3, 22, 47.5,
                                  18.25, 41, 24.9, 44.6, 13.3])),
      (12, 7, 0, 150.0, _polygon([3.3, 3.3, 20.8, 6.1, 14.2, 33.7, 4.4, 28.0])),
      (12, 1, 1, 189, {'segmentation': _rle(blob), 'bbox': [30, 5, 17, 12]}),
      (14, 3, 0, 100.0, _polygon([50.5, 10, 60.5, 10, 60.5, 20, 50.5, 20])),  # 0.5 px past
      (14, 1, 0, 100.0, _polygon([-0.5, 5, 9.5, 5, 9.5, 15, -0.5, 15])),  # x < 0
      (14, 90, 0, 64.5, _polygon([20.25, 20.5, 35.75, 22.0, 30.0, 39.5])),
      (15, 7, 0, 300.0, _polygon([5, 5, 35, 5, 35, 30, 5, 30])),
  ]
  document = {
      'images': [{'id': i, 'file_name': name, 'width': size[0], 'height': size[1]}
                 for i, name, size, _ in images],
      'annotations': [{'id': n, 'image_id': image_id, 'category_id': category,
                       'iscrowd': crowd, 'area': area, **shape}
                      for n, (image_id, category, crowd, area, shape) in enumerate(anns, 1)],
      'categories': [{'id': i, 'name': name, 'supercategory': 'thing'}
                     for i, name in CATEGORIES.items()],
  }
  path = root / 'instances.json'
  path.write_text(json.dumps(document))
  return path


def _peer() -> str:
  if not PEER.exists():
    pytest.fail('.peers/tf-models is missing: run `make .peers/tf-models/.installed`')
  return str(PEER)


def _by_source_id(examples) -> dict:
  found = {}
  for example in examples:
    found[example['image/source_id'][1][0].decode()] = example
  return found


@pytest.fixture(scope='module')
def both(tmp_path_factory):
  root = tmp_path_factory.mktemp('reference')
  annotations = make_set(root)
  done = subprocess.run(
      [_peer(), '-m', 'official.vision.data.create_coco_tf_record',
       f'--image_dir={root / "images"}', f'--object_annotations_file={annotations}',
       f'--output_file_prefix={root / "reference" / "train"}', '--num_shards=1',
       '--include_masks', '--num_processes=0'], capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  shard = root / 'reference' / 'train-00000-of-00001.tfrecord'
  with open(shard, 'rb') as stream:
    theirs = [parse_example(data) for _, data in read_records(stream)]
  out = root / 'ours'
  assert convert.main(['--annotations', str(annotations), '--annotation_format', 'coco',
                       '--image_dir', str(root / 'images'), '--resize_mode', 'none',
                       '--encoding', 'jpeg', '--include_masks', '--output_dir', str(out),
                       '--progress', 'off']) == EXIT_OK
  return root, shard, out, theirs, read_examples(out)


OBJECT_KEYS = ('image/object/bbox/xmin', 'image/object/bbox/ymin', 'image/object/bbox/xmax',
               'image/object/bbox/ymax', 'image/object/class/label',
               'image/object/class/text', 'image/object/is_crowd', 'image/object/area')


def _objects(example: dict) -> list:
  """One tuple per object: every per-object value, the mask as its pixels."""
  columns = [example.get(key, (None, []))[1] for key in OBJECT_KEYS]
  pixels = [masks.decode_mask(m).tobytes() for m in example.get('image/object/mask',
                                                                 (None, []))[1]]
  return [(*values, mask) for *values, mask in zip(*columns, pixels, strict=True)]


def test_every_record_equals_the_references(both):
  root, _, out, theirs, ours = both
  theirs, ours = _by_source_id(theirs), _by_source_id(ours)
  assert sorted(ours) == sorted(theirs) == ['11', '12', '13', '14', '15']
  for source_id in ('11', '12', '15'):  # no edge case: equal object for object
    assert _objects(ours[source_id]) == _objects(theirs[source_id]), source_id
    assert len(_objects(ours[source_id])) == len(theirs[source_id]['image/object/mask'][1])
  assert [o[4] for o in _objects(ours['11'])] == [1, 3, 90, 7]  # the file's order
  assert [o[5] for o in _objects(ours['11'])] == [b'person', b'car', b'toothbrush', b'train']
  # the box ending exactly on the right and bottom edges is kept, at 1.0
  assert _objects(ours['11'])[2][2:4] == (1.0, 1.0)
  for source_id, example in ours.items():
    for key in ('image/height', 'image/width', 'image/filename', 'image/key/sha256'):
      assert example[key] == theirs[source_id][key], (source_id, key)
    name = example['image/filename'][1][0].decode()
    assert example['image/key/sha256'][1][0].decode() == hashlib.sha256(
        (root / 'images' / name).read_bytes()).hexdigest()
  # RGB JPEGs are passed through: the same bytes as the reference's
  for source_id in ('11', '13', '14'):
    assert ours[source_id]['image/encoded'] == theirs[source_id]['image/encoded']
  assert read_info(out)['detection']['dropped_boxes']['crop_visibility'] == 0


def test_what_still_differs_is_what_the_docs_list(both):
  root, _, _, theirs, ours = both
  # record order: the images array's there; here --shuffle on's, a salted
  # hash of the key (the file name)
  assert [e['image/source_id'][1][0] for e in theirs] == [b'11', b'12', b'13', b'14', b'15']
  ordering = Ordering(shuffle=True, seed=0)
  names = [e['image/filename'][1][0].decode() for e in ours]
  assert names == sorted(names, key=lambda name: ordering.key(name, 0))
  theirs, ours = _by_source_id(theirs), _by_source_id(ours)
  # image/format: the reference writes 'jpg' whatever the file, we 'jpeg'
  assert {e['image/format'][1][0] for e in theirs.values()} == {b'jpg'}
  assert {e['image/format'][1][0] for e in ours.values()} == {b'jpeg'}
  # our extra per-object keys, VOC's flags: 0 for COCO
  for example in ours.values():
    count = len(example['image/object/class/label'][1])
    assert example['image/object/difficult'][1] == example['image/object/truncated'][1] == (
        [0] * count)
  assert not any('image/object/difficult' in e for e in theirs.values())
  # an image without objects: empty lists here, no object keys there
  assert all(ours['13'][key][1] == [] for key in (*OBJECT_KEYS, 'image/object/mask'))
  assert not [key for key in theirs['13'] if key.startswith('image/object/')]
  # the edges: the reference skips the box 0.5 px past the right edge (any
  # overshoot), and keeps the box at x < 0 as it is (xmin < 0); we clip both
  # (within the 1-px tolerance) and scale their recorded area by what stays
  mine, reference = _objects(ours['14']), _objects(theirs['14'])
  assert [o[4] for o in mine] == [3, 1, 90] and [o[4] for o in reference] == [1, 90]
  past, below_zero, same = mine
  assert past[2] == 1.0 and past[7] == pytest.approx(100.0 * 9.5 / 10)
  assert reference[0][0] == np.float32(-0.5 / 60) and below_zero[0] == 0.0
  assert below_zero[7] == pytest.approx(100.0 * 9.5 / 10) and reference[0][7] == 100.0
  assert below_zero[1:7] == reference[0][1:7] and below_zero[8] == reference[0][8]
  assert same == reference[1]
  # a grayscale JPEG is stored as RGB (--channels 3: decoded and re-encoded)
  gray = np.asarray(Image.open(io.BytesIO(ours['12']['image/encoded'][1][0])))
  source = np.asarray(Image.open(root / 'images' / 'gray.jpg'))
  assert gray.shape == (40, 50, 3) and np.abs(gray[:, :, 1].astype(int) - source).max() < 16
  # RGBA: the reference stores the PNG's bytes as they are; we composite the
  # transparent half over --background (white) and store a JPEG
  assert theirs['15']['image/encoded'][1][0] == (root / 'images' / 'rgba.png').read_bytes()
  rgba = np.asarray(Image.open(io.BytesIO(ours['15']['image/encoded'][1][0])))
  assert rgba.shape == (40, 40, 3) and rgba[:, :18].min() > 240


DECODE = """
import json
import sys
import tensorflow as tf
from official.vision.dataloaders import tf_example_decoder
decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)
for path in sys.argv[1:]:
  for record in tf.data.TFRecordDataset(path):
    out = decoder.decode(record)
    print(json.dumps({'path': path, 'source_id': out['source_id'].numpy().decode(),
                      'image': list(out['image'].shape),
                      'boxes': out['groundtruth_boxes'].numpy().tolist(),
                      'classes': out['groundtruth_classes'].numpy().tolist(),
                      'is_crowd': out['groundtruth_is_crowd'].numpy().tolist(),
                      'area': out['groundtruth_area'].numpy().tolist(),
                      'masks': out['groundtruth_instance_masks'].numpy().sum(
                          axis=(1, 2)).tolist()}))
"""


def test_model_gardens_decoder_reads_both_alike(both):
  _, shard, out, _, _ = both
  info = read_info(out)
  ours = [str(out / name) for name in info['splits']['train']['shards']]
  done = subprocess.run([_peer(), '-c', DECODE, str(shard), *ours], capture_output=True,
                        text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  decoded = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{')]
  theirs = {d['source_id']: d for d in decoded if d['path'] == str(shard)}
  mine = {d['source_id']: d for d in decoded if d['path'] != str(shard)}
  assert sorted(mine) == sorted(theirs) == ['11', '12', '13', '14', '15']
  for source_id in ('11', '12', '13'):
    assert {k: v for k, v in mine[source_id].items() if k != 'path'} == {
        k: v for k, v in theirs[source_id].items() if k != 'path'}, source_id
  assert mine['11']['classes'] == [1, 3, 90, 7] and mine['11']['masks'][2] == 24 * 18
  assert mine['15']['image'] == [40, 40, 3]  # the decoder's own image: 3 channels
  assert len(mine['14']['classes']) == 3 and len(theirs['14']['classes']) == 2
