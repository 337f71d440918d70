# The two commands a new user needs: `make demo` and `make test`.
# install: everything (runtime + the tf extra + test tools); a worker installs
# only requirements.txt (see docs/running.md "Running on Dataflow").
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo demo-detection demo-sources demo-flink demo-spark fetch-engines test test-integration lint docs-flags docs-images bench bench-engines bench-launcher bench-peers clean

# The project's own bytecode is compiled here too (compileall skips what is up
# to date): with PYTHONDONTWRITEBYTECODE set, as on some CI machines, Python
# compiled every module of pipeline/ and transforms/ again at each command's
# start (0.71-0.74 against 0.62-0.64 s for a 5-row nightly run).
install: $(STAMP)
	$(PY) -m compileall -q -j 0 pipeline transforms bench

$(STAMP): requirements.txt requirements-tf.txt requirements-test.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-tf.txt -r requirements-test.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

demo: install
	$(PY) -m pipeline.demo

# A small COCO-format detection set (scikit-image's astronaut, coffee, chelsea
# with hand-made boxes and masks): convert --schema detection, validate, inspect
# (demo_output_detection/inspect/contact_sheet.png shows the boxes).
demo-detection: install
	$(PY) -m pipeline.demo_detection

# A small set in each shape datasets are shared in: Hugging Face Parquet,
# WebDataset tars, a URL list served on 127.0.0.1; each converted and validated.
demo-sources: install
	$(PY) -m pipeline.demo_sources

# The same sample on an embedded Flink / a local Spark: needs Java 17 (or any
# the engine runs on) and, the first time, Maven to fetch the job server into
# the cache (docs/running.md "Running on Flink"). fetch-engines fetches both ahead of
# time (CI).
demo-flink: install
	$(PY) -m pipeline.engines fetch flink
	$(PY) -m pipeline.demo --engine flink

demo-spark: install
	$(PY) -m pipeline.engines fetch spark
	$(PY) -m pipeline.demo --engine spark

fetch-engines: install
	$(PY) -m pipeline.engines fetch flink
	$(PY) -m pipeline.engines fetch spark

# Two pytest workers (pytest-xdist): a test mostly waits on one core for a Beam
# pipeline, so two run side by side on CI's two cores. Tests sharing an
# expensive fixture carry one xdist_group and stay on one worker (loadgroup).
# TEST_WORKERS=0 runs everything in this process (for a debugger).
TEST_WORKERS ?= 2
# The clusters make test-integration starts (tests/peers/requirements-*.txt),
# and the other real clients it runs (tf-models: the Model Garden's decoder;
# datasets: Hugging Face's library writing Parquet).
CLUSTERS := flink spark
TEST_PEERS := tf-models datasets
# The schedulers whose examples make test-integration runs (examples/), each
# in its own venv with its dependencies (tests/peers/requirements-*.txt).
SCHEDULERS := airflow
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# make test leaves out the tests marked integration (real Flink and Spark runs,
# venvs under .peers/) and those marked slow (TensorFlow, Chromium, servers,
# killed runs, time limits, Beam in subprocesses: 3-14 s each, a third of the
# suite's time), so that it stays within 6 minutes on 2 cores. make
# test-integration runs both, after fetching the job servers (Java 17 and
# Maven) and building the clusters' .peers/ venvs; CI runs both targets.
test: install
	$(PYTEST) -m 'not integration and not slow' tests

test-integration: install fetch-engines $(foreach peer,$(CLUSTERS) $(TEST_PEERS) $(SCHEDULERS),.peers/$(peer)/.installed)
	$(PYTEST) -m 'integration or slow' tests

# ruff for everything but indents; pycodestyle holds indents to the house's 2
# spaces (ruff's E111 knows only multiples of 4). See ruff.toml.
LINTED := pipeline transforms tests bench setup.py
lint: install
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/pycodestyle --select=E111,E114,E117 --indent-size=2 $(LINTED)

# The flag reference of docs/convert.md and docs/validate.md, generated from the
# flag table (pipeline/configuration/flags.py); tests/test_docs.py checks it.
docs-flags: install
	$(PY) -m pipeline.configuration.flag_reference

# The pictures of docs/ from make demo's dataset: the contact sheet inspect
# draws, and its report page as Debian's chromium shows it (make demo itself
# writes only demo_data/ and demo_output/).
docs-images: demo
	$(PY) -c "from PIL import Image; Image.open('demo_output/inspect/contact_sheet.png').convert('RGB').quantize(256).save('docs/contact_sheet.png', optimize=True)"
	chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=700,1330 \
	  --user-data-dir=demo_output/.chromium --screenshot=demo_output/report.png \
	  "file://$(CURDIR)/demo_output/inspect/report.html"
	$(PY) -c "from PIL import Image; Image.open('demo_output/report.png').convert('RGB').quantize(256).save('docs/report.png', optimize=True)"

bench: install
	$(PY) -m bench.bench $(BENCH_ARGS)

# convert on each engine side by side (bench/engines.py): wall time, steady
# images/s against the DirectRunner's, peak memory; --clusters in BENCH_ARGS
# adds the session clusters (their .peers/ venvs).
bench-engines: install fetch-engines
	$(PY) -m bench.engines $(BENCH_ARGS)

# The launching process's CPU per row (target <= 0.05 ms) and every other
# process's, on the DirectRunner: 20,000 16x16 PNGs to raw 16x16 (a corpus
# cached under the workdir, bench/corpus.py), marginal over a 2,000-image run,
# so per-row work is measured and start-up, pixels and disk writes are not.
bench-launcher: install
	$(PY) -m bench.engines --engines direct --corpus tiny --case raw16 --num_images 20000 --startup_images 2000 $(BENCH_ARGS)

# The peers (img2dataset, TensorFlow Datasets' builder), each in its own venv
# (.peers/NAME, pinned in bench/peers/requirements-NAME.txt), then the bench's
# peer job alone, on 4,000 images, from files and from URLs (add --cases
# raw300,jpeg224 to BENCH_ARGS for the rest too; --num_images N for another size).
PEERS := img2dataset tfds
bench-peers: install $(foreach peer,$(PEERS),.peers/$(peer)/.installed)
	$(PY) -m bench.bench --cases none --peers --num_images 4000 $(BENCH_ARGS)

.peers/%/.installed: bench/peers/requirements-%.txt
	$(PYTHON) -m venv .peers/$*
	.peers/$*/bin/python -m pip install --quiet --upgrade pip
	.peers/$*/bin/python -m pip install --quiet -r $<
	touch $@

# The Flink and Spark clusters make test-integration starts (their jars and
# scripts; --no-deps: apache-flink pins an old apache-beam, and neither
# cluster runs Python of its own: the workers are this venv's worker pool).
# tf-models: --no-deps too, its full list pinned (tests/peers/requirements-tf-models.txt).
$(foreach peer,$(CLUSTERS) $(TEST_PEERS),.peers/$(peer)/.installed): .peers/%/.installed: tests/peers/requirements-%.txt
	$(PYTHON) -m venv .peers/$*
	.peers/$*/bin/python -m pip install --quiet --no-deps -r $<
	touch $@

# Apache Airflow for examples/airflow/'s test: with its dependencies, never in .venv.
$(foreach scheduler,$(SCHEDULERS),.peers/$(scheduler)/.installed): .peers/%/.installed: tests/peers/requirements-%.txt
	$(PYTHON) -m venv .peers/$*
	.peers/$*/bin/python -m pip install --quiet --upgrade pip
	.peers/$*/bin/python -m pip install --quiet -r $<
	touch $@

clean:
	rm -rf demo_data demo_output demo_data_detection demo_output_detection demo_data_sources demo_output_sources demo_output_flink demo_output_spark build *.egg-info .pytest_cache .peers
