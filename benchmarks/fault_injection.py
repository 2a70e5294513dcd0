"""Fault injection: what a hostile or clumsy user does to a repository where the whole DAG has run
(e.g. the smoke profile), each fault injected, its outcome checked and the repository put back.

Each fault: what is injected -> the outcome expected.

- two-front-ends: DVC reruns the slowest targets instance while Snakemake runs it -> DVC waits, naming the
  holder's PID; both succeed; the outputs are one run's bytes.
- non-finite-target: NaN in a head's target cache -> `taskgeom head` exits naming the file and
  row; the head's published set is untouched.
- corrupt-header: random bytes over a checkpoint's safetensors header -> the loading stage exits
  naming the file (and what to rerun).
- corrupt-weights: bytes changed in a checkpoint's tensor data -> the weights digest check names
  the file.
- non-finite-depth: NaN in the train split's depth -> the depth model's `taskgeom zoo` exits naming
  the file and image.
- rejected-call: a stage call with an unknown item -> refused; its log and every output unchanged.
- injected-name: a zoo model named `x;touch PWNED;#` -> DVC and Snakemake refuse it; no PWNED.
- resume-split: `targets` killed once its val split is published -> the rerun restores train and
  val from the published links, same bytes.
- tampered-package: a wheel whose sha256 is not its hash line -> pip --require-hashes refuses it.
- damaged-world: 4 KiB of random bytes in the middle of the test split, then a truncated copy ->
  `taskgeom sources` refuses each in one line naming the file and what to do; the index is untouched.
- two-setups: two `envs/setup-venv.sh` on one fresh cache (a one-wheel lock), the second started while
  the first builds -> the second waits; both clones work; a cache marked complete without its
  interpreter is built again.
- other-size-checkpoint: a Depth-Anything-V2 checkpoint 64 wide in zoo: -> with overrides asking 768,
  one line naming the entry, its config.json and the key; without, the copy records its size and
  `diagnose` runs on it.
- small-dead-ends: `snakemake -R prune-dense` (DVC's stage name), a misspelt params key under
  Snakemake, an unknown probe or profile (one line listing the valid names), a Snakemake killed
  mid-job -> each works, or says in one line what to do (after a kill: --unlock, then a plain rerun).

Every fault ends by comparing every file under data/ and results/ with its digest before.

    python benchmarks/fault_injection.py REPO [--out results/benchmarks]

Writes <out>/faults.{csv,md} and exits 1 unless every fault had its expected outcome.
"""

from __future__ import annotations

import argparse
import fcntl
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
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import yaml
from crash_test import digests, leftovers, seconds, write_result

from taskgeom.pipeline import config
from taskgeom.pipeline.registry import STAGES

TARGETS = next(s for s in STAGES if s.name == "targets")

Check = Callable[[Path, dict], tuple[bool, str]]


def sh(cmd: list[str], repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True)


def said(proc: subprocess.CompletedProcess) -> str:
    """The last line of a process's output that is not blank."""
    lines = [x for x in (proc.stderr + proc.stdout).splitlines() if x.strip()]
    return lines[-1][:240] if lines else ""


def held(lock: Path) -> bool:
    """Whether another process holds the stage lock file ``lock``."""
    if not lock.exists():
        return False
    with open(lock) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def first(params: dict, key: str) -> str:
    """The first item of the mapping at dotted ``key`` (a foreach of the registry)."""
    return next(iter(config.get(params, key)))


def two_front_ends(repo: Path, params: dict) -> tuple[bool, str]:
    # the slowest targets instance of the run, so that DVC's command starts well before Snakemake's ends
    probe = max(config.get(params, "learn.probes"), key=lambda p: seconds(repo, TARGETS, p))
    log = tempfile.TemporaryFile("w+")  # not a pipe: a full pipe would stall the lock's holder
    snakemake = subprocess.Popen(["snakemake", "--cores", "1", "--force", f"data/targets/{probe}/train.h5"],
                                 cwd=repo, stdout=log, stderr=subprocess.STDOUT, text=True)
    lock, deadline = repo / f".taskgeom/locks/targets@{probe}.lock", time.time() + 300
    while not held(lock) and snakemake.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    if not held(lock):
        return False, "Snakemake's run never took the stage lock"
    dvc = sh(["dvc", "repro", "--force", "-s", f"targets@{probe}"], repo)
    waited = re.search(rf"targets@{probe} is running in process \d+", dvc.stdout + dvc.stderr)
    ok = snakemake.wait(timeout=600) == 0 and dvc.returncode == 0 and waited is not None
    rcs = f"; Snakemake rc {snakemake.returncode}, DVC rc {dvc.returncode}"
    return ok, (waited.group(0) if waited else said(dvc)) + rcs


def poke_h5(path: Path, dataset: str, index: tuple) -> bytes:
    """Write NaN at ``index`` of ``dataset`` in ``path``; return the file's bytes before."""
    before = path.read_bytes()
    with h5py.File(path, "r+") as f:
        f[dataset][index] = np.nan
    return before


def refused(proc: subprocess.CompletedProcess, *names: str) -> tuple[bool, str]:
    text = proc.stderr + proc.stdout
    line = next((x.strip() for x in text.splitlines() if names and names[0] in x), said(proc))
    return proc.returncode != 0 and all(n in text for n in names), f"rc {proc.returncode}: {line[:240]}"


def non_finite_target(repo: Path, params: dict) -> tuple[bool, str]:
    head = first(params, "learn.heads")
    probe = config.get(params, "learn.heads")[head]["probe"]
    cache = repo / f"data/targets/{probe}/train.h5"
    before = poke_h5(cache, "features", (1, 0, 0))
    try:
        return refused(sh(["taskgeom", "head", "--head", head, "--log", f"logs/head/{head}.log"], repo),
                       str(cache.relative_to(repo)), "1")
    finally:
        cache.write_bytes(before)


def diagnose_call(params: dict) -> tuple[list[str], str]:
    probe = first(params, "diagnose.probes")
    return (["taskgeom", "diagnose", "--probe", probe, "--log", f"logs/diagnose/{probe}.log"],
            params["diagnose"]["probes"][probe]["model"])


def corrupt(repo: Path, params: dict, offset: int) -> tuple[bool, str]:
    cmd, model = diagnose_call(params)
    weights = repo / f"data/zoo/{model}/model.safetensors"
    before = weights.read_bytes()
    where = offset if offset >= 0 else len(before) + offset
    weights.write_bytes(before[:where] + np.random.default_rng(0).bytes(16) + before[where + 16:])
    try:
        return refused(sh(cmd, repo), str(weights.relative_to(repo)))
    finally:
        weights.write_bytes(before)


def non_finite_depth(repo: Path, params: dict) -> tuple[bool, str]:
    model = next(m for m, spec in params["zoo"].items() if spec["kind"] == "dpt")
    world = repo / "data/world/train.h5"
    before = poke_h5(world, f"r{params['world']['resolution']}/depth", (2, 5, 5))
    try:
        return refused(sh(["taskgeom", "zoo", "--model", model, "--log", f"logs/zoo/{model}.log"], repo),
                       "data/world/train.h5[2]")
    finally:
        world.write_bytes(before)


def rejected_call(repo: Path, params: dict) -> tuple[bool, str]:
    model = first(params, "zoo")
    log = repo / f"logs/zoo/{model}.log"
    before = log.read_bytes()
    ok, what = refused(sh(["taskgeom", "zoo", "--model", "no-such-model", "--log", f"logs/zoo/{model}.log"], repo),
                       "no-such-model")
    return ok and log.read_bytes() == before, what + ("" if log.read_bytes() == before else "; the log changed")


def injected_name(repo: Path, params: dict) -> tuple[bool, str]:
    path, evil = repo / "params.yaml", "x;touch PWNED;#"
    before = path.read_bytes()
    bad = yaml.safe_load(before)
    bad["zoo"][evil] = bad["zoo"][first(params, "zoo")]
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    try:
        procs = [sh(["dvc", "repro", "-s", f"zoo@{evil}"], repo),
                 sh(["snakemake", "--cores", "1", f"data/zoo/{evil}/config.json"], repo)]
    finally:
        path.write_bytes(before)
    pwned = (repo / "PWNED").exists()
    rcs = "; ".join(f"{n} rc {p.returncode}" for n, p in zip(("DVC", "Snakemake"), procs))
    return all(p.returncode != 0 for p in procs) and not pwned, rcs + f"; PWNED {'made' if pwned else 'absent'}"


def resume_split(repo: Path, params: dict) -> tuple[bool, str]:
    probe = first(params, "learn.probes")
    cmd = ["taskgeom", "targets", "--probe", probe, "--log", f"logs/targets/{probe}.log"]
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    partial, deadline = repo / f"data/targets/{probe}/.partial", time.time() + 600
    while proc.poll() is None and time.time() < deadline and not list(partial.glob("*val.h5.published")):
        time.sleep(0.02)
    if proc.poll() is not None:
        return False, f"targets ended (rc {proc.returncode}) before its val split was published"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rerun = sh(cmd, repo)
    log = (repo / f"logs/targets/{probe}.log").read_text()
    restored = sorted(set(re.findall(r"(train|val)\.h5: restored as published", log)))
    return rerun.returncode == 0 and restored == ["train", "val"], f"rerun rc {rerun.returncode}; restored {restored}"


def tampered_package(repo: Path, params: dict) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        wheel = Path(tmp) / "tamper_probe-0.1-py3-none-any.whl"
        info = "tamper_probe-0.1.dist-info"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tamper-probe\nVersion: 0.1\n")
            z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr(f"{info}/RECORD", "")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (Path(tmp) / "req.txt").write_text(f"{wheel} --hash=sha256:{digest[::-1]}\n")   # the lock says otherwise
        proc = sh([sys.executable, "-m", "pip", "download", "--no-deps", "--no-index", "--require-hashes", "-r",
                   str(Path(tmp) / "req.txt"), "-d", str(Path(tmp) / "out")], repo)
    return refused(proc, "DO NOT MATCH THE HASHES")


# ----------------------------------------------------------- damaged inputs, set-ups, sizes, names


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


FAULTS: dict[str, Check] = {
    "two-front-ends": two_front_ends,
    "non-finite-target": non_finite_target,
    "corrupt-header": lambda repo, params: corrupt(repo, params, 8),
    "corrupt-weights": lambda repo, params: corrupt(repo, params, -64),
    "non-finite-depth": non_finite_depth,
    "rejected-call": rejected_call,
    "injected-name": injected_name,
    "resume-split": resume_split,
    "tampered-package": tampered_package,
    "damaged-world": damaged_world,
    "two-setups": two_setups,
    "other-size-checkpoint": other_size_checkpoint,
    "small-dead-ends": small_dead_ends,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    params = yaml.safe_load((repo / "params.yaml").read_text())
    rows = []
    for name, check in FAULTS.items():
        before = digests(repo)
        ok, outcome = check(repo, params)
        after = digests(repo)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        left = leftovers(repo)
        rows.append({"fault": name, "outcome": outcome, "files_changed": ";".join(changed[:5]),
                     "left_behind": ";".join(left[:5]), "handled": ok and not changed and not left})
        print(f"{name}: {'handled' if rows[-1]['handled'] else 'NOT HANDLED'} ({outcome})", flush=True)
    (repo / "PWNED").unlink(missing_ok=True)
    table = pd.DataFrame(rows)
    write_result(table, args.out, "faults", "Injected faults",
                 f"{int(table['handled'].sum())} of {len(table)} injected faults handled as expected.")
    return 0 if table["handled"].all() else 1

if __name__ == "__main__":
    sys.exit(main())
