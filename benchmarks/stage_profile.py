"""Where a run's time goes, stage by stage: Snakemake's ``benchmark:`` records of every job,
and for each, the shares of its sampled time by category (imports, HDF5 and checkpoint
I/O, figures, rendering, JVP / VJP / backward, optimizer, statistics, forward, other).

The sampler is ``benchmarks/stage_profile/sitecustomize.py``: with that folder on PYTHONPATH and
``TASKGEOM_PROFILE`` set, every ``taskgeom <stage>`` process samples its own main thread's stack and
writes ``logs/profile/<stage>~<item>.<pid>.json`` when it ends. ``--run`` starts the run that
way (``snakemake --cores N --keep-going`` in RUN_DIR, on whatever params.yaml holds there);
without it, the records already in RUN_DIR are summarised.

    python benchmarks/stage_profile.py RUN_DIR [--run] [--cores 2] [--out results/benchmarks] [--name default_run]

Writes <out>/<name>_profile.csv (a row per job: wall and CPU seconds, peak RSS, each category's
share) and <out>/<name>_profile.md (jobs by wall time, each category's seconds as its share of
the job's wall time, totals per category, and the package frames where most time went).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd

HOOK = Path(__file__).resolve().parent / "stage_profile"
sys.path.insert(0, str(HOOK))
from sitecustomize import CATEGORIES  # noqa: E402  (the sampler's categories, in its order of precedence)
from stamp import write_stamped  # noqa: E402

COLUMNS = [name for name, _ in CATEGORIES] + ["other"]


def run(run_dir: Path, cores: int) -> float:
    """Run the DAG in ``run_dir`` with every stage command sampled; returns the wall seconds."""
    env = {**os.environ, "TASKGEOM_PROFILE": str(run_dir / "logs" / "profile"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    subprocess.run(["snakemake", "--cores", str(cores), "--keep-going"], cwd=run_dir, env=env, check=False)
    return time.perf_counter() - start


def benchmarks(run_dir: Path) -> pd.DataFrame:
    """One row per job from ``logs/benchmarks/**/*.tsv``: job (``stage`` or ``stage~item``), s, cpu_time, max_rss."""
    root = run_dir / "logs" / "benchmarks"
    rows = []
    for tsv in sorted(root.rglob("*.tsv")):
        rec = pd.read_csv(tsv, sep="\t").iloc[-1]
        job = tsv.relative_to(root).with_suffix("").as_posix().replace("/", "~")
        rows.append({"job": job, "wall_s": float(rec["s"]), "cpu_s": float(rec["cpu_time"]),
                     "max_rss_mb": float(rec["max_rss"])})
    return pd.DataFrame(rows)


def profiles(run_dir: Path, wall: dict[str, float]) -> tuple[pd.DataFrame, Counter, Counter]:
    """Category shares per job from the newest sample file of each; and the seconds per package
    frame and per innermost frame, each frame's share of its job's sampled time times the job's
    ``wall`` seconds, summed over the jobs."""
    newest: dict[str, Path] = {}
    for path in sorted((run_dir / "logs" / "profile").glob("*.json"), key=lambda p: p.stat().st_mtime):
        newest[path.name.rsplit(".", 2)[0]] = path
    rows, frames, leaves = [], Counter(), Counter()
    for job, path in newest.items():
        rec = json.loads(path.read_text())
        total = sum(rec["categories"].values()) or 1
        rows.append({"job": job, "sampled_s": total, **{c: rec["categories"].get(c, 0) / total for c in COLUMNS}})
        scale = wall.get(job, 0.0) / total
        frames.update({k: v * scale for k, v in rec["frames"].items()})
        leaves.update({k: v * scale for k, v in rec.get("leaves", {}).items()})
    return pd.DataFrame(rows), frames, leaves


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--run", action="store_true", help="run the DAG there first, sampled")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    ap.add_argument("--name", default="default_run")
    args = ap.parse_args(argv)
    run_dir = args.run_dir.resolve()
    elapsed = run(run_dir, args.cores) if args.run else None
    jobs = benchmarks(run_dir)
    if jobs.empty:
        raise SystemExit(f"{run_dir}/logs/benchmarks: no benchmark records; run the DAG there first")
    shares, frames, leaves = profiles(run_dir, dict(zip(jobs["job"], jobs["wall_s"])))
    table = jobs.merge(shares, on="job", how="left").sort_values("wall_s", ascending=False)

    seconds = table[["job", "wall_s"]].copy()
    for c in COLUMNS:
        seconds[c] = (table[c] * table["wall_s"]).round(1)
    seconds["wall_s"] = seconds["wall_s"].round(1)
    sampled = table["sampled_s"].notna()
    totals = seconds[sampled][COLUMNS].sum()
    stage = seconds.assign(stage=seconds["job"].str.split("~").str[0]).groupby("stage")["wall_s"].agg(["sum", "count"])
    top = pd.DataFrame(frames.most_common(25), columns=["category | innermost package frame", "s"]).round(0)
    inner = pd.DataFrame(leaves.most_common(25), columns=["innermost frame", "s"]).round(0)
    head = (f"{len(table)} jobs, {int(sampled.sum())} of them sampled; the jobs' wall time adds to "
            f"{table['wall_s'].sum():.0f} s" + (f"; the run took {elapsed:.0f} s" if elapsed else "") +
            f". {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores.")
    write_stamped(
        args.out, f"{args.name}_profile", table.round(4),
        f"# Where the {args.name.replace('_', ' ')}'s time goes\n\n{head}\n\n"
        "Seconds per category: the job's wall time (Snakemake's `benchmark:`) times the category's share "
        "of its sampled time (`benchmarks/stage_profile/sitecustomize.py`).\n\n"
        f"{seconds.to_markdown(index=False)}\n\n## Totals over the sampled jobs (s)\n\n"
        f"{totals.round(0).to_frame('s').to_markdown()}\n\n## Wall time per stage (s)\n\n"
        f"{stage.sort_values('sum', ascending=False).round(0).to_markdown()}\n\n"
        f"## Where the time went\n\n{top.to_markdown(index=False)}\n\n{inner.to_markdown(index=False)}\n")
    print(seconds.head(25).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
