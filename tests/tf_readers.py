"""Independent readers of convert's output, run in their own process.

  python tests/tf_readers.py seed OUT_DIR H W      # the seed's TF1 queue recipe
  python tests/tf_readers.py tfdata OUT_DIR        # tf.data driven by dataset_info.json

Prints a JSON list of [label, first pixel...] per record, sorted.

  python tests/tf_readers.py jobs JSON             # [[mode, OUT_DIR, ...], ...] in one process

Prints one {"rows": [...]} or {"error": traceback} per job: one process for
many datasets pays TensorFlow's import (~5 s) once.

  python tests/tf_readers.py seed_pickle OUT_DIR H W FILE   # the seed recipe, every pixel
  python tests/tf_readers.py load FILE DIR:SPLIT...          # pipeline.read.load, in its order
  python tests/tf_readers.py keras OUT_DIR                  # a tiny model, one epoch
  python tests/tf_readers.py eager FILE JSON                # {"load": [DIR:SPLIT, ...],
                                                            #  "keras": OUT_DIR, "options":
                                                            #  [[DIR, SPLIT, {read.load kwargs}],
                                                            #  ...]}: all, one process

seed_pickle pickles a list of {label, image} (numpy) to FILE, load a list of
such lists (with key, class_text, extras) per DIR:SPLIT; keras prints its training history as JSON;
eager pickles {"load": {DIR:SPLIT: that list}, "keras": the history, "options":
{json.dumps([DIR, SPLIT, kwargs]): the elements of read.load(DIR, SPLIT, **kwargs),
each value numpy as it comes (bytes kept), a tf.RaggedTensor as {"ragged": its
shape, "values": its nested lists}}} to FILE.
"""

import glob
import json
import os
import sys
import traceback

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
import tensorflow as tf


def seed_recipe(out_dir, height, width, full_images=None):
  """The classic tutorial, unchanged but for tf.compat.v1. full_images: a list
  that receives every {label, image} as well."""
  from PIL import Image
  tf1 = tf.compat.v1
  tf1.disable_eager_execution()
  files = sorted(glob.glob(os.path.join(out_dir, 'train-*.tfrecord')))
  filename_queue = tf1.train.string_input_producer(files, num_epochs=1, shuffle=False)
  reader = tf1.TFRecordReader()
  _, serialized_example = reader.read(filename_queue)
  features = tf1.parse_single_example(serialized_example, features={
      'label': tf1.FixedLenFeature([], tf.int64),
      'img_raw': tf1.FixedLenFeature([], tf.string),
  })
  img = tf1.decode_raw(features['img_raw'], tf.uint8)
  img = tf.reshape(img, [height, width, 3])
  label = tf.cast(features['label'], tf.int32)
  img_batch, label_batch = tf1.train.shuffle_batch(
      [img, label], batch_size=2, capacity=30, min_after_dequeue=5,
      allow_smaller_final_batch=True)
  results = []
  saved = os.path.join(out_dir, 'seed_images')
  os.makedirs(saved, exist_ok=True)
  with tf1.Session() as sess:
    sess.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
    coord = tf1.train.Coordinator()
    threads = tf1.train.start_queue_runners(sess=sess, coord=coord)
    try:
      while True:
        images, labels = sess.run([img_batch, label_batch])
        for image, value in zip(images, labels):
          # the seed saves each image with its label in the file name
          Image.fromarray(image, 'RGB').save(
              os.path.join(saved, f'{len(results)}_Label_{value}.jpg'))
          results.append([int(value)] + image[0, 0].tolist())
          if full_images is not None:
            full_images.append({'label': int(value), 'image': image})
    except tf.errors.OutOfRangeError:
      pass
    finally:
      coord.request_stop()
      coord.join(threads)
  return results


def parse_spec(feature_spec: dict) -> dict:
  """tf.io parse features chosen mechanically from feature_spec's shapes (the
  docs/reading.md recipe): [] and [N] fixed, [null] ragged, [null, N] ragged of N-rows."""
  dtypes = {'string': tf.string, 'int64': tf.int64, 'float32': tf.float32}
  spec = {}
  for name, f in feature_spec.items():
    dtype, shape = dtypes[f['dtype']], f['shape']
    if None not in shape:
      spec[name] = tf.io.FixedLenFeature(shape, dtype)
    elif len(shape) == 1:
      spec[name] = tf.io.RaggedFeature(dtype)
    else:
      spec[name] = tf.io.RaggedFeature(
          dtype, partitions=[tf.io.RaggedFeature.UniformRowLength(shape[1])])
  return spec


def _text(value):
  """bytes (in nested lists) as text, for JSON."""
  if isinstance(value, list):
    return [_text(v) for v in value]
  return value.decode() if isinstance(value, bytes) else value


def extras(out_dir):
  """{key: {extra feature: its value as a (nested) list}} read with tf.data."""
  with open(os.path.join(out_dir, 'dataset_info.json')) as handle:
    info = json.load(handle)
  spec = parse_spec(info['feature_spec'])
  names = [n for n in info['feature_spec'] if not n.startswith('image/')]
  files = [os.path.join(out_dir, shard) for split in info['splits'].values()
           for shard in split['shards']]
  found = {}
  for record in tf.data.TFRecordDataset(files):
    example = tf.io.parse_single_example(record, spec)
    values = {}
    for name in names:
      value = example[name]
      value = value.to_list() if hasattr(value, 'to_list') else value.numpy().tolist()
      values[name] = _text(value)
    found[example['image/key'].numpy().decode()] = values
  return found


def tfdata(out_dir):
  """tf.data with a parse spec built from dataset_info.json's feature_spec."""
  with open(os.path.join(out_dir, 'dataset_info.json')) as handle:
    info = json.load(handle)
  spec = parse_spec(info['feature_spec'])
  files = [os.path.join(out_dir, shard) for split in info['splits'].values()
           for shard in split['shards']]
  compression = 'GZIP' if info['compression'] == 'gzip' else ''
  image = info['image']
  results = []
  for record in tf.data.TFRecordDataset(files, compression_type=compression):
    example = tf.io.parse_single_example(record, spec)
    if info['schema'] == 'seed':
      pixels = tf.reshape(tf.io.decode_raw(example['img_raw'], tf.uint8),
                          [image['height'], image['width'], image['channels']])
      label = example['label']
    else:
      encoded = example['image/encoded']
      shape = [example['image/height'], example['image/width'], example['image/channels']]
      if image['encoding'] == 'raw':
        pixels = tf.reshape(tf.io.decode_raw(encoded, tf.uint8), shape)
      else:
        pixels = tf.io.decode_image(encoded, channels=image['channels'])
        tf.debugging.assert_equal(tf.shape(pixels, out_type=tf.int64), tf.stack(shape))
      label = example['image/class/label']
    # --multi_label: feature_spec says [null], so the labels are a list
    if isinstance(label, tf.SparseTensor):
      value = label.values.numpy().tolist()
    elif label.shape.rank:
      value = label.numpy().tolist()
    else:
      value = int(label)
    results.append([value] + pixels.numpy()[0, 0].tolist())
  return results


def run_jobs(jobs: list) -> list:
  """Every tf.data job first: the seed recipe turns eager execution off for
  good, so a process runs at most one, last."""
  seeds = [i for i, job in enumerate(jobs) if job[0] == 'seed']
  if len(seeds) > 1:
    raise ValueError('one seed job per process (it disables eager execution)')
  results = {}
  for i in [i for i in range(len(jobs)) if i not in seeds] + seeds:
    mode, out, *size = jobs[i]
    try:
      rows = seed_recipe(out, *map(int, size)) if mode == 'seed' else tfdata(out)
      results[i] = {'rows': sorted(rows)}
    except Exception:
      # reported to that job's test, which fails with it; the other jobs go on
      results[i] = {'error': traceback.format_exc()}
  return [results[i] for i in range(len(jobs))]


def load_records(out_dir, split):
  """pipeline.read.load, every record in the dataset's order, as numpy."""
  from pipeline import read
  rows = []
  for example in read.load(out_dir, split):
    row = {name: value.numpy() for name, value in example.items()}
    row['key'] = row['key'].decode('utf-8')
    if row['label'].ndim:  # --multi_label: a list of ids and of texts
      row['label'] = row['label'].tolist()
      row['class_text'] = [text.decode('utf-8') for text in row['class_text']]
    else:
      row['label'] = int(row['label'])
      row['class_text'] = row['class_text'].decode('utf-8')
    rows.append(row)
  return rows


def as_numpy(value):
  """A tensor as numpy; a tf.RaggedTensor as its shape and nested lists."""
  if isinstance(value, tf.RaggedTensor):
    return {'ragged': value.shape.as_list(), 'values': value.to_list()}
  return value.numpy()


def load_with_options(out_dir, split, options):
  """read.load with keyword options (multi_hot, resize_to, batch_size, ...):
  every element, nothing decoded or converted but to numpy."""
  from pipeline import read
  return [{name: as_numpy(value) for name, value in element.items()}
          for element in read.load(out_dir, split, **options)]


def train_keras(out_dir):
  """A tiny classifier, one epoch on read.load: the README's recipe."""
  from pipeline import read
  info = json.load(open(os.path.join(out_dir, 'dataset_info.json')))
  image = info['image']
  tf.keras.utils.set_random_seed(0)
  model = tf.keras.Sequential([
      tf.keras.Input((image['height'], image['width'], image['channels'])),
      tf.keras.layers.Rescaling(1 / 255),
      tf.keras.layers.GlobalAveragePooling2D(),
      tf.keras.layers.Dense(info['num_classes'], activation='softmax')])
  model.compile('adam', 'sparse_categorical_crossentropy', metrics=['accuracy'])
  dataset = (read.load(out_dir, 'train').shuffle(100, seed=0)
             .map(lambda e: (e['image'], e['label'])).batch(4))
  batches = []
  counter = tf.keras.callbacks.LambdaCallback(
      on_train_batch_end=lambda batch, logs: batches.append(batch))
  history = model.fit(dataset, epochs=1, verbose=0, callbacks=[counter])
  return {'history': {k: [float(v) for v in vs] for k, vs in history.history.items()},
          'steps': len(batches)}


if __name__ == '__main__':
  mode, out = sys.argv[1], sys.argv[2]
  if mode == 'jobs':
    print(json.dumps(run_jobs(json.loads(out))))
    sys.exit(0)
  if mode in ('seed_pickle', 'load', 'eager'):
    import pickle
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if mode == 'eager':
      jobs = json.loads(sys.argv[3])
      rows = {'load': {arg: load_records(*arg.rsplit(':', 1)) for arg in jobs['load']},
              'keras': train_keras(jobs['keras']),
              'options': {json.dumps(job): load_with_options(*job)
                          for job in jobs.get('options', [])}}
    elif mode == 'load':
      rows = [load_records(*arg.rsplit(':', 1)) for arg in sys.argv[3:]]
      out = sys.argv[2]
    else:
      rows = []
      seed_recipe(out, int(sys.argv[3]), int(sys.argv[4]), rows)
      out = sys.argv[5]
    with open(out, 'wb') as handle:
      pickle.dump(rows, handle)
    print(json.dumps(len(rows)))
    sys.exit(0)
  if mode == 'extras':
    print(json.dumps(extras(out)))
    sys.exit(0)
  if mode == 'keras':
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(json.dumps(train_keras(out)))
    sys.exit(0)
  rows = seed_recipe(out, int(sys.argv[3]), int(sys.argv[4])) if mode == 'seed' else tfdata(out)
  print(json.dumps(sorted(rows)))
