"""The stage sampler of ``benchmarks/stage_profile.py``: a ``taskgeom`` process with it on
PYTHONPATH writes its sampled time by category at exit; other processes are left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

HOOK = REPO / "benchmarks" / "stage_profile"
sys.path.insert(0, str(HOOK))
from sitecustomize import _category, _name  # noqa: E402


def test_the_first_matching_category_wins_and_names_come_from_the_log_path():
    assert _category(["taskgeom.stages.targets", "torch._functorch.apis", "torch.nn.modules.conv"]) == \
        "JVP, VJP and backward"
    assert _category(["taskgeom.stages.prune_dense", "torch.nn.modules.conv"]) == "forward"
    assert _category(["taskgeom.stages.zoo", "h5py._hl.dataset", "importlib._bootstrap"]) == "imports"
    assert _category(["taskgeom.stages.findings", "torchvision"]) == "other"
    assert _name(["taskgeom", "prune-dense", "--dense", "x", "--log", "logs/prune-dense/x.log"]) == "prune-dense~x"


def test_a_taskgeom_process_writes_its_samples_and_python_itself_does_not(tmp_path: Path):
    env = {**os.environ, "TASKGEOM_PROFILE": str(tmp_path), "TASKGEOM_PROFILE_INTERVAL": "0.001",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")]))}
    taskgeom = Path(sys.executable).with_name("taskgeom")
    subprocess.run([str(taskgeom), "--help"], env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, "-c", "import taskgeom"], env=env, check=True)
    (written,) = tmp_path.glob("*.json")
    record = json.loads(written.read_text())
    assert written.name.startswith("--help.")
    assert record["argv"][1:] == ["--help"] and record["wall_s"] > 0
    total = sum(record["categories"].values())
    assert 0 < total <= record["wall_s"]
    assert abs(sum(record["frames"].values()) - total) < 1e-9 and abs(sum(record["leaves"].values()) - total) < 1e-9
    assert "imports" in record["categories"]
