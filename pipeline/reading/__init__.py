"""Reading a converted dataset back, driven by its dataset_info.json: as
numpy or as a tf.data.Dataset (dataset.py; the public API is pipeline/read.py),
a detection dataset's records (read_detection.py).

May import: pipeline.errors, transforms.
"""
