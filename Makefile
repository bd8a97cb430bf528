# Two commands on a fresh machine: `make demo` (install + main job), `make test` (install + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,postgres]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/archsearch models
	$(BIN)/archsearch trial examples/trial-coatnet-synthetic.yaml

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/models.py
	$(BIN)/python benchmarks/measure.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
