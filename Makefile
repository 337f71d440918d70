# The two commands a new user needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): requirements.txt requirements-test.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-test.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

demo: install
	$(PY) -m pipeline.demo

test: install
	$(PY) -m pytest -q tests

bench: install
	$(PY) -m bench.bench $(BENCH_ARGS)

clean:
	rm -rf demo_data demo_output build *.egg-info .pytest_cache
