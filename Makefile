# The two commands of the README: `make run` (set up, then the main job on the
# embedded software switch) and `make test` (set up, then lint and the whole suite).
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test lint bench vectors
setup:
	@bash scripts/setup.sh

run: setup
	$(BIN)/olaf run

test: setup
	$(BIN)/ruff check .
	@bash scripts/test.sh

lint: setup
	$(BIN)/ruff check .

bench: setup
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

vectors: setup
	$(BIN)/python tests/vectors/generate.py
