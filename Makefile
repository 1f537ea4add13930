# Two commands matter: `make demo` and `make test`. Both install what they need first.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install system-deps demo test lint histories sandbox-image bench ts-client clean

$(BIN)/agent-worker: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

# bubblewrap isolates the process sandbox tier; without it the tier is a plain subprocess.
system-deps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null)); \
	  else echo "note: install bubblewrap (bwrap) to isolate the process sandbox tier"; fi; }

# Bytecode for our packages: the workflow sandbox imports the workflow modules afresh for every workflow
# it instantiates (a cache miss, a query on an evicted task). With PYTHONDONTWRITEBYTECODE set (as on
# this machine) it would compile them from source each time: 12-15% of a replay here. A wheel install
# compiles at install time; this does the same for the editable one (only what changed).
install: $(BIN)/agent-worker system-deps
	$(BIN)/python -m compileall -q workflows schemas activities telemetry security >/dev/null

demo: install
	$(BIN)/agent-worker demo --approve

# The suite needs more than Python: bubblewrap, a Docker daemon and the sandbox image, PostgreSQL,
# docker-compose and Chromium. scripts/test-machine.sh installs and starts what is missing (as root,
# with apt-get) and leaves the rest alone. About 35 minutes here (2 cores), set-up included.
test: install
	BIN=$(BIN) scripts/test-machine.sh
	$(BIN)/python scripts/check_imports.py
	$(BIN)/python scripts/check_workflows.py
	$(BIN)/pytest -q --durations=25

# The default Docker sandbox image, built locally (cached in the daemon). Needs root and debootstrap.
sandbox-image: install
	$(BIN)/agent-worker sandbox-image

# All eight benchmarks (under 45 minutes here): prints a table, writes bench/RESULTS.md. Add
# BENCH_ARGS=--quick for a run that only checks they work.
bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

# The import graph: no cycle, no upward import across the layers (scripts/check_imports.py says which);
# the workflow code deterministic without the sandbox's checks (scripts/check_workflows.py).
lint: install
	$(BIN)/python scripts/check_imports.py
	$(BIN)/python scripts/check_workflows.py
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# Re-record tests/histories/ from real runs (only for intended workflow changes; review the diff).
# The tests that record them are listed in tests/recorded_histories.txt.
histories: install
	AW_RECORD_HISTORIES=tests/histories $(BIN)/pytest -q $$(grep -v '^#' tests/recorded_histories.txt)

# The TypeScript client (clients/typescript): its OpenAPI document dumped from the API, its types
# generated from it (openapi-typescript), then built (tsc). Run after changing a route; commit the result.
ts-client: install
	$(BIN)/python scripts/openapi.py
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run generate && npm run build

clean:
	rm -rf $(VENV) .agent-worker .pytest_cache
