"""The fetch stage on one rendering process against several (``pipeline/pool.py``).

Renders the default profile's world with its splits scaled by --scale (every split at least one
chunk), alternating the process counts, --repeats times each, and checks that every count wrote
the same split files.

    python benchmarks/fetch_processes.py [--params params/default.yaml] [--scale 0.2] [--processes 1,2]
                                         [--repeats 3] [--out results/benchmarks]

Writes <out>/fetch_processes.{csv,md}: the seconds of each run, and per count the median and the
ratio of the one-process median to it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from stamp import write_stamped

from taskgeom.pipeline import config
from taskgeom.pipeline.registry import WORLD_FILES
from taskgeom.pipeline.runtime import StageContext
from taskgeom.stages import fetch


def scaled(world: dict, scale: float) -> dict:
    size = lambda n: max(world["chunk"], round(n * scale))
    return {**world, "splits": {k: size(v) for k, v in world["splits"].items()},
            "multiview": {**world["multiview"], "train": size(world["multiview"]["train"]),
                          "test": size(world["multiview"]["test"])}}


def fetch_seconds(world: dict, root: Path, processes: int) -> tuple[float, dict[str, bytes]]:
    root.mkdir(parents=True)
    outputs = {k: root / Path(v).name for k, v in WORLD_FILES.items()}
    outputs |= {"summary_csv": root / "summary.csv", "summary_md": root / "summary.md",
                "figure_png": root / "samples.png", "figure_pdf": root / "samples.pdf"}
    start = time.perf_counter()
    fetch.run(StageContext("fetch", {}, outputs, {"world": world}, threads=processes))
    return time.perf_counter() - start, {k: outputs[k].read_bytes() for k in WORLD_FILES}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=Path("params/default.yaml"))
    ap.add_argument("--scale", type=float, default=0.2)
    ap.add_argument("--processes", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = ap.parse_args(argv)
    world = scaled(config.load(args.params)["world"], args.scale)
    counts = [int(c) for c in args.processes.split(",")]
    rows, written = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for n in counts:
                seconds, files = fetch_seconds(world, Path(tmp) / f"{repeat}-{n}", n)
                if files != written.setdefault("files", files):
                    raise SystemExit(f"fetch on {n} processes wrote other bytes than on {counts[0]}")
                rows.append({"processes": n, "repeat": repeat, "seconds": round(seconds, 2)})
                print(rows[-1], flush=True)
    runs = pd.DataFrame(rows)
    summary = runs.groupby("processes")["seconds"].agg(["median", "min", "max"]).reset_index()
    summary["speedup"] = (summary["median"].iloc[0] / summary["median"]).round(2)
    scenes = sum(world["splits"].values()) + world["multiview"]["train"] + world["multiview"]["test"]
    write_stamped(
        args.out, "fetch_processes", runs,
        f"# fetch on one rendering process and on several\n\n"
        f"The world of {args.params} scaled by {args.scale} ({scenes} scenes); {args.repeats} alternating runs per "
        f"process count, every count writing the same split files. {os.cpu_count()} cores, "
        f"Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}.\n\n"
        f"Seconds:\n\n{summary.to_markdown(index=False)}\n\nEvery run:\n\n{runs.to_markdown(index=False)}\n")
    print(summary.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
