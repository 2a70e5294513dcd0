"""An ordered parallel map over forked worker processes that end with the stage.

A stage that declares more than one thread can hand independent, deterministic pieces of work
(a function of their arguments alone) to ``ordered_map``: the results come back in the order of
the arguments, so what the stage writes does not depend on the number of workers.

The workers are forked, so they need no imports of their own. They ignore SIGINT (the stage
process takes it and ends the pool) and, on Linux, get SIGKILL when the stage process dies
(``PR_SET_PDEATHSIG``), so a stage killed by any signal leaves no worker behind.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:  # the stage died before prctl took effect
        os._exit(1)


@contextmanager
def ordered_map(workers: int) -> Iterator[Callable[[Callable[[A], R], Iterable[A]], Iterator[R]]]:
    """A ``map(fn, items)`` for the block: in this process for ``workers`` ≤ 1, else over that
    many forked processes (``fn`` and the items must pickle; results are yielded in order)."""
    if workers <= 1:
        yield map
        return
    pool = multiprocessing.get_context("fork").Pool(workers, initializer=_die_with, initargs=(os.getpid(),))
    try:
        yield pool.imap
    finally:
        pool.terminate()
        pool.join()
