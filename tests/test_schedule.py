"""Critical-path priorities (taskgeom.pipeline.schedule): the job graph is Snakemake's, every job
outranks the jobs that read its outputs, and Snakemake's jobs carry the priorities."""

from __future__ import annotations

from pathlib import Path

from conftest import REPO, snakemake_jobs

from taskgeom.pipeline import config
from taskgeom.pipeline.schedule import bottom_levels, expected_seconds, job_graph, priorities


def test_bottom_level_is_the_longest_path_to_the_end():
    readers = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}
    seconds = {"a": 1.0, "b": 10.0, "c": 2.0, "d": 3.0}
    assert bottom_levels(readers, seconds) == {"a": 14.0, "b": 13.0, "c": 5.0, "d": 3.0}


def test_a_job_without_a_recorded_time_costs_its_stages_mean():
    recorded = {"head~x": 10.0, "head~y": 30.0, "fetch": 5.0}
    assert expected_seconds(["head~x", "head~z", "fetch", "report"], recorded) == {
        "head~x": 10.0, "head~z": 20.0, "fetch": 5.0, "report": 1.0}


def test_the_dense_pruning_chain_outranks_what_runs_beside_it():
    """On the default profile: zoo training, the first pruning head's targets and head, then dense
    pruning, each above the jobs that read it; the recorded default run holds every job."""
    params = config.load(REPO / "params.yaml")
    readers, prio = job_graph(params), priorities(params)
    chain = ["fetch", "sources~world-train", "zoo~tiny-trunk", "targets~dpt-depth-l1", "head~dpt-depth-l1",
             "prune-dense~tiny-trunk"]
    for a, b in zip(chain, chain[1:]):
        assert b in readers[a]
    assert all(prio[job] >= prio[r] for job, rs in readers.items() for r in rs)  # whole seconds
    assert prio["fetch"] == max(prio.values())
    assert prio["head~dpt-depth-l1"] > max(p for j, p in prio.items() if j.startswith("diagnose~"))


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
