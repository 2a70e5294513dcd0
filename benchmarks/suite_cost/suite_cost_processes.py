"""A record of each Python process's own CPU, for ``benchmarks/suite_cost.py``: imported at start-up
by every interpreter of the environment whose environment names a folder in
``TASKGEOM_SUITE_PROCESSES`` (a ``.pth`` file that ``suite_cost.record`` puts in the environment's
site-packages for one run), it writes, at the process's exit, one JSON file in that folder: its
argv, its own user + system CPU seconds and its working directory. A process whose environment
lacks the variable at its exit (a command run with another environment) writes nothing.

Each process counts only its own CPU (``RUSAGE_SELF``), so the records add up without counting a
command twice, and reach where the per-test records cannot: SLURM jobs, which the cluster's
daemons start, and stages that the stage server runs in its forks (the CPU of a fork starts at
zero, and the fork runs the exit hooks it inherited). A process that leaves by ``os._exit`` or
a signal writes nothing.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sys

ENV = "TASKGEOM_SUITE_PROCESSES"


def _record() -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        record = {"argv": [a[:200] for a in sys.argv[:12]], "cpu_s": usage.ru_utime + usage.ru_stime,
                  "pid": os.getpid(), "cwd": os.getcwd()}
        with open(os.path.join(folder, f"{os.getpid()}-{os.urandom(4).hex()}.json"), "w") as f:
            json.dump(record, f)
    except OSError:  # its folder, or the run's, is gone: nothing to record
        pass


atexit.register(_record)
