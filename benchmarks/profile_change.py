"""How a run's time changed between two profiles of ``benchmarks/stage_profile.py``: per stage and
per job, the wall seconds of Snakemake's ``benchmark:`` records before and after, and their ratio;
and the run's own wall time where both profiles record it.

    python benchmarks/profile_change.py BEFORE AFTER [--out results/benchmarks] [--name default_run_change]

BEFORE and AFTER are a profile's name without extension (``<dir>/<name>``: its ``.csv`` and
``.md``), each either a path or ``REV:PATH`` read from git (e.g.
``a11fabc:results/benchmarks/default_run_profile``). Two runs on the same kind of machine at
different times: a ratio inside the spread of the jobs that did not change is no change.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stamp import REPO, write_stamped  # noqa: E402


def read(spec: str, ext: str) -> str:
    """The text of profile ``spec``'s ``.ext`` file, from the tree or from git (``REV:PATH``)."""
    if ":" in spec and not Path(f"{spec}.{ext}").exists():
        rev, path = spec.split(":", 1)
        return subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}.{ext}"], capture_output=True,
                              text=True, check=True).stdout
    return Path(f"{spec}.{ext}").read_text()


def run_seconds(markdown: str) -> float | None:
    """The run's wall time that stage_profile records ("the run took N s"), if any."""
    found = re.search(r"the run took (\d+) s", markdown)
    return float(found.group(1)) if found else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    ap.add_argument("--name", default="default_run_change")
    args = ap.parse_args(argv)
    jobs = {k: pd.read_csv(io.StringIO(read(spec, "csv")))[["job", "wall_s"]]
            for k, spec in (("before", args.before), ("after", args.after))}
    table = jobs["before"].merge(jobs["after"], on="job", how="outer", suffixes=("_before", "_after"))
    table["stage"] = table["job"].str.split("~").str[0]
    stages = table.groupby("stage")[["wall_s_before", "wall_s_after"]].sum(min_count=1)
    for t in (table, stages):
        t["ratio"] = t["wall_s_after"] / t["wall_s_before"]
    stages = stages.sort_values("wall_s_before", ascending=False)
    total = table[["wall_s_before", "wall_s_after"]].sum()
    runs = [run_seconds(read(spec, "md")) for spec in (args.before, args.after)]
    head = (f"Jobs' wall time: {total['wall_s_before']:.0f} s before, {total['wall_s_after']:.0f} s after "
            f"(ratio {total['wall_s_after'] / total['wall_s_before']:.3f})")
    if all(runs):
        head += f"; the run: {runs[0]:.0f} s before, {runs[1]:.0f} s after (ratio {runs[1] / runs[0]:.3f})"
    spread = table["ratio"].describe(percentiles=[0.1, 0.5, 0.9])[["10%", "50%", "90%"]]
    head += (f". Per job, the ratio's 10th, 50th and 90th percentiles: {spread['10%']:.3f}, {spread['50%']:.3f}, "
             f"{spread['90%']:.3f}.")
    write_stamped(args.out, args.name, table.round(3),
                  f"# The default run's time, before and after\n\nBefore: `{args.before}`; after: `{args.after}`.\n\n"
                  f"{head}\n\n## Per stage (s)\n\n{stages.round(3).to_markdown()}\n\n## Per job (s)\n\n"
                  f"{table.sort_values('wall_s_before', ascending=False).round(3).to_markdown(index=False)}\n")
    print(head)
    print(stages.round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
