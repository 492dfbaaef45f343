# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# constraints.txt is the one place torch is pinned; every pip call passes it.
PIP_INSTALL := $(PIP) install --disable-pip-version-check -q -c constraints.txt
STAMP := $(VENV)/.installed
# The fairseq distribution, built from source against the installed torch. The shortcut below
# skips the slow build only when this exact distribution and version is installed, not any
# importable fairseq (fairseq 0.12.2 or ve-fairseq would pass `import fairseq`). ve-fairseq
# 0.12.3's prebuilt wheels were tried and are not used: docs/install.md says why.
FAIRSEQ_DIST := fairseq-fixed
FAIRSEQ_VERSION := 0.12.3.1
# Distributions that install the same fairseq/ folder: removed first, or their files and
# metadata would stay mixed with fairseq-fixed's.
OTHER_FAIRSEQ_DISTS := fairseq ve-fairseq
PYTEST_ARGS ?=
# pytest-xdist workers for make test / test-fast: the suite is mostly single-threaded fairseq
# runs, so two workers halve its wall time on 2 cores. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
# worksteal: an idle worker takes queued tests from the busy one, so one long end-to-end test
# near the end does not leave a core idle
XDIST_ARGS := $(if $(filter 0,$(PYTEST_WORKERS)),,--dist worksteal)

.PHONY: install test test-fast test-triton lint demo bench reproduce clean

install: $(STAMP)

$(VENV)/bin/python:
	python3 -m venv $(VENV)

# Order matters: torch, cython and numpy first, because fairseq-fixed builds its C++/Cython
# parts against them with --no-build-isolation; --no-deps keeps its metadata (torchaudio) from
# pulling a second torch, and requirements.txt lists its runtime dependencies instead
# (docs/install.md). The stamp makes a second run a no-op.
$(STAMP): requirements.txt requirements-dev.txt constraints.txt setup.py \
		relu_former/relu_attention/kernels/relu_attention_cpu.cpp | $(VENV)/bin/python
	$(PIP_INSTALL) torch cython numpy setuptools wheel
	$(PY) -c "from importlib.metadata import version as v; assert v('$(FAIRSEQ_DIST)') == '$(FAIRSEQ_VERSION)'" 2>/dev/null || { \
		$(PIP) uninstall -y -q $(OTHER_FAIRSEQ_DISTS) 2>/dev/null; \
		$(PIP_INSTALL) --no-deps --no-build-isolation $(FAIRSEQ_DIST)==$(FAIRSEQ_VERSION); }
	$(PIP_INSTALL) -r requirements.txt -r requirements-dev.txt
	$(PIP_INSTALL) --no-build-isolation -e .
	$(PY) -c "import torch, fairseq, relu_former; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	touch $(STAMP)

test: install
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(XDIST_ARGS) $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(XDIST_ARGS) -m "not slow" $(PYTEST_ARGS)

# The Triton kernel's test in Triton's CPU interpreter. triton is no part of the CPU install:
# it goes into a folder of its own (on PYTHONPATH for this target only), with --no-deps so
# that it can never pull a second torch, at the version constraints.txt pins.
TRITON_SITE := .venv-triton-site
$(TRITON_SITE)/.installed: constraints.txt | $(STAMP)
	$(PIP_INSTALL) --no-deps --target $(TRITON_SITE) --upgrade "$$(grep -E '^triton==' constraints.txt)"
	touch $@

test-triton: $(TRITON_SITE)/.installed
	PYTHONPATH=$(TRITON_SITE) TRITON_INTERPRET=1 OMP_NUM_THREADS=1 $(PY) -m pytest \
		tests/relu_attention/kernels/test_triton_kernel.py \
		tests/relu_attention/kernels/test_triton_compile.py $(PYTEST_ARGS)

# The linter alone, at the version requirements-dev.txt pins: no torch, no fairseq build.
$(VENV)/bin/ruff: requirements-dev.txt | $(VENV)/bin/python
	$(PIP_INSTALL) "$$(grep -E '^ruff([=<>~ ]|$$)' requirements-dev.txt)"
	touch $@

lint: $(VENV)/bin/ruff
	$(VENV)/bin/ruff check .

demo: install
	$(PY) -m scripts.demo.demo $(DEMO_ARGS)

# Tables and plots of every benchmark, collected into docs/benchmarks.md.
bench: install
	$(PY) -m scripts.benchmarks.run_all $(BENCH_ARGS)

# One paper table at toy scale on 3 seeds, cached cell by cell, into docs/reproduction.md:
# make reproduce TABLE=relu_former_table6 [REPRODUCE_ARGS="--scale paper --dry-run"]
reproduce: install
	@test -n "$(TABLE)" || { echo "make reproduce: set TABLE (one of: $$($(PY) -m scripts.reproduce --list | cut -d' ' -f1 | tr '\n' ' '))"; exit 2; }
	$(PY) -m scripts.reproduce $(TABLE) $(REPRODUCE_ARGS)

clean:
	rm -rf $(VENV) $(TRITON_SITE) demo_out bench reproduce_out .pytest_cache .ruff_cache
