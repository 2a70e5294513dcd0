"""Faults between the two front ends (pipeline/sync.py, pipeline/made.py), for fault_injection.py:
what a team does to a repository where the whole DAG has run, each checked and put back.

- stale-params: another value of a parameter, `dvc repro`, the old value back -> both front ends
  plan the stage whose outputs were made with the other value.
- damaged-world-rerun: a world file emptied, then `snakemake` -> only `fetch` may do any work (it writes
  the same bytes again, or puts back its kept copy where that is intact); every job downstream keeps
  its outputs; both front ends end up to date.
- damaged-intermediate: a target cache truncated -> both front ends plan its `targets` instance;
  the recovery command the error line prints (`dvc checkout --force PATH`) leaves nothing to do.
- params-edited-mid-run: a speed table's repeats raised, `snakemake` runs prune-speed, the old
  value put back while the job runs -> dvc.lock records the value the job read, and both front
  ends plan the stage.
- run-cache-mid-run: the same, then `dvc repro` of the stage -> DVC's run cache never pairs the
  table with the value put back: the table `dvc repro` leaves was made with params.yaml's value.
- rerun-triggers-mtime: repeats changed, `snakemake --rerun-triggers mtime --forcerun prune-tables`
  -> the speed table's dvc.lock entry holds the value its provenance names; nothing planned for it.
- pulled-clone-damage: a copy of the repository without outputs that `dvc pull`s them from this
  one's cache, a world file emptied there, then `snakemake` for a zoo model -> only `fetch` does
  any work (the zoo model is kept), as in the clone that made it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from fault_tools import first, in_step, sh, up_to_date

from taskgeom.pipeline import config
from taskgeom.pipeline.made import RERUN


def planned(repo: Path) -> tuple[str, set[str]]:
    """(Snakemake's dry run, with shell commands; the stages ``dvc status`` finds changed)."""
    dry = sh(["snakemake", "-n", "--printshellcmds"], repo).stdout
    return dry, set(json.loads(sh(["dvc", "status", "--json"], repo).stdout or "{}"))


def put_back(repo: Path, saved: dict[Path, bytes]) -> None:
    for path, data in saved.items():
        path.write_bytes(data)
    in_step(repo)


def stale_params(repo: Path, params: dict) -> tuple[bool, str]:
    in_step(repo)
    item = first(params, "prune.dense")
    address = f"prune-speed@{item}"
    # what the runs rewrite: params.yaml, dvc.lock, the outputs and the stages' records of their making
    touched = [repo / "params.yaml", repo / "dvc.lock",
               *(p for top in ("results", ".taskgeom/made") for p in (repo / top).rglob("*") if p.is_file())]
    saved = {p: p.read_bytes() for p in touched}
    text = saved[repo / "params.yaml"].decode()
    repeats = config.get(params, "prune.speed")["repeats"]
    try:
        (repo / "params.yaml").write_text(re.sub(r"repeats: \d+", f"repeats: {repeats + 1}", text, count=1))
        sh(["dvc", "repro"], repo)
        (repo / "params.yaml").write_text(text)
        dry, stale = planned(repo)
        ok = address in stale and f"taskgeom prune-speed --dense '{item}'" in dry
    finally:
        put_back(repo, saved)
    clean = up_to_date(repo)
    return ok and clean, (f"{address} planned by {'both' if ok else 'not both'} front ends"
                          + ("; put back: nothing to rerun" if clean else "; put back: work planned"))


def damaged_world(repo: Path, params: dict) -> tuple[bool, str]:
    in_step(repo)
    world = repo / "data/world/val.h5"
    env = {k: v for k, v in os.environ.items() if k != RERUN}
    before = world.read_bytes()
    try:
        world.write_bytes(b"")
        start = time.time()
        proc = sh(["snakemake", "-c2"], repo, env=env)
        logs = [p for p in (repo / "logs").rglob("*.log") if p.stat().st_mtime >= start]  # this run's jobs
        worked = sorted(p.relative_to(repo / "logs").with_suffix("").as_posix() for p in logs
                        if " done in " in p.read_text())
        kept = sum("kept them" in p.read_text() for p in logs)
        same = world.read_bytes() == before
    finally:
        if world.read_bytes() != before:
            world.write_bytes(before)
    clean = up_to_date(repo)
    ok = proc.returncode == 0 and set(worked) <= {"fetch"} and same and clean
    return ok, (f"snakemake rc {proc.returncode}; worked: {', '.join(worked) or 'none'}; {kept} kept their "
                f"outputs; {'the same' if same else 'other'} bytes; "
                + ("nothing to rerun" if clean else "work planned"))


def damaged_intermediate(repo: Path, params: dict) -> tuple[bool, str]:
    in_step(repo)
    probe = config.get(params, "learn.heads")[first(params, "learn.heads")]["probe"]
    damaged = repo / f"data/targets/{probe}/train.h5"
    before = damaged.read_bytes()
    try:
        damaged.write_bytes(before[: len(before) // 10])
        dry, stale = planned(repo)
        ok = f"targets@{probe}" in stale and f"taskgeom targets --probe '{probe}'" in dry
        restored = sh(["dvc", "checkout", "--force", str(damaged.relative_to(repo))], repo).returncode == 0
    finally:
        if damaged.read_bytes() != before:
            damaged.write_bytes(before)
    clean = restored and up_to_date(repo)
    return ok and clean, (f"targets@{probe} planned by {'both' if ok else 'not both'} front ends; "
                          f"`dvc checkout --force` {'left nothing to rerun' if clean else 'left work planned'}")


GATE_SHIM = """#!/bin/sh
"{real}" "$@"
rc=$?
case "$*" in *prune-speed*) : > "{ran}"; while [ ! -e "{gate}" ]; do sleep 0.1; done;; esac
exit $rc
"""


def said_all(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def speed_state(repo: Path, item: str) -> dict:
    """The speed table's repeats by its provenance, by dvc.lock, and by params.yaml; its md5; the
    repeats each run-cache entry pairs with it."""
    table = repo / f"results/prune/speed/{item}.csv"
    provenance = json.loads(table.read_text().splitlines()[0].removeprefix("# provenance: "))
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"][f"prune-speed@{item}"]
    md5 = hashlib.md5(table.read_bytes()).hexdigest()
    paired = []
    for entry in (repo / ".dvc/cache/runs").glob("*/*/*"):
        data = yaml.safe_load(entry.read_text()) or {}
        if any(o.get("md5") == md5 for o in data.get("outs", [])):
            paired.append(((data.get("params") or {}).get("params.yaml") or {}).get("prune.speed", {}).get("repeats"))
    return {"provenance": provenance["params"]["prune"]["speed"]["repeats"],
            "locked": lock["params"]["params.yaml"]["prune.speed"]["repeats"],
            "params": config.get(yaml.safe_load((repo / "params.yaml").read_text()), "prune.speed")["repeats"],
            "md5": md5, "run_cache": paired}


def saved_state(repo: Path) -> dict[Path, bytes]:
    """What the runs of these faults rewrite: params.yaml, dvc.lock, the outputs and the job records."""
    return {p: p.read_bytes() for p in [repo / "params.yaml", repo / "dvc.lock",
                                         *(p for top in ("data", "results", ".taskgeom/made")
                                           for p in (repo / top).rglob("*") if p.is_file())]}


def set_repeats(repo: Path, text: str, repeats: int) -> None:
    (repo / "params.yaml").write_text(re.sub(r"repeats: \d+", f"repeats: {repeats}", text, count=1))


def edited_mid_run(repo: Path, item: str, text: str, repeats: int) -> subprocess.CompletedProcess:
    """repeats + 2 in params.yaml, `snakemake` for the speed table, ``repeats`` back while its job runs."""
    with tempfile.TemporaryDirectory() as tmp:
        shim, ran, gate = Path(tmp) / "shim", Path(tmp) / "ran", Path(tmp) / "gate"
        shim.mkdir()
        (shim / "taskgeom").write_text(GATE_SHIM.format(real=shutil.which("taskgeom"), ran=ran, gate=gate))
        (shim / "taskgeom").chmod(0o755)
        env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
        set_repeats(repo, text, repeats + 2)
        proc = subprocess.Popen(["snakemake", "-c2", f"results/prune/speed/{item}.csv"], cwd=repo, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            while not ran.exists() and proc.poll() is None:
                time.sleep(0.2)
            set_repeats(repo, text, repeats)
        finally:
            gate.touch()
            out, _ = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def params_edited_mid_run(repo: Path, params: dict, then_repro: bool = False) -> tuple[bool, str]:
    in_step(repo)
    item, saved = first(params, "prune.dense"), saved_state(repo)
    text, repeats = saved[repo / "params.yaml"].decode(), config.get(params, "prune.speed")["repeats"]
    try:
        proc = edited_mid_run(repo, item, text, repeats)
        state = speed_state(repo, item)
        dry, stale = planned(repo)
        plans = f"prune-speed@{item}" in stale and f"taskgeom prune-speed --dense '{item}'" in dry
        if then_repro:
            sh(["dvc", "repro", f"prune-speed@{item}"], repo)
            after = speed_state(repo, item)
            ok = proc.returncode == 0 and after["provenance"] == after["params"] == after["locked"] and not any(
                r != after["provenance"] for r in after["run_cache"])
            said_ = (f"after `dvc repro`: table made with repeats {after['provenance']}, params.yaml "
                     f"{after['params']}, dvc.lock {after['locked']}; run cache pairs it with {after['run_cache']}")
        else:
            ok = proc.returncode == 0 and state["locked"] == state["provenance"] == repeats + 2 and plans and (
                repeats not in state["run_cache"])
            said_ = (f"job read repeats {state['provenance']}, dvc.lock records {state['locked']}, params.yaml "
                     f"{state['params']}; planned by {'both' if plans else 'not both'} front ends; run cache pairs "
                     f"the table with {state['run_cache'] or 'nothing'}")
    finally:
        put_back(repo, saved)
    clean = up_to_date(repo)
    return ok and clean, said_ + ("; put back: nothing to rerun" if clean else "; put back: work planned")


def rerun_triggers_mtime(repo: Path, params: dict) -> tuple[bool, str]:
    in_step(repo)
    item, saved = first(params, "prune.dense"), saved_state(repo)
    text, repeats = saved[repo / "params.yaml"].decode(), config.get(params, "prune.speed")["repeats"]
    try:
        set_repeats(repo, text, repeats + 1)
        proc = sh(["snakemake", "-c2", "--rerun-triggers", "mtime", "--forcerun", "prune-tables"], repo)
        state = speed_state(repo, item)
        dry = said_all(sh(["snakemake", "-n", f"results/prune/speed/{item}.csv", "--rerun-triggers", "mtime"], repo))
        quiet = "prune-speed" not in dry and f"prune-speed@{item}" not in planned(repo)[1]
        ok = proc.returncode == 0 and state["provenance"] == state["locked"] and quiet
    finally:
        put_back(repo, saved)
    clean = up_to_date(repo)
    return ok and clean, (f"snakemake rc {proc.returncode}; table made with repeats {state['provenance']}, dvc.lock "
                          f"{state['locked']}; {'nothing' if quiet else 'work'} planned for it"
                          + ("; put back: nothing to rerun" if clean else "; put back: work planned"))


def pulled_clone_damage(repo: Path, params: dict) -> tuple[bool, str]:
    in_step(repo)
    model = first(params, "zoo")
    skip = {repo / name for name in ("data", "results", "logs", ".snakemake", ".taskgeom", ".dvc/cache", ".dvc/tmp")}
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"   # what a clone that only pulled holds: no output, no record of a run
        shutil.copytree(repo, clone, symlinks=True, ignore=lambda d, names: [n for n in names if Path(d, n) in skip])
        sh(["dvc", "remote", "add", "-f", "-d", "--local", "origin", str(repo / ".dvc/cache")], clone)
        pulled = sh(["dvc", "pull"], clone)
        (clone / "data/world/val.h5").write_bytes(b"")
        env = {k: v for k, v in os.environ.items() if k != RERUN}
        start = time.time()
        proc = sh(["snakemake", "-c2", f"data/zoo/{model}/model.safetensors"], clone, env=env)
        logs = [p for p in (clone / "logs").rglob("*.log") if p.stat().st_mtime >= start]
        worked = sorted(p.relative_to(clone / "logs").with_suffix("").as_posix() for p in logs
                        if " done in " in p.read_text())
        kept = sorted(p.relative_to(clone / "logs").with_suffix("").as_posix() for p in logs
                      if "kept them" in p.read_text())
        same = (clone / "data/world/val.h5").read_bytes() == (repo / "data/world/val.h5").read_bytes()
    ok = pulled.returncode == 0 and proc.returncode == 0 and set(worked) <= {"fetch"} and f"zoo/{model}" in kept
    return ok and same, (f"pull rc {pulled.returncode}, snakemake rc {proc.returncode}; worked: "
                         f"{', '.join(worked) or 'none'}; kept: {', '.join(kept) or 'none'}; world file "
                         f"{'the same' if same else 'other'} bytes")
