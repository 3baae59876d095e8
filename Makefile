# Two commands do all the set-up: `make run` (the main job) and `make test` (the suite).
# Each creates the project-local virtualenv .venv on first use and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test bench venv clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

run: $(STAMP)
	$(PY) -m dledger.cli demo

bench: $(STAMP)
	$(PY) benchmarks/bench_store_append.py
	$(PY) benchmarks/bench_inproc_cluster.py
	$(PY) benchmarks/bench_sim.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
