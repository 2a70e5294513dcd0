"""The Snakefile's ``onsuccess`` commit to DVC (``sync.commit_to_dvc``) and the environment's
``dvc repro``, killed while they write dvc.lock or DVC's rwlock, leave the previous file
(``pipeline/dvc_atomic.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from taskgeom.artifacts.atomic import leftovers
from taskgeom.pipeline import made
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


def job_records() -> None:
    """What the jobs of check-params and copy record as they publish (pipeline/made.py), in the current directory."""
    for address, inputs, outputs in (("check-params", {}, {"ok": Path("params.ok")}),
                                     ("copy", {"ok": Path("params.ok")}, {"copy": Path("copy.txt")})):
        made.record(address, "", made.input_sha256(inputs), {}, outputs)


def hook(tmp_path: Path, sitecustomize: str) -> Path:
    """A directory whose ``sitecustomize.py`` (``sitecustomize``) every Python process with it on
    PYTHONPATH loads."""
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook/sitecustomize.py").write_text(sitecustomize)
    return tmp_path / "hook"


def test_a_commit_killed_while_writing_dvc_lock_leaves_the_previous_dvc_lock(tmp_path, monkeypatch):
    root = dvc_repository(tmp_path / "repository")
    monkeypatch.chdir(root)  # where the Snakefile's onsuccess runs it
    job_records()
    assert commit_to_dvc(["cp params.ok copy.txt"], root) == ["copy"]
    before = (root / "dvc.lock").read_bytes()
    assert set(yaml.safe_load(before)["stages"]) == {"check-params", "copy"}

    (root / "copy.txt").write_text("changed\n")  # something new for the next commit to record
    job_records()
    monkeypatch.setenv("PYTHONPATH", str(hook(tmp_path, KILL_WHILE_DUMPING)))
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
    monkeypatch.setenv("PYTHONPATH", str(hook(tmp_path, KILL_WHILE_DUMPING)))
    assert subprocess.run(dvc, cwd=root).returncode == -9
    assert (root / "dvc.lock").read_bytes() == before
    monkeypatch.delenv("PYTHONPATH")
    subprocess.run(dvc, cwd=root, check=True)  # and the next run reads it and records its own
    assert set(yaml.safe_load((root / "dvc.lock").read_text())["stages"]) == {"check-params", "copy"}
    assert not leftovers(root / "dvc.lock")


# DVC's rwlock edit (``dvc.rwlock._edit_rwlock``), given the lock's contents, writes half of them
# to its file, flushes, and the process kills itself: the first stage ``dvc repro`` starts.
KILL_WHILE_WRITING_RWLOCK = """\
import json, os, signal, types
import dvc.rwlock

def half_then_sigkill(obj, stream):
    text = json.dumps(obj)
    stream.write(text[: len(text) // 2])
    stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)

dvc.rwlock.json = types.SimpleNamespace(load=json.load, dump=half_then_sigkill, JSONDecodeError=json.JSONDecodeError)
"""


@pytest.mark.parametrize("launcher", ["dvc's own", "the environment's"])
def test_a_dvc_repro_killed_while_writing_the_rwlock(launcher, tmp_path, monkeypatch):
    """DVC's own ``dvc`` leaves an rwlock every later run refuses; the environment's leaves the
    previous one, which the next run reads, and that run removes the half-written temporary file."""
    root = dvc_repository(tmp_path / "repository")
    own = launcher == "dvc's own"
    dvc = [sys.executable, "-m", "dvc"] if own else [str(Path(sys.executable).with_name("dvc"))]
    monkeypatch.setenv("PYTHONPATH", str(hook(tmp_path, KILL_WHILE_WRITING_RWLOCK)))
    assert subprocess.run([*dvc, "repro", "--quiet"], cwd=root).returncode == -9
    assert bool(leftovers(root / ".dvc/tmp/rwlock")) != own  # the environment's half-written file
    monkeypatch.delenv("PYTHONPATH")
    rerun = subprocess.run([*dvc, "repro"], cwd=root, capture_output=True, text=True)
    if own:
        assert rerun.returncode != 0 and "Unable to read RWLock-file" in rerun.stderr, rerun.stderr
        return
    assert rerun.returncode == 0, rerun.stderr
    assert set(yaml.safe_load((root / "dvc.lock").read_text())["stages"]) == {"check-params", "copy"}
    assert not leftovers(root / ".dvc/tmp/rwlock")
