# Two commands on a fresh machine: `make plan` (offline plan of the dev stack) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev

.PHONY: plan test lint docs bench bench-plan clean

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed requirements-test.txt workload/requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	touch $@

plan: $(VENV)/.installed
	$(PY) -m offline.plan --stack $(STACK)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(VENV)/.installed-test lint
	$(PY) -m pytest

docs: $(VENV)/.installed
	$(PY) -m stacks.reference --write README.md

bench: $(VENV)/.installed-test
	$(PY) benchmarks/train_throughput.py

bench-plan: $(VENV)/.installed
	$(PY) benchmarks/plan_scaling.py

clean:
	rm -rf build .pytest_cache .ruff_cache
