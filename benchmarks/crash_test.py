"""Crash test: SIGKILL stage instances mid-run under each front end, rerun, and compare digests.

REPO is a repository where the whole DAG has run (e.g. the smoke profile under `snakemake -c2`).
For each selected stage instance, front end and kill point:

1. the front end reruns just that instance, forced (`snakemake --cores 1 --force <its first
   output>`, or `dvc repro --force -s <stage>[@<item>]`), in its own process group;
2. the group is SIGKILLed at u × T seconds, T the instance's time in its `benchmark:` file and
   u drawn from U(0.15, 0.85) with --seed (a run that ends first counts as "finished first");
3. the same command reruns without a kill (Snakemake after `--unlock`, with `--rerun-incomplete`);
4. every file under data/ and results/ is compared with its digest before step 1: the instance's
   outputs must come back with the same bytes (prune-speed's wall-clock times and the tables of
   them: present only), no other file may change or disappear, and no staged (`.staged.*`),
   unfinished (`.*.tmp`) or partial file may remain.

    python benchmarks/crash_test.py REPO [--stages fetch,targets] [--first-only] [--points 2]
                                         [--front-ends snakemake,dvc] [--seed 0] [--out results/benchmarks]

Writes <out>/crash_test.{csv,md} (one row per kill) and exits 1 unless every kill was survived.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from stamp import write_stamped

from taskgeom.pipeline import config
from taskgeom.pipeline.made import RERUN
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.stage import Stage, resolve
from taskgeom.pipeline.sync import CHECK_PARAMS

WALL_CLOCK = ("results/prune/speed",)  # prune-speed's times and the tables of them: compared for presence only


def digests(repo: Path) -> dict[str, str]:
    """sha256 of every file under data/ and results/ outside .partial/, by relative path."""
    return {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
            for top in ("data", "results") for p in sorted((repo / top).rglob("*"))
            if p.is_file() and ".partial" not in p.parts}


def leftovers(repo: Path) -> list[str]:
    """Staged outputs, unfinished atomic writes and partial files anywhere under data/ and results/."""
    return sorted(str(p.relative_to(repo)) for top in ("data", "results") for p in (repo / top).rglob("*")
                  if p.is_file() and (p.name.startswith(".staged.") or ".partial" in p.parts
                                      or p.name.startswith(".") and p.name.endswith(".tmp")))


def instances(params: dict, names: set[str] | None, first_only: bool = False) -> list[tuple[Stage, str | None]]:
    """Every (stage, item) of the DAG that writes data, or those of the stages ``names``; with
    ``first_only``, each stage's first item."""
    out = []
    for stage in STAGES:
        if stage.name == CHECK_PARAMS or (names and stage.name not in names):
            continue
        items = list(config.get(params, stage.foreach)) if stage.foreach else [None]
        out += [(stage, item) for item in items[:1 if first_only else None]]
    return out


def seconds(repo: Path, stage: Stage, item: str | None) -> float:
    """The instance's time in its Snakemake benchmark file (10 s when there is none)."""
    path = repo / stage.benchmark.replace(f"{{{stage.wildcard}}}", item or "")
    return float(pd.read_csv(path, sep="\t")["s"].iloc[-1]) if path.is_file() else 10.0


def command(front_end: str, stage: Stage, item: str | None, outputs: dict[str, Path], repo: Path,
            rerun: bool) -> list[str]:
    if front_end == "dvc":
        return ["dvc", "repro", "--force", "-s", stage.address(item)]
    first = str(next(iter(outputs.values())).relative_to(repo))
    return ["snakemake", "--cores", "1", "--force", *(["--rerun-incomplete"] if rerun else []), first]


def kill_after(cmd: list[str], repo: Path, delay: float) -> bool:
    """Run ``cmd`` in its own process group and SIGKILL the group after ``delay`` s; False if it ended first."""
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def crash(repo: Path, front_end: str, stage: Stage, item: str | None, delay: float, params: dict) -> dict:
    """One kill and rerun of one instance; the row of the result table."""
    _, outputs = resolve(stage, params, item)
    outputs = {k: repo / p for k, p in outputs.items()}
    before = digests(repo)
    killed = kill_after(command(front_end, stage, item, outputs, repo, rerun=False), repo, delay)
    if front_end == "snakemake":
        subprocess.run(["snakemake", "--unlock"], cwd=repo, capture_output=True)
    rerun = subprocess.run(command(front_end, stage, item, outputs, repo, rerun=True), cwd=repo,
                           capture_output=True, text=True)
    after = digests(repo)
    mine = {str(p.relative_to(repo)) for p in outputs.values()}
    timed = lambda k: k.startswith(WALL_CLOCK) and k in before and k in after
    changed_mine = sorted(k for k in mine if after.get(k) != before.get(k) and not timed(k))
    changed_other = sorted(k for k in set(before) | set(after)
                           if k not in mine and before.get(k) != after.get(k) and not timed(k))
    left = leftovers(repo)
    ok = rerun.returncode == 0 and not changed_mine and not changed_other and not left
    return {"stage": stage.name, "item": item or "", "front_end": front_end, "kill_at_s": round(delay, 2),
            "killed": killed, "rerun_rc": rerun.returncode, "outputs": len(mine),
            "outputs_changed": ";".join(changed_mine), "other_files_changed": ";".join(changed_other[:5]),
            "left_behind": ";".join(left[:5]), "survived": ok,
            "error": "" if rerun.returncode == 0 else rerun.stderr[-300:].replace("\n", " ")}


def write_result(table: pd.DataFrame, out: Path, name: str, title: str, summary: str) -> None:
    """``table`` as <out>/<name>.csv and, under ``title`` and ``summary`` (with the Python version
    and date), as <out>/<name>.md, both stamped with the code (``stamp``); the summary is printed too."""
    summary += f" Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}."
    write_stamped(out, name, table, f"# {title}\n\n{summary}\n\n{table.to_markdown(index=False)}")
    print(summary)


def main(argv: list[str] | None = None) -> int:
    # its reruns must run, not keep outputs whose making is unchanged (pipeline/made.py); a fault
    # that tests that reuse drops it for its own commands
    os.environ.setdefault(RERUN, "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--stages", default="", help="comma-separated stage names (default: every stage)")
    ap.add_argument("--front-ends", default="snakemake,dvc")
    ap.add_argument("--points", type=int, default=2, help="kills per instance and front end")
    ap.add_argument("--first-only", action="store_true", help="each stage's first item only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    params = yaml.safe_load((repo / "params.yaml").read_text())
    rng = np.random.default_rng(args.seed)
    rows = []
    for stage, item in instances(params, set(filter(None, args.stages.split(","))) or None, args.first_only):
        T = seconds(repo, stage, item)
        for front_end in args.front_ends.split(","):
            for _ in range(args.points):
                row = crash(repo, front_end, stage, item, float(rng.uniform(0.15, 0.85)) * T, params)
                rows.append(row)
                print(f"{row['stage']}{'@' + row['item'] if row['item'] else ''} {front_end} kill at "
                      f"{row['kill_at_s']} s: {'survived' if row['survived'] else 'FAILED'}", flush=True)
    table = pd.DataFrame(rows)
    kills = int(table["killed"].sum())
    write_result(table, args.out, "crash_test", "Crash test",
                 f"{len(table)} runs of {table[['stage', 'item']].drop_duplicates().shape[0]} stage instances "
                 f"({table['stage'].nunique()} stages) under {', '.join(args.front_ends.split(','))}: {kills} killed "
                 f"mid-run, {len(table) - kills} finished first; survived: {int(table['survived'].sum())} of "
                 f"{len(table)}. Seed {args.seed}.")
    return 0 if table["survived"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
