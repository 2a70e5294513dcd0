"""The crash-test harness and the fault injection on copies of the smoke run: every kill of a
stage that writes several files, checkpoints or trains (fetch, targets, zoo, head) under
Snakemake and under DVC is survived, and every injected fault has its expected outcome."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, copy_run, run

sys.path.insert(0, str(REPO / "benchmarks"))
from fault_injection import FAULTS  # noqa: E402 (found through the path above)

pytestmark = [pytest.mark.pipeline, pytest.mark.slow, pytest.mark.long]


def test_every_kill_is_survived_under_both_front_ends(smoke_run: Path, tmp_path: Path):
    repo = copy_run(smoke_run, tmp_path / "repo")
    proc = run([sys.executable, str(REPO / "benchmarks/crash_test.py"), str(repo), "--stages", "fetch,targets,zoo,head",
                "--first-only", "--points", "1", "--out", str(tmp_path / "out")], repo, check=False)
    table = pd.read_csv(tmp_path / "out/crash_test.csv")
    assert len(table) == 8 and set(table["front_end"]) == {"snakemake", "dvc"}
    assert proc.returncode == 0 and table["survived"].all(), table[~table["survived"]].to_string()
    assert table["killed"].sum() >= 4, table.to_string()   # most runs were killed mid-way, not after the end


# The faults that a test of their own exercises, each as written (the whole harness runs in
# `make benchmarks-long`, results/benchmarks/faults.md); the suite injects the others here.
OWN_TESTS = {
    "damaged-world": "tests/test_sources_stage.py, tests/data/test_sources.py",
    "two-setups": "tests/test_requirements_lock.py",
    "other-size-checkpoint": "tests/test_paper_mini.py",
    "small-dead-ends": "tests/test_front_ends.py, tests/test_cli.py, tests/test_profiles.py",
    "pull-after-dry-run": "tests/test_remotes.py",
    "failed-stage": "tests/test_failures.py",
    "rejected-params-dvc": "tests/test_failures.py",
    "stage-log-error": "tests/test_cli.py, tests/test_failures.py",
    "pull-first": "tests/test_remotes.py",
    "stale-params": "tests/test_one_truth.py",
    "damaged-world-rerun": "tests/test_one_truth.py",
    "damaged-intermediate": "tests/test_one_truth.py",
    "alias-bomb": "tests/test_hostile_input.py",
    "non-utf8-params": "tests/test_hostile_input.py",
    "symlink-loop": "tests/test_hostile_input.py",
    "dry-run-fresh-clone": "tests/test_hostile_input.py",
    "empty-link": "tests/test_hostile_input.py",
    "recovery-command": "tests/test_hostile_input.py",
}


def test_every_injected_fault_is_handled(smoke_run: Path, tmp_path: Path):
    repo = copy_run(smoke_run, tmp_path / "repo")
    assert set(OWN_TESTS) <= set(FAULTS)
    here = [name for name in FAULTS if name not in OWN_TESTS]
    proc = run([sys.executable, str(REPO / "benchmarks/fault_injection.py"), str(repo), "--out", str(tmp_path / "out"),
                "--faults", ",".join(here)], repo, check=False)
    table = pd.read_csv(tmp_path / "out/faults.csv", keep_default_na=False)
    assert list(table["fault"]) == here, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0 and table["handled"].all(), table[~table["handled"]].to_string()
    assert "is running in process" in table.set_index("fault").loc["two-front-ends", "outcome"]
