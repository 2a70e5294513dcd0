"""Regenerate every file under results/benchmarks/ (``make benchmarks``, ``make benchmarks-long``).

The stamp (``stamp.py``: the commit and whether the tree is clean) is read once, before anything
runs, and every benchmark writes it; run from a clean checkout of a commit, so that the files
say which code they measured. Two sets:

- ``QUICK`` (``make benchmarks``): benchmarks that need the checkout alone; any model they would
  take from a finished run (data/zoo) is replaced by seeded random weights of its architecture
  when the run has not happened. About half an hour on 2 cores.
- ``--long`` (``make benchmarks-long``): first the default profile's whole DAG in this checkout,
  sampled (``stage_profile.py . --run``: the default run profile, about an hour on 2 cores),
  then ``QUICK`` and ``AFTER_RUN`` on its outputs, then the crash, fault and commit benchmarks
  on a smoke-profile run in a clone of the same commit (``ON_SMOKE_RUN``), then the test loop's
  cost (``make test``). Several hours.

Each benchmark runs as its own process, in order; the seconds each took are printed, and the
first that fails stops the rest.
    python benchmarks/run_all.py [--long] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stamp import ENV, REPO, code_stamp

HERE = "benchmarks"
QUICK = [
    ["stage_imports.py"],
    ["fetch_processes.py"],
    ["resize_layout.py"],
    ["paper_estimate.py"],
    ["prune_speed.py"],
    ["patch_speed.py"],
    ["patch_overhead.py"],
    ["patch_fidelity.py"],
    ["fit_cost.py", "--reference"],
    ["user_path.py"],
    ["diagnose_cost.py", "--no-probes", "--paper-scale", "--plain-vit"],
    ["diagnose_cost.py", "--inspect", "--repeats", "8"],
]
PROFILE = ["stage_profile.py", ".", "--run", "--cores", "2"]
AFTER_RUN = [  # read the default run's outputs (data/zoo, data/targets, data/retrieval, the world)
    ["diagnose_cost.py"],
    ["dense_spectrum.py"],
    ["targets_io.py"],
    ["retrieval_speed.py"],
    ["mv_pose_difficulty.py"],
]
ON_SMOKE_RUN = [  # REPO argument: a repository where the smoke profile's DAG has run
    ["crash_test.py"],
    ["fault_injection.py"],
    ["dvc_commit_cost.py"],
]
SUITE = ["suite_cost.py", "--command", "make test"]


def run(argv: list[str], env: dict[str, str], dry_run: bool, cwd: Path = REPO) -> None:
    command = [sys.executable, str(REPO / HERE / argv[0]), *argv[1:]]
    print(f"$ {' '.join([f'python {HERE}/{argv[0]}', *argv[1:]])}", flush=True)
    if dry_run:
        return
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env)
    print(f"{argv[0]}: {time.monotonic() - start:.0f} s, exit status {done.returncode}", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed (exit status {done.returncode}); the benchmarks after it were not run")


def smoke_run(commit: str, env: dict[str, str], dry_run: bool) -> tempfile.TemporaryDirectory:
    """A clone of ``commit`` with its own environment and the smoke profile's DAG run in it; ``env``
    gets that environment's tools first on its PATH."""
    tmp = tempfile.TemporaryDirectory(prefix="taskgeom-smoke-")
    clone = Path(tmp.name) / "repo"
    env["PATH"] = f"{clone / '.venv/bin'}{os.pathsep}{env.get('PATH', '')}"
    steps = [["git", "clone", "--quiet", "--no-checkout", str(REPO), str(clone)],
             ["git", "-C", str(clone), "checkout", "--quiet", commit], ["bash", "envs/setup-venv.sh"],
             ["taskgeom", "params", "use", "smoke"], ["snakemake", "--cores", "2"]]
    for step in steps:
        print(f"$ {' '.join(step)}", flush=True)
        if not dry_run:
            subprocess.run(step, cwd=clone if step[0] != "git" else REPO, env=env, check=True)
    return tmp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--long", action="store_true", help="the default run and everything that needs a run, too")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = ap.parse_args(argv)
    commit, tree = code_stamp()
    print(f"benchmarks of commit {commit} ({tree} tree)", flush=True)
    if tree != "clean":
        print("the tree has changes: every file will be stamped dirty", file=sys.stderr, flush=True)
    env = {**os.environ, ENV: f"{commit} {tree}"}
    if args.long:
        run(PROFILE, env, args.dry_run)
    for argv_ in QUICK + (AFTER_RUN if args.long else []):
        run(argv_, env, args.dry_run)
    if args.long:
        smoke_env = dict(env)
        with smoke_run(commit, smoke_env, args.dry_run) as tmp:
            for argv_ in ON_SMOKE_RUN:
                run([argv_[0], str(Path(tmp) / "repo"), *argv_[1:]], smoke_env, args.dry_run)
        run(SUITE, env, args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
