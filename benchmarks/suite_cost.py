"""Where the test loop's time goes: ``make test`` (or another command) with a plugin that records
each test's wall time and CPU seconds (``benchmarks/suite_cost/suite_cost_plugin.py``), then the
tests and files ranked by CPU, each worker's busy time, and the run's wall and CPU totals.

On C cores a suite cannot finish in less than its CPU seconds over C, whatever the order of
its tests; the per-test CPU says which tests that floor is made of.

    python benchmarks/suite_cost.py [--command "make test"] [--out results/benchmarks]
    python benchmarks/suite_cost.py --records FILE.jsonl     # summarise a run already recorded

Writes <out>/suite_cost.{csv,md}. CPU is what the worker's process tree used (SLURM jobs, which
the cluster's daemons start, are left out), so the SLURM tests show mostly their waiting.

The same run also records every Python process of the environment with its own CPU
(``suite_cost/suite_cost_processes.py``, through a ``.pth`` file in the environment's
site-packages for the run's length), and the summary adds them up by kind: a tool and its
subcommand (``dvc status``, ``taskgeom targets``), Snakemake's SLURM jobs, pytest's workers.
That says which tool the CPU went to, SLURM jobs and the stage server's forks included.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pandas as pd
from stamp import write_stamped

PLUGIN = Path(__file__).resolve().parent / "suite_cost"
PROCESSES_ENV = "TASKGEOM_SUITE_PROCESSES"  # suite_cost/suite_cost_processes.py: where each process records


def children_cpu() -> float:
    """User + system CPU seconds of this process's children waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hook_path() -> Path:
    """The ``.pth`` file that this process's ``record`` puts in the environment's site-packages
    (named by the process: two runs at once, as the suite's own test inside a measured run, each
    have their own)."""
    return Path(sysconfig.get_paths()["purelib"]) / f"zz-taskgeom-suite-cost-{os.getpid()}.pth"


def record(command: str, records: Path, processes: Path | None = None) -> dict[str, float]:
    """Run ``command`` with the plugin loaded in every pytest process; its wall and CPU seconds
    and its exit status (a run with failures is summarised too). With ``processes`` (a folder),
    every Python process of this environment that the command starts records its own CPU there."""
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    env = {**os.environ, "TASKGEOM_SUITE_COST": str(records),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")])),
           "PYTEST_ADDOPTS": addopts if "suite_cost_plugin" in addopts else f"{addopts} -p suite_cost_plugin".strip()}
    hook = None
    if processes is not None:
        env[PROCESSES_ENV] = str(processes)
        hook = hook_path()
        hook.write_text(f"import os, sys; os.environ.get({PROCESSES_ENV!r}) and "
                        f"(sys.path.append({str(PLUGIN)!r}), __import__('suite_cost_processes'))\n")
    try:
        start, cpu = time.monotonic(), children_cpu()
        returncode = subprocess.run(shlex.split(command), env=env).returncode
        return {"wall_s": time.monotonic() - start, "cpu_s": children_cpu() - cpu, "returncode": returncode}
    finally:
        if hook is not None:
            hook.unlink()


def process_kind(argv: list[str]) -> str:
    """What a recorded process was: its program (a package run with ``-m`` by its name, the dvc
    launcher as ``dvc``) and, for the tools with subcommands, the first argument that is not an
    option; Snakemake inside a SLURM job as ``snakemake (SLURM job)``."""
    program = argv[0] if argv else "?"
    name = os.path.basename(program)
    if name == "__main__.py":
        name = os.path.basename(os.path.dirname(program))
    name = {"dvc_atomic.py": "dvc", "dvc_commit.py": "dvc commit (taskgeom)", "-c": "python -c"}.get(name, name)
    if name == "snakemake" and "--target-jobs" in argv:
        return "snakemake (SLURM job)"
    if name in ("dvc", "taskgeom", "warm_cli.py"):
        sub = next((a for a in argv[1:] if not a.startswith("-")), "")
        return f"{name} {sub}".strip()
    return name


def processes_table(folder: Path) -> pd.DataFrame:
    """The records under ``folder`` added up by ``process_kind``, most CPU first."""
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    frame = pd.DataFrame({"kind": [process_kind(r["argv"]) for r in rows], "cpu_s": [r["cpu_s"] for r in rows]})
    return (frame.groupby("kind").agg(processes=("cpu_s", "size"), cpu_s=("cpu_s", "sum"))
            .sort_values("cpu_s", ascending=False))


def summarise(records: Path, totals: dict[str, float] | None, out: Path, label: str,
              processes: pd.DataFrame | None = None) -> pd.DataFrame:
    """The per-test table (CPU first) and a Markdown summary of it (with ``processes``, the
    processes by kind), written under ``out``."""
    tests = pd.DataFrame([json.loads(line) for line in records.read_text().splitlines() if line.strip()])
    tests["cpu_s"] = tests["cpu_own_s"] + tests["cpu_children_s"]
    tests["file"] = tests["test"].str.split("::").str[0]
    tests["start_s"] = tests["start"] - tests["start"].min()
    tests = tests.sort_values("cpu_s", ascending=False).drop(columns="start")
    files = tests.groupby("file")[["wall_s", "cpu_s"]].sum().sort_values("cpu_s", ascending=False)
    workers = tests.groupby("worker").agg(tests=("test", "size"), busy_s=("wall_s", "sum"), cpu_s=("cpu_s", "sum"))
    cpu, cores = tests["cpu_s"].sum(), os.cpu_count() or 1
    lines = [f"# The test loop's cost\n\n`{label}`, {time.strftime('%Y-%m-%d')}; {len(tests)} tests. "
             f"Their CPU adds to {cpu:.0f} s: on this machine's {cores} cores no order of the tests "
             f"finishes in under {cpu / cores:.0f} s."]
    if totals:
        lines.append(f"The command took {totals['wall_s']:.0f} s wall and {totals['cpu_s']:.0f} CPU-s "
                     f"(collection, lint and what no test recorded included); exit status "
                     f"{totals['returncode']}.")
    lines += ["\n## Tests over 10 CPU-s\n", tests[tests.cpu_s > 10][["test", "worker", "start_s", "wall_s", "cpu_s"]]
              .round(1).to_markdown(index=False), "\n## Files\n", files.round(1).to_markdown(),
              "\n## Workers\n", workers.round(1).to_markdown()]
    if processes is not None:
        lines += [f"\n## Processes\n\nThe Python processes of the run, each with its own CPU, by kind: "
                  f"{processes['processes'].sum()} processes, {processes['cpu_s'].sum():.0f} CPU-s in all "
                  "(what no Python process used, and processes that ended by a signal, left out); "
                  "kinds over 1 CPU-s.\n", processes[processes.cpu_s > 1].round(1).to_markdown()]
    write_stamped(out, "suite_cost", tests.round(1), "\n".join(lines))
    return tests


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--command", default="make test")
    ap.add_argument("--records", type=Path, help="summarise this file of records instead of running")
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = ap.parse_args(argv)
    if args.records:
        tests = summarise(args.records, None, args.out, args.command)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            records, processes = Path(tmp) / "tests.jsonl", Path(tmp) / "processes"
            processes.mkdir()
            totals = record(args.command, records, processes)
            tests = summarise(records, totals, args.out, args.command, processes_table(processes))
        print(f"{args.command}: {totals['wall_s']:.0f} s wall, {totals['cpu_s']:.0f} CPU-s, "
              f"exit status {totals['returncode']}")
    print(tests.head(15)[["test", "wall_s", "cpu_s"]].round(1).to_string(index=False))
    return 0 if args.records else int(totals["returncode"] != 0)


if __name__ == "__main__":
    sys.exit(main())
