# Set-up, serving and tests. Everything installs into .venv from the project's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-test serve migrate test test-fast clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e .

install-test: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,crosscheck]'

migrate: install
	$(BIN)/python -m service.migrate

# Migrates the embedded SQLite database (./data/roofline.db) and serves the API.
serve: migrate
	$(BIN)/uvicorn service.main:app --host $(HOST) --port $(PORT)

# The whole suite, the torch FLOP cross-checks included.
test: install-test
	$(BIN)/python -m pytest

test-fast: install-test
	$(BIN)/python -m pytest -m "not crosscheck"

clean:
	rm -rf $(VENV) data .pytest_cache
