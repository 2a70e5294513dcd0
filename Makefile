# The two commands a newcomer needs:
#   make reproduce   build .venv from envs/requirements.lock, then regenerate every result (snakemake)
#   make test        build .venv the same way, then lint (ruff) and run the test suite
SHELL := /bin/bash
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
CORES ?= 2

.PHONY: venv reproduce test test-fast lint lock dvc-yaml benchmarks benchmarks-long clean-venv

venv:
	bash envs/setup-venv.sh

reproduce: venv
	snakemake --cores $(CORES)

# A file's tests on one pytest-xdist worker (its module fixtures built once, its tests in order).
# `make test` runs one worker more than there are cores, since the remote tests (and with LONG=1
# the SLURM and crash tests) spend much of their time waiting on daemons and killed processes; it
# hands out the longest files first (tests/conftest.py), and the end-to-end tests share one smoke
# run. `make test-fast`: one worker per core, xdist's order (most tests first).
UNIT := not pipeline and not slurm
XDIST := --dist loadfile

# `make test SLURM=1` first brings up the one-node test cluster (root; Debian's packages), so the
# SLURM tests run rather than skip and TASKGEOM_REQUIRE_SLURM makes a missing cluster a failure.
# `make test LONG=1` adds the tests marked `long` (pyproject.toml); CI runs `make test LONG=1 SLURM=1`.
test: venv lint $(if $(SLURM),slurm)
	python -m pytest -q -n $$(( $(CORES) + 1 )) $(XDIST) --no-loadscope-reorder --durations=25 \
		$(if $(LONG),,-m "not long")

test-fast: venv lint
	python -m pytest -q -n $(CORES) $(XDIST) -m "$(UNIT) and not slow"

slurm:
	bash envs/setup-slurm.sh

lint: venv
	ruff check .

dvc-yaml: venv
	taskgeom dvc-yaml

# Every file under results/benchmarks/, each stamped with the commit and whether the tree was clean
# (benchmarks/run_all.py): run it in a clean checkout of a commit. `benchmarks` runs those that need
# the checkout alone (minutes); `benchmarks-long` first runs the default profile's DAG here, then
# every benchmark, the crash and fault sweeps on a smoke run and the test loop's cost (hours).
benchmarks: venv
	python benchmarks/run_all.py

benchmarks-long: venv
	python benchmarks/run_all.py --long

# Re-resolve the lock from envs/requirements.in and hash every file (needs the package index);
# `bash envs/lock.sh envs/requirements.lock` re-hashes the current pins without resolving.
lock:
	bash envs/lock.sh

clean-venv:
	rm -rf $(VENV)
