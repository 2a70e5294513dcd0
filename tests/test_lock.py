"""Stage locks: a second run of a stage instance waits for the first, naming its process; a
killed holder releases the lock; other instances run side by side."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from taskgeom.pipeline.lock import lock_path, stage_lock

HOLD = """
import sys, time
from taskgeom.pipeline.lock import stage_lock
with stage_lock("targets", "p"):
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


def holder(tmp_path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(seconds)], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_waits_for_the_first_and_names_its_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = holder(tmp_path, 1.5)
    said: list[str] = []
    with stage_lock("targets", "q", say=said.append):   # another instance: no wait
        assert not said
    start = time.perf_counter()
    with stage_lock("targets", "p", say=said.append) as path:
        waited = time.perf_counter() - start
        assert proc.wait(timeout=10) == 0   # the holder had released it: its with-block was over
        assert path.read_text().startswith(f"{os.getpid()} ")
    assert waited > 0.5 and len(said) == 1 and f"targets@p is running in process {proc.pid} " in said[0]


def test_a_killed_holder_releases_the_lock(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = holder(tmp_path, 60)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    said: list[str] = []
    start = time.perf_counter()
    with stage_lock("targets", "p", say=said.append):
        assert time.perf_counter() - start < 5 and not said
    assert lock_path("targets", "p") == tmp_path.joinpath(".taskgeom/locks/targets@p.lock").relative_to(tmp_path)
