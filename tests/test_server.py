"""The stage server (pipeline/server.py): a command run through it behaves as the same command
run directly (output, exit status, working directory, environment, the bytes a stage writes),
and a signal or a kill of the client reaches the command it started."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import BIN, REPO, copy_run, output_digests, run, tool_env

from taskgeom.pipeline import server
from taskgeom.pipeline.lock import lock_path
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.stage import resolve

pytestmark = pytest.mark.pipeline

TASKGEOM = str(BIN / "taskgeom")


def both(cmd: list[str], cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """``cmd`` run directly and through the server, with ``env`` added to both environments."""
    return tuple(subprocess.run(cmd, cwd=cwd, env=tool_env(warm) | env, capture_output=True, text=True, timeout=120)
                 for warm in (False, True))


def test_a_command_through_the_server_is_the_command(tmp_path: Path):
    shutil.copyfile(REPO / "params/smoke.yaml", tmp_path / "mine.yaml")
    (tmp_path / "bad.yaml").write_text("world: [\n")
    for cmd in ([TASKGEOM, "params", "check", "mine.yaml"], [TASKGEOM, "params", "check", "bad.yaml"],
                [TASKGEOM, "params", "check", "absent.yaml"], [TASKGEOM, "no-such-command"],
                [TASKGEOM, "fetch", "--params", "bad.yaml"]):
        cold, warm = both(cmd, tmp_path)
        assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr), cmd
        assert warm.returncode == (0 if cmd[-1] == "mine.yaml" else 2), cmd
    # the environment is the client's: an unknown profile named by it
    cold, warm = both(["sh", "-c", f'{TASKGEOM} params use "$PROFILE"'], tmp_path, PROFILE="nowhere")
    assert warm.returncode == cold.returncode == 2 and "nowhere" in warm.stderr and warm.stderr == cold.stderr


def test_stages_run_cold_write_the_bytes_of_the_warm_smoke_run(smoke_run: Path, smoke_digests: dict,
                                                               tmp_path: Path):
    """The smoke run's stages ran in the server; a model trained and a head fitted in fresh
    interpreters, each on the threads it declares, write the same bytes (the SLURM test runs
    its jobs through the server too)."""
    repo = copy_run(smoke_run, tmp_path / "repo")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    stages = {s.name: s for s in STAGES}
    written = []
    for name, item in (("zoo", "tiny-cls"), ("head", "dpt-depth-l4")):
        stage = stages[name]
        run([TASKGEOM, name, f"--{stage.wildcard}", item], repo, warm=False)
        written += [str(p) for p in resolve(stage, params, item)[1].values()]
    now = output_digests(repo)
    assert [rel for rel in written if now[rel] != smoke_digests[rel]] == []


def hold_the_lock(tmp_path: Path) -> int:
    """Take ``fetch``'s stage lock in ``tmp_path`` (a smoke params.yaml beside it); its descriptor."""
    shutil.copyfile(REPO / "params/smoke.yaml", tmp_path / "params.yaml")
    lock = tmp_path / lock_path("fetch")
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def blocked_fetch(tmp_path: Path) -> subprocess.Popen:
    """``taskgeom fetch`` through the server in ``tmp_path``, waiting for the lock this test holds."""
    proc = subprocess.Popen([TASKGEOM, "fetch"], cwd=tmp_path, env=tool_env(), stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert "is running in process" in proc.stderr.readline()
    return proc


def in_directory(path: Path) -> list[int]:
    """PIDs of the processes whose working directory is ``path``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == path:
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def gone(path: Path, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while in_directory(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_killing_the_client_kills_its_command(tmp_path: Path):
    fd = hold_the_lock(tmp_path)
    proc = blocked_fetch(tmp_path)
    assert len(in_directory(tmp_path)) == 2  # the client and the worker
    os.killpg(proc.pid, signal.SIGKILL)      # as Snakemake and the crash tests stop a job
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert gone(tmp_path)
    os.close(fd)
    time.sleep(0.5)
    assert not (tmp_path / "data").exists()  # nothing started fetching once the lock was free


def test_a_signal_to_the_client_reaches_its_command_and_its_status_comes_back(tmp_path: Path):
    fd = hold_the_lock(tmp_path)
    proc = blocked_fetch(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM  # the worker died of it, and so did the client
    assert gone(tmp_path)
    proc = blocked_fetch(tmp_path)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 1 and "KeyboardInterrupt" in proc.stderr.read()  # Python's own handler
    os.close(fd)


def test_a_second_server_on_a_live_socket_is_refused(tmp_path: Path):
    live = tool_env()[server.ENV]
    proc = subprocess.run([TASKGEOM, "serve", "--socket", live], cwd=tmp_path, env=tool_env(warm=False),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "a server already answers there" in proc.stderr
    assert subprocess.run([TASKGEOM, "--version"], env=tool_env(), capture_output=True).returncode == 0


def test_no_server_is_a_clear_error(tmp_path: Path):
    env = tool_env(warm=False) | {server.ENV: str(tmp_path / "absent.sock")}
    proc = subprocess.run([TASKGEOM, "params", "check"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and f"{server.ENV}={tmp_path / 'absent.sock'}: no server answers" in proc.stderr
