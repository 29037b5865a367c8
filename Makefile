# Every target sets up what it needs: .venv at the repository root, installed from
# constraints.txt, re-installed when pyproject.toml or constraints.txt change.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
WORLD_SIZE ?= 4

NBVAL := --nbval --nbval-current-env --nbval-cell-timeout=600 --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: install test unit nbtest lab demo notebooks bench reliability clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[notebooks,test]"
	touch $@

test: $(INSTALLED)  ## unit tests, multi-process tests and every notebook under nbval
	$(PY) -m pytest tests notebooks $(NBVAL)

unit: $(INSTALLED)  ## only the library's tests
	$(PY) -m pytest tests

nbtest: $(INSTALLED)  ## only the notebooks under nbval
	$(PY) -m pytest notebooks $(NBVAL)

lab: $(INSTALLED)  ## JupyterLab on notebooks/
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

demo: $(INSTALLED)  ## the classic example, headless, on $(WORLD_SIZE) ranks
	$(PY) -m ddp_lib run demo_basic --world-size $(WORLD_SIZE)

notebooks: $(INSTALLED)  ## re-execute every notebook in place from a fresh kernel, for committing
	$(PY) tools/execute_notebooks.py $(or $(NB),notebooks/*.ipynb)

bench: $(INSTALLED)  ## every benchmark, full size (several minutes); add ARGS=--quick for a small run
	$(PY) -m ddp_lib bench launch
	for name in allreduce ring ddp buckets startup scaling; do \
		echo "== $$name"; $(PY) -m ddp_lib bench $$name $(ARGS) || exit 1; done

reliability: $(INSTALLED)  ## the long reliability checks behind the README's table
	$(PY) tools/reliability.py

clean:
	rm -rf $(VENV) .pytest_cache
