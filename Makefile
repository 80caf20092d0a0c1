# benchrun: `make run` (the canary spec on this machine), `make test`, `make ui`.
# Every target bootstraps what it needs: the venv (idempotent, fast when nothing changed)
# and, when running as root, the Debian packages the suites and tests use.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
APT_PACKAGES := fio prometheus-pushgateway postgresql prometheus prometheus-node-exporter chromium kubectl
export BENCHRUN_HOME ?= $(CURDIR)/.benchrun
UI_PORT ?= 3000

.PHONY: bootstrap apt run test test-fast ui validate clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "benchrun needs Python >= 3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch==2.13.0 is the CPU build on this machine's disk; a bare `torch` pulls CUDA (GBs).
	$(PY) -m pip install --quiet -e '.[test,torch]'
	@touch $(STAMP)

apt:
	@missing=""; \
	for pkg in $(APT_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    (apt-get install -y -q $$missing || (apt-get update -q && apt-get install -y -q $$missing)) >/dev/null; \
	  else \
	    echo "note: Debian packages missing:$$missing (run as root, or: sudo apt-get install$$missing)"; \
	  fi; \
	fi

# Bytecode for benchrun's own modules: a machine with PYTHONDONTWRITEBYTECODE set never caches
# it, and every benchrun process and Python suite would compile them again (~0.4 s each).
bootstrap: $(STAMP) apt
	@$(PY) -m compileall -q benchrun bench_assets resources schedules sensors >/dev/null

run: bootstrap
	$(VENV)/bin/benchrun run specs/local/canary.yaml

# Three workers on two cores: most of the suite waits on subprocesses, servers and the cluster
# harness, so a third process fills the waits (pytest on a clean clone of this 2-core machine,
# 2026-12-07: 14:08 in two workers, 13:01 in three; ~17 min in one; the suite has grown since:
# 15:22-15:27 in three, 2,530 tests). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 3
test: bootstrap
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=25

test-fast: bootstrap
	$(PY) -m pytest -q -m "not slow"

validate: bootstrap
	$(VENV)/bin/benchrun validate specs/

# The webserver and the daemon (schedules, sensors, run queue) side by side: what `dagster dev`
# starts, without its warnings (the repo's dagster.yaml is a template copied into DAGSTER_HOME,
# and `dagster dev` is superseded by `dg dev`, which is not a dependency).
ui: bootstrap
	@export DAGSTER_HOME="$$($(PY) -c 'from benchrun.submit import dagster_home; print(dagster_home())')"; \
	  $(VENV)/bin/dagster-daemon run -w workspace.yaml & daemon=$$!; \
	  trap 'kill $$daemon 2>/dev/null; wait $$daemon 2>/dev/null' EXIT INT TERM; \
	  $(VENV)/bin/dagster-webserver -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
