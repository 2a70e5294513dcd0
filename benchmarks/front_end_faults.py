"""Faults between the two front ends (pipeline/sync.py, pipeline/made.py), for fault_injection.py:
what a team does to a repository where the whole DAG has run, each checked and put back.

- stale-params: another value of a parameter, `dvc repro`, the old value back -> both front ends
  plan the stage whose outputs were made with the other value.
- damaged-world-rerun: a world file emptied, then `snakemake` -> only `fetch` may do any work (it writes
  the same bytes again, or puts back its kept copy where that is intact); every job downstream keeps
  its outputs; both front ends end up to date.
- damaged-intermediate: a target cache truncated -> both front ends plan its `targets` instance;
  the recovery command the error line prints (`dvc checkout --force PATH`) leaves nothing to do.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

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
