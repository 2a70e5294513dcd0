"""taskgeom.pipeline.pool: results in order on any number of workers, workers that end with the
stage, and a fetch that writes the same bytes on one process or two."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskgeom.pipeline.pool import ordered_map
from taskgeom.pipeline.registry import WORLD_FILES
from taskgeom.pipeline.runtime import StageContext
from taskgeom.stages import fetch

WORLD = {"seed": 5, "resolution": 32, "eval_resolutions": [48], "splits": {"train": 10, "val": 3, "test": 7},
         "multiview": {"views": 2, "train": 5, "test": 3}, "num_objects": [3, 4], "fov_deg": [45.0, 60.0],
         "room_fov_deg": [50.0, 50.0], "room_share": 0.4, "chunk": 2}


def square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_order(workers: int):
    with ordered_map(workers) as map_:
        out = list(map_(square_and_pid, range(20)))
    assert [v for v, _ in out] == [x * x for x in range(20)]
    assert ({pid for _, pid in out} == {os.getpid()}) == (workers == 1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:   # a zombie is dead
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_the_stage_process():
    script = ("import multiprocessing, sys, time\n"
              "from taskgeom.pipeline.pool import ordered_map\n"
              "with ordered_map(2) as map_:\n"
              "    results = map_(time.sleep, [60] * 4)\n"
              "    print(*[p.pid for p in multiprocessing.active_children()], flush=True)\n"
              "    list(results)\n")
    stage = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    workers = [int(p) for p in stage.stdout.readline().split()]
    assert len(workers) == 2 and all(alive(p) for p in workers)
    stage.send_signal(signal.SIGKILL)
    stage.wait()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in workers)


def test_fetch_writes_the_same_bytes_on_two_processes(tmp_path: Path):
    def world(threads: int) -> dict[str, bytes]:
        root = tmp_path / str(threads)
        root.mkdir()
        outputs = {k: root / Path(v).name for k, v in WORLD_FILES.items()}
        outputs |= {"summary_csv": root / "summary.csv", "summary_md": root / "summary.md",
                    "figure_png": root / "samples.png", "figure_pdf": root / "samples.pdf"}
        fetch.run(StageContext("fetch", {}, outputs, {"world": WORLD}, threads=threads))
        return {k: outputs[k].read_bytes() for k in (*WORLD_FILES, "summary_csv")}

    assert world(2) == world(1)
