"""The Snakemake-to-DVC sync's commit (``pipeline/dvc_commit.py``) against ``dvc commit --force``.

REPO is a repository where the whole DAG has run (e.g. the smoke profile under `snakemake -c2`).
For each count N in --counts, the first N stage instances of the registry (check-params aside) are
committed, with check-params, the targets formed as the sync forms them (``sync.commit_targets``),
in two copies of REPO: by DVC's CLI through ``dvc_atomic`` (what the sync ran before) and by
``dvc_commit``. Before each commit the instances' outputs are touched, as a run leaves them.
The two alternate, --repeats times each, and must leave the same dvc.lock bytes.

    python benchmarks/dvc_commit_cost.py REPO [--counts 1,4,20] [--repeats 3] [--out results/benchmarks]

Writes <out>/dvc_commit.{csv,md}: the seconds of each commit, and per N the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from stamp import write_stamped

from taskgeom.pipeline import config
from taskgeom.pipeline.stage import resolve
from taskgeom.pipeline.sync import CHECK_PARAMS, commit_targets, files_under, instances

COMMANDS = {
    "dvc commit": [sys.executable, "-m", "taskgeom.pipeline.dvc_atomic", "--wait-for-lock", "commit", "--force",
                   "--quiet"],
    "dvc_commit": [sys.executable, "-m", "taskgeom.pipeline.dvc_commit"],
}


def commit_seconds(repo: Path, command: list[str], targets: list[str], outputs: list[Path]) -> float:
    """Touch ``outputs`` (relative to ``repo``), then time ``command`` on ``targets`` there."""
    for f in files_under(repo / o for o in outputs):
        os.utime(f)
    start = time.perf_counter()
    subprocess.run([*command, *targets], cwd=repo, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--counts", default="1,4,20")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = ap.parse_args(argv)
    params = config.load(args.repo / "params.yaml")
    chosen = [(s, v) for s, v in instances(params) if s.name != CHECK_PARAMS]
    everything = {s.address(v) for s, v in chosen}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        copies = {name: shutil.copytree(args.repo, Path(tmp) / name.replace(" ", "-"), symlinks=True)
                  for name in COMMANDS}
        for n in (int(c) for c in args.counts.split(",")):
            first = chosen[:n]
            targets = commit_targets([s.address(v) for s, v in first], everything)
            targets = [CHECK_PARAMS, *targets] if targets else []  # none: every stage, as the sync does
            outputs = [Path(p) for s, v in first for p in resolve(s, params, v)[1].values()]
            for repeat in range(args.repeats):
                for name, command in COMMANDS.items():
                    seconds = commit_seconds(copies[name], command, targets, outputs)
                    rows.append({"instances": n, "targets": len(targets), "command": name, "repeat": repeat,
                                 "seconds": round(seconds, 2)})
                    print(f"{n} instances, {name}: {seconds:.2f} s", flush=True)
            locks = {name: (copies[name] / "dvc.lock").read_bytes() for name in COMMANDS}
            if locks["dvc commit"] != locks["dvc_commit"]:
                print(f"{n} instances: the two commits wrote different dvc.lock files", file=sys.stderr)
                return 1
    table = pd.DataFrame(rows)
    medians = table.groupby(["instances", "targets", "command"])["seconds"].median().unstack("command")
    medians["ratio"] = (medians["dvc commit"] / medians["dvc_commit"]).round(2)
    medians = medians.reset_index()
    summary = (f"{args.repeats} commits of each kind per count, alternating, on copies of a finished run "
               f"of the {params['profile']} profile; both wrote the same dvc.lock. "
               f"Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}.")
    write_stamped(
        args.out, "dvc_commit", table,
        f"# The sync's commit against dvc commit\n\n{summary}\n\n"
        f"Median seconds:\n\n{medians.to_markdown(index=False)}\n\n"
        f"Every commit:\n\n{table.to_markdown(index=False)}\n")
    print(medians.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
