"""The two front ends drawn from the registry, checked without running a stage: dvc.yaml is
current, Snakemake's linter is content, and both plan the same commands on the same files."""

from __future__ import annotations

from pathlib import Path

from conftest import dvc_stages, run, snakemake_jobs


def test_snakemake_and_dvc_dags_agree(repo_copy: Path):
    jobs, stages = snakemake_jobs(repo_copy), dvc_stages(repo_copy)
    # DVC's check-params stage stands for the Snakefile's config.validate: no rule, no input
    check = next(cmd for cmd, s in stages.items() if s["name"] == "check-params")
    guard = stages.pop(check)["outs"]
    for stage in stages.values():
        stage["deps"] = [d for d in stage["deps"] if d not in guard]
    assert set(jobs) == set(stages), "the two front ends run different commands"
    for cmd, job in jobs.items():
        stage = stages[cmd]
        assert job["rule"] == stage["name"].split("@")[0]
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


def test_snakemake_takes_the_stage_names_dvc_and_taskgeom_use(repo_copy: Path):
    proc = run(["snakemake", "-n", "--forcerun", "prune-dense", "zoo-table"], repo_copy, check=False, warm=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "rule prune-dense:" in proc.stdout + proc.stderr


def test_snakemake_says_a_bad_params_key_in_one_line_as_params_check_does(repo_copy: Path):
    params = repo_copy / "params.yaml"
    head, prune = params.read_text().split("\nprune:", 1)
    params.write_text(head + "\nprune:" + prune.replace("  images:", "  imagez:", 1))
    cmds = (["snakemake", "-n"], ["taskgeom", "params", "check"])
    said = [run(cmd, repo_copy, check=False, warm=False) for cmd in cmds]
    assert [p.returncode for p in said] == [1, 2]
    snakemake, check = ((p.stdout + p.stderr).strip().splitlines() for p in said)
    assert "  unknown key prune.imagez" in check
    # after Snakemake's one line naming its workflow profile: what `taskgeom params check` says, no more
    assert snakemake[-len(check):] == check and len(snakemake) <= len(check) + 1, snakemake[:20]
