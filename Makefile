# The commands of the README: `make demo` runs the demo pipeline, `make stack` starts a Docker-free
# deployment to look at (`make stack-cut LEAF=leaf-a` cuts one of its leaves off the hub while it runs,
# `make stack-relink LEAF=leaf-a` links it again), `make test` runs the tests.
# Each creates .venv when missing and installs the package with what it needs.
# `make wheel` builds the wheel into dist/. With INSTALL=wheel (`make demo INSTALL=wheel`, also
# stack), .venv gets that wheel, rebuilt from the working tree, instead of the editable sources.
# `make docs` builds the documentation site into docs/_build/html (Sphinx, warnings are errors).
# `make fuzz` runs the generated-input tests (tests/reliability/test_generated_inputs.py) with many
# more examples than `make test` does (Hypothesis profile "fuzz"), and every fixed attack on every argument.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALL ?= editable
EXTRAS := spark,postgres,test,websocket,messaging,openlineage,docs
VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' airflow_provider_jetstream/__init__.py)
WHEEL = dist/airflow_provider_jetstream-$(VERSION)-py3-none-any.whl
STAMP := $(VENV)/$(if $(filter wheel,$(INSTALL)),.installed-wheel-stamp,.installed-stamp)
PYTEST_ARGS ?=
SPHINX_ARGS ?=
# The work directory of `make stack` (logs, stores, Airflow's home, the control socket).
STACK_DIR ?= .stack
# Parallel test workers (pytest-xdist): a test file runs whole on one worker, in order, with the
# servers, SparkSession and deployment of that worker. PYTEST_WORKERS=0 runs them in one process.
# Four, even on two cores: most of a test is waiting on servers, processes and deadlines, not computing.
PYTEST_WORKERS ?= 4
# nats.js (the official JavaScript client) for tests/interop, pinned by its package-lock.json.
JS_DIR := tests/interop/js
JS_STAMP := $(JS_DIR)/node_modules/.installed-stamp
# constraints.txt pins releases that need Python 3.11+; a Python with its own
# constraints-py<version>.txt (3.10: constraints.txt's direct pins, the rest resolved on 3.10) installs with that one.
PY_VERSION = $(shell $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CONSTRAINTS = $(if $(wildcard constraints-py$(PY_VERSION).txt),constraints-py$(PY_VERSION).txt,constraints.txt)

.PHONY: install wheel interop-deps demo stack stack-cut stack-relink test docs fuzz lint format clean

ifeq ($(INSTALL),wheel)
# Always rebuilt and reinstalled: a module removed from the sources must leave the install too.
$(STAMP): wheel
	rm -f $(VENV)/.installed-stamp $(STAMP)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip uninstall --quiet --yes airflow-provider-jetstream
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) '$(WHEEL)[$(EXTRAS)]'
	touch $(STAMP)
else ifeq ($(INSTALL),editable)
$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	rm -f $(VENV)/.installed-wheel-stamp
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	touch $(STAMP)
else
$(error INSTALL is "editable" (the default) or "wheel", not "$(INSTALL)")
endif

install: $(STAMP)

# The wheel, from the working tree: build/ is removed first, so no file deleted since the last
# build can come back. The backend is the one pyproject.toml's [build-system] names.
wheel:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	rm -rf build $(WHEEL)
	$(BIN)/python -m pip wheel --quiet --no-deps --disable-pip-version-check -w dist .
	@echo "built $(WHEEL)"

# npm ci when node_modules is missing or the lock changed. Without npm it only warns: the interop
# tests then fail, saying what to install, and the rest of the suite still runs.
$(JS_STAMP): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(JS_DIR) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed-stamp; \
	else \
		echo "npm not found: tests/interop will fail (install Node.js and npm, e.g. apt-get install nodejs npm)" >&2; \
	fi

interop-deps: $(JS_STAMP)

demo: $(STAMP)
	$(BIN)/python demo/run.py

stack: $(STAMP)
	$(BIN)/python -m local_stack.stack --dags-folder dags --workdir $(STACK_DIR)

# Talk to the running `make stack` (its control socket in $(STACK_DIR)): cut a leaf off the hub, link it again.
stack-cut stack-relink:
	$(if $(LEAF),,$(error LEAF=<name> is required, e.g. make $@ LEAF=leaf-a))
	$(BIN)/python -m local_stack.control $(patsubst stack-%,%,$@) '$(LEAF)' --workdir $(STACK_DIR)

test: $(STAMP) $(JS_STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The site from docs/ (MyST Markdown), the API reference generated from every module's docstrings (its
# pages are written to docs/_api), the example DAGs included from dags/. Built from scratch each time, so a
# removed module or page cannot linger; any warning fails the build, after all of them are reported.
docs: $(STAMP)
	rm -rf docs/_build docs/_api
	$(BIN)/python -m sphinx -b html -W --keep-going -j auto $(SPHINX_ARGS) docs docs/_build/html
	@echo "built docs/_build/html/index.html"

fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest tests/reliability/test_generated_inputs.py --timeout=1800 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .demo $(STACK_DIR) .pytest_cache $(JS_DIR)/node_modules build dist docs/_build docs/_api
