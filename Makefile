# Two commands do all the set-up on a fresh machine: `make train` and `make test`.
# The others run in the same environment: `make inspect`, `make tensorboard`, `make results`, `make bench`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOK_STAMP := $(VENV)/.notebook-installed
KERNEL := tied_embed/fast/mkl/_gemm.so
export TF_CPP_MIN_LOG_LEVEL := 3

# `make train CONFIG=configs/untied.py WORKDIR=runs/untied`, then `make inspect WORKDIR=runs/untied`.
CONFIG ?= configs/default.py
WORKDIR ?= runs/default

.PHONY: install train test inspect tensorboard results bench lint notebook clean

install: $(STAMP) $(KERNEL)

# The venv is rebuilt when the pins or the package metadata change.
$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The step's kernels: the chunked loss's GEMMs (tied_embed/fast/mkl: float32 on oneMKL, bfloat16 on AMX via oneMKL
# and oneDNN) and AdamW's one-pass update (tied_embed/fast/fused_adamw). A failed build prints an `info:` line and
# exits 0: the step then runs XLA's own code, so train and test work without them (and a build that wrote nothing
# is tried again next time).
$(KERNEL): $(STAMP) tied_embed/fast/mkl/gemm.h tied_embed/fast/mkl/gemm.cc tied_embed/fast/mkl/gemm_onednn.cc \
		tied_embed/fast/fused_adamw/adamw.cc
	$(PY) -m tied_embed.fast.mkl.build

train: $(STAMP) $(KERNEL)
	$(PY) train.py --config $(CONFIG) --workdir $(WORKDIR)

test: $(STAMP) $(KERNEL) $(NOTEBOOK_STAMP)
	$(PY) -m pytest -q

# The tutorial's runner and kernel (jupytext, nbclient, ipykernel): `make test` runs the notebook, `make train` never
# needs them. `make notebook` executes docs/tutorial.md from the repository root into runs/tutorial.ipynb, outputs
# and pictures included (headless: open that file in any Jupyter or notebook viewer).
$(NOTEBOOK_STAMP): $(STAMP) requirements-notebook.txt
	$(PY) -m pip install --quiet -r requirements-notebook.txt
	touch $(NOTEBOOK_STAMP)

notebook: $(STAMP) $(KERNEL) $(NOTEBOOK_STAMP)
	mkdir -p runs
	$(VENV)/bin/jupytext --to ipynb --execute --run-path . docs/tutorial.md -o runs/tutorial.ipynb

inspect: $(STAMP)
	$(PY) -m tied_embed.inspection --workdir $(WORKDIR)

tensorboard: $(STAMP)
	$(VENV)/bin/tensorboard --logdir $(dir $(WORKDIR))

results: $(STAMP)
	$(PY) scripts/results.py

bench: $(STAMP) $(KERNEL)
	$(PY) -m pip install --quiet -r requirements-bench.txt
	mkdir -p runs/bench
	$(PY) benchmarks/run.py --json runs/bench/results.json

lint: $(STAMP)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs
