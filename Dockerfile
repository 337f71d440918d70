# Custom worker container for Dataflow (--sdk_container_image), the
# alternative to --setup_file: Beam's own Python SDK image, pinned to this
# project's Beam (requirements.txt) and Python (3.11), with the package and its
# runtime requirements installed: no TensorFlow. Its entry point stays the
# image's /opt/apache/beam/boot. Not built by the tests (no docker daemon
# here); tests/test_packaging.py checks the pins and that every COPY exists.
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/img2tfrecord-worker:0.1.0 .
FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /opt/img2tfrecord
COPY setup.py MANIFEST.in README.md requirements.txt requirements-tf.txt requirements-test.txt ./
COPY pipeline/ pipeline/
COPY transforms/ transforms/
RUN pip install --no-cache-dir . && cd / && python -c "import pipeline.convert, pipeline.validate"
