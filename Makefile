# Two commands: `make demo` (the main job on embedded defaults) and `make test` (lint, types, tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is only needed for tests and benchmarks (the estimator has no torch dependency).
# On these machines torch 2.13.0 (CPU) installs from local disk; on a GPU box set TORCH=torch.
TORCH ?= torch==2.13.0

.PHONY: demo test bench golden clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[bench]"
	touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test]"
	touch $@

demo: $(VENV)/.demo
	$(BIN)/gpuscout estimate
	$(BIN)/gpuscout estimate --gpu rtx-4090
	$(BIN)/gpuscout pick
	@# A real measurement on this machine (tiny model, seconds a run on a CPU), twice, three runs each,
	@# then the comparison: the same machine twice, so the honest answer is "no measurable difference".
	OMP_NUM_THREADS=1 $(BIN)/gpuscout bench examples/tiny-finetune.toml --device auto --warmup 2 --repeats 8 \
		--runs 3 -o .demo/tiny-finetune-a.json
	OMP_NUM_THREADS=1 $(BIN)/gpuscout bench examples/tiny-finetune.toml --device auto --warmup 2 --repeats 8 \
		--runs 3 -o .demo/tiny-finetune-b.json
	$(BIN)/gpuscout compare .demo/tiny-finetune-a.json .demo/tiny-finetune-b.json

# The HTML report's browser tests open it in Debian's headless Chromium (tests/report/test_html_browser.py).
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium

# The ssh trial engine's tests start Debian's OpenSSH server as the test user on 127.0.0.1, with keys made per
# run (tests/trial/sshd.py); the package's own service is never used.
SSHD := /usr/sbin/sshd

$(SSHD):
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client

test: $(VENV)/.test | $(CHROMIUM) $(SSHD)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -q

# Refresh the expected screens in tests/report/golden/ after an intended change to a view; review the diff.
golden: $(VENV)/.test
	GPUSCOUT_UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/report/test_golden.py

bench: $(VENV)/.test
	$(BIN)/python benchmarks/estimator_speed.py
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python benchmarks/speed_vs_published.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
