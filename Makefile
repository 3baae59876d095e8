# Two commands do all the set-up: `make run` (the main job) and `make test` (the suite).
# Each creates the project-local virtualenv .venv on first use and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# the build inputs: a change to any of them (the C extension's source too) installs again
BUILD_INPUTS := pyproject.toml setup.py $(sort $(wildcard src/dledger/broker/csrc/*))
STAMP := $(VENV)/.installed-$(shell cat $(BUILD_INPUTS) | cksum | cut -d' ' -f1)

.PHONY: run test bench bench-tcp soak venv clean

$(STAMP): $(BUILD_INPUTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark,connect]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

run: $(STAMP)
	rm -rf run-output
	$(PY) -m dledger.cli demo --dir run-output

bench: $(STAMP)
	$(PY) benchmarks/bench_store_append.py
	$(PY) benchmarks/bench_inproc_cluster.py
	$(PY) benchmarks/bench_sim.py
	$(PY) benchmarks/bench_tcp_cluster.py --quick

# the wide swarm sweep on every core: 5,000 seeds with the long safety phase and 20,000 with the
# default one, 3 and 5 nodes, both durability modes, file stores, storage faults (docs/simulation.md);
# e.g. make soak SOAK_ARGS="--long 400 --short 2000"
soak: $(STAMP)
	$(PY) -m dledger.sim soak $(SOAK_ARGS)

# the 3-process benchmark side by side with PySyncObj (installed for the benchmark only)
bench-tcp: $(STAMP)
	$(PY) -m pip install --quiet pysyncobj uvloop
	$(PY) benchmarks/bench_tcp_cluster.py --vs-pysyncobj --failover

clean:
	rm -rf $(VENV) build dist src/*.egg-info
