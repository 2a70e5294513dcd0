"""``dvc`` and ``snakemake`` command lines run one after another in one interpreter, for tests that
ask either front end questions (``dvc status``, ``snakemake -n``: tests/conftest.py's ``run``,
tests/test_reruns.py).

Each fresh ``dvc`` or ``snakemake`` process spends about a second importing its tool before it
reads anything; a test that asks dozens of times pays that each time. ``WarmCLI(tool, cwd)``
starts this file as a process that imports the tool once, then runs each command line it is
sent through the tool's own entry point (``taskgeom.pipeline.dvc_atomic.main``, which the
environment's ``dvc`` launcher runs, or ``snakemake.cli.main``) with the process's standard
output and error redirected to files, and sends back the exit status and both outputs. Each
command builds its repository state afresh (DVC's ``Repo``, Snakemake's workflow), as a new
process would, in the working directory it names (the process's own where it names none).
Protocol: one JSON line per command each way (``{"argv", "cwd"}``; ``{"returncode", "stdout",
"stderr"}``), on the process's stdin and on a copy of its stdout made before any command runs.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ANSWER_TIMEOUT = 1800  # s: a guard against a hung command, not a speed target


def entry_point(tool: str) -> Callable[[list[str]], int]:
    """The function ``tool``'s launcher runs, imported once."""
    if tool == "dvc":
        from taskgeom.pipeline import dvc_atomic

        return dvc_atomic.main
    if tool == "snakemake":
        from snakemake.cli import main

        return main
    raise SystemExit(f"warm_cli: no entry point for {tool!r}")


def captured(main: Callable[[list[str]], int], argv: list[str], cwd: str | None = None) -> dict:
    """``main(argv)`` in ``cwd`` with file descriptors 1 and 2 sent to files; its status and both
    outputs."""
    home = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            os.chdir(home)
        out.seek(0)
        err.seek(0)
        return {"returncode": code or 0, "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace")}


def serve(tool: str) -> None:
    """Answer command lines on stdin until it closes."""
    replies = os.fdopen(os.dup(1), "w")
    main = entry_point(tool)
    for line in sys.stdin:
        request = json.loads(line)
        replies.write(json.dumps(captured(main, request["argv"], request["cwd"])) + "\n")
        replies.flush()


class WarmCLI:
    """``tool`` (``dvc`` or ``snakemake``) answering command lines in ``cwd``, in ``env``; a
    context manager that stops the process at exit."""

    def __init__(self, tool: str, cwd: Path, env: dict[str, str]) -> None:
        self.tool = tool
        self.proc = subprocess.Popen([sys.executable, __file__, tool], cwd=cwd, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def send(self, argv: list[str], cwd: Path | None = None) -> None:
        self.proc.stdin.write(json.dumps({"argv": argv, "cwd": None if cwd is None else str(cwd)}) + "\n")
        self.proc.stdin.flush()

    def receive(self, argv: list[str], timeout: float = ANSWER_TIMEOUT) -> subprocess.CompletedProcess:
        """The answer to ``argv``; a process that gives none in ``timeout`` seconds is killed."""
        if not select.select([self.proc.stdout], [], [], timeout)[0]:  # (one line per question: none buffered)
            self.proc.kill()
            raise AssertionError(f"warm {self.tool} gave no answer to {argv} in {timeout:.0f} s: killed")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"warm {self.tool} exited ({self.proc.wait()}) before answering {argv}")
        reply = json.loads(line)
        return subprocess.CompletedProcess([self.tool, *argv], reply["returncode"], reply["stdout"], reply["stderr"])

    def __enter__(self) -> WarmCLI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def ask_together(questions: list[tuple[WarmCLI, list[str]]], cwd: Path | None = None
                 ) -> list[subprocess.CompletedProcess]:
    """Each (tool, argv) sent at once, run in ``cwd``, so that the tools answer side by side;
    their answers."""
    for cli, argv in questions:
        cli.send(argv, cwd)
    return [cli.receive(argv) for cli, argv in questions]


if __name__ == "__main__":
    serve(sys.argv[1])
