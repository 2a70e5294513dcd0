"""What the front ends' questions cost on repositories where the smoke DAG has run (each with the
`taskgeom`, `dvc` and `snakemake` of its own environment): `dvc status`, and `snakemake -n` when
the workspace changed since it last took DVC's state (pipeline/sync.py follows: one `dvc status`
inside) and when it did not. The repositories' commands alternate, round after round, so a
machine that slows down slows each alike; each cell is the median of the rounds with min and max.

    python benchmarks/front_end_cost.py REPO:VENV_BIN [REPO:VENV_BIN ...] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

FOLLOWED = Path(".snakemake/taskgeom-dvc-lock.sha256")  # pipeline/sync.py's record of the state followed
QUESTIONS = {
    "dvc status": ["dvc", "status", "--json"],
    "snakemake -n, after a change": ["snakemake", "-n"],
    "snakemake -n, nothing changed": ["snakemake", "-n"],
}


def timed(cmd: list[str], repo: Path, bin_: str) -> float:
    env = dict(os.environ, PATH=f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}")
    start = time.perf_counter()
    subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repos", nargs="+", help="REPO:VENV_BIN")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    repos = [(Path(r.split(":")[0]), r.split(":")[1]) for r in args.repos]
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, cmd in QUESTIONS.items():
            for repo, bin_ in repos:
                if name.endswith("after a change"):
                    (repo / FOLLOWED).unlink(missing_ok=True)
                seconds.setdefault((str(repo), name), []).append(timed(cmd, repo, bin_))
    for (repo, name), values in seconds.items():
        print(f"{repo}\t{name}\tmedian {statistics.median(values):.2f} s\t"
              f"[{min(values):.2f}, {max(values):.2f}]\tn={len(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
