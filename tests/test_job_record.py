"""``pipeline/job_record.py``: what DVC saves for a stage is what its job read. A stage whose job
record describes its files takes the parameter values the job was given, whatever params.yaml
holds when DVC saves, and enters the run cache only where DVC read those same values; the
Snakemake commit (``dvc_commit --recorded``) leaves out a stage without such a record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from taskgeom.pipeline import dvc_commit, made

DVC_YAML = """\
stages:
  speed:
    cmd: cp in.txt out.txt
    deps: [in.txt]
    params: [speed.repeats]
    outs: [out.txt]
  other:
    cmd: cp in.txt other.txt
    deps: [in.txt]
    outs: [other.txt]
"""


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DVC repository whose ``speed`` job read repeats 3 while params.yaml now says 1."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "--quiet"], check=True)
    Path("dvc.yaml").write_text(DVC_YAML)
    for name in ("in.txt", "out.txt", "other.txt"):
        Path(name).write_text("made\n")
    Path("params.yaml").write_text("speed:\n  repeats: 1\n")
    return tmp_path


def job_record(repeats: int) -> None:
    read = made.input_sha256({"in": Path("in.txt")})
    made.record("speed", "", read, {"params.yaml": {"speed.repeats": repeats}}, {"out": Path("out.txt")})


def runs(root: Path) -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in (root / ".dvc/cache/runs").glob("*/*/*")]


def test_a_stage_takes_the_values_its_job_read_and_no_run_cache_entry(repo: Path):
    job_record(3)
    assert dvc_commit.commit([], recorded=True) == ["speed"]   # "other" has no job record
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    assert lock["speed"]["params"]["params.yaml"] == {"speed.repeats": 3}
    assert "other" not in lock
    assert runs(repo) == []
    status = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], capture_output=True, text=True)
    assert "speed" in status.stdout   # params.yaml's 1 is not what made out.txt


def test_a_job_that_read_params_yaml_as_it_is_commits_with_its_run_cache_entry(repo: Path):
    job_record(1)
    assert dvc_commit.commit(["speed"], recorded=True) == ["speed"]
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    assert lock["speed"]["params"]["params.yaml"] == {"speed.repeats": 1}
    assert [r["params"]["params.yaml"] for r in runs(repo)] == [{"speed.repeats": 1}]


@pytest.mark.parametrize("change", ["output", "input"])
def test_a_record_that_no_longer_describes_the_files_is_not_committed(repo: Path, change: str):
    job_record(1)
    Path("out.txt" if change == "output" else "in.txt").write_text("changed since the job\n")
    assert dvc_commit.commit(["speed"], recorded=True) == []
    assert not (repo / "dvc.lock").exists() or "speed" not in yaml.safe_load((repo / "dvc.lock").read_text())
