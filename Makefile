# Two commands do all the set-up on a fresh machine: `make train` and `make test`; `make help` lists every target.
# The others run in the same environment: `make kernels` (the step's optional C++ kernels), `make notebook` (the
# tutorial in Jupyter), `make inspect`, `make tensorboard`, `make results`, `make bench`.
VENV := .venv
PY := $(VENV)/bin/python
TENSORBOARD := $(VENV)/bin/tensorboard
STAMP := $(VENV)/.installed
NOTEBOOK_STAMP := $(VENV)/.notebook-installed
JUPYTER_STAMP := $(VENV)/.jupyter-installed
KERNEL_STAMP := $(VENV)/.kernels-installed
TEST_STAMP := $(VENV)/.test-installed
KERNELS := $(addprefix tied_embed/fast/kernels/,_gemm.so _gemm_onednn.so _adamw.so)
export TF_CPP_MIN_LOG_LEVEL := 3

# `make train CONFIG=configs/untied.py WORKDIR=runs/untied`, then `make inspect WORKDIR=runs/untied`.
CONFIG ?= configs/default.py
WORKDIR ?= runs/default
# The recipes read them from the environment as "$$CONFIG" and "$$WORKDIR": one word each whatever they hold (a
# space, a quote, a semicolon), where $(WORKDIR) in a recipe would be split and run by the shell.
export CONFIG WORKDIR

.PHONY: default help install kernels train test inspect tensorboard results bench lint notebook notebook-run mutate house clean

# `make` alone installs, then lists the targets.
default: install help

help:
	@echo "make train       train CONFIG (configs/default.py) into WORKDIR (runs/default); installs .venv first"
	@echo "make test        the test suite (installs the test runner, the notebook's runner, builds the kernels)"
	@echo "make inspect     report and pictures of WORKDIR's latest checkpoint"
	@echo "make tensorboard TensorBoard over the folder above WORKDIR"
	@echo "make results     rerun docs/results.md's table (scripts/results.py)"
	@echo "make kernels     the step's optional C++ kernels (oneMKL, oneDNN); runs are the same without them"
	@echo "make notebook    open docs/tutorial.ipynb in Jupyter; make notebook-run runs it headless"
	@echo "make bench       the benchmarks into runs/bench/ (installs PyTorch CPU)"
	@echo "make lint        ruff"
	@echo "make mutate      mutation testing of one package (mutmut 3):"
	@echo "                 PACKAGE=core|entrypoint|fast|data|train|choose|inspection|science|scripts"
	@echo "make house       the house in figures: lines per layer, long functions (scripts/house.py)"
	@echo "make install     only the venv (.venv) with the pinned requirements"
	@echo "make clean       remove .venv, runs/ and the kernels' builds"
	@echo "e.g. make train CONFIG=configs/untied.py WORKDIR=runs/untied, then make inspect WORKDIR=runs/untied"

install: $(STAMP)

# The venv is rebuilt when the pins or the package metadata change.
$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The step's C++ kernels (tied_embed/fast/kernels): the chunked loss's GEMMs on oneMKL and oneDNN (float32 on an
# Intel CPU with AVX-512, bfloat16 on AMX) and AdamW's one-pass update. Only this target installs their libraries
# (requirements-kernels.txt) and builds them. What cannot be installed or built is named in an `info:` line and
# make goes on: the step then runs XLA's own code, so train and test work without them (and it is tried again
# next time).
kernels: $(KERNELS)

$(KERNEL_STAMP): $(STAMP) requirements-kernels.txt
	if $(PY) -m pip install --quiet -r requirements-kernels.txt 2>$(VENV)/kernels-install.log; then touch $@; \
	else echo "info: requirements-kernels.txt does not install here ($(VENV)/kernels-install.log says why)"; fi

$(KERNELS) &: $(KERNEL_STAMP) $(wildcard tied_embed/fast/kernels/*.cc tied_embed/fast/kernels/*.h) \
		tied_embed/fast/kernels/library.py tied_embed/fast/kernels/build.py
	$(PY) -m tied_embed.fast.kernels.build

train: $(STAMP)
	$(PY) train.py --config "$$CONFIG" --workdir "$$WORKDIR"

# The tests on TEST_WORKERS pytest-xdist workers (requirements-test.txt). One test: `.venv/bin/python -m pytest -q
# tests/core/test_model.py`, in one process.
TEST_WORKERS ?= 2
# The tests marked slow (minutes each: the drawn sweep, a context model on 8 devices) run with `make test TEST_MARKS=`.
TEST_MARKS ?= not slow

test: $(STAMP) $(TEST_STAMP) $(KERNELS) $(NOTEBOOK_STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "$(TEST_MARKS)"

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install --quiet -r requirements-test.txt
	touch $(TEST_STAMP)

# The tutorial's runner and kernel (jupytext, nbclient, ipykernel): `make test` runs the notebook, `make train` never
# needs them. `make notebook` opens docs/tutorial.ipynb in Jupyter Notebook (installing it on first use; Ctrl-C stops
# the server); `make notebook-run` executes docs/tutorial.md headless into runs/tutorial.ipynb, outputs and pictures
# included, for a machine without a browser.
$(NOTEBOOK_STAMP): $(STAMP) requirements-notebook.txt
	$(PY) -m pip install --quiet -r requirements-notebook.txt
	touch $(NOTEBOOK_STAMP)

$(JUPYTER_STAMP): $(NOTEBOOK_STAMP) requirements-jupyter.txt
	$(PY) -m pip install --quiet -r requirements-jupyter.txt
	touch $(JUPYTER_STAMP)

notebook: $(STAMP) $(JUPYTER_STAMP)
	$(VENV)/bin/jupyter notebook docs/tutorial.ipynb

notebook-run: $(STAMP) $(NOTEBOOK_STAMP)
	mkdir -p runs
	$(VENV)/bin/jupytext --to ipynb docs/tutorial.md -o runs/tutorial.ipynb
	$(VENV)/bin/jupyter-execute --inplace runs/tutorial.ipynb

inspect: $(STAMP)
	$(PY) -m tied_embed.inspection --workdir "$$WORKDIR"

tensorboard: $(STAMP)
	$(TENSORBOARD) --logdir "$$(dirname "$$WORKDIR")"

results: $(STAMP)
	$(PY) scripts/results.py

bench: $(STAMP) $(KERNELS)
	$(PY) -m pip install --quiet -r requirements-bench.txt
	mkdir -p runs/bench
	$(PY) benchmarks/run.py --json runs/bench/results.json

lint: $(STAMP)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(VENV)/bin/ruff check .

# Mutation testing with mutmut 3 (requirements-mutate.txt, installed only here): `make mutate PACKAGE=core`, one of
# core | entrypoint | fast | data | train | choose | inspection | science | scripts (MUTANTS='tied_embed.core.optim.*'
# reruns those mutants alone; SAMPLE=40 runs 40 drawn at random, from those MUTANTS names where given); mutants/ is its
# working copy and cache. docs/testing.md has the scores.
PACKAGE ?= core
MUTANTS ?=
SAMPLE ?=
MUTATE_STAMP := $(VENV)/.mutate-installed

mutate: $(STAMP) $(TEST_STAMP) $(MUTATE_STAMP)
	$(PY) scripts/mutate.py $(PACKAGE) $(MUTANTS) $(if $(SAMPLE),--sample $(SAMPLE))

$(MUTATE_STAMP): $(TEST_STAMP) requirements-mutate.txt
	$(PY) -m pip install --quiet -r requirements-mutate.txt
	touch $(MUTATE_STAMP)

clean:
	rm -rf $(VENV) runs $(KERNELS) $(KERNELS:.so=.json)

# The house in figures (budgets are reported, never a failing test).
house:
	python3 scripts/house.py
