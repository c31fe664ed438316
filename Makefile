# Set-up, serving and tests. Everything installs into .venv from the project's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-test serve migrate check docs test test-fast test-newest lock golden clean bench bench-sweep bench-in-process bench-plan bench-inferencex bench-unmeasured bench-mlperf bench-dstack bench-calibration bench-charts bench-explorer bench-access-log bench-measure

# Every install is held to constraints.txt: the versions `make test` was verified with (see that file; `make lock`
# re-pins it on purpose, `make test-newest` tries the newest releases without touching it).
CONSTRAINTS := constraints.txt

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --constraint $(CONSTRAINTS) --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet --constraint $(CONSTRAINTS) -e .

# The FLOP cross-checks compare against torch's own counter, CPU build only: PyPI's Linux torch wheel
# is the CUDA build with gigabytes of nvidia-* packages. The +cpu pin resolves to a wheel pip's own indexes and
# find-links hold where they do, else to PyTorch's CPU index (about 200 MB), tried second so that a machine
# without it never waits on it; where neither answers, the cross-checks are skipped
# (and CI, with REQUIRE_CROSSCHECK=1, fails).
TORCH_CPU := torch==2.13.0+cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# Test libraries that need torch, installed after its CPU build so that none of them pulls PyPI's CUDA one: Hugging
# Face PEFT's real LoRA layers for the fine-tuning cross-check (their versions pinned in constraints.txt).
TORCH_TEST_PACKAGES := peft>=0.21,<0.22

install-test: $(BIN)/python
	$(BIN)/pip install --quiet --constraint $(CONSTRAINTS) -e '.[test,dev]'
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet '$(TORCH_CPU)' 2>/dev/null \
		|| $(BIN)/pip install --quiet --retries 1 --timeout 20 '$(TORCH_CPU)' --extra-index-url $(TORCH_CPU_INDEX) \
		|| echo "torch (CPU build) could not be installed: the FLOP cross-checks will be skipped"
	@$(BIN)/python -c "import torch" 2>/dev/null && $(BIN)/pip install --quiet --constraint $(CONSTRAINTS) '$(TORCH_TEST_PACKAGES)' \
		|| echo "$(TORCH_TEST_PACKAGES) not installed: its cross-checks will be skipped"

migrate: install
	$(BIN)/python -m service.persistence.migrate

# Migrates the embedded SQLite database (./data/roofline.db) and serves the API. Two malloc arenas instead of
# one per thread-pool thread: a worker then keeps about 8 MB less after a long run (`make bench`).
serve: migrate
	MALLOC_ARENA_MAX=2 $(BIN)/python -m service.runtime.server --host $(HOST) --port $(PORT)

POSTGRES_TEST_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test

# What machines check in the code (the rule sets are in pyproject.toml; docs/developing.md says why):
# lint, types, and no function in service/ above a cyclomatic complexity of 20.
check: install-test
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/xenon --max-absolute C service

# The manual (docs/) as a static site in build/site, offline; a warning (a broken link, a page off the nav) fails it.
docs: install-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The checks and the manual, then the whole suite on SQLite (torch FLOP cross-checks included), then again on PostgreSQL when a server
# answers at POSTGRES_TEST_URL (REQUIRE_POSTGRES=1 turns a missing server into a failure, as in CI).
test: check docs
	$(BIN)/python -m pytest
	@if $(BIN)/python -c "import psycopg, sys; psycopg.connect('$(POSTGRES_TEST_URL)'.replace('+psycopg', ''), connect_timeout=3).close()" 2>/dev/null; then \
		echo "== the suite again on PostgreSQL"; \
		ROOFLINE_TEST_POSTGRES=$(POSTGRES_TEST_URL) $(BIN)/python -m pytest -m "not crosscheck and not dialect_free" -p no:cacheprovider; \
	else \
		echo "PostgreSQL is not reachable at $(POSTGRES_TEST_URL): its run is skipped"; test -z "$(REQUIRE_POSTGRES)"; \
	fi

# The suite (SQLite) in a throwaway venv with the newest releases pyproject.toml's ranges admit, not the pins: it
# lists each package newer than constraints.txt and what failed. It never changes the pins and never blocks a landing.
test-newest:
	$(PYTHON) scripts/newest_releases.py check

# Re-pins constraints.txt to the newest releases the ranges admit; run `make test` before committing the change.
lock:
	$(PYTHON) scripts/newest_releases.py lock

test-fast: install-test
	$(BIN)/python -m pytest -m "not crosscheck"

# Re-records the golden answers (tests/golden): only when a change is meant to change answers; commit both files.
golden: install-test
	$(BIN)/python -m tests.golden.record

clean:
	rm -rf $(VENV) .venv-newest data .pytest_cache

# Throughput and latency against a bare FastAPI ceiling, with wrk (installed from Debian if missing).
bench: install
	$(BIN)/python bench/run.py

# A 4,096-point model sweep through the full request path, in-process.
bench-sweep: install
	$(BIN)/python bench/sweep.py

# The serving planner's search beside one model analysis, in-process, interleaved.
bench-plan: install
	$(BIN)/python bench/plan.py

# A chart's cost beside the analysis it draws (model-roofline, serving plan), in-process, interleaved.
# The serving analysis against InferenceX's measured runs (measured / bound), and its cost beside a model analysis.
bench-inferencex: install
	$(BIN)/python bench/inferencex.py
	$(BIN)/python bench/scheduling.py

# Each device's serving runs left out and predicted from its kernel tables and the engines' carried-over costs.
bench-unmeasured: install
	$(BIN)/python bench/unmeasured.py

# MLPerf Inference v5.1's Llama 2 70B Offline results against the bound and the expectation of the same deployments.
bench-mlperf: install
	$(BIN)/python bench/mlperf_inference.py

# dstack's DeepSeek-R1 runs on the H200 and MI300X (March 2025) held against the bound and the expectation.
bench-dstack: install
	$(BIN)/python bench/dstack_runs.py

# A calibrated operator answer's cost beside an uncalibrated one, and a 10,000-timing fit's and write's.
bench-calibration: install
	$(BIN)/python bench/kernel_calibration.py

# roofline measure on this machine: its grids' time and size, the calibration fitted to the quick run, held-out shapes.
bench-measure: install-test
	$(BIN)/python bench/measure.py

bench-charts: install
	$(BIN)/python bench/charts.py

# The explorer's update in headless Chromium, keystroke to figures, against one or more running servers (URLS).
URLS ?= http://127.0.0.1:8000
bench-explorer: install-test
	$(BIN)/python bench/explorer.py $(URLS)

# Each endpoint's cost per request through the whole ASGI app, no socket, against the bare ceiling.
bench-in-process: install
	$(BIN)/python bench/in_process.py

# The access log's cost per request: every request logged, one success in a hundred, none; interleaved.
bench-access-log: install
	$(BIN)/python bench/access_log.py 2>/dev/null
