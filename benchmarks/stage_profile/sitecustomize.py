"""A stack sampler for stage commands, loaded by Python at start-up when this folder is on
PYTHONPATH (``benchmarks/stage_profile.py`` puts it there) and ``TASKGEOM_PROFILE`` names a folder.

In a ``taskgeom <stage>`` process only, a daemon thread reads the main thread's stack every
``TASKGEOM_PROFILE_INTERVAL`` seconds (default 0.01) and files the sample under the first
category of ``CATEGORIES`` that any frame of the stack matches (``other`` when none does), and
under the innermost frame of the package's modules. At exit it writes
``$TASKGEOM_PROFILE/<log name>.<pid>.json`` (the ``--log`` path below ``logs/``, ``/`` as ``~``):
wall seconds from interpreter start, samples per category and per package frame.

torch's operators release the GIL while they run, so a sample lands inside them rather than after.
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
    import threading
    import time

    start, main = time.perf_counter(), threading.main_thread().ident
    categories: dict[str, int] = {}
    frames: dict[str, int] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(interval):
            frame = sys._current_frames().get(main)
            modules, inner = [], None
            while frame is not None:
                module = frame.f_globals.get("__name__") or ""
                modules.append(module)
                if inner is None and module.startswith(PACKAGE):
                    inner = f"{module}:{frame.f_code.co_name}"
                frame = frame.f_back
            cat = _category(modules)
            categories[cat] = categories.get(cat, 0) + 1
            key = f"{cat} | {inner or '-'}"
            frames[key] = frames.get(key, 0) + 1

    def write() -> None:
        stop.set()
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{_name(sys.argv)}.{os.getpid()}.json")
        with open(path, "w") as fh:
            json.dump({"argv": sys.argv, "wall_s": time.perf_counter() - start, "interval_s": interval,
                       "categories": categories, "frames": frames}, fh, indent=1)

    threading.Thread(target=sample, name="stage-profile", daemon=True).start()
    atexit.register(write)


if os.environ.get("TASKGEOM_PROFILE") and os.path.basename(sys.argv[0] if sys.argv else "") == "taskgeom":
    _start(os.environ["TASKGEOM_PROFILE"], float(os.environ.get("TASKGEOM_PROFILE_INTERVAL", "0.01")))
