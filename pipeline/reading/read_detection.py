"""read.load of a --schema detection dataset: each record as `image`, `boxes`
[N, 4] (ymin, xmin, ymax, xmax in [0, 1], as TF expects), `classes` [N],
`class_text` [N], `key` (the file name), `masks` [N, H, W] (with
--include_masks), `num_objects`; batches padded (classes with -1)."""

from __future__ import annotations

from transforms.core.detection_checks import BOX_FEATURES
from transforms.core.detection_checks import MASK

# What a padded batch fills the missing objects with (0 is the background id).
PAD_CLASS = -1


def decoder(info: dict, decode: bool, tf):
  """Parsed features -> the example dict of a detection record."""
  image_info = info['image']
  channels, encoding = image_info['channels'], image_info['encoding']
  with_masks = MASK in info['feature_spec']

  def decoded(encoded):
    if encoding == 'jpeg':
      # INTEGER_ACCURATE: the DCT Pillow (convert, validate, read.examples) uses.
      return tf.io.decode_jpeg(encoded, channels=channels, dct_method='INTEGER_ACCURATE')
    return tf.io.decode_png(encoded, channels=channels)

  def to_example(features):
    encoded = features['image/encoded']
    height = tf.cast(features['image/height'], tf.int32)
    width = tf.cast(features['image/width'], tf.int32)
    example = {
        'image': decoded(encoded) if decode else encoded,
        'boxes': tf.reshape(tf.stack([features[name] for name in BOX_FEATURES], axis=-1),
                            [-1, 4]),
        'classes': features['image/object/class/label'],
        'class_text': features['image/object/class/text'],
        'key': features['image/filename'],
        'num_objects': tf.shape(features['image/object/class/label'])[0],
    }
    if with_masks:
      masks = features[MASK]
      example['masks'] = tf.cond(
          tf.size(masks) > 0,
          lambda: tf.map_fn(lambda png: tf.io.decode_png(png, channels=1)[..., 0], masks,
                            fn_output_signature=tf.TensorSpec([None, None], tf.uint8)),
          lambda: tf.zeros([0, height, width], tf.uint8))
    return example

  return to_example


def padded_batches(dataset, batch_size: int, tf):
  """Records N at a time, each object list padded to the batch's longest
  (boxes and masks with 0, classes with PAD_CLASS, texts with b'')."""
  fill = {'classes': tf.constant(PAD_CLASS, tf.int64)}
  padding = {name: fill.get(name, tf.zeros([], spec.dtype)) if spec.dtype != tf.string
             else tf.constant(b'') for name, spec in dataset.element_spec.items()}
  return dataset.padded_batch(batch_size, padding_values=padding)
