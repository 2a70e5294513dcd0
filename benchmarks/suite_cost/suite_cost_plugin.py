"""A pytest plugin for ``benchmarks/suite_cost.py``: each test's wall time and the CPU seconds of
the process that ran it and of the commands it started, appended as one JSON line to the file
that ``TASKGEOM_SUITE_COST`` names (under pytest-xdist, from every worker).

CPU is ``getrusage``: the worker's own (RUSAGE_SELF) and its children's (RUSAGE_CHILDREN), which
counts a command and the commands it waited for once it has been waited for, plus what the
worker's live descendants used so far, with the commands they waited for: the stage server
(tests/conftest.py) lives as long as the worker, and runs the tests' stages in its children. A
fixture's setup counts toward the test that first needed it. Work done outside the worker's
process tree (jobs that SLURM's daemons start) is not counted."""

from __future__ import annotations

import json
import os
import resource
import time

import psutil
import pytest


def _cpu() -> tuple[float, float]:
    """(own, descendants') user + system CPU seconds of this process so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime + _live_descendants()


def _live_descendants() -> float:
    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            t = proc.cpu_times()
        except psutil.Error:  # ended since it was listed: its parent counts it once it waits
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    out = os.environ.get("TASKGEOM_SUITE_COST")
    if not out:
        yield
        return
    start, (own, children) = time.time(), _cpu()
    yield
    own_end, children_end = _cpu()
    record = {"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "master"), "start": start,
              "wall_s": time.time() - start, "cpu_own_s": own_end - own, "cpu_children_s": children_end - children}
    with open(out, "a") as f:  # one short line per write: the workers' lines do not interleave
        f.write(json.dumps(record) + "\n")
