"""read.load of a --schema detection dataset: each record as `image`, `boxes`
[N, 4] (ymin, xmin, ymax, xmax in [0, 1], as TF expects), `classes` [N],
`class_text` [N], `key` (the file name), `masks` [N, H, W] (with
--include_masks), `num_objects`; batches as read.load batches any dataset
(images of their own size, and their masks, ragged), the object lists then
padded (classes with -1)."""

from __future__ import annotations

from transforms.core.detection_checks import BOX_FEATURES
from transforms.core.detection_checks import MASK

# What a padded batch fills the missing objects with (0 is the background id).
PAD_CLASS = -1
# The features with one row per object, padded to the batch's longest list.
OBJECT_LISTS = ('boxes', 'classes', 'class_text', 'masks')


def decoder(info: dict, decode: bool, tf, image_shape: list):
  """Parsed features -> the example dict of a detection record; image_shape:
  [H, W, C] as the classification reader pins it (dataset._image_shape, None
  for what differs)."""
  image_info = info['image']
  channels, encoding = image_info['channels'], image_info['encoding']
  with_masks = MASK in info['feature_spec']

  def decoded(encoded):
    if encoding == 'jpeg':
      # INTEGER_ACCURATE: the DCT Pillow (convert, validate, read.examples) uses.
      image = tf.io.decode_jpeg(encoded, channels=channels, dct_method='INTEGER_ACCURATE')
    elif encoding == 'png':
      image = tf.io.decode_png(encoded, channels=channels)
    else:
      raise ValueError(f'no decoder for the encoding {encoding!r}')
    # Pinned in the static shape, as the classification decoder does: read.load's
    # ragged_batch keeps a fixed size dense and makes images of their own size ragged.
    return tf.ensure_shape(image, image_shape)

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
      example['masks'] = tf.ensure_shape(tf.cond(
          tf.size(masks) > 0,
          lambda: tf.map_fn(lambda png: tf.io.decode_png(png, channels=1)[..., 0], masks,
                            fn_output_signature=tf.TensorSpec([None, None], tf.uint8)),
          lambda: tf.zeros([0, height, width], tf.uint8)), [None, *image_shape[:2]])
    return example

  return to_example


def padded_objects(batch: dict, tf) -> dict:
  """A ragged_batch of detection records with each object list padded to the
  batch's longest (boxes and masks with 0, classes with PAD_CLASS, texts with
  b''), the Object Detection API's groundtruth-plus-num_objects layout. Only
  the object dimension is padded: the masks of images of their own size stay
  ragged [N, None, None, None] like the images, since padding their height
  and width would misalign them with the boxes, which are normalised to each
  image's own size."""
  padded = dict(batch)
  for name in OBJECT_LISTS:
    value = batch.get(name)
    if isinstance(value, tf.RaggedTensor) and value.ragged_rank == 1:
      fill = (tf.constant(b'') if value.dtype == tf.string else
              tf.constant(PAD_CLASS if name == 'classes' else 0, value.dtype))
      padded[name] = value.to_tensor(default_value=fill)
  return padded
