# The two commands a newcomer needs: `make run` and `make test`. Both set up what is missing.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
CDK := node_modules/.bin/cdk
export CDK_DISABLE_CLI_TELEMETRY := true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1

.PHONY: help run test lint fmt bench synth deploy destroy clean lock

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "streamlease needs Python 3.11 or newer; found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing Python dependencies into $(VENV) (first run takes a minute or two)"
	$(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]'
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "Node.js (with npm) is needed for the CDK CLI: install Node.js 20 or newer" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

run: $(STAMP) ## the whole system on this machine (moto, API, workers, upstream simulator)
	$(PY) -m local

test: $(STAMP) $(NODE_STAMP) ## every test: unit, moto, integration, infra (synth + cdk-nag), chaos
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP) ## ruff and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: $(STAMP) ## apply ruff's formatting and fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP) ## benchmarks; QUICK=1 for a one-minute smoke run
	$(PY) -m bench $(if $(QUICK),--quick,)

synth: $(STAMP) $(NODE_STAMP) ## synthesize the CloudFormation templates (no AWS account or Docker needed)
	$(CDK) synth --quiet

deploy: $(STAMP) $(NODE_STAMP) ## deploy both stacks to the AWS account in your credentials
	$(CDK) deploy --all

destroy: $(STAMP) $(NODE_STAMP) ## remove the stateless stack (the stateful one is retained)
	$(CDK) destroy --all

lock: ## re-resolve requirements.lock from pyproject.toml
	rm -rf .lockvenv && $(PYTHON) -m venv .lockvenv && .lockvenv/bin/pip install --quiet '.[dev]'
	{ echo "# Exact versions for a fresh machine; the Makefile installs with -c requirements.lock."; echo "# Regenerate: make lock"; .lockvenv/bin/pip freeze --exclude streamlease; } > requirements.lock
	rm -rf .lockvenv

clean: ## remove the virtualenv, node_modules, build output and local state
	rm -rf $(VENV) node_modules cdk.out build .local .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
