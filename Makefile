# Two commands on a fresh machine: `make demo` (install + main job), `make test` (install + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint bench clean browser check-install

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,postgres,digits,mnist5k,synetune,track,botorch]'
	touch $(STAMP)

install: $(STAMP)

# The main job: a small multi-objective search (local Ray, SQLite file, synthetic data, CPU). Its study
# is `quickstart`, the spec's own name, which the manual's Python examples load; where the store has
# one already (a later demo), the new one is `quickstart-<date>-<time>` beside it.
demo: $(STAMP)
	name=quickstart; \
	if $(BIN)/archsearch trials quickstart --limit 0 >/dev/null 2>&1; then name=quickstart-$$(date +%Y%m%d-%H%M%S); fi; \
	$(BIN)/archsearch search search_space/presets/quickstart.yaml --name $$name && \
	$(BIN)/archsearch report $$name -o reports/$$name.html --png reports/$$name --color-by config.model.layout

# Two test processes (pytest-xdist), a file to each at a time so that a file's fixtures (its local Ray)
# start once; the slowest files first (tests/conftest.py). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# Headless Chromium (Debian's package) for the report's browser test; CI installs it (root, apt).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is not installed (apt-get install chromium): the report's browser test will be skipped"; fi; }

# `pip install .` with no extras, in a fresh venv, runs a verdict and the reproduce command: every
# package the code imports at run time is a declared dependency (CI runs this after the tests).
check-install:
	rm -rf .venv-plain && $(PYTHON) -m venv .venv-plain
	.venv-plain/bin/python -m pip install --quiet --upgrade pip
	.venv-plain/bin/python -m pip install --quiet -c constraints.txt .
	cd /tmp && $(CURDIR)/.venv-plain/bin/archsearch reproduce coatnet-layouts --help > /dev/null
	cd /tmp && $(CURDIR)/.venv-plain/bin/python $(CURDIR)/.ci/import_everything.py
	cd /tmp && $(CURDIR)/.venv-plain/bin/python -c "from trials.config.data_config import DataConfig; \
	  from trials.data.loading import in_memory_splits; in_memory_splits(DataConfig(name='digits'))"  # the demo's data
	cd /tmp && $(CURDIR)/.venv-plain/bin/python -c "from dashboards.stats import verdict; \
	  v = verdict({0: 81.6, 1: 81.9, 2: 81.4}, {0: 80.9, 1: 81.0, 2: 80.7}, '>'); print('verdict:', v); \
	  assert v.startswith('holds'), v"
	rm -rf .venv-plain build

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m benchmarks.models
	$(BIN)/python -m benchmarks.measure

clean:
	rm -rf $(VENV) .venv-plain *.egg-info .pytest_cache .ruff_cache
