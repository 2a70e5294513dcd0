"""The Snakefile's ``onsuccess`` commit to DVC (``sync.commit_to_dvc``), killed while it writes
dvc.lock, leaves the previous dvc.lock (``pipeline/dvc_atomic.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from taskgeom.artifacts.atomic import leftovers
from taskgeom.pipeline.sync import commit_to_dvc

DVC_YAML = """\
stages:
  check-params:
    cmd: echo ok > params.ok
    outs: [params.ok]
  copy:
    cmd: cp params.ok copy.txt
    deps: [params.ok]
    outs: [copy.txt]
"""

# Loaded by every Python process of the test's commit (through PYTHONPATH): DVC's YAML dumper,
# given dvc.lock's contents (its other YAML files, such as the run cache's, have no "stages"),
# writes half of them to its stream, flushes, and the process kills itself.
KILL_WHILE_DUMPING = """\
import io, os, signal
from dvc.utils.serialize import _yaml

_dump = _yaml._dump

def half_then_sigkill(data, stream):
    if "stages" not in data:
        return _dump(data, stream)
    text = io.StringIO()
    _dump(data, text)
    stream.write(text.getvalue()[: len(text.getvalue()) // 2])
    stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)

_yaml._dump = half_then_sigkill
"""


def dvc_repository(root: Path) -> Path:
    root.mkdir()
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "--quiet"], cwd=root, check=True)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.ok").write_text("ok\n")
    (root / "copy.txt").write_text("ok\n")
    return root


def test_a_commit_killed_while_writing_dvc_lock_leaves_the_previous_dvc_lock(tmp_path, monkeypatch):
    root = dvc_repository(tmp_path / "repository")
    monkeypatch.chdir(root)  # where the Snakefile's onsuccess runs it
    assert commit_to_dvc(["cp params.ok copy.txt"], root) == ["copy"]
    before = (root / "dvc.lock").read_bytes()
    assert set(yaml.safe_load(before)["stages"]) == {"check-params", "copy"}

    (root / "copy.txt").write_text("changed\n")  # something new for the next commit to record
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_WHILE_DUMPING)
    monkeypatch.setenv("PYTHONPATH", str(hook))
    with pytest.raises(subprocess.CalledProcessError) as killed:
        commit_to_dvc(["cp params.ok copy.txt"], root)
    assert killed.value.returncode == -9

    assert (root / "dvc.lock").read_bytes() == before
    monkeypatch.delenv("PYTHONPATH")
    assert commit_to_dvc(["cp params.ok copy.txt"], root) == ["copy"]  # and the next commit records it
    assert (root / "dvc.lock").read_bytes() != before
    assert yaml.safe_load((root / "dvc.lock").read_text())["stages"]["copy"]["outs"][0]["size"] == len("changed\n")
    assert not leftovers(root / "dvc.lock")


def test_the_environments_dvc_killed_while_writing_dvc_lock_leaves_the_previous_dvc_lock(tmp_path, monkeypatch):
    """``dvc repro`` as a user runs it (the launcher envs/setup-venv.sh writes)."""
    root = dvc_repository(tmp_path / "repository")
    dvc = [str(Path(sys.executable).with_name("dvc")), "repro", "--quiet"]
    subprocess.run(dvc, cwd=root, check=True)
    before = (root / "dvc.lock").read_bytes()
    (root / "params.ok").write_text("changed\n")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_WHILE_DUMPING)
    monkeypatch.setenv("PYTHONPATH", str(hook))
    assert subprocess.run(dvc, cwd=root).returncode == -9
    assert (root / "dvc.lock").read_bytes() == before
    monkeypatch.delenv("PYTHONPATH")
    subprocess.run(dvc, cwd=root, check=True)  # and the next run reads it and records its own
    assert set(yaml.safe_load((root / "dvc.lock").read_text())["stages"]) == {"check-params", "copy"}
    assert not leftovers(root / "dvc.lock")
