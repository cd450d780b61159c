# Two commands do all the set-up on a fresh machine: `make train` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL := 3

.PHONY: install train test bench lint clean

install: $(STAMP)

# The venv is rebuilt when the pins or the package metadata change.
$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

train: $(STAMP)
	$(PY) train.py --config configs/default.py --workdir runs/default

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m pip install --quiet -r requirements-bench.txt
	$(PY) benchmarks/run.py --json benchmarks/results.json

lint: $(STAMP)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs
