"""The Snakemake profiles: rules declare what a job needs, profiles say where it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from base64 import urlsafe_b64encode

import pytest
import yaml
from conftest import REPO, run

from taskgeom.pipeline import config
from taskgeom.pipeline.dag import snakemake_rule
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.runtime import THREAD_VARIABLES

SLURM = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
LOCAL = yaml.safe_load((REPO / "profiles/local/config.yaml").read_text())


def test_every_rule_declares_threads_memory_runtime_and_gpu_but_no_placement():
    params = config.load(REPO / "params/smoke.yaml")
    for device, gpu in (("auto", 1), ("cpu", None)):
        params["device"] = device
        for stage in (s for s in STAGES if not s.dvc_only):
            rule = snakemake_rule(stage.name, params)
            assert rule.threads >= 1 and rule.resources["mem_mb"] > 0 and rule.resources["runtime"] > 0
            assert rule.resources.get("gpu") == (gpu if stage.gpu else None), (stage.name, device)
            assert not any(k.startswith("slurm") for k in rule.resources), stage.name


def test_slurm_profile_places_every_job_and_sends_the_gpu_stages_to_a_gpu_partition():
    assert SLURM["executor"] == "slurm"
    default = SLURM["default-resources"]
    assert default["slurm_partition"] and default["slurm_account"]
    gpu_rules = {s.name for s in STAGES if s.gpu}
    assert set(SLURM["set-resources"]) == gpu_rules
    assert all(r["slurm_partition"] != default["slurm_partition"] for r in SLURM["set-resources"].values())


def test_local_profile_uses_every_core_and_runs_gpu_stages_one_at_a_time():
    assert LOCAL["cores"] == "all" and LOCAL["resources"]["gpu"] == 1
    assert "executor" not in LOCAL


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="torch's own default, every core, would be 1 thread too")
@pytest.mark.parametrize("exported, expected", [(None, 1), ("2", 2)])
def test_a_stage_runs_on_its_declared_threads_unless_snakemake_exports_others(exported, expected):
    """DVC exports no thread count, and torch would take every core; Snakemake exports its
    ``threads`` (or ``--set-threads``) as OMP_NUM_THREADS."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    if exported:
        env["OMP_NUM_THREADS"] = exported
    code = ("from taskgeom.pipeline.runtime import use_threads; use_threads(1); "
            "import torch; print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert int(out) == expected


def test_the_run_after_a_killed_one_rebuilds_what_it_left_incomplete_without_flags(repo_copy):
    """A killed run leaves its outputs marked incomplete (.snakemake/incomplete/); the workflow's
    default profile (profiles/default, read by every run) makes the next one rebuild them."""
    output = "data/world/train.h5"
    (repo_copy / output).parent.mkdir(parents=True)
    (repo_copy / output).write_bytes(b"half-written")
    marker = repo_copy / ".snakemake/incomplete" / urlsafe_b64encode(output.encode()).decode()
    marker.parent.mkdir(parents=True)
    marker.touch()
    proc = run(["snakemake", "-n", output], repo_copy, check=False, warm=False)
    assert proc.returncode == 0 and "rule fetch:" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
