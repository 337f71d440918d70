"""Real clients read --schema detection output unchanged: TensorFlow with the
Object Detection API's documented feature spec, read.load, and (make
test-integration) the Model Garden's TfExampleDecoder from tf-models-official
in its own venv (.peers/tf-models, tests/peers/requirements-tf-models.txt)."""

import json
import pathlib
import subprocess

import numpy as np
import pytest

from pipeline import convert
from pipeline import demo_detection
from pipeline import read

# TensorFlow and the Model Garden: real clients, all in make test-integration.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group('detection')]
REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope='module')
def dataset(tmp_path_factory) -> pathlib.Path:
  root = tmp_path_factory.mktemp('peers')
  annotations = demo_detection.make_sample(str(root))
  out = root / 'out'
  assert convert.main(['--annotations', annotations, '--annotation_format', 'coco',
                       '--image_dir', str(root / 'images'), '--include_masks',
                       '--height', '160', '--width', '160', '--resize_mode', 'stretch',
                       '--output_dir', str(out), '--progress', 'off', '--shuffle', 'off']) == 0
  return out


def _shard(out: pathlib.Path) -> str:
  return str(out / json.loads((out / 'dataset_info.json').read_text())['splits']['train'][
      'shards'][0])


# The Object Detection API's TfExampleDecoder keys (object_detection/data_decoders).
OD_API_KEYS = {
    'image/encoded': 'string', 'image/format': 'string', 'image/height': 'int64',
    'image/width': 'int64', 'image/filename': 'string', 'image/source_id': 'string',
    'image/key/sha256': 'string', 'image/object/bbox/xmin': 'float32',
    'image/object/bbox/xmax': 'float32', 'image/object/bbox/ymin': 'float32',
    'image/object/bbox/ymax': 'float32', 'image/object/class/label': 'int64',
    'image/object/class/text': 'string', 'image/object/area': 'float32',
    'image/object/is_crowd': 'int64', 'image/object/difficult': 'int64',
    'image/object/truncated': 'int64', 'image/object/mask': 'string',
}


@pytest.mark.slow
def test_the_object_detection_api_feature_spec_parses_it(dataset):
  import tensorflow as tf
  spec = {name: tf.io.FixedLenFeature((), getattr(tf, dtype)) if name in (
      'image/encoded', 'image/format', 'image/height', 'image/width', 'image/filename',
      'image/source_id', 'image/key/sha256') else tf.io.VarLenFeature(getattr(tf, dtype))
      for name, dtype in OD_API_KEYS.items()}
  records = list(tf.data.TFRecordDataset(_shard(dataset)))
  first = tf.io.parse_single_example(records[0], spec)
  # --shuffle off: astronaut (id 1) first; stretched, boxes keep their fractions
  assert first['image/source_id'].numpy() == b'1'
  xmin = tf.sparse.to_dense(first['image/object/bbox/xmin']).numpy()
  assert np.allclose(xmin, np.array([150, 275, 355]) / 512)
  masks = tf.sparse.to_dense(first['image/object/mask'], default_value=b'').numpy()
  decoded = tf.io.decode_png(masks[0]).numpy()
  assert decoded.shape == (160, 160, 1) and set(np.unique(decoded)) == {0, 1}
  batch = next(iter(read.load(str(dataset), schema='detection', batch_size=3)))
  assert batch['boxes'].shape == (3, 4, 4) and batch['masks'].shape == (3, 4, 160, 160)
  assert batch['classes'].numpy().tolist()[0] == [1, 2, 3, -1]  # padded with -1
  with pytest.raises(ValueError, match='was written with --schema detection'):
    read.load(str(dataset), schema='default')


DECODE = """
import sys
import tensorflow as tf
from official.vision.dataloaders import tf_example_decoder
decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)
for record in tf.data.TFRecordDataset(sys.argv[1]).take(1):
  out = decoder.decode(record)
  print(out['source_id'].numpy().decode(), out['groundtruth_classes'].numpy().tolist(),
        out['groundtruth_boxes'].numpy().shape, out['groundtruth_instance_masks'].numpy().shape)
"""


def test_the_model_gardens_decoder_reads_it(dataset):
  python = REPO / '.peers' / 'tf-models' / 'bin' / 'python'
  if not python.exists():
    pytest.fail('.peers/tf-models is missing: run `make .peers/tf-models/.installed`')
  done = subprocess.run([str(python), '-c', DECODE, _shard(dataset)], capture_output=True,
                        text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.split('\n')[0] == '1 [1, 2, 3] (3, 4) (3, 160, 160)'
