"""Load a converted dataset for training (the public API; the code is in
pipeline/reading/dataset.py):

  from pipeline import read
  ds = read.load('out', 'train').shuffle(1000).batch(32)    # tf.data.Dataset of dicts
  for example in read.examples('out', 'train'):               # numpy, no TensorFlow
    example['image'], example['label'], example['key'], example['class_text']
"""

from pipeline.reading.dataset import examples
from pipeline.reading.dataset import load

__all__ = ['examples', 'load']
