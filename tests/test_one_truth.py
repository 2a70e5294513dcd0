"""One truth across both front ends, on copies of the smoke run (docs/design.md, "One state after
either front end"): whatever ran last, a stage whose outputs were not made from what params.yaml
and the files now hold is planned by both, and nothing else is; a damaged file reruns its maker
and nothing downstream does any work; the recovery command an error prints restores the state."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import copy_run, jobs, plans, run, tool_env

from taskgeom.pipeline.made import RERUN

pytestmark = pytest.mark.pipeline

SPEED = "prune-speed@tiny-dpt"


@pytest.fixture
def repo(smoke_run: Path, tmp_path: Path) -> Path:
    return copy_run(smoke_run, tmp_path / "repo")


def planned(repo: Path) -> tuple[set[str], set[str]]:
    """(the instances ``snakemake -n`` plans, the stages ``dvc status`` finds changed), by DVC's names."""
    commands, stale = plans(repo)
    names = {cmd: name for cmd, (name, _, _) in jobs(repo).items()}
    return {names[c] for c in commands}, stale


def set_repeats(repo: Path, repeats: int) -> None:
    path = repo / "params.yaml"
    path.write_text(re.sub(r"repeats: \d+", f"repeats: {repeats}", path.read_text(), count=1))


def locked_repeats(repo: Path) -> int:
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return lock["stages"][SPEED]["params"]["params.yaml"]["prune.speed"]["repeats"]


def test_outputs_made_with_other_parameters_are_planned_by_both_and_never_synced_as_current(repo: Path):
    """``dvc repro`` with another value, then the old value back: both front ends plan the stage,
    and a Snakemake run that forces something else reruns it rather than record it as current;
    the value dvc.lock holds, put back, plans nothing in either."""
    before = yaml.safe_load((repo / "params.yaml").read_text())["prune"]["speed"]["repeats"]
    set_repeats(repo, before + 1)
    run(["dvc", "repro"], repo)
    set_repeats(repo, before)
    snakemake, dvc = planned(repo)
    assert SPEED in snakemake and SPEED in dvc, (snakemake, dvc)
    set_repeats(repo, before + 1)   # what made the outputs: nothing to do in either
    assert planned(repo) == (set(), set())
    set_repeats(repo, before)
    speed = "results/prune/speed/tiny-dpt.csv"
    run(["snakemake", "-c2", "--forcerun", "zoo-table", speed, "results/zoo_table.csv"], repo)
    assert locked_repeats(repo) == before
    provenance = json.loads((repo / speed).read_text().splitlines()[0]
                            .removeprefix("# provenance: "))
    assert provenance["params"]["prune"]["speed"]["repeats"] == before
    snakemake, dvc = planned(repo)   # its readers are out of date now, in both
    assert SPEED not in snakemake | dvc and dvc <= snakemake, (snakemake, dvc)


def test_a_damaged_intermediate_is_planned_by_both_and_its_printed_recovery_restores_it(repo: Path):
    damaged = repo / "data/targets/dpt-depth-l4/train.h5"
    with damaged.open("r+b") as f:
        f.truncate(100_000)
    snakemake, dvc = planned(repo)
    assert "targets@dpt-depth-l4" in snakemake and "targets@dpt-depth-l4" in dvc
    assert dvc <= snakemake, dvc - snakemake
    run(["dvc", "checkout", "--force", str(damaged.relative_to(repo))], repo)
    assert planned(repo) == (set(), set())


def test_a_damaged_world_file_reruns_its_maker_and_nothing_downstream_works(repo: Path):
    """A world file emptied: both front ends plan ``fetch``, which writes the same bytes again (or,
    where its kept copy is intact, puts them back: this copy of the run holds copies, not links);
    every job downstream that Snakemake runs then finds its making unchanged (pipeline/made.py)
    and keeps its outputs; the zoo is not retrained, no output changes, and DVC agrees."""
    outputs = {p: p.read_bytes() for top in ("data", "results") for p in (repo / top).rglob("*")
               if p.is_file() and "speed" not in p.parts}
    (repo / "data/world/val.h5").write_bytes(b"")
    snakemake, dvc = planned(repo)
    assert "fetch" in snakemake and "fetch" in dvc
    env = {k: v for k, v in tool_env().items() if k != RERUN}
    start = time.time()
    proc = run(["snakemake", "-c2"], repo, env=env)
    logs = {log.relative_to(repo / "logs").with_suffix("").as_posix(): log.read_text()
            for log in (repo / "logs").rglob("*.log") if log.stat().st_mtime >= start}   # this run's jobs
    worked = {name for name, text in logs.items() if " done in " in text}
    kept = {name for name, text in logs.items() if "kept them" in text}
    assert worked <= {"fetch"}, proc.stderr[-3000:]
    assert {"zoo/tiny-cls", "zoo/tiny-dpt", "sources/world-train"} <= kept
    assert {p: p.read_bytes() for p in outputs} == outputs
    assert planned(repo) == (set(), set())


def test_the_documented_recovery_of_a_damaged_world_file_leaves_nothing_to_do(repo: Path):
    """A damaged world file, a Snakemake run over it, then the recovery docs/failures.md gives
    (the file, then the stage that reads it, from DVC's cache): nothing left to do in either."""
    damaged = repo / "data/world/test.h5"
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 3])
    run(["snakemake", "-c2", "data/sources/world-test.json"], repo, check=False,
        env={k: v for k, v in tool_env().items() if k != RERUN})
    run(["dvc", "checkout", "--force", "data/world/test.h5"], repo)
    run(["dvc", "checkout", "--force", "sources@world-test"], repo)
    assert planned(repo) == (set(), set())


def test_a_forced_rerun_with_rerun_set_does_the_work(repo: Path):
    """``TASKGEOM_RERUN=1`` (the suite's default, conftest) runs a stage whose making is unchanged."""
    assert os.environ.get(RERUN) == "1"
    run(["taskgeom", "zoo-table", "--log", "logs/zoo-table.log"], repo)  # as both front ends run it
    assert " done in " in (repo / "logs/zoo-table.log").read_text()
