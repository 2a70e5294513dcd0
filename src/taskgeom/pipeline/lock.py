"""One run of a stage instance at a time, whichever front end started it.

Snakemake rules, DVC stages and direct calls all run the ``taskgeom <stage>`` command, which
takes an advisory lock (``flock``) on ``.taskgeom/locks/<stage>[@<item>].lock`` after its
parameters and inputs are checked and before it opens its log or touches any file of the stage.
A second run of the same instance waits for the first to finish, saying which process holds
the lock; the kernel releases the lock when its holder exits or is killed, so a dead run never
blocks the next. Inside the lock, a partial file left by a killed run is known to be nobody's
live work, which is what lets resume code discard a damaged one safely.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_DIR = Path(".taskgeom/locks")


def lock_path(stage: str, item: str | None = None) -> Path:
    """The lock file of a stage instance."""
    return LOCK_DIR / (f"{stage}@{item}.lock" if item else f"{stage}.lock")


@contextlib.contextmanager
def stage_lock(stage: str, item: str | None = None,
               say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)) -> Iterator[Path]:
    """Hold the stage instance's lock for the ``with`` block, waiting (after ``say`` names the
    holder's process) while another run holds it. The file records the holder's PID and command."""
    path = lock_path(stage, item)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            say(f"taskgeom: stage {path.stem} is running in process {holder}; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} ({' '.join(sys.argv)})\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock
