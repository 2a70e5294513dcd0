"""Every rule of the smoke DAG, on a real one-node SLURM cluster (tests/cluster.py) through
Snakemake's SLURM executor and profiles/slurm, gives the bytes of a local run; a failing job
fails the run, with its log, within a bound.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge (envs/setup-slurm.sh).
Without them the tests skip, unless TASKGEOM_REQUIRE_SLURM=1 (as in CI) makes that a failure.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cluster import PARTITION, SYSTEM_CONF, Cluster, clear_stale_link, missing_programs, slurm_cluster
from conftest import REPO, WALL_CLOCK, copy_run, output_digests, snakemake_jobs, tool_env

from taskgeom.pipeline.registry import STAGES

pytestmark = pytest.mark.slurm

# Snakemake ignores SIGTERM while it waits on jobs: a run past this is killed outright.
RUN_LIMIT_S = 900


def cluster_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "bringing up munged, slurmctld and slurmd needs root"
    if missing := missing_programs():
        return f"{', '.join(missing)} not installed (envs/setup-slurm.sh installs them)"
    clear_stale_link()
    if SYSTEM_CONF.exists():
        return f"{SYSTEM_CONF} exists: this machine belongs to a SLURM cluster already"
    return None


def require_cluster() -> None:
    if why := cluster_unavailable():
        if os.environ.get("TASKGEOM_REQUIRE_SLURM") == "1":
            pytest.fail(f"TASKGEOM_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def cluster():
    require_cluster()
    with slurm_cluster() as c:
        yield c


def test_a_cluster_whose_owner_was_killed_does_not_block_the_next():
    """A run killed inside ``slurm_cluster`` leaves its daemons and the ``SYSTEM_CONF``
    link behind; the next cluster clears them and comes up."""
    require_cluster()
    owner = subprocess.Popen(
        [sys.executable, "-c", "import time; from cluster import slurm_cluster\n"
         "with slurm_cluster():\n    print('up', flush=True); time.sleep(600)"],
        cwd=Path(__file__).parent, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "up"
    finally:
        owner.kill()
        owner.wait()
    left = SYSTEM_CONF.resolve().parent
    assert SYSTEM_CONF.is_symlink() and left.is_dir()
    with slurm_cluster() as c:
        assert SYSTEM_CONF.resolve() == c.conf.resolve() != left / "slurm.conf"
        assert not left.exists()
    assert not SYSTEM_CONF.is_symlink()


def cluster_profile(dest: Path, rules: bool = True) -> Path:
    """profiles/slurm, pointed at the test cluster: its partition, no account (there is no
    slurmdbd), squeue for job status, no GPUs, short polls, and every job's log kept."""
    profile = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    profile["default-resources"] = {"slurm_partition": PARTITION}
    profile["set-resources"] = {rule: {"slurm_partition": PARTITION, "gpu": 0} for rule in profile["set-resources"]}
    if not rules:
        del profile["set-resources"]
    profile |= {"slurm-no-account": True, "slurm-status-command": "squeue",
                "slurm-init-seconds-before-status-checks": 1, "seconds-between-status-checks": 1,
                "latency-wait": 5, "slurm-keep-successful-logs": True}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return dest


# Snakemake, with the SLURM plugin polling at the profile's seconds-between-status-checks. The
# plugin adds 10 s to its next poll whenever one finds no job finished (up to 180 s, to spare a
# shared slurmctld), so each job longer than one poll would wait about 10 s more than it ran.
SNAKEMAKE_POLLING_EACH_SECOND = """\
import sys
import snakemake_executor_plugin_slurm as slurm
slurm.Executor.next_seconds_between_status_checks = property(
    lambda self: self.workflow.remote_execution_settings.seconds_between_status_checks, lambda self, value: None)
from snakemake.cli import main
sys.argv[0] = "snakemake"
main()
"""


def snakemake(*args: str) -> list[str]:
    """``snakemake ARGS`` polling the test cluster each second (SNAKEMAKE_POLLING_EACH_SECOND)."""
    return [sys.executable, "-c", SNAKEMAKE_POLLING_EACH_SECOND, *args]


def run_bounded(cmd: list[str], cwd: Path, cluster: Cluster, limit: float = RUN_LIMIT_S) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; SIGKILL the group if it outlives ``limit``."""
    env = {**tool_env(), "SLURM_CONF": cluster.env["SLURM_CONF"]}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"{cmd} still running after {limit:.0f} s: killed\n{report(cwd, out, err, cluster)}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def report(repo: Path, out: str, err: str, cluster: Cluster) -> str:
    """Snakemake's output, then the log of every SLURM job that failed, then the daemons' logs."""
    parts = [out[-3000:], err[-6000:]]
    for log in sorted((repo / ".snakemake/slurm_logs").rglob("*.log")):
        text = log.read_text(errors="replace")
        if "error" in text.lower():
            parts.append(f"--- {log.relative_to(repo)} ---\n{text[-4000:]}")
    parts += [f"--- {d} ---\n{cluster.log(d)[-1500:]}" for d in ("slurmctld", "slurmd")]
    return "\n".join(parts)


def every_rule_cheaply(repo: Path) -> tuple[list[str], list[str], int]:
    """In ``repo``, where the smoke DAG has run: one output of each job of a set that holds every
    rule but fetch, and fetch's outputs, for two ``snakemake --force`` runs in that order; and how
    many jobs the first runs. Snakemake also runs every job on a path between two forced ones
    (its input is updated by another job), so the set is the choice of one job per rule, over all
    choices, that runs the fewest seconds with those, timed by the run's own benchmarks. Fetch,
    upstream of every job, goes alone and last: run first, its outputs' new times would make
    Snakemake rerun everything below it."""
    jobs = list(snakemake_jobs(repo).values())
    made_by = {out: i for i, job in enumerate(jobs) for out in job["outputs"]}
    parents = [{made_by[f] for f in job["inputs"] if f in made_by} for job in jobs]

    @functools.cache
    def upstream(i: int) -> frozenset[int]:  # the job and every job upstream of it
        return frozenset({i}.union(*(upstream(p) for p in parents[i])))

    above = [upstream(i) for i in range(len(jobs))]
    seconds = [float((repo / job["benchmark"]).read_text().splitlines()[-1].split("\t")[0]) for job in jobs]
    by_rule: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        by_rule.setdefault(job["rule"], []).append(i)
    (fetch,) = by_rule.pop("fetch")

    def runs(forced: tuple[int, ...]) -> set[int]:
        return {j for j in range(len(jobs)) if any(f in above[j] for f in forced)
                and any(j in above[g] for g in forced)}

    forced = min(itertools.product(*by_rule.values()), key=lambda f: sum(seconds[j] for j in runs(f)))
    first = lambda i: sorted(jobs[i]["outputs"])[0]
    return [first(i) for i in forced], sorted(jobs[fetch]["outputs"]), len(runs(forced))


@pytest.mark.long
def test_every_rule_through_slurm_gives_the_bytes_of_a_local_run(cluster: Cluster, smoke_run: Path,
                                                                smoke_digests: dict, tmp_path: Path):
    """Every rule of the smoke DAG runs as a SLURM job and writes the bytes of the local run."""
    repo = copy_run(smoke_run, tmp_path / "repo")
    profile = cluster_profile(tmp_path / "profile")
    targets, world, count = every_rule_cheaply(repo)
    start = time.monotonic()
    submitted = 0
    for extra in (targets, world):
        proc = run_bounded(snakemake("--profile", str(profile), "--force", *extra), repo, cluster)
        assert proc.returncode == 0, report(repo, proc.stdout, proc.stderr, cluster)
        submitted += proc.stderr.count("has been submitted with SLURM jobid")
    took = time.monotonic() - start
    logs = list((repo / ".snakemake/slurm_logs").rglob("*.log"))
    rules = {log.relative_to(repo / ".snakemake/slurm_logs").parts[0].removeprefix("rule_") for log in logs}
    assert submitted == len(logs) == 1 + count, (submitted, len(logs), count)  # every job went through sbatch
    assert rules == {s.name for s in STAGES if not s.dvc_only}, rules
    print(f"\nevery rule through SLURM: {submitted} jobs in {took:.0f} s")
    compared = lambda digests: {k: v for k, v in digests.items() if not k.startswith(WALL_CLOCK)}
    ours, local = compared(output_digests(repo)), compared(smoke_digests)
    assert ours.keys() == local.keys()
    assert [k for k in ours if ours[k] != local[k]] == []


def test_a_failing_job_fails_the_run_with_its_log(cluster: Cluster, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "Snakefile").write_text('rule boom:\n    output: "never.txt"\n'
                                    '    shell: "echo boom: the command failed >&2; exit 3"\n')
    profile = cluster_profile(tmp_path / "profile", rules=False)
    start = time.monotonic()
    proc = run_bounded(snakemake("--profile", str(profile)), work, cluster, limit=120)
    assert proc.returncode != 0 and time.monotonic() - start < 120
    assert "boom: the command failed" in report(work, proc.stdout, proc.stderr, cluster)
    assert not (work / "never.txt").exists()
