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
- pull-after-dry-run: a teammate's clone with dvc.lock committed runs `snakemake -n`, then `dvc pull`
  -> `dvc status` and `snakemake -n` have nothing to rerun. pull-first: the same, pulling first.
- failed-stage: a head's target cache truncated -> Snakemake's job (its rule alone: both front ends
  would rerun `targets` first, see damaged-intermediate) fails in one line naming the file,
  and `dvc checkout` puts back the outputs Snakemake removed; `dvc repro -s` fails and keeps them.
- rejected-params-dvc: an unknown key in params.yaml -> `dvc repro` refuses it by name; once restored,
  `dvc status`, `dvc repro --dry` and `snakemake -n` have nothing to rerun.
- stage-log-error: a corrupt checkpoint under DVC and Snakemake -> the stage log holds the one-line
  error (no traceback); the outputs are kept (DVC) or put back (`dvc checkout`).
- alias-bomb: params.yaml's `prune.ratios` made of nested YAML aliases (9**9 numbers expanded) ->
  `taskgeom params check`, `snakemake -n`, `dvc status` and `dvc repro` each refuse it within a minute
  in one line naming params.yaml.
- non-utf8-params: a latin-1 byte in params.yaml -> the same four refuse it in one line naming the
  byte and its offset.
- symlink-loop: `data/world/val.h5` made a link to itself -> `snakemake -n`, `dvc status` and `dvc repro
  --dry` name it in one line with what to do; doing it (`rm`, `dvc checkout --force`) restores the
  file, with nothing to rerun.
- dry-run-fresh-clone: `dvc repro --dry` on a git clone of the repository -> it plans every stage and
  writes no output.
- empty-link: `taskgeom data link NAME` with an empty PATH, `.` or `/` -> refused in one line; no link.
- recovery-command: half of the test split as a new file -> `taskgeom sources` refuses it in one line
  naming the file; the `dvc checkout --force` it prints restores it, with nothing to rerun.
- stale-params, damaged-world-rerun, damaged-intermediate, params-edited-mid-run,
  run-cache-mid-run, rerun-triggers-mtime, pulled-clone-damage: the faults between the two front
  ends, in front_end_faults.py.

Every fault ends by comparing every file under data/ and results/ with its digest before.

    python benchmarks/fault_injection.py REPO [--out results/benchmarks] [--faults NAME,...]

Writes <out>/faults.{csv,md} and exits 1 unless every fault had its expected outcome.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import front_end_faults
import h5py
import numpy as np
import pandas as pd
import yaml
from crash_test import digests, leftovers, seconds, write_result
from fault_tools import first, held, in_step, refused, said, sh, up_to_date
from input_faults import HOSTILE_INPUT, damaged_world, other_size_checkpoint, small_dead_ends, two_setups

from taskgeom.pipeline import config
from taskgeom.pipeline.made import RERUN
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.stage import resolve

TARGETS, HEAD, DIAGNOSE = (next(s for s in STAGES if s.name == name) for name in ("targets", "head", "diagnose"))

Check = Callable[[Path, dict], tuple[bool, str]]


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


# What a failed or refused run leaves, on a teammate's clone and under each front end (docs/failures.md)


def pull_after_dry_run(repo: Path, params: dict, look_first: bool = True) -> tuple[bool, str]:
    git = ["git", "-c", "user.email=faults@taskgeom", "-c", "user.name=taskgeom"]
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        sh(["git", "clone", "-q", str(repo), str(clone)], repo)
        for name in ("params.yaml", "dvc.lock"):  # the teammate's commit: the parameters and the lock they ran
            shutil.copyfile(repo / name, clone / name)
        sh(["git", "add", "params.yaml", "dvc.lock"], clone)
        sh([*git, "commit", "-qm", "lock", "--allow-empty"], clone)
        sh(["dvc", "remote", "add", "-d", "team", str(repo / ".dvc/cache")], clone)   # the cache as a remote
        looked = sh(["snakemake", "-n"], clone) if look_first else None
        pulled = sh(["dvc", "pull"], clone)
        ok = (looked is None or looked.returncode == 0) and pulled.returncode == 0 and up_to_date(clone)
    first_ = "snakemake -n, dvc pull" if look_first else "dvc pull"
    return ok, f"{first_} rc {pulled.returncode}; then {'nothing to rerun' if ok else 'work planned'}"


def stage_error(repo: Path, log: str) -> str:
    """The stage log's error line, or what it holds instead; a traceback is named."""
    text = (repo / log).read_text() if (repo / log).is_file() else ""
    line = next((x for x in text.splitlines() if "taskgeom: error:" in x), "no error in the log")
    return line.split("taskgeom: error: ", 1)[-1][:200] + ("; a traceback" if "Traceback" in text else "")


def fails_then_restored(repo: Path, address: str, outputs: list[Path], log: str) -> tuple[bool, str]:
    """Run a stage instance whose input is broken under DVC, then Snakemake, then `dvc checkout` it."""
    published = {p: p.read_bytes() for p in outputs}
    dvc = sh(["dvc", "repro", "-s", address], repo)
    kept = {p: p.read_bytes() if p.exists() else None for p in outputs} == published
    said = stage_error(repo, log)
    # its rule alone: both front ends would rerun the maker of a damaged input first (pipeline/sync.py)
    smk = sh(["snakemake", "-c1", "--allowed-rules", address.split("@")[0], str(outputs[0].relative_to(repo))], repo)
    removed = not any(p.exists() for p in outputs)
    sh(["dvc", "checkout", address], repo)
    back = {p: p.read_bytes() if p.exists() else None for p in outputs} == published
    ok = dvc.returncode != 0 and smk.returncode != 0 and kept and back and said == stage_error(repo, log)
    return ok, (f"{said}; DVC rc {dvc.returncode} {'kept' if kept else 'lost'} the outputs; Snakemake rc "
                f"{smk.returncode} {'removed' if removed else 'kept'} them, `dvc checkout` "
                f"{'put them back' if back else 'did not'}")


def failed_stage(repo: Path, params: dict) -> tuple[bool, str]:
    in_step(repo)
    head = first(params, "learn.heads")
    source = repo / f"data/targets/{config.get(params, 'learn.heads')[head]['probe']}/train.h5"
    before = source.read_bytes()
    source.write_bytes(before[:len(before) // 10])
    try:
        outputs = [repo / p for p in resolve(HEAD, params, head)[1].values()]
        ok, what = fails_then_restored(repo, f"head@{head}", outputs, f"logs/head/{head}.log")
    finally:
        source.write_bytes(before)
    clean = up_to_date(repo)
    return ok and clean and str(source.relative_to(repo)) in what, what + ("; nothing to rerun" if clean else "")


def stage_log_error(repo: Path, params: dict) -> tuple[bool, str]:
    in_step(repo)
    _, model = diagnose_call(params)
    probe = first(params, "diagnose.probes")
    weights = repo / f"data/zoo/{model}/model.safetensors"
    before = weights.read_bytes()
    weights.write_bytes(before[:8] + np.random.default_rng(0).bytes(16) + before[24:])
    try:
        outputs = [repo / p for p in resolve(DIAGNOSE, params, probe)[1].values()]
        ok, what = fails_then_restored(repo, f"diagnose@{probe}", outputs, f"logs/diagnose/{probe}.log")
    finally:
        weights.write_bytes(before)
    clean = up_to_date(repo)
    return ok and clean and "traceback" not in what, what + ("; nothing to rerun" if clean else "")


def rejected_params_dvc(repo: Path, params: dict) -> tuple[bool, str]:
    path = repo / "params.yaml"
    before = path.read_bytes()
    path.write_bytes(before + b"\nno_such_key: 1\n")
    try:
        ok, what = refused(sh(["dvc", "repro"], repo), "no_such_key")
    finally:
        path.write_bytes(before)
    dry = sh(["dvc", "repro", "--dry"], repo)
    clean = dry.returncode == 0 and "Running stage" not in dry.stdout and up_to_date(repo)
    return ok and clean, what + ("; restored: nothing to rerun" if clean else "; restored: work planned")


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
    "pull-after-dry-run": pull_after_dry_run,
    "failed-stage": failed_stage,
    "rejected-params-dvc": rejected_params_dvc,
    "stage-log-error": stage_log_error,
    "pull-first": lambda repo, params: pull_after_dry_run(repo, params, look_first=False),
    "stale-params": front_end_faults.stale_params,
    "damaged-world-rerun": front_end_faults.damaged_world,
    "damaged-intermediate": front_end_faults.damaged_intermediate,
    "params-edited-mid-run": front_end_faults.params_edited_mid_run,
    "run-cache-mid-run": lambda repo, params: front_end_faults.params_edited_mid_run(repo, params, then_repro=True),
    "rerun-triggers-mtime": front_end_faults.rerun_triggers_mtime,
    "pulled-clone-damage": front_end_faults.pulled_clone_damage,
    **HOSTILE_INPUT,   # alias-bomb ... recovery-command (input_faults.py)
}


def main(argv: list[str] | None = None) -> int:
    # its reruns must run, not keep outputs whose making is unchanged (pipeline/made.py); a fault
    # that tests that reuse drops it for its own commands
    os.environ.setdefault(RERUN, "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    ap.add_argument("--faults", help="comma-separated names of the faults to inject (default: every one)")
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    params = yaml.safe_load((repo / "params.yaml").read_text())
    chosen = args.faults.split(",") if args.faults else list(FAULTS)
    if unknown := sorted(set(chosen) - set(FAULTS)):
        ap.error(f"--faults: unknown {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    rows = []
    for name, check in ((n, FAULTS[n]) for n in chosen):
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
