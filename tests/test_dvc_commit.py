"""``pipeline/dvc_commit.py``: DVC's ``dvc commit --force`` of several targets, with dvc.lock
read and written once."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from taskgeom.pipeline import dvc_commit

DVC_YAML = """\
stages:
  check-params:
    cmd: echo ok > params.ok
    outs: [params.ok]
  copy:
    foreach: [a, b, c]
    do:
      cmd: cp params.ok ${item}.txt
      deps: [params.ok]
      outs: ["${item}.txt"]
  last:
    cmd: cat a.txt b.txt > last.txt
    deps: [a.txt, b.txt]
    outs: [last.txt]
"""


def dvc(root: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, check=True, capture_output=True)


def committed_repository(root: Path) -> Path:
    """A DVC repository whose every stage is committed, then every output changed."""
    root.mkdir()
    dvc(root, "init", "--no-scm", "--quiet")
    (root / "dvc.yaml").write_text(DVC_YAML)
    for name in ("params.ok", "a.txt", "b.txt", "c.txt", "last.txt"):
        (root / name).write_text("first\n")
    dvc(root, "commit", "--force", "--quiet")
    for name in ("params.ok", "a.txt", "b.txt", "c.txt", "last.txt"):
        (root / name).write_text(f"second {name}\n")
    return root


def cached(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / ".dvc/cache").rglob("*") if p.is_file())


def test_a_commit_of_several_targets_writes_what_dvc_commit_writes(tmp_path: Path, monkeypatch):
    base = committed_repository(tmp_path / "base")
    ours, theirs = shutil.copytree(base, tmp_path / "ours"), shutil.copytree(base, tmp_path / "theirs")
    targets = ["check-params", "copy@a", "copy@c", "last"]
    dvc(theirs, "commit", "--force", "--quiet", *targets)
    monkeypatch.chdir(ours)
    assert dvc_commit.commit(targets) == targets
    assert (ours / "dvc.lock").read_bytes() == (theirs / "dvc.lock").read_bytes()
    assert cached(ours) == cached(theirs)
    stages = yaml.safe_load((ours / "dvc.lock").read_text())["stages"]
    assert stages["copy@b"]["outs"][0]["size"] == len("first\n")  # not a target: as committed before
    assert stages["copy@c"]["outs"][0]["size"] == len("second c.txt\n")


def test_without_targets_every_stage_is_committed_and_a_stage_named_twice_once(tmp_path: Path, monkeypatch):
    root = committed_repository(tmp_path / "repo")
    monkeypatch.chdir(root)
    from dvc import dvcfile

    writes = []
    modify = dvcfile.modify_yaml
    monkeypatch.setattr(dvcfile, "modify_yaml", lambda path, fs=None: (writes.append(path), modify(path, fs=fs))[1])
    assert dvc_commit.commit(["copy", "copy@b"]) == ["copy@a", "copy@b", "copy@c"]
    assert len(writes) == 1  # dvc commit rewrites dvc.lock once per target
    assert dvc_commit.commit([]) == ["check-params", "copy@a", "copy@b", "copy@c", "last"]
    status = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=root, capture_output=True,
                            text=True, check=True)
    assert status.stdout.strip() == "{}"
