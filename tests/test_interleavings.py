"""Random interleavings of what a team does to params.yaml and the two front ends, on a copy of the
smoke run, restricted to two stages (the speed table ``prune-speed@tiny-dpt`` and its reader
``prune-tables``): parameter edits before, during and after a job, ``dvc repro``, ``snakemake``
under each ``--rerun-triggers``, ``dvc push``/``pull --run-cache`` and ``dvc checkout``. After each
step the invariant of one recorder holds: a table whose provenance names another repeats than
params.yaml's is planned by both front ends (Snakemake under default and ``mtime`` triggers), and
neither dvc.lock nor any run-cache entry pairs the table's bytes with another value than the one
that made it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml
from conftest import copy_run, run
from test_one_truth import (
    SPEED,
    SPEED_CSV,
    edited_during_job,
    md5_of,
    planned,
    provenance_repeats,
    run_cache_pairs,
    set_repeats,
)

pytestmark = [pytest.mark.pipeline, pytest.mark.long]

TABLES = "results/prune/table2.csv"
TRIGGERS = (None, "mtime", "params", "input", "code")
STEPS, SEQUENCES = 10, 2


def lock_pairs(repo: Path) -> tuple[int, str]:
    """(repeats, table md5) that dvc.lock records for the speed table."""
    entry = yaml.safe_load((repo / "dvc.lock").read_text())["stages"][SPEED]
    out = next(o for o in entry["outs"] if o["path"] == SPEED_CSV)
    return entry["params"]["params.yaml"]["prune.speed"]["repeats"], out["md5"]


def invariant(repo: Path, step: str) -> None:
    made, wanted = provenance_repeats(repo), yaml.safe_load((repo / "params.yaml").read_text())["prune"]["speed"][
        "repeats"]
    table = md5_of(repo / SPEED_CSV)
    locked, locked_md5 = lock_pairs(repo)
    assert locked_md5 != table or locked == made, f"after {step}: dvc.lock pairs the table with {locked}, made {made}"
    assert all(r == made for r, md5 in run_cache_pairs(repo) if md5 == table), f"after {step}: run cache"
    if made != wanted:
        snakemake, dvc = planned(repo)
        assert SPEED in snakemake and SPEED in dvc, f"after {step}: not planned by both"
        proc = run(["snakemake", "-n", SPEED_CSV, "--rerun-triggers", "mtime"], repo)
        dry = proc.stdout + proc.stderr
        assert "prune-speed" in dry, f"after {step}: Snakemake under mtime plans nothing"


@pytest.mark.parametrize("seed", range(SEQUENCES))
def test_no_interleaving_records_a_table_with_a_value_that_did_not_make_it(smoke_run: Path, tmp_path: Path,
                                                                          seed: int):
    repo = copy_run(smoke_run, tmp_path / "repo")
    run(["dvc", "remote", "add", "-d", "team", str(tmp_path / "remote")], repo)
    base = provenance_repeats(repo)
    rng = random.Random(seed)
    for i in range(STEPS):
        value, trigger = rng.choice([base, base + 1, base + 2]), rng.choice(TRIGGERS)
        triggers = ["--rerun-triggers", trigger] if trigger else []
        action = rng.choice(["edit", "edit-during", "snakemake", "repro", "push", "pull", "checkout"])
        if action == "edit":
            set_repeats(repo, value)
        elif action == "edit-during":
            edited_during_job(repo, tmp_path / "shim", value, rng.choice([base, base + 1, base + 2]), *triggers)
        elif action == "snakemake":
            run(["snakemake", "-c2", TABLES, *triggers], repo, check=False)
        elif action == "repro":
            run(["dvc", "repro", "prune-tables"], repo, check=False)
        elif action in ("push", "pull"):
            run(["dvc", action, "--run-cache"], repo, check=False)
        else:
            run(["dvc", "checkout", "--force"], repo, check=False)
        invariant(repo, f"step {i}: {action} (repeats {value}, triggers {trigger})")
