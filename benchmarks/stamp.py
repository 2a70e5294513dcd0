"""The code a benchmark measured, stamped on everything it writes: the commit, and whether the
working tree held changes that commit lacks ("dirty") or none ("clean").

Every benchmark writes its results through ``write_stamped``: the CSV gains ``commit`` and
``tree`` columns and the Markdown ends with a line ``Code: commit <12 hex>, <clean|dirty> tree.``
(``STAMP``; tests/test_benchmark_stamps.py refuses a committed file without a clean one). The
tree is read with ``git status``: a modified or staged tracked file, or an untracked file git
does not ignore, makes it dirty; what benchmarks write (``results/benchmarks/``) does not.
``benchmarks/run_all.py`` reads the stamp once before the first benchmark and hands it to each
(``ENV``), so the stamp is the tree the whole set started from.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OUTPUTS = "results/benchmarks"
ENV = "TASKGEOM_BENCHMARK_STAMP"  # "<commit> <clean|dirty>", set by run_all.py for every benchmark
STAMP = re.compile(r"^Code: commit (?P<commit>[0-9a-f]{12}), (?P<tree>clean|dirty) tree\.$", re.MULTILINE)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def code_stamp() -> tuple[str, str]:
    """(commit, "clean" or "dirty") of the checkout the benchmarks run from."""
    if stamp := os.environ.get(ENV):
        commit, tree = stamp.split()
        return commit, tree
    commit = git("rev-parse", "--short=12", "HEAD").strip()
    # dvc.lock is a run's record of its outputs, written by the run a benchmark measures
    changes = git("status", "--porcelain", "--", ".", f":(exclude){OUTPUTS}", ":(exclude)dvc.lock").strip()
    return commit, "dirty" if changes else "clean"


def stamp_line() -> str:
    commit, tree = code_stamp()
    return f"Code: commit {commit}, {tree} tree."


def write_stamped(out: Path, name: str, table: pd.DataFrame, markdown: str, **to_csv: object) -> None:
    """``<out>/<name>.csv`` (``table`` with the stamp's columns; ``to_csv``: pandas' options) and
    ``<out>/<name>.md`` (``markdown`` and the stamp's line), each replaced whole."""
    from taskgeom.artifacts.atomic import write_text

    commit, tree = code_stamp()
    out.mkdir(parents=True, exist_ok=True)
    csv = table.assign(commit=commit, tree=tree).to_csv(index=False, lineterminator="\n", **to_csv)
    write_text(out / f"{name}.csv", csv)
    write_text(out / f"{name}.md", markdown.rstrip("\n") + f"\n\n{stamp_line()}\n")
