"""The crash-test harness on a copy of the smoke run: every kill of a stage that writes several
files, checkpoints or trains (fetch, targets, zoo, head) under Snakemake and under DVC is survived."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, run

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]


def test_every_kill_is_survived_under_both_front_ends(smoke: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    shutil.copytree(smoke, repo, symlinks=True)
    proc = run([sys.executable, str(REPO / "benchmarks/crash_test.py"), str(repo), "--stages", "fetch,targets,zoo,head",
                "--first-only", "--points", "1", "--out", str(tmp_path / "out")], repo, check=False)
    table = pd.read_csv(tmp_path / "out/crash_test.csv")
    assert len(table) == 8 and set(table["front_end"]) == {"snakemake", "dvc"}
    assert proc.returncode == 0 and table["survived"].all(), table[~table["survived"]].to_string()
    assert table["killed"].sum() >= 4, table.to_string()   # most runs were killed mid-way, not after the end
