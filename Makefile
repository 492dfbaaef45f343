# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIP_INSTALL := $(PIP) install --disable-pip-version-check -q -c constraints.txt
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install test test-fast lint demo bench clean

install: $(STAMP)

# Order matters (DESIGN.md 1.1): torch, cython and numpy first, because fairseq-fixed builds
# its C++/Cython parts against them with --no-build-isolation; --no-deps keeps its metadata
# (torchaudio) from pulling a second torch. The stamp makes a second run a no-op.
$(STAMP): requirements.txt constraints.txt setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP_INSTALL) torch==2.13.0 cython numpy setuptools wheel
	$(PY) -c "import fairseq" 2>/dev/null || \
		$(PIP_INSTALL) --no-deps --no-build-isolation fairseq-fixed==0.12.3.1
	$(PIP_INSTALL) -r requirements.txt
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	$(PY) -c "import torch, fairseq, relu_former; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	touch $(STAMP)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .

demo: install
	$(PY) -m scripts.demo.demo $(DEMO_ARGS)

bench: install
	$(PY) -m scripts.benchmarks.run_all $(BENCH_ARGS)

clean:
	rm -rf $(VENV) demo_out bench/out .pytest_cache .ruff_cache
