"""img2tfrecord: image datasets -> sharded TFRecords of tf.train.Example, with Beam.

Installable so that `--setup_file ./setup.py` ships `pipeline` and
`transforms` to Dataflow/Flink workers.
"""

import pathlib

import setuptools

HERE = pathlib.Path(__file__).parent


def requirements(name):
  lines = (HERE / name).read_text().splitlines()
  return [line.strip() for line in lines if line.strip() and not line.startswith('#')]


setuptools.setup(
    name='img2tfrecord',
    version='0.1.0',
    description='Apache Beam pipelines converting image datasets to TFRecords and '
    'validating them',
    long_description=(HERE / 'README.md').read_text() if (HERE / 'README.md').exists() else '',
    long_description_content_type='text/markdown',
    python_requires='>=3.10',
    packages=setuptools.find_packages(include=['pipeline', 'pipeline.*', 'transforms', 'transforms.*']),
    # Workers install only the runtime list; TensorFlow (readers, tests) is the `tf` extra.
    # Among them pycocotools, a compiled wheel every worker needs for --include_masks
    # (COCO polygons rasterised as the COCO tools do; docs/sizing.md).
    install_requires=requirements('requirements.txt'),
    extras_require={
        'tf': requirements('requirements-tf.txt'),
        'test': requirements('requirements-tf.txt') + requirements('requirements-test.txt'),
    },
    entry_points={'console_scripts': ['img2tfrecord = pipeline.cli:console_main']},
)
