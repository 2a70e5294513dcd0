"""What a stage command costs before it computes anything: the imports of each stage's runner.

Every stage runs as its own process (``taskgeom <stage>``, under Snakemake, DVC or SLURM), so a
DAG of J jobs pays J interpreter starts and import sets. For each runner module
``taskgeom.stages.<name>`` and for the libraries that dominate them (torch; timm, which imports
torchvision, whose ops import ``torch._dynamo``; scipy.stats), this times ``python -c "import M"``
in a fresh interpreter, the candidates interleaved, --repeats times each, and reports the
median and the range. The interpreters run on one thread (OMP_NUM_THREADS=1), as stages do by default.

    python benchmarks/stage_imports.py [--repeats 3] [--out results/benchmarks]

Writes <out>/stage_imports.{csv,md}.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from stamp import write_stamped

from taskgeom.pipeline.registry import STAGES

LIBRARIES = {"python": "pass", "torch": "import torch", "torch, timm": "import torch, timm",
             "torch, timm, scipy.stats": "import torch, timm, scipy.stats"}


def seconds(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = ap.parse_args(argv)
    cases = {**LIBRARIES, **{s.name: f"import {s.runner}" for s in STAGES}}
    rows = [{"imports": name, "repeat": r, "seconds": seconds(code)}
            for r in range(args.repeats) for name, code in cases.items()]
    table = pd.DataFrame(rows)
    stats = table.groupby("imports", sort=False)["seconds"].agg(["median", "min", "max"]).round(2).reset_index()
    summary = (f"A fresh interpreter importing each module, {args.repeats} interleaved runs each. "
               f"Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}.")
    write_stamped(args.out, "stage_imports", table.round(3),
                  f"# Imports per stage command\n\n{summary}\n\n{stats.to_markdown(index=False)}\n")
    print(stats.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
