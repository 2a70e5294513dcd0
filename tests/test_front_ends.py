"""The two front ends drawn from the registry, checked without running a stage: dvc.yaml is
current, Snakemake's linter is content, and both plan the same commands on the same files."""

from __future__ import annotations

from pathlib import Path

from conftest import dvc_stages, run, snakemake_jobs


def test_snakemake_and_dvc_dags_agree(repo_copy: Path):
    jobs, stages = snakemake_jobs(repo_copy), dvc_stages(repo_copy)
    # DVC's check-params stage stands for the Snakefile's validate(config): no rule, no input
    check = next(cmd for cmd, s in stages.items() if s["name"] == "check-params")
    guard = stages.pop(check)["outs"]
    for stage in stages.values():
        stage["deps"] = [d for d in stage["deps"] if d not in guard]
    assert set(jobs) == set(stages), "the two front ends run different commands"
    for cmd, job in jobs.items():
        stage = stages[cmd]
        assert job["rule"] == stage["name"].split("@")[0].replace("-", "_")
        assert job["outputs"] == set(stage["outs"]), cmd
        # DVC depends on a directory where Snakemake lists the files it collects in it
        for dep in job["inputs"]:
            assert dep in stage["deps"] or any(dep.startswith(d + "/") for d in stage["deps"]), (cmd, dep)
        for dep in stage["deps"]:
            assert dep in job["inputs"] or any(i.startswith(dep + "/") for i in job["inputs"]), (cmd, dep)


def test_snakemake_lint_is_clean(repo_copy: Path):
    proc = run(["snakemake", "--lint"], repo_copy, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Lints for" not in proc.stdout + proc.stderr


def test_dvc_yaml_is_generated_from_the_registry(repo_copy: Path):
    run(["taskgeom", "dvc-yaml", "--check"], repo_copy)
