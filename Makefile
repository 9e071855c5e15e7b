# One-command set-up: every target below creates .venv and installs the project on first use.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo farm-demo test test-long test-fast lint bench bench-daemon protos gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

# The main job: the end-to-end training demo on the embedded default (configs/demo.py).
demo: $(STAMP)
	$(PY) -m learner train --config configs/demo.py

# Score the built-in suite's shipped fast and wrong variants of three tasks.
farm-demo: $(STAMP)
	$(PY) -m evalfarm.ops.demo

# The whole CPU test suite (GPU tests are skipped without a GPU): TEST_WORKERS pytest-xdist
# processes, then the tests marked `exclusive` (they check host-wide state or time against a
# threshold) one after another, with nothing else running; under one xdist run they would hold
# the other workers idle while each waits for the tests in flight to end.
TEST_WORKERS ?= 2

# bubblewrap first (installed where this machine allows; a loud note where it cannot): the tests
# then exercise the sandbox a farm daemon requires (docs/operations.md, "Isolation").
test: $(STAMP)
	bash scripts/ensure_bubblewrap.sh $(PY)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not gpu and not long and not exclusive" --durations=30
	$(PY) -m pytest -q -m "exclusive and not gpu and not long" --durations=5

# The long scenarios: experiment-sized runs, the end-to-end scenarios that take minutes each (the
# learner CLI killed and resumed, scaling and multi-host runs, the operator and hostile-tenant
# drills, a 200-sample stream, a daemon's queue around a re-verification, daemons killed
# mid-stream), the honest corpus scored through the farm, benchmark smoke runs, and CPU tests that
# compile C++ against torch's headers (20-45 s each on 2 cores). CI runs them after `make test`,
# in a step of their own.
test-long: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "long and not gpu" --durations=30

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not gpu and not slow" -x

lint: $(STAMP)
	$(PY) -m ruff check .

# Benchmarks (see docs/benchmarks.md). On a GPU host: make bench DEVICE=cuda
DEVICE ?= cpu
bench: $(STAMP)
	$(PY) -m evalfarm.bench --device $(DEVICE)

# A stream of candidates through a real local daemon (docs/benchmarks.md, "Daemon benchmark").
bench-daemon: $(STAMP)
	$(PY) -m evalfarm.bench_daemon --device $(DEVICE) --out bench-daemon

protos: $(STAMP)
	bash scripts/gen_protos.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
