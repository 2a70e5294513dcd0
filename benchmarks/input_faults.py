"""Faults of inputs and set-up for ``fault_injection.py`` (its docstring says what each injects and
expects): a damaged world file, two set-ups at once, a paper checkpoint of another size, and the
names and messages a user meets (stage names under Snakemake, a misspelt key, a killed run)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import yaml
from crash_test import digests
from fault_tools import first, held, refused, said, sh


def one_line_refusal(proc: subprocess.CompletedProcess, *names: str) -> tuple[bool, str]:
    """``refused``, in one line of ``taskgeom: error:`` (exit status 2, no traceback)."""
    ok, what = refused(proc, *names)
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.startswith("taskgeom: error:")]
    return ok and proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, what


def damaged_world(repo: Path, params: dict) -> tuple[bool, str]:
    world = repo / "data/world/test.h5"
    before = world.read_bytes()
    middle = len(before) // 2
    cmd = ["taskgeom", "sources", "--source", "world-test", "--log", "logs/sources/world-test.log"]
    said_ = []
    try:
        for damaged in (before[:middle] + np.random.default_rng(0).bytes(4096) + before[middle + 4096:],
                        before[:middle]):
            world.write_bytes(damaged)
            said_.append(one_line_refusal(sh(cmd, repo), "data/world/test.h5"))
    finally:
        world.write_bytes(before)
    return all(ok for ok, _ in said_), " | ".join(what for _, what in said_)


def small_wheel(folder: Path) -> Path:
    """A one-module wheel named ``taskgeom``: a lock of it builds a shared environment in seconds."""
    wheel, info = folder / "taskgeom-0.0.1-py3-none-any.whl", "taskgeom-0.0.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("taskgeom/__init__.py", "")
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: taskgeom\nVersion: 0.0.1\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return wheel


def two_setups(repo: Path, params: dict) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        wheel, cache = small_wheel(Path(tmp)), Path(tmp) / "cache"
        lock = f"{wheel} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n"
        clones = [Path(tmp) / name for name in ("one", "two")]
        for clone in clones:
            (clone / "envs").mkdir(parents=True)
            (clone / "envs/setup-venv.sh").write_bytes((repo / "envs/setup-venv.sh").read_bytes())
            (clone / "envs/requirements.lock").write_text(lock)
        env = {**os.environ, "TASKGEOM_VENV_CACHE": str(cache), "PYTHON": sys.executable}
        setup = lambda clone: subprocess.Popen(["bash", "envs/setup-venv.sh"], cwd=clone, env=env, text=True,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        first, deadline = setup(clones[0]), time.time() + 120
        while not list(cache.glob("*/bin/python")) and first.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        second = setup(clones[1])   # while the first installs into the environment it has made
        rcs = [p.wait(timeout=300) for p in (first, second)]
        works = [subprocess.run([c / ".venv/bin/python", "-c", "import taskgeom"]).returncode for c in clones]
        waited = "waiting for the setup" in second.stdout.read()
        shared = next(iter(cache.glob("*/.complete")), cache / "none").parent
        (shared / "bin/python").unlink(missing_ok=True)   # what the race used to leave: complete, no python
        again = subprocess.run(["bash", "envs/setup-venv.sh"], cwd=clones[0], env=env, capture_output=True)
    ok = rcs == [0, 0] and works == [0, 0] and again.returncode == 0
    return ok, f"setups rc {rcs}, the second {'waited' if waited else 'did not wait'}; clones import {works}; " \
               f"complete without bin/python: rebuilt, rc {again.returncode}"


def remove_new(repo: Path, before: set[str]) -> None:
    """Delete the files under data/ and results/ that are not in ``before``."""
    for rel in set(digests(repo)) - before:
        (repo / rel).unlink()


def other_size_checkpoint(repo: Path, params: dict) -> tuple[bool, str]:
    from taskgeom.fixtures.checkpoints import IMG_SIZE, write_depth_anything

    path, name, probe = repo / "params.yaml", "da-other-size", "da-other-size-l2"
    before, files = path.read_bytes(), set(digests(repo))
    test = "world-test"
    train = next(n for n, s in params["sources"].items() if s["kind"] == "world" and s.get("split") == "train")
    with tempfile.TemporaryDirectory() as tmp:
        write_depth_anything(Path(tmp))   # 64 wide (Base: 768); its config.json says so
        p = yaml.safe_load(before)
        entry = {"kind": "pretrained", "adapter": "depth-anything-v2", "path": tmp, "img_size": IMG_SIZE[
            "depth-anything-v2"], "batch_size": 4, "sources": {"train": train, "test": test}}
        p["diagnose"]["probes"][probe] = {"model": name, "decoder": "depth", "layers": [2], "source": test}
        zoo = ["taskgeom", "zoo", "--model", name, "--log", f"logs/zoo/{name}.log"]
        try:
            path.write_text(yaml.safe_dump(p | {"zoo": {**p["zoo"], name: entry | {"overrides": {"hidden_size": 768}}}},
                                           sort_keys=False))
            asked, what = one_line_refusal(sh(zoo, repo), f"zoo.{name}", "config.json", "hidden_size")
            path.write_text(yaml.safe_dump(p | {"zoo": {**p["zoo"], name: entry}}, sort_keys=False))
            made = sh(zoo, repo)
            written = repo / f"data/zoo/{name}/config.json"
            width = (json.loads(written.read_text())["architecture"]["overrides"].get("hidden_size")
                     if written.is_file() else None)
            diagnosed = sh(["taskgeom", "diagnose", "--probe", probe, "--log", f"logs/diagnose/{probe}.log"], repo)
        finally:
            path.write_bytes(before)
            remove_new(repo, files)
    ok = asked and made.returncode == 0 and width == 64 and diagnosed.returncode == 0
    return ok, f"{what}; without overrides: zoo rc {made.returncode}, copy records hidden_size {width}, " \
               f"diagnose rc {diagnosed.returncode} ({said(diagnosed)[:80]})"


def killed_snakemake(repo: Path, target: str, lock: Path) -> tuple[bool, str]:
    """Snakemake killed while it runs the job of ``target`` (the job holding ``lock``), then run again."""
    proc = subprocess.Popen(["snakemake", "--cores", "1", "--force", target], cwd=repo, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while not held(lock) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    locked = sh(["snakemake", "--cores", "1", target], repo)
    unlocked = sh(["snakemake", "--unlock"], repo)
    rerun = sh(["snakemake", "--cores", "1", target], repo)
    ok = locked.returncode != 0 and "--unlock" in locked.stderr + locked.stdout and unlocked.returncode == 0
    return ok and rerun.returncode == 0, f"after the kill: {'says --unlock' if ok else said(locked)[:60]}; " \
                                         f"then a plain rerun: rc {rerun.returncode}"


def small_dead_ends(repo: Path, params: dict) -> tuple[bool, str]:
    path = repo / "params.yaml"
    before, bad = path.read_bytes(), yaml.safe_load(path.read_bytes())
    bad["prune"]["imagez"] = bad["prune"].pop("images")
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    try:
        schema = sh(["snakemake", "-n"], repo)
    finally:
        path.write_bytes(before)
    lines = (schema.stdout + schema.stderr).strip().splitlines()
    checks = {"-R prune-dense": sh(["snakemake", "-n", "--forcerun", "prune-dense"], repo).returncode == 0,
              "prune.imagez": schema.returncode == 1 and "  unknown key prune.imagez" in lines and len(lines) <= 6}
    for cmd, name in ((["diagnose", "--probe", "nope"], first(params, "diagnose.probes")),
                      (["params", "use", "smok"], "smoke"), (["params", "use", "../params"], "smoke")):
        checks[" ".join(cmd)] = one_line_refusal(sh(["taskgeom", *cmd], repo), name)[0] and path.read_bytes() == before
    source = first(params, "sources")
    checks["killed"], killed = killed_snakemake(repo, f"data/sources/{source}.json",
                                                repo / f".taskgeom/locks/sources@{source}.lock")
    return all(checks.values()), f"{sum(checks.values())} of {len(checks)} ({', '.join(checks)}); {killed}"
