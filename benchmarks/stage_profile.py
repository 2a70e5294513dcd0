"""Where a run's time goes, stage by stage: Snakemake's ``benchmark:`` records of every job,
and for each, the shares of its sampled time by category (imports, HDF5 and checkpoint
I/O, figures, rendering, JVP / VJP / backward, optimizer, statistics, forward, other).

The sampler is ``benchmarks/stage_profile/sitecustomize.py``: with that folder on PYTHONPATH and
``TASKGEOM_PROFILE`` set, every ``taskgeom <stage>`` process samples its own main thread's stack and
writes ``logs/profile/<stage>~<item>.<pid>.json`` when it ends. ``--run`` starts the run that
way (``snakemake --cores N --keep-going`` in RUN_DIR, on whatever params.yaml holds there),
timing it from start to end and keeping that time in ``RUN_DIR/logs/profile_run.json``
(``RUN_RECORD``); without it, the records already in RUN_DIR are summarised.

Two times head the report, each on its own line: the run's elapsed (wall-clock) time, start to
end of ``snakemake``, from ``RUN_RECORD``, or "not recorded" when no ``--run`` of this script
wrote one or a job's benchmark record is newer than its end (jobs ran again since); and the
jobs' wall times added up, each job in full, also while others ran beside it.

    python benchmarks/stage_profile.py RUN_DIR [--run] [--cores 2] [--out results/benchmarks] [--name default_run]

Writes <out>/<name>_profile.csv (a row per job: wall and CPU seconds, peak RSS, each category's
share) and <out>/<name>_profile.md (the two times above; jobs by wall time, each category's
seconds as its share of the job's wall time, totals per category, and the package frames where
most time went).
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
RUN_RECORD = Path("logs") / "profile_run.json"  # under RUN_DIR: the last --run's elapsed seconds and end


def run(run_dir: Path, cores: int) -> float:
    """Run the DAG in ``run_dir`` with every stage command sampled; returns the elapsed (wall-clock)
    seconds, also written to ``RUN_RECORD`` with the run's end (Unix time) and command."""
    env = {**os.environ, "TASKGEOM_PROFILE": str(run_dir / "logs" / "profile"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")]))}
    command = ["snakemake", "--cores", str(cores), "--keep-going"]
    start = time.perf_counter()
    subprocess.run(command, cwd=run_dir, env=env, check=False)
    elapsed = time.perf_counter() - start
    (run_dir / RUN_RECORD).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / RUN_RECORD).write_text(json.dumps({"elapsed_s": elapsed, "ended": time.time(), "command": command}))
    return elapsed


def recorded_run(run_dir: Path) -> tuple[float, list[str]] | None:
    """(elapsed seconds, command) of the last ``--run`` in ``run_dir``, if it is the run the benchmark
    records come from: none when there is no ``RUN_RECORD`` or a record is newer than the run's end."""
    path = run_dir / RUN_RECORD
    if not path.is_file():
        return None
    rec = json.loads(path.read_text())
    newest = max((p.stat().st_mtime for p in (run_dir / "logs" / "benchmarks").rglob("*.tsv")), default=0.0)
    return (float(rec["elapsed_s"]), rec["command"]) if newest <= rec["ended"] else None


def times_head(run_dir: Path, table: pd.DataFrame, sampled: int) -> str:
    """The report's first lines: the run's elapsed time and the jobs' summed wall time, apart."""
    recorded = recorded_run(run_dir)
    elapsed = ("not recorded (no `--run` of this script wrote these records, or jobs ran again since)"
               if recorded is None else
               f"the run took {recorded[0]:.0f} s, from start to end of `{' '.join(recorded[1])}`")
    return (f"- Elapsed (wall-clock): {elapsed}.\n"
            f"- Summed job wall time: {table['wall_s'].sum():.0f} s over {len(table)} jobs, {sampled} of them "
            "sampled; each job counts in full, also while others ran beside it.\n\n"
            f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores.")


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
    if args.run:
        run(run_dir, args.cores)
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
    head = times_head(run_dir, table, int(sampled.sum()))
    write_stamped(
        args.out, f"{args.name}_profile", table.round(4),
        f"# Where the {args.name.replace('_', ' ')}'s time goes\n\n{head}\n\n"
        "Seconds per category: the job's wall time (Snakemake's `benchmark:`) times the category's share "
        "of its sampled time (`benchmarks/stage_profile/sitecustomize.py`).\n\n"
        f"{seconds.to_markdown(index=False)}\n\n## Totals over the sampled jobs (s)\n\n"
        f"{totals.round(0).to_frame('s').to_markdown()}\n\n## Wall time per stage (s)\n\n"
        f"{stage.sort_values('sum', ascending=False).round(0).to_markdown()}\n\n"
        f"## Where the time went\n\n{top.to_markdown(index=False)}\n\n{inner.to_markdown(index=False)}\n")
    print(f"{head}\n\n{seconds.head(25).to_string(index=False)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
