"""What the stages' code dependencies cost a DVC question. Every stage lists each module file its
runner imports as a dependency (``Stage.code``), so each ``dvc`` command collects and checks those
files for every stage instance. This times ``dvc status --json`` on a repository where the smoke
DAG has run and on a copy of it whose dvc.yaml and dvc.lock list no code file (every ``src/``
dependency dropped from both, so the copy is up to date as well). The two alternate, round
after round, so a machine that slows down slows each alike; each cell is the median of the
rounds with min and max, CPU seconds of the command's process tree and wall seconds.

    python benchmarks/code_deps_cost.py REPO [--rounds 9] [--out results/benchmarks]

Writes <out>/code_deps_cost.{csv,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml
from stamp import write_stamped

CODE = "src/"  # where the stages' code dependencies lie, relative to the repository
QUESTION = ["dvc", "status", "--json"]


def without_code(deps: list) -> list:
    """``deps`` (dvc.yaml strings or dvc.lock records) without the files under ``CODE``."""
    return [d for d in deps if not str(d if isinstance(d, str) else d.get("path", "")).startswith(CODE)]


def strip_code(repo: Path) -> int:
    """Drop every code dependency from ``repo``'s dvc.yaml and dvc.lock; how many dvc.yaml lines went."""
    spec = yaml.safe_load((repo / "dvc.yaml").read_text())
    dropped = 0
    for stage in spec["stages"].values():
        body = stage.get("do", stage)
        kept = without_code(body.get("deps", []))
        dropped += len(body.get("deps", [])) - len(kept)
        body["deps"] = kept
    (repo / "dvc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, width=120))
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    for entry in lock["stages"].values():
        entry["deps"] = without_code(entry.get("deps", []))
    (repo / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False, width=120))
    return dropped


def ask(repo: Path) -> tuple[float, float, dict]:
    """(CPU seconds, wall seconds, answer) of ``dvc status --json`` in ``repo``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(QUESTION, cwd=repo, capture_output=True, text=True, check=True,
                          env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, json.loads(done.stdout or "{}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="a repository where the smoke DAG has run")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="taskgeom-code-deps-") as tmp:
        copy = shutil.copytree(args.repo, Path(tmp) / "repo", symlinks=True)
        dropped = strip_code(copy)
        repos = {"as built": args.repo, "no code dependencies": copy}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in repos}
        for repo in repos.values():  # one untimed question each: DVC's state database warms up
            if ask(repo)[2]:
                raise SystemExit(f"{repo}: dvc status is not clean; run the smoke DAG there first")
        for _ in range(args.rounds):
            for name, repo in repos.items():
                samples[name].append(ask(repo)[:2])
    rows = []
    for name, values in samples.items():
        cpu, wall = [v[0] for v in values], [v[1] for v in values]
        rows.append({"repository": name, "cpu_s": statistics.median(cpu), "cpu_min": min(cpu), "cpu_max": max(cpu),
                     "wall_s": statistics.median(wall), "wall_min": min(wall), "wall_max": max(wall),
                     "rounds": len(values)})
    table = pd.DataFrame(rows)
    base = table.set_index("repository")
    ratio = base.loc["no code dependencies", "cpu_s"] / base.loc["as built", "cpu_s"]
    show = table.assign(cpu=[f"{r.cpu_s:.2f} [{r.cpu_min:.2f}, {r.cpu_max:.2f}]" for r in table.itertuples()],
                        wall=[f"{r.wall_s:.2f} [{r.wall_min:.2f}, {r.wall_max:.2f}]" for r in table.itertuples()])
    markdown = (f"# What the code dependencies cost `dvc status`\n\n"
                f"`dvc status --json` on a repository where the smoke DAG has run, and on a copy whose dvc.yaml "
                f"and dvc.lock list no code file ({dropped} code dependencies dropped from dvc.yaml), "
                f"alternating, {args.rounds} rounds; median [min, max] seconds.\n\n"
                + show[["repository", "cpu", "wall"]].rename(columns={"cpu": "CPU s", "wall": "wall s"})
                .to_markdown(index=False)
                + f"\n\nWithout its code dependencies the question takes {ratio:.2f}× the CPU (medians).\n")
    write_stamped(args.out, "code_deps_cost", table, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
