"""A warm interpreter for ``taskgeom`` commands: stages without their imports.

Each ``taskgeom <stage>`` process spends seconds importing torch, timm, scipy and pandas before
it does any work, which dominates a small DAG of short stages (the smoke profile, the test
suite). ``taskgeom serve --socket PATH`` imports every stage's runner once and then waits on a
Unix socket; a ``taskgeom`` command started with ``TASKGEOM_SERVER=PATH`` in its environment is a
thin client (``pipeline/entry.py``) that hands its arguments, working directory, environment and
standard streams to the server and exits with the status of the command the server ran.
Nothing else changes:

- Each command runs in a fresh ``fork`` of the server (the *worker*), so no state passes from
  one command to the next, and the worker runs exactly ``cli.main`` with the client's argv,
  cwd, environment (``os.environ`` replaced) and file descriptors 0-2. The server never runs
  torch's thread pool before forking, so each worker starts its own (``runtime.use_threads``
  sets its size, as in a fresh process).
- A per-command *handler* (forked from the server, forking the worker) relays: a signal the
  client receives (SIGTERM, SIGINT, SIGHUP) goes to the worker's process group; the worker's
  exit status goes back to the client, which exits with the same code or dies of the same
  signal. A client that dies (``kill -9``, a front end killing its job's process group) closes
  its socket, and the handler kills the worker's process group at once, as the kill would have
  killed a direct run.

Protocol, client to handler: 4-byte length with the client's fds 0-2 attached (``SCM_RIGHTS``),
then that many bytes of JSON ``{"argv", "cwd", "env"}``, then any number of 4-byte signal
numbers. Handler to client: 8 bytes, ``(kind, value)``: kind 0 an exit code, 1 a signal.

The server serves one user's commands from one virtual environment; code changed after it
started is not seen until it restarts. Snakemake's ``benchmark:`` files measure the job's own
process tree, the client: their wall time is the command's, their CPU and memory are not.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

ENV = "TASKGEOM_SERVER"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXITED, SIGNALED = 0, 1
POLL_S = 0.05  # how often a handler looks at its worker and its client


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``conn``, or fewer if the peer closed first."""
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------- client


def delegate(path: str, argv: list[str]) -> int:
    """Run ``taskgeom argv`` in the server at ``path`` as if in this process; its exit code.
    Dies of the worker's signal when the worker died of one."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as exc:
        print(f"taskgeom: error: {ENV}={path}: no server answers ({exc.strerror}); start one with "
              f"`taskgeom serve --socket {path}` or unset {ENV}", file=sys.stderr)
        return 2
    header = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    fds = [fd for fd in (0, 1, 2) if _is_open(fd)]
    socket.send_fds(conn, [struct.pack("!I", len(header)), bytes(f in fds for f in (0, 1, 2))], fds)
    conn.sendall(header)
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _frame: _forward(conn, s))
    reply = recv_exactly(conn, 8)
    if len(reply) < 8:
        print("taskgeom: error: the server closed the connection without an exit status", file=sys.stderr)
        return 1
    kind, value = struct.unpack("!ii", reply)
    if kind == SIGNALED:
        signal.signal(value, signal.SIG_DFL)
        os.kill(os.getpid(), value)
    return value


def _forward(conn: socket.socket, sig: int) -> None:
    """Pass a signal the client received on to its command (nothing if the command has ended)."""
    with contextlib.suppress(OSError):
        conn.sendall(struct.pack("!i", sig))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------- server


def warm_up() -> None:
    """Import every stage's runner (and so torch, timm, scipy, pandas, h5py) into this process."""
    from taskgeom.pipeline.registry import STAGES

    for stage in STAGES:
        importlib.import_module(stage.runner)


def serve(path: str, main: Callable[[list[str]], int]) -> int:
    """Serve commands on the Unix socket ``path`` until SIGTERM or SIGINT, each one run as
    ``main(argv)`` (``cli.main``); removes the socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        if probe.connect_ex(path) == 0:
            print(f"taskgeom: error: {path}: a server already answers there", file=sys.stderr)
            return 2
    warm_up()
    sys.stdout.flush()
    sys.stderr.flush()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    Path(path).unlink(missing_ok=True)  # a socket file left by a server that was killed
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(1.0)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    try:
        while not stop:
            with contextlib.suppress(OSError):  # a timeout, or a signal while waiting
                conn, _ = listener.accept()
                if os.fork() == 0:
                    listener.close()
                    _exit_after(lambda: _handle(conn, main))
                conn.close()
            _reap()
    finally:
        listener.close()
        Path(path).unlink(missing_ok=True)
    return 0


def _reap() -> None:
    """Collect the handlers that finished."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _exit_after(body: Callable[[], int], at_exit: bool = False) -> None:
    """Run ``body`` in a forked child and leave the process with its status, never returning
    into the caller's stack; ``at_exit``: run the ``atexit`` functions first, as an interpreter
    does when it exits."""
    code = 1
    try:
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            if at_exit:
                atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _handle(conn: socket.socket, main: Callable[[list[str]], int]) -> int:
    """Receive one command, run it in a worker, relay signals and the exit status."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    conn.settimeout(None)
    msg, fds, _, _ = socket.recv_fds(conn, 7, 3)
    (length,), have = struct.unpack("!I", msg[:4]), msg[4:7]
    request = json.loads(recv_exactly(conn, length))
    passed = iter(fds)
    streams = [next(passed) if have[i] else None for i in range(3)]
    worker = os.fork()
    if worker == 0:
        conn.close()
        _exit_after(lambda: _work(request, streams, main), at_exit=True)
    with contextlib.suppress(OSError):  # the worker does it too: whichever runs first
        os.setpgid(worker, worker)
    for fd in fds:
        os.close(fd)
    client = True
    while True:
        done, status = os.waitpid(worker, 0 if not client else os.WNOHANG)
        if done:
            reply = (SIGNALED, os.WTERMSIG(status)) if os.WIFSIGNALED(status) else (EXITED, os.WEXITSTATUS(status))
            with contextlib.suppress(OSError):
                conn.sendall(struct.pack("!ii", *reply))
            return 0
        if select.select([conn], [], [], POLL_S)[0]:
            data = recv_exactly(conn, 4)
            if len(data) < 4:  # the client is gone: its command goes with it
                client = False
                _kill_group(worker, signal.SIGKILL)
            else:
                _kill_group(worker, struct.unpack("!i", data)[0])


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _work(request: dict, streams: list[int | None], main: Callable[[list[str]], int]) -> int:
    """The worker: become the client's command and run it."""
    with contextlib.suppress(OSError):  # its own group, which the handler signals with what it starts
        os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(streams):
        if fd is None:
            fd = os.open(os.devnull, os.O_RDWR)
        if fd != target:  # (a server started with a standard stream closed receives on its number)
            os.dup2(fd, target)
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ENV)  # a taskgeom command the stage starts runs in the worker's own process tree
    sys.argv = ["taskgeom", *request["argv"]]
    return main(request["argv"])
