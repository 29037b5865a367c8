# Every target sets up what it needs: .venv at the repository root, installed from
# constraints.txt by tools/install.py, re-installed when pyproject.toml or constraints.txt change.
# INSTALLER=pip installs with plain pip instead of uv; TORCH=cpu or TORCH=cuda picks torch's build
# (default auto: CPU-only on Linux without nvidia-smi). After changing either: make clean install.
PYTHON ?= python3
VENV ?= .venv
INSTALLER ?= uv
TORCH ?= auto
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
WORLD_SIZE ?= 4

# `make lab` and tools/check_lab.py (tests/test_lab.py, through `make lab-args`) start JupyterLab
# with these options: the lessons' folder, opening on lesson 00. Jupyter refuses to run as root
# unless told; containers often run as root.
LAB_ARGS := --notebook-dir=. --LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb --ip=127.0.0.1 $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)
LINTED := ddp_lib tests tools notebooks

# Tests run on $(JOBS) processes (pytest-xdist); conftest.py keeps each file and each notebook on one
# of them, in order, keeps apart the files that share a port or the machine's network namespaces, and
# starts the longest first (add --unit-seconds to print what each took).
JOBS ?= 2
PARALLEL := -n $(JOBS) --dist loadfile --durations=25
NBVAL := --nbval --nbval-current-env --nbval-cell-timeout=600 --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: install test test-slow test-lessons test-browser test-cluster lint lab lab-args check-lab demo notebooks bench bench-notebooks reliability setup-git book book-serve clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml constraints.txt tools/install.py tools/jupyterlab_overrides.json tools/jupyter_server_config.d/ddp-lib.json
	$(PYTHON) tools/install.py --venv $(VENV) --installer $(INSTALLER) --torch $(TORCH)
	touch $@

# The multi-host tests and the cluster lab (lesson 06b) build network namespaces and a SLURM cluster
# (minutes, root on Linux): they run in make test-cluster, which .ci/run runs after make test.
CLUSTER_TESTS := tests/test_cluster_hosts.py tests/test_cluster_slurm.py tests/test_cluster_listen.py notebooks/06b_cluster_lab.ipynb

# The library's tests whose every case is a whole job or a wait: torchrun jobs, killed and interrupted
# ranks, deadlines, the template under three launchers, the copied workers and the cheat sheet's
# script under torch's mp.spawn and torchrun, full disks, the install resolved for each platform,
# JupyterLab and Colab, the book built (where `make book` installed its tools). They run in
# make test-slow, which .ci/run runs after make test.
SLOW_TESTS := $(addprefix tests/test_,$(addsuffix .py,torchrun torchrun_signals torchrun_view launch_guards \
	launch_deadlines interrupted_spawn stress_pids stale_store driver_stdin reliability no_room template_worker \
	plain_train plain_fsdp2 copy_workers cheatsheet install colab_cell lab lab_contents book published_book))

# make test is the quick check while working (lint and the library's other tests, about 4 minutes on
# two cores); make test-slow the long tests above, make test-lessons every lesson under nbval (3 to 4
# minutes each). .ci/run runs all three.
test: $(INSTALLED) lint  ## lint, then the library's tests (unit tests and multi-process tests on real ranks), but the slow ones
	$(PY) -m pytest $(PARALLEL) tests $(addprefix --ignore=,$(CLUSTER_TESTS) $(SLOW_TESTS))

test-slow: $(INSTALLED)  ## the library's slow tests: torchrun jobs, kills, deadlines, the template, the install
	$(PY) -m pytest $(PARALLEL) $(SLOW_TESTS)

test-lessons: $(INSTALLED)  ## every lesson but the cluster lab under nbval, each cell's output compared with the stored one
	$(PY) -m pytest $(PARALLEL) notebooks $(addprefix --ignore=,$(CLUSTER_TESTS)) $(NBVAL)

test-browser: $(INSTALLED)  ## every lesson in JupyterLab in Chromium: errors, cell times, lessons opened as modified, the stop button
	$(PY) tools/browser_check.py --install $(LESSONS)

test-cluster: $(INSTALLED)  ## the multi-host tests and the cluster lab: two hosts in network namespaces, SLURM (root on Linux)
	$(PY) -m pytest $(CLUSTER_TESTS) $(NBVAL)

lint: $(INSTALLED)  ## ruff on the library, the tests, the tools and the notebooks' code cells
	$(VENV)/bin/ruff check $(LINTED)

# LAB_IP=0.0.0.0 (set by the Dockerfile) listens on every interface instead, so that a container's
# published port reaches the lab.
lab: $(INSTALLED)  ## JupyterLab on the repository, opening lesson 00 (the lessons' links to docs/ work)
	$(VENV)/bin/jupyter lab $(if $(LAB_IP),$(subst --ip=127.0.0.1,--ip=$(LAB_IP),$(LAB_ARGS)),$(LAB_ARGS))

lab-args:  ## print the options make lab passes to jupyter lab (tools/check_lab.py reads them)
	@echo $(LAB_ARGS)

check-lab: $(INSTALLED)  ## start JupyterLab headless, check it serves the notebooks, stop it
	$(PY) tools/check_lab.py

demo: $(INSTALLED)  ## the classic example, headless, on $(WORLD_SIZE) ranks
	$(PY) -m ddp_lib run demo_basic --world-size $(WORLD_SIZE)

notebooks: $(INSTALLED)  ## re-execute every notebook in place from a fresh kernel, for committing
	$(PY) tools/execute_notebooks.py $(or $(NB),notebooks/*.ipynb)

bench: $(INSTALLED)  ## every benchmark, full size (several minutes); add ARGS=--quick for a small run
	for name in launch allreduce ring ddp overlap pinned buckets startup scaling wide; do \
		echo "== $$name"; $(PY) -m ddp_lib bench $$name $(ARGS) || exit 1; done

bench-notebooks: $(INSTALLED)  ## the notebook suite under nbval against a notebook that only imports torch
	$(PY) tools/notebook_suite_cost.py --jobs $(JOBS)

.PHONY: gpu-check
gpu-check: $(INSTALLED)  ## lesson 03's GPU cases for real on 2+ CUDA GPUs (elsewhere: one line, nothing to run)
	$(PY) tools/gpu_check.py

reliability: $(INSTALLED)  ## the long reliability checks behind the README's table
	$(PY) tools/reliability.py

setup-git: $(INSTALLED)  ## once per clone: nbdime as git's diff and merge driver for notebooks (see .gitattributes)
	git config diff.jupyternotebook.command "$(abspath $(VENV))/bin/git-nbdiffdriver diff"
	git config merge.jupyternotebook.driver "$(abspath $(VENV))/bin/git-nbmergedriver merge %O %A %B %L %P"
	git config merge.jupyternotebook.name "jupyter notebook merge driver"

# The book: the `book` extra added to .venv (pinned by constraints.txt), then Sphinx with book/conf.py over
# the repository. The lessons are shown with their committed outputs, never executed; the site loads
# nothing from the internet (tests/test_book.py checks). Open build/book/html/index.html.
# Only the extra's packages (read from pyproject.toml), not the project again: torch stays the build installed.
BOOK_INSTALLED := $(VENV)/.installed-book
BOOK_PACKAGES = $$($(PY) -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['book'])")

$(BOOK_INSTALLED): $(INSTALLED)
	$(if $(filter pip,$(INSTALLER)),$(PY) -m pip install,$(VENV)/bin/uv pip install --python $(PY)) -c constraints.txt $(BOOK_PACKAGES)
	touch $@

book: $(BOOK_INSTALLED)  ## the lessons and docs/ as a static website in build/book/html (offline)
	$(PY) -m sphinx -b html -c book -n -q . build/book/html

# Opened from disk the site works, but the browser blocks the search page's reading of other pages
# (file://), so results show titles without excerpts: served, they have both.
BOOK_PORT ?= 8000
book-serve: book  ## the book served on http://127.0.0.1:$(BOOK_PORT)/ (full search), until Ctrl-C
	$(PY) -m http.server $(BOOK_PORT) --bind 127.0.0.1 --directory build/book/html

clean:
	rm -rf $(VENV) .pytest_cache build/book
