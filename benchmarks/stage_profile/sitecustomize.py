"""A sampler for stage commands, loaded by Python at start-up when this folder is on PYTHONPATH
(``benchmarks/stage_profile.py`` puts it there) and ``TASKGEOM_PROFILE`` names a folder.

In a ``taskgeom <stage>`` process only, a wall-clock timer (SIGALRM, every
``TASKGEOM_PROFILE_INTERVAL`` seconds, default 0.01) interrupts the main thread, which files the
seconds since the previous sample under the first category of ``CATEGORIES`` that any frame of
its own stack matches (``other`` when none does), under the innermost frame of the package's
modules, and under its innermost frame. Python runs the handler between bytecodes, so a long
operator of torch or h5py is charged whole, to the frame that called it, when it returns. The
stack is walked by the thread that owns it: walking another thread's frames from a sampling
thread crashed CPython 3.11 inside a stage. At exit it writes
``$TASKGEOM_PROFILE/<log name>.<pid>.json`` (the ``--log`` path below ``logs/``, ``/`` as ``~``):
wall seconds from interpreter start and seconds per category, per package frame and per
innermost frame.
"""

from __future__ import annotations

import os
import sys

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # (category, module prefixes); the first category that any frame's module matches wins
    ("imports", ("importlib",)),
    ("hdf5 and checkpoint I/O", ("h5py", "safetensors", "taskgeom.data.hdf5", "taskgeom.artifacts.checkpoints")),
    ("figures", ("matplotlib",)),
    ("rendering", ("taskgeom.data.world",)),
    ("JVP, VJP and backward", ("torch._functorch", "torch.autograd", "torch.func", "taskgeom.linalg.operator")),
    ("optimizer", ("torch.optim",)),
    ("statistics", ("scipy",)),
    ("forward", ("torch.nn", "taskgeom.models", "timm", "transformers")),
)
PACKAGE = "taskgeom."


def _category(modules: list[str]) -> str:
    for name, prefixes in CATEGORIES:
        if any(m == p or m.startswith(p + ".") for m in modules for p in prefixes):
            return name
    return "other"


def _name(argv: list[str]) -> str:
    log = argv[argv.index("--log") + 1] if "--log" in argv[:-1] else "-".join(argv[1:2]) or "taskgeom"
    log = log.removeprefix("logs/").removesuffix(".log")
    return log.replace("/", "~")


def _start(folder: str, interval: float) -> None:
    import atexit
    import json
    import signal
    import time

    start = last = time.perf_counter()
    categories: dict[str, float] = {}
    frames: dict[str, float] = {}
    leaves: dict[str, float] = {}

    busy = False

    def sample(signum, frame) -> None:
        # An alarm can arrive while an earlier one is being handled (Python runs a handler between
        # bytecodes, so in the middle of these updates): that one is skipped, and its seconds go
        # to the next sample, so the three tallies always add up to the same total.
        nonlocal busy
        if busy:
            return
        busy = True
        try:
            tally(frame)
        finally:
            busy = False

    def tally(frame) -> None:
        nonlocal last
        now = time.perf_counter()
        seconds, last = now - last, now
        modules, inner = [], None
        leaf = f"{frame.f_globals.get('__name__')}:{frame.f_code.co_name}" if frame is not None else "-"
        while frame is not None:
            module = frame.f_globals.get("__name__") or ""
            modules.append(module)
            if inner is None and module.startswith(PACKAGE):
                inner = f"{module}:{frame.f_code.co_name}"
            frame = frame.f_back
        cat = _category(modules)
        categories[cat] = categories.get(cat, 0.0) + seconds
        key = f"{cat} | {inner or '-'}"
        frames[key] = frames.get(key, 0.0) + seconds
        leaves[leaf] = leaves.get(leaf, 0.0) + seconds

    def write() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{_name(sys.argv)}.{os.getpid()}.json")
        with open(path, "w") as fh:
            json.dump({"argv": sys.argv, "wall_s": time.perf_counter() - start, "interval_s": interval,
                       "categories": categories, "frames": frames, "leaves": leaves}, fh, indent=1)

    signal.signal(signal.SIGALRM, sample)
    signal.setitimer(signal.ITIMER_REAL, interval, interval)
    atexit.register(write)


def _is_taskgeom() -> bool:
    """Whether this interpreter runs the ``taskgeom`` command: the console script, or ``python -m
    taskgeom`` (the environment's launcher), whose module sys.argv does not name yet."""
    return os.path.basename(sys.argv[0] if sys.argv else "") == "taskgeom" or sys.orig_argv[1:3] == ["-m", "taskgeom"]


if os.environ.get("TASKGEOM_PROFILE") and _is_taskgeom():
    _start(os.environ["TASKGEOM_PROFILE"], float(os.environ.get("TASKGEOM_PROFILE_INTERVAL", "0.01")))
