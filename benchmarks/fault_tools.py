"""What the fault injection's checks share: running a command in the repository, what it said,
whether a stage lock is held, whether a command was refused naming what it should, and whether
both front ends have nothing to rerun."""

from __future__ import annotations

import fcntl
import json
import subprocess
from pathlib import Path

from taskgeom.pipeline import config
from taskgeom.pipeline.sync import FOLLOWED


def sh(cmd: list[str], repo: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env=env)


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


def refused(proc: subprocess.CompletedProcess, *names: str) -> tuple[bool, str]:
    text = proc.stderr + proc.stdout
    line = next((x.strip() for x in text.splitlines() if names and names[0] in x), said(proc))
    return proc.returncode != 0 and all(n in text for n in names), f"rc {proc.returncode}: {line[:240]}"


def in_step(repo: Path) -> None:
    """Snakemake takes DVC's state afresh: earlier faults wrote files back with new dates, and a
    Snakemake run since may have recorded only its own jobs."""
    (repo / FOLLOWED).unlink(missing_ok=True)
    sh(["snakemake", "-n"], repo)


def up_to_date(repo: Path) -> bool:
    """Whether both front ends have nothing to rerun."""
    status, dry = sh(["dvc", "status", "--json"], repo), sh(["snakemake", "-n"], repo)
    return (status.returncode == 0 and json.loads(status.stdout or "{}") == {}
            and "Nothing to be done" in dry.stdout + dry.stderr)
