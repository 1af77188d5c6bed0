# The two commands a newcomer needs (both set up .venv on first use):
#   make run    runs the main job on its embedded default
#   make test   runs the test suite (what CI runs, through .ci/run)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.archsearch-installed

.PHONY: run test lint setup clean

run: $(STAMP)
	$(VENV)/bin/archsearch sweep

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

setup: $(STAMP)

# torch first, pinned to the CPU build: a local wheel when pip is configured with one
# (--no-index), else PyTorch's CPU index; then the project with a torch range that 2.13 meets,
# so nothing pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-index torch==2.13.0 2>/dev/null \
	  || $(PY) -m pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache .hypothesis
