# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-stress install lint bench clean device-wheels

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU wheel from local disk first, so the torch range below never pulls a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@# bytecode for the repo's own modules, as pip writes it for installed ones (this
	@# environment sets PYTHONDONTWRITEBYTECODE, so imports would recompile them every run)
	@$(PY) -m compileall -q src flows tasks > /dev/null
	$(VENV)/bin/assay run configs/quickstart.yaml --output runs/quickstart

# Every core: pytest-xdist workers, one test module per worker at a time (module fixtures
# are built once). The suite is written for it: no test assumes it has the machine alone.
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope

test: $(STAMP)
	$(PYTEST)

# The suite while a CPU burner keeps every core busy, STRESS_RUNS times in a row: a test that
# depends on a wall-clock margin or on the order concurrent work finishes fails here. With it,
# the concurrency matrix (tests/stages/test_graph_race_matrix.py: every two and three source
# kinds in one study, fresh interpreters, bytes equal to the one-at-a-time run).
STRESS_RUNS ?= 3
STRESS_ARGS ?=
test-stress: $(STAMP)
	ASSAY_STRESS_MATRIX=1 $(PY) tests/cpu_burner.py --runs $(STRESS_RUNS) -- $(PYTEST) $(STRESS_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src flows tasks tests benchmarks configs
	$(VENV)/bin/mypy

# What the GPU device check needs there (no network): the wheels the device image lacks, for its
# Python (3.12), and an int8 copy of the bundled MiniLM, in dist/device; prints the sizes and
# fails over the 64 MiB that travel (benchmarks/README.md, "Device check"). Needs an index.
device-wheels: $(STAMP)
	$(PY) benchmarks/device_check.py --pack dist/device

clean:
	rm -rf $(VENV) .assay .prefect runs
