"""What the fault injection's checks share: running a command in the repository, what it said,
whether a stage lock is held, and whether a command was refused naming what it should."""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

from taskgeom.pipeline import config


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


def refused(proc: subprocess.CompletedProcess, *names: str) -> tuple[bool, str]:
    text = proc.stderr + proc.stdout
    line = next((x.strip() for x in text.splitlines() if names and names[0] in x), said(proc))
    return proc.returncode != 0 and all(n in text for n in names), f"rc {proc.returncode}: {line[:240]}"
