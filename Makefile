# The two commands a newcomer needs (both set up .venv on first use):
#   make run    runs the main job on its embedded default
#   make test   runs the test suite (what CI runs, through .ci/run)
# and, while working: make test-fast, the unit and property tests (every package; no Ray,
# servers, subprocesses, calibration or training: those are marked slow)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.archsearch-installed

.PHONY: run test test-fast lint setup clean

run: $(STAMP)
	$(VENV)/bin/archsearch sweep

# two workers (pytest-xdist): most tests wait on Ray, servers and subprocesses, so two cores
# run the suite in about two thirds of the time one worker takes; the tests that share a
# module's cluster or exported programs (`xdist_group`) run on one worker, which starts it once
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

setup: $(STAMP)

# torch first, pinned to its CPU build, from the package index pip is configured with (set
# TORCH_INDEX='--index-url https://download.pytorch.org/whl/cpu' where that index offers only
# CUDA builds); then the project with a torch range that 2.13 meets, so nothing pulls a
# multi-GB CUDA build. Quiet: pip's errors still show; the build's chatter does not.
TORCH_INDEX ?=
$(STAMP): pyproject.toml
	@echo "setting up $(VENV) (PyTorch 2.13 CPU build and the project's dependencies: 1-5 min)"
	@python3 -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0 $(TORCH_INDEX)
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,bench]' > $(VENV)/install.log 2>&1 \
	  || { cat $(VENV)/install.log; exit 1; }
	@touch $(STAMP)
	@echo "$(VENV) ready: $(VENV)/bin/archsearch --help"

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache .hypothesis
