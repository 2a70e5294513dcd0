"""What the front ends' questions cost on repositories where the smoke DAG has run (each with the
`taskgeom`, `dvc` and `snakemake` of its own environment): `dvc status`, and `snakemake -n` when
the workspace changed since it last took DVC's state (pipeline/sync.py follows: one `dvc status`
inside) and when it did not. The repositories' commands alternate, round after round, so a
machine that slows down slows each alike; each cell is the median of the rounds with min and max,
CPU seconds of the command's process tree and wall seconds. Each repository is named by its
commit, with the size of its dvc.lock.

    python benchmarks/front_end_cost.py REPO:VENV_BIN [REPO:VENV_BIN ...] [--rounds 7] [--out results/benchmarks]

Writes <out>/front_end_cost.{csv,md}.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from stamp import write_stamped

FOLLOWED = Path(".snakemake/taskgeom-dvc-lock.sha256")  # pipeline/sync.py's record of the state followed
QUESTIONS = {
    "dvc status": ["dvc", "status", "--json"],
    "snakemake -n, after a change": ["snakemake", "-n"],
    "snakemake -n, nothing changed": ["snakemake", "-n"],
}


def timed(cmd: list[str], repo: Path, bin_: str) -> tuple[float, float]:
    """(CPU seconds of its process tree, wall seconds) of ``cmd`` in ``repo`` with ``bin_`` first on PATH."""
    env = dict(os.environ, PATH=f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}", DVC_NO_ANALYTICS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def label(repo: Path) -> str:
    """The repository's commit, and the size of its dvc.lock."""
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    lock = (repo / "dvc.lock").read_text()
    return f"{commit} (dvc.lock: {len(lock.splitlines())} lines, {len(lock.encode()) // 1024} KiB)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repos", nargs="+", help="REPO:VENV_BIN")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = ap.parse_args(argv)
    repos = [(Path(r.split(":")[0]), r.split(":")[1]) for r in args.repos]
    for repo, bin_ in repos:  # one untimed round: each tool's caches and DVC's state database warm up
        for cmd in QUESTIONS.values():
            timed(cmd, repo, bin_)
    samples: dict[tuple[Path, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for name, cmd in QUESTIONS.items():
            for repo, bin_ in repos:
                if name.endswith("after a change"):
                    (repo / FOLLOWED).unlink(missing_ok=True)
                samples.setdefault((repo, name), []).append(timed(cmd, repo, bin_))
    rows = []
    for (repo, name), values in samples.items():
        cpu, wall = [v[0] for v in values], [v[1] for v in values]
        rows.append({"repository": label(repo), "question": name, "cpu_s": statistics.median(cpu),
                     "cpu_min": min(cpu), "cpu_max": max(cpu), "wall_s": statistics.median(wall),
                     "wall_min": min(wall), "wall_max": max(wall), "rounds": len(values)})
    table = pd.DataFrame(rows)
    cells = lambda v, lo, hi: [f"{a:.2f} [{b:.2f}, {c:.2f}]" for a, b, c in zip(table[v], table[lo], table[hi])]
    show = table.assign(cpu=cells("cpu_s", "cpu_min", "cpu_max"), wall=cells("wall_s", "wall_min", "wall_max"))
    markdown = (f"# What the front ends' questions cost\n\n"
                f"On repositories where the smoke DAG has run, alternating, {args.rounds} rounds; median "
                f"[min, max] seconds of each command's process tree.\n\n"
                + show[["question", "repository", "cpu", "wall"]].sort_values(["question", "repository"], kind="stable")
                .rename(columns={"cpu": "CPU s", "wall": "wall s"}).to_markdown(index=False) + "\n")
    write_stamped(args.out, "front_end_cost", table, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
