"""One truth across both front ends, on copies of the smoke run (docs/design.md, "One state after
either front end"): whatever ran last, a stage whose outputs were not made from what params.yaml
and the files now hold is planned by both, and nothing else is; a damaged file reruns its maker
and nothing downstream does any work; the recovery command an error prints restores the state."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
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


SPEED_CSV = "results/prune/speed/tiny-dpt.csv"
GATE_SHIM = """#!/bin/sh
# the real command, then wait for the test's gate before exiting: a job that has read its parameters
"{real}" "$@"
rc=$?
case "$*" in *prune-speed*) : > "{ran}"; while [ ! -e "{gate}" ]; do sleep 0.1; done;; esac
exit $rc
"""


def provenance_repeats(repo: Path) -> int:
    """The repeats the speed table's own provenance says made it."""
    line = (repo / SPEED_CSV).read_text().splitlines()[0].removeprefix("# provenance: ")
    return json.loads(line)["params"]["prune"]["speed"]["repeats"]


def run_cache_pairs(repo: Path) -> list[tuple[int, str]]:
    """(repeats, speed table md5) of each run-cache entry of prune-speed@tiny-dpt."""
    pairs = []
    for entry in (repo / ".dvc/cache/runs").glob("*/*/*"):
        data = yaml.safe_load(entry.read_text()) or {}
        outs = {o["path"]: o.get("md5") for o in data.get("outs", [])}
        params = (data.get("params") or {}).get("params.yaml") or {}
        if SPEED_CSV in outs and "prune.speed" in params:
            pairs.append((params["prune.speed"]["repeats"], outs[SPEED_CSV]))
    return pairs


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def edited_during_job(repo: Path, shim: Path, value: int, back: int, *flags: str) -> subprocess.CompletedProcess:
    """repeats ``value`` in params.yaml, `snakemake` for the speed table, then ``back`` while its
    job, having read ``value``, is still running (``shim``: a folder for the gated command)."""
    shim.mkdir(exist_ok=True)
    ran, gate = shim / "ran", shim / "gate"
    ran.unlink(missing_ok=True)
    gate.unlink(missing_ok=True)
    (shim / "taskgeom").write_text(GATE_SHIM.format(real=shutil.which("taskgeom", path=tool_env()["PATH"]),
                                                     ran=ran, gate=gate))
    (shim / "taskgeom").chmod(0o755)
    env = {**tool_env(), "PATH": f"{shim}{os.pathsep}{tool_env()['PATH']}"}
    set_repeats(repo, value)
    proc = subprocess.Popen(["snakemake", "-c2", SPEED_CSV, *flags], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        while not ran.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        set_repeats(repo, back)
        gate.touch()
        out, _ = proc.communicate(timeout=600)
    finally:
        gate.touch()
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def test_a_parameter_edited_back_while_its_job_runs_is_recorded_as_the_job_read_it(repo: Path, tmp_path: Path):
    """Case 1: repeats raised, `snakemake` runs prune-speed, repeats put back while the job runs:
    dvc.lock records the value the job read, and both front ends plan the stage."""
    before = locked_repeats(repo)
    proc = edited_during_job(repo, tmp_path / "shim", before + 2, before)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert provenance_repeats(repo) == before + 2
    assert locked_repeats(repo) == before + 2   # what the job read, not params.yaml at the end
    snakemake, dvc = planned(repo)
    assert SPEED in snakemake and SPEED in dvc, (snakemake, dvc)


def test_the_run_cache_never_pairs_a_table_with_a_value_edited_during_its_job(repo: Path, tmp_path: Path):
    """Case 2: the same edit during the job, then `dvc repro` of the stage: no run-cache entry pairs
    the table with the value put back, and the table DVC leaves was made with params.yaml's value."""
    before = locked_repeats(repo)
    edited_during_job(repo, tmp_path / "shim", before + 2, before)
    assert (before, md5_of(repo / SPEED_CSV)) not in run_cache_pairs(repo)
    run(["dvc", "repro", SPEED], repo)
    assert provenance_repeats(repo) == before == locked_repeats(repo)
    assert all(r == before for r, md5 in run_cache_pairs(repo) if md5 == md5_of(repo / SPEED_CSV))


def test_snakemake_judging_by_modification_time_never_records_a_table_with_new_parameters(repo: Path):
    """Case 3: repeats changed, `snakemake --rerun-triggers mtime --forcerun prune-tables`: the
    speed table's dvc.lock entry holds the value its own provenance names (Snakemake, told to
    ignore parameters, still reruns prune-speed: it is dated as out of date), and neither front
    end, Snakemake under the same triggers, has anything left to do for it."""
    set_repeats(repo, locked_repeats(repo) + 1)
    run(["snakemake", "-c2", "--rerun-triggers", "mtime", "--forcerun", "prune-tables"], repo)
    assert provenance_repeats(repo) == locked_repeats(repo)
    proc = run(["snakemake", "-n", SPEED_CSV, "--rerun-triggers", "mtime"], repo)
    dry = proc.stdout + proc.stderr
    assert "prune-speed" not in dry and SPEED not in planned(repo)[1], dry[-2000:]


def test_a_clone_that_only_pulled_reruns_only_the_maker_of_a_damaged_file(repo: Path, tmp_path: Path):
    """Case 4: the run pushed to a DVC remote and pulled into a clone; a world file emptied there,
    then `snakemake` for a zoo model: nothing but `fetch` does any work (DVC's cache holds what
    every job would write), as in the clone that made it."""
    git = ["git", "-c", "user.email=ci@taskgeom", "-c", "user.name=taskgeom"]
    run(["dvc", "remote", "add", "-d", "team", str(tmp_path / "remote")], repo)
    run(["dvc", "push"], repo)
    run(["git", "add", "-A"], repo)
    run([*git, "commit", "-qm", "results", "--allow-empty"], repo)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    run(["dvc", "pull"], clone)
    (clone / "data/world/val.h5").write_bytes(b"")
    env = {k: v for k, v in tool_env().items() if k != RERUN}
    start = time.time()
    proc = run(["snakemake", "-c2", "data/zoo/tiny-cls/model.safetensors"], clone, env=env)
    logs = {log.relative_to(clone / "logs").with_suffix("").as_posix(): log.read_text()
            for log in (clone / "logs").rglob("*.log") if log.stat().st_mtime >= start}
    worked = {name for name, text in logs.items() if " done in " in text}
    assert worked <= {"fetch"}, (worked, proc.stderr[-3000:])
    assert "zoo/tiny-cls" in {name for name, text in logs.items() if "kept them" in text}
    assert (clone / "data/world/val.h5").read_bytes() == (repo / "data/world/val.h5").read_bytes()
