# The two commands a newcomer needs: `make run` and `make test`. Both set up what is missing.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Two installs: what running needs (`make run`, `make demo`: the `local` extra) and everything
# (tests, lint, CDK, benchmarks: the `dev` extra, which includes `local`).
STAMP_LOCAL := $(VENV)/.installed-local
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
CDK := node_modules/.bin/cdk

# Lambda code asset, built without Docker by cdk/lambda_asset.py: wheels for the Lambda platform
# (arm64, CPython 3.12) without the SDK the runtime has, next to the two packages the handlers
# import, compiled by a Python 3.12 (LAMBDA_PYTHON; found on PATH, in pyenv or uv if unset) and
# zipped reproducibly. The dependency install is redone only when the lock changes, the zip only
# when their sources change.
LAMBDA_DEPS := build/lambda-deps
LAMBDA_DEPS_STAMP := $(LAMBDA_DEPS)/.installed
LAMBDA_ZIP := build/lambda.zip
LAMBDA_PYTHON ?=
LAMBDA_SOURCES := $(shell find streamlease lambdas -not -path '*/__pycache__*' 2>/dev/null)
export CDK_DISABLE_CLI_TELEMETRY := true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1

.PHONY: help run demo test lint docs fmt bench synth deploy destroy clean lock lambda openapi

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# pip's output goes to .venv/pip.log (its end is shown when pip fails); on a terminal one line
# counts what pip has found and says when it installs.
PIP_PROGRESS := if [ -t 1 ]; then awk '/^Collecting /{n++; printf "\r\033[K  %d found: %s", n, $$2} \
	/^Installing collected/{printf "\r\033[K  installing %d packages ...", n} {fflush()} \
	END{printf "\r\033[K"}'; else cat >/dev/null; fi

# $(call pip_install,EXTRA,what it is for): the project in editable mode with that extra.
define pip_install
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "streamlease needs Python 3.11 or newer; found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing $(2) into $(VENV)/ (pip's log: $(VENV)/pip.log)"
	@set -o pipefail; started=$$(date +%s); \
	$(PY) -m pip install --disable-pip-version-check --progress-bar off -c requirements.lock \
		-e '.[$(1)]' 2>&1 | tee $(VENV)/pip.log | { $(PIP_PROGRESS); } \
	|| { echo "pip failed; the end of $(VENV)/pip.log:" >&2; tail -n 25 $(VENV)/pip.log >&2; exit 1; }; \
	echo "installed in $$(( $$(date +%s) - started )) s"
endef

$(STAMP_LOCAL): pyproject.toml requirements.lock
	$(call pip_install,local,what the local stack runs)
	@touch $@

$(STAMP): pyproject.toml requirements.lock
	$(call pip_install,dev,everything the tests and tools need (a minute or two the first time))
	@touch $@ $(STAMP_LOCAL)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "Node.js (with npm) is needed for the CDK CLI: install Node.js 20 or newer" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

run: $(STAMP_LOCAL) ## the whole system on this machine (moto, API, workers, upstream simulator)
	$(PY) -m local

demo: $(STAMP_LOCAL) ## 20 streams, a worker killed and one rolled, then a gap/duplicate report (uses or starts make run)
	$(PY) -m local.demo

# Three phases in one command (tests/tiers.py): every test not marked `serial` on parallel
# workers (pytest-xdist, two a core; TEST_WORKERS=N to choose), then the `serial` ones (chaos,
# races: real workers on shrunk timers) in two lanes (TEST_LANES=N; 1: one at a time), then
# those marked `alone` (a time is their evidence) one at a time. PYTEST_ARGS go to every phase.
TEST_WORKERS ?=
TEST_LANES ?=

test: $(STAMP) $(NODE_STAMP) $(LAMBDA_ZIP) ## every test: unit, moto, integration, API contract (schemathesis), infra (synth + cdk-nag), chaos
	STREAMLEASE_TEST_WORKERS=$(TEST_WORKERS) STREAMLEASE_TEST_LANES=$(TEST_LANES) $(PY) tests/tiers.py $(PYTEST_ARGS)

lint: $(STAMP) ## ruff, mypy, the import contracts and no import cycle (make test checks those too)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo
	$(PY) -m pytest -q -n 0 -p no:cacheprovider tests/unit/test_import_cycles.py

# The documentation site from README.md and docs/ (mkdocs.yml), strict: a broken link, a missing
# page or a missing included file fails the build. make test builds it too (tests/docs/).
docs: $(STAMP) ## build the documentation site into build/site (strict: a broken link fails)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

fmt: $(STAMP) ## apply ruff's formatting and fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Full runs time the failover and write-cost sections at half of production's timers (lease
# 10 s): what does not shrink with the timers (the reaper call, a handoff's SQS and DynamoDB round
# trips, about 0.2-0.5 s here) is then a few per cent of a lease, not a tenth to a quarter as at
# the option's default of 0.1. QUICK=1 keeps 0.1.
BENCH_SCALE ?= 0.5

bench: $(STAMP) $(LAMBDA_ZIP) ## benchmarks (timers x BENCH_SCALE, 0.5); QUICK=1 for a short smoke run at x 0.1
	$(PY) -m bench $(if $(QUICK),--quick,--scale $(BENCH_SCALE))

# The fleet's size: cdk.json's preset (light, feeds of up to 1 msg/s) unless PRESET names
# another of cdk/presets.py (busy: up to 10 msg/s): `make deploy PRESET=busy`.
PRESET ?=
PRESET_CONTEXT := $(if $(PRESET),-c streamlease:preset=$(PRESET))

synth: $(STAMP) $(NODE_STAMP) $(LAMBDA_ZIP) ## synthesize the CloudFormation templates (no AWS account or Docker needed)
	$(CDK) synth --quiet $(PRESET_CONTEXT)

deploy: $(STAMP) $(NODE_STAMP) $(LAMBDA_ZIP) ## deploy both stacks (PRESET=busy for 10 msg/s feeds) to the AWS account in your credentials
	$(CDK) deploy --all $(PRESET_CONTEXT)

destroy: $(STAMP) $(NODE_STAMP) ## delete both stacks (the table, queues and sink stream are retained)
	$(CDK) destroy --all

$(LAMBDA_DEPS_STAMP): requirements.lock cdk/lambda_asset.py | $(STAMP)
	$(PY) -m cdk.lambda_asset --install-deps --deps $(LAMBDA_DEPS)
	@touch $@

$(LAMBDA_ZIP): $(LAMBDA_DEPS_STAMP) $(LAMBDA_SOURCES) cdk/lambda_asset.py
	$(PY) -m cdk.lambda_asset --deps $(LAMBDA_DEPS) --out $@ $(if $(LAMBDA_PYTHON),--python $(LAMBDA_PYTHON))

lambda: $(LAMBDA_ZIP) ## build the Lambda code asset (build/lambda.zip) for synth and deploy

openapi: $(STAMP) ## regenerate lambdas/openapi.json from the API routes
	$(PY) -m lambdas.openapi_document lambdas/openapi.json

lock: ## re-resolve requirements.lock from pyproject.toml
	rm -rf .lockvenv && $(PYTHON) -m venv .lockvenv && .lockvenv/bin/pip install --quiet '.[dev]'
	{ echo "# Exact versions for a fresh machine; the Makefile installs with -c requirements.lock."; echo "# Regenerate: make lock"; .lockvenv/bin/pip freeze --exclude streamlease; } > requirements.lock
	rm -rf .lockvenv

clean: ## remove the virtualenv, node_modules, build output and local state
	rm -rf $(VENV) node_modules cdk.out build .local .pytest_cache .mypy_cache .ruff_cache .hypothesis \
		.import_linter_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
