"""envs/requirements.lock pins every package to one version and the sha256 of its file
(envs/hash_lock.py, from pip's installation report), and ``make lock`` works in a temporary
directory of its own."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENVS = Path(__file__).parents[1] / "envs"
spec = importlib.util.spec_from_file_location("hash_lock", ENVS / "hash_lock.py")
hash_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hash_lock)
sys.path.insert(0, str(ENVS.parent / "benchmarks"))
from input_faults import small_wheel  # noqa: E402 (the fault harness's one-wheel lock, found through the path above)

PIN = re.compile(r"^([a-z0-9-]+)==([^ ]+) \\\n    --hash=sha256:[0-9a-f]{64}$")


def requirements(text: str) -> list[str]:
    """The requirements of a pip requirements file, continuation lines joined, comments dropped."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return [r for r in re.split(r"\n(?!    )", body) if r.strip()]


def test_every_locked_package_is_pinned_with_its_hash():
    reqs = requirements((ENVS / "requirements.lock").read_text())
    assert len(reqs) > 100
    unhashed = [r for r in reqs if not PIN.match(r)]
    assert unhashed == [], f"{len(unhashed)} requirement(s) without a pinned version and sha256, e.g. {unhashed[:3]}"
    names = [PIN.match(r).group(1) for r in reqs]
    assert names == sorted(set(names))
    assert {"torch", "timm", "snakemake", "dvc"} <= set(names)


def test_setup_installs_with_require_hashes_and_lock_uses_a_fresh_temporary_directory():
    setup = (ENVS / "setup-venv.sh").read_text()
    installs = [line for line in setup.splitlines() if "pip install" in line and "-e ." not in line]
    assert installs and all("--require-hashes" in line for line in installs), installs
    lock = (ENVS / "lock.sh").read_text()
    assert "mktemp -d" in lock and "trap" in lock
    assert "/tmp" not in lock and "/tmp" not in (ENVS.parent / "Makefile").read_text()


def item(name: str, version: str, sha: str | None, url: str = "https://files.example/x.whl") -> dict:
    info = {"url": url, "archive_info": {"hashes": {"sha256": sha}} if sha else {}}
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def test_lock_lines_are_canonical_sorted_and_refuse_a_file_without_hash():
    report = {"install": [item("PyYAML", "6.0.3", "b" * 64), item("annotated_types", "0.8.0", "a" * 64)]}
    assert hash_lock.lock_lines(report) == [f"annotated-types==0.8.0 \\\n    --hash=sha256:{'a' * 64}",
                                            f"pyyaml==6.0.3 \\\n    --hash=sha256:{'b' * 64}"]
    with pytest.raises(ValueError, match=r"taskgeom==0.1.0: .*no sha256 for file:///work"):
        hash_lock.lock_lines({"install": [item("taskgeom", "0.1.0", None, "file:///work")]})
    with pytest.raises(ValueError, match="pyyaml appears twice"):
        hash_lock.lock_lines({"install": [item("PyYAML", "6.0.3", "b" * 64), item("pyyaml", "6.0.2", "c" * 64)]})


def test_the_same_report_gives_the_same_lock(tmp_path: Path):
    import json

    report = {"install": [item("numpy", "2.4.0", "d" * 64), item("h5py", "3.15.0", "e" * 64)]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    hash_lock.main(str(tmp_path / "r.json"), str(tmp_path / "a.lock"))
    report["install"].reverse()
    (tmp_path / "r.json").write_text(json.dumps(report))
    hash_lock.main(str(tmp_path / "r.json"), str(tmp_path / "b.lock"))
    assert (tmp_path / "a.lock").read_bytes() == (tmp_path / "b.lock").read_bytes()
    assert requirements((tmp_path / "a.lock").read_text())[0].startswith("h5py==3.15.0")


def fake_clone(root: Path, wheel: Path) -> Path:
    """A clone whose lock pins one small local wheel (a ``taskgeom`` module), with envs/setup-venv.sh."""
    (root / "envs").mkdir(parents=True)
    shutil.copy(ENVS / "setup-venv.sh", root / "envs")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (root / "envs/requirements.lock").write_text(f"{wheel} --hash=sha256:{digest}\n")
    return root


def test_two_setups_at_once_share_one_build_and_a_broken_cache_is_rebuilt(tmp_path: Path):
    """The second setup starts while the first builds the shared environment: it waits and uses
    it, and both clones work. A cache marked complete without its interpreter is built again."""
    wheel, cache = small_wheel(tmp_path), tmp_path / "cache"
    clones = [fake_clone(tmp_path / name, wheel) for name in ("one", "two")]
    env = {**os.environ, "TASKGEOM_VENV_CACHE": str(cache), "PYTHON": sys.executable}
    setup = lambda clone: subprocess.Popen(["bash", "envs/setup-venv.sh"], cwd=clone, env=env, text=True,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    first = setup(clones[0])
    deadline = time.monotonic() + 120
    while not list(cache.glob("*/bin/python")) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert first.poll() is None, "the first setup ended before it built anything: " + first.communicate()[0]
    second = setup(clones[1])  # the first is building (its venv made, its packages not yet installed)
    said = [p.communicate(timeout=300)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], said
    for clone in clones:
        subprocess.run([clone / ".venv/bin/python", "-c", "import taskgeom"], check=True)
    shared = next(cache.glob("*/.complete")).parent
    (shared / "bin/python").unlink()  # marked complete, no interpreter: what the race used to leave
    again = subprocess.run(["bash", "envs/setup-venv.sh"], cwd=clones[0], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    subprocess.run([clones[0] / ".venv/bin/python", "-c", "import taskgeom"], check=True)
