"""Critical-path priorities (taskgeom.pipeline.schedule): a job's priority is the longest path from
it to the end of the DAG, in the seconds its stage declares; the job graph is Snakemake's, and
Snakemake's jobs carry the priorities."""

from __future__ import annotations

from pathlib import Path

from conftest import REPO, snakemake_jobs

from taskgeom.pipeline import config
from taskgeom.pipeline.registry import stage
from taskgeom.pipeline.schedule import bottom_levels, expected_seconds, job_graph, priorities


def test_bottom_level_is_the_longest_path_to_the_end():
    readers = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}
    seconds = {"a": 1.0, "b": 10.0, "c": 2.0, "d": 3.0}
    assert bottom_levels(readers, seconds) == {"a": 14.0, "b": 13.0, "c": 5.0, "d": 3.0}


def test_a_chain_of_long_jobs_outranks_many_short_ones_beside_it():
    """A made-up DAG: a source feeding a chain of long jobs (a1 -> a2 -> a3) and a fan of short
    ones (b1..b4) that all meet at a sink. Each level is the job's seconds plus its readers'
    highest level, every job outranks the jobs that read it, and the long chain's first job
    outranks every short one however many there are."""
    readers = {"src": {"a1", "b1", "b2", "b3", "b4"}, "a1": {"a2"}, "a2": {"a3"}, "a3": {"sink"},
               "b1": {"sink"}, "b2": {"sink"}, "b3": {"sink"}, "b4": {"sink"}, "sink": set()}
    seconds = {"src": 1.0, "a1": 10.0, "a2": 10.0, "a3": 10.0, "b1": 12.0, "b2": 12.0, "b3": 12.0, "b4": 12.0,
               "sink": 2.0}
    levels = bottom_levels(readers, seconds)
    for job, rs in readers.items():
        assert levels[job] == seconds[job] + max((levels[r] for r in rs), default=0.0)
        assert all(levels[job] > levels[r] for r in rs)
    assert levels["src"] == 33.0 and levels["a1"] == 32.0
    assert levels["a1"] > max(levels[b] for b in ("b1", "b2", "b3", "b4"))


def test_every_job_costs_its_stages_declared_seconds():
    params = config.load(REPO / "params.yaml")
    seconds = expected_seconds(params)
    assert set(seconds) == set(job_graph(params))
    assert all(seconds[job] == stage(job.split("~")[0]).seconds > 0 for job in seconds)
    assert all(p >= 0 for p in priorities(params).values())


def test_snakemake_runs_the_registry_graph_with_its_priorities(repo_copy: Path):
    """``snakemake -n`` on the smoke profile: each job's priority is ours, and a job reads another's
    outputs exactly where job_graph says so."""
    params = config.load(repo_copy / "params.yaml")
    prio, readers = priorities(params), job_graph(params)
    jobs = snakemake_jobs(repo_copy).values()

    def name(job: dict) -> str:
        stage = job["rule"]
        return f"{stage}~{job['wildcards'].split('=', 1)[1]}" if "wildcards" in job else stage

    by_name = {name(j): j for j in jobs}
    assert set(by_name) == set(prio)
    assert {n: j["priority"] for n, j in by_name.items()} == prio
    edges = {(a, b) for a, ja in by_name.items() for b, jb in by_name.items()
             if a != b and ja["outputs"] & jb["inputs"]}
    assert edges == {(a, b) for a, rs in readers.items() for b in rs}
