# Two commands on a fresh machine: `make demo` (install + main job), `make test` (install + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,postgres,digits]'
	touch $(STAMP)

install: $(STAMP)

# The main job: a small multi-objective search (local Ray, SQLite file, synthetic data, CPU).
demo: $(STAMP)
	name=quickstart-$$(date +%Y%m%d-%H%M%S); \
	$(BIN)/archsearch search search_space/presets/quickstart.yaml --name $$name && \
	$(BIN)/archsearch report $$name -o reports/$$name.html --png reports/$$name --color-by config.model.layout

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
