"""Faults of inputs and set-up for ``fault_injection.py`` (its docstring says what each injects and
expects): a damaged world file, two set-ups at once, a paper checkpoint of another size, the
names and messages a user meets (stage names under Snakemake, a misspelt key, a killed run), and
hostile input to the front ends (a params.yaml of nested aliases or not in UTF-8, a symbolic link
loop, a dry run on a fresh clone, an empty link path, the restore command an error line prints)."""

from __future__ import annotations

import hashlib
import json
import os
import re
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


FAST = 60  # s: each refusal takes seconds; expanding a params.yaml's aliases took minutes and gigabytes


def refused_fast(cmd: list[str], repo: Path, *names: str) -> tuple[bool, str]:
    """``cmd`` refused within ``FAST`` seconds in one ``taskgeom: error:`` line holding each of
    ``names``, with no traceback (the line, or what happened instead)."""
    try:
        proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=FAST, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"{' '.join(cmd)}: still running after {FAST} s"
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.startswith("taskgeom: error:")]
    ok = proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr
    ok = ok and all(n in lines[0] for n in names)
    return ok, f"{' '.join(cmd[:2])}: {lines[0][17:100] if len(lines) == 1 else said(proc)[:100]}"


def nothing_to_rerun(repo: Path) -> bool:
    """Whether ``dvc status`` and ``snakemake -n`` both have nothing to rerun."""
    status, dry = sh(["dvc", "status", "--json"], repo), sh(["snakemake", "-n"], repo)
    return (status.returncode == 0 and json.loads(status.stdout or "{}") == {}
            and "Nothing to be done" in dry.stdout + dry.stderr)


def nested_aliases(text: str, levels: int = 9, width: int = 9) -> str:
    """``text`` with its ``prune.ratios`` list made of nested YAML aliases: ``width ** levels``
    numbers once expanded, in a few hundred bytes."""
    rows = [f"&l0 [{', '.join(['0.1'] * width)}]"]
    rows += [f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return re.sub(r"(?m)^(  ratios:).*$", lambda m: f"{m.group(1)} [{', '.join(rows)}]", text, count=1)


def unreadable_params(repo: Path, hostile: bytes, *names: str) -> tuple[bool, str]:
    """params.yaml replaced by ``hostile``: every front end refuses it at once, naming it."""
    path = repo / "params.yaml"
    before = path.read_bytes()
    path.write_bytes(hostile)
    try:
        said_ = [refused_fast(cmd, repo, "params.yaml", *names) for cmd in (
            ["taskgeom", "params", "check"], ["snakemake", "-n"], ["dvc", "status"], ["dvc", "repro"])]
    finally:
        path.write_bytes(before)
    return all(ok for ok, _ in said_), " | ".join(what for _, what in said_)


def alias_bomb(repo: Path, params: dict) -> tuple[bool, str]:
    hostile = nested_aliases((repo / "params.yaml").read_text()).encode()
    return unreadable_params(repo, hostile, "YAML aliases", "more than the")


def non_utf8_params(repo: Path, params: dict) -> tuple[bool, str]:
    hostile = (repo / "params.yaml").read_bytes() + "# café\n".encode("latin-1")
    return unreadable_params(repo, hostile, "not UTF-8 text (byte 0xe9 at offset")


def follow_advice(output: str, repo: Path, first: tuple[str, ...] = ("rm", "dvc")) -> list[int]:
    """Run each command the ``taskgeom: error:`` line of ``output`` names between backticks whose
    first word is one of ``first``; their exit statuses."""
    line = next((x for x in output.splitlines() if x.startswith("taskgeom: error:")), "")
    return [sh(cmd.split(), repo).returncode for cmd in re.findall(r"`([^`]+)`", line) if cmd.split()[0] in first]


def symlink_loop(repo: Path, params: dict) -> tuple[bool, str]:
    val = repo / "data/world/val.h5"
    before = val.read_bytes()
    val.unlink()
    val.symlink_to("val.h5")
    try:
        said_ = [refused_fast(cmd, repo, "data/world/val.h5: a symbolic link loop",
                              "`dvc checkout --force data/world/val.h5`")
                 for cmd in (["snakemake", "-n"], ["dvc", "status"], ["dvc", "repro", "--dry"])]
        done = follow_advice(sh(["dvc", "status"], repo).stderr, repo)
        restored = val.is_file() and not val.is_symlink() and val.read_bytes() == before
    finally:
        if val.is_symlink() or not val.exists():
            val.unlink(missing_ok=True)
            val.write_bytes(before)
    clean = nothing_to_rerun(repo)
    ok = all(ok for ok, _ in said_) and done == [0, 0] and restored and clean
    return ok, " | ".join(what for _, what in said_) + f"; the advice: rc {done}, " \
               f"{'restored' if restored else 'not restored'}, {'nothing to rerun' if clean else 'work planned'}"


def dry_run_fresh_clone(repo: Path, params: dict) -> tuple[bool, str]:
    from taskgeom.pipeline.registry import instances

    expected = {"check-params"} | {stage.name for stage, _ in instances(params)}
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        cloned = subprocess.run(["git", "clone", "-q", str(repo), str(clone)], capture_output=True)
        dry = sh(["dvc", "repro", "--dry"], clone)
        planned = set(re.findall(r"Running stage '([^'@]+)", dry.stdout))
        made = sorted(str(p.relative_to(clone)) for top in ("data", "results") for p in (clone / top).rglob("*.h5"))
    ok = cloned.returncode == 0 and dry.returncode == 0 and planned == expected and not made
    return ok, f"dvc repro --dry on a clone: rc {dry.returncode}, {len(planned)} of {len(expected)} stages planned" + (
        f"; {said(dry)[:120]}" if dry.returncode else "")


def empty_link(repo: Path, params: dict) -> tuple[bool, str]:
    name, where = "fault-link", repo / "data/external/fault-link"
    said_ = [one_line_refusal(sh(["taskgeom", "data", "link", name, path], repo), expect)
             for path, expect in (("", "PATH is empty"), (".", f"holds data/external/{name} itself"),
                                  ("/", f"holds data/external/{name} itself"))]
    linked = where.is_symlink()
    if linked:
        where.unlink()
    return all(ok for ok, _ in said_) and not linked, " | ".join(what for _, what in said_)


def recovery_command(repo: Path, params: dict) -> tuple[bool, str]:
    source = next(n for n, s in params["sources"].items() if s["kind"] == "world" and s.get("split") == "test")
    world = repo / "data/world/test.h5"
    before = world.read_bytes()
    damaged = world.with_name(".test.h5.damaged")
    damaged.write_bytes(before[: len(before) // 2])
    os.replace(damaged, world)   # a new file: the published link keeps the good bytes (pipeline/publish.py)
    try:
        proc = sh(["taskgeom", "sources", "--source", source, "--log", f"logs/sources/{source}.log"], repo)
        ok, what = one_line_refusal(proc, "data/world/test.h5", "`dvc checkout --force data/world/test.h5`")
        done = follow_advice(proc.stderr, repo, first=("dvc",))   # not its `snakemake -R fetch`
        restored = world.read_bytes() == before
    finally:
        if world.read_bytes() != before:
            world.write_bytes(before)
    clean = nothing_to_rerun(repo)
    return ok and done == [0] and restored and clean, f"{what}; the printed `dvc checkout --force`: rc {done}, " \
        f"{'restored' if restored else 'not restored'}, {'nothing to rerun' if clean else 'work planned'}"


HOSTILE_INPUT = {  # fault_injection.FAULTS' faults of hostile input to the front ends (its docstring)
    "alias-bomb": alias_bomb,
    "non-utf8-params": non_utf8_params,
    "symlink-loop": symlink_loop,
    "dry-run-fresh-clone": dry_run_fresh_clone,
    "empty-link": empty_link,
    "recovery-command": recovery_command,
}
