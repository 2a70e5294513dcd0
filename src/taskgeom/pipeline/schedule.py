"""Which ready job Snakemake starts first: critical-path priorities.

Snakemake starts, among the jobs whose inputs exist, those of highest ``priority``, and breaks ties
by the size of their inputs. With every priority equal the order follows file sizes, and a long
chain (zoo training, the targets of the first pruning head, that head, dense pruning) can start
late and run alone at the end while the other core idles. Each job's priority here is its
*bottom level*: the expected seconds of the longest path from the job's start to the end of the
DAG, itself included (highest-level-first list scheduling; Adam, Chandy & Dickson 1974). The order
of jobs never changes what they write.

Expected seconds are declared per stage in the registry (``Stage.seconds``, with where they
were measured): every job of a stage costs its stage's seconds. The costs set only the order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from taskgeom.pipeline.registry import instances
from taskgeom.pipeline.stage import resolve


def job_name(stage: str, value: str | None) -> str:
    """A job by name: ``zoo~tiny-trunk``, or ``fetch``."""
    return f"{stage}~{value}" if value else stage


def expected_seconds(params: dict) -> dict[str, float]:
    """job name -> the seconds its stage declares (``Stage.seconds``)."""
    return {job_name(s.name, v): s.seconds for s, v in instances(params)}


def job_graph(params: dict) -> dict[str, set[str]]:
    """job -> the jobs that read one of its outputs: the path itself, a file under an output
    directory, or an output under an input directory."""
    ios = {job_name(s.name, v): resolve(s, params, v) for s, v in instances(params)}
    makers: dict[Path, set[str]] = {}   # an output, and every directory above it -> the jobs writing there
    exact: dict[Path, set[str]] = {}
    for job, (_, outs) in ios.items():
        for out in map(Path, outs.values()):
            exact.setdefault(out, set()).add(job)
            for d in (out, *out.parents):
                makers.setdefault(d, set()).add(job)
    readers: dict[str, set[str]] = {job: set() for job in ios}
    for job, (ins, _) in ios.items():
        for entry in ins.values():
            for path in map(Path, entry if isinstance(entry, list) else [entry]):
                found = makers.get(path, set()).union(*(exact.get(d, set()) for d in path.parents))
                for maker in found - {job}:
                    readers[maker].add(job)
    return readers


def bottom_levels(readers: Mapping[str, set[str]], seconds: Mapping[str, float]) -> dict[str, float]:
    """Seconds of the longest path from each job's start to the end of the DAG, the job included.

    Args:
        readers: job -> the jobs that depend on it directly (acyclic).
        seconds: job -> its expected seconds.
    """
    levels: dict[str, float] = {}

    def level(job: str) -> float:
        if job not in levels:
            levels[job] = seconds[job] + max((level(r) for r in readers[job]), default=0.0)
        return levels[job]

    for job in readers:
        level(job)
    return levels


def priorities(params: dict) -> dict[str, int]:
    """job name -> its Snakemake priority, the bottom level in whole seconds."""
    levels = bottom_levels(job_graph(params), expected_seconds(params))
    return {job: round(s) for job, s in levels.items()}
