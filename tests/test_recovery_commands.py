"""Every command docs/failures.md gives to put something right, and each that an error line prints,
runs as printed on a copy of the smoke run (``STAGE`` and ``ITEM`` filled in) and does what the
doc says it does; after it, both front ends have nothing to do. The commands are read from the
doc and from the error lines, never copied here: a command the doc gives that no test below runs
fails ``test_each_command_the_doc_gives_is_run_here``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO, SMOKE, copy_run, plans, run, tool_env

from taskgeom.data.hdf5 import StoreError, open_store
from taskgeom.pipeline.made import RERUN
from taskgeom.pipeline.registry import stage
from taskgeom.pipeline.stage import resolve

pytestmark = pytest.mark.pipeline

DOC = REPO / "docs/failures.md"
TOOLS = ("snakemake", "dvc", "rm")  # a span between backticks that starts with one is a command
HEAD = "dpt-depth-l4"
FILLED = {"STAGE@ITEM": f"head@{HEAD}", "STAGE": "zoo-table"}  # the doc's names, as the tests fill them in
DAMAGED = f"data/targets/{HEAD}/train.h5"  # the file the doc's example error line names
LOOP = "data/world/val.h5"  # the symbolic link loop of the doc's example
# Which test runs each command, by what it says; the doc's commands that only look (a dry run) or
# need a remote (tests/test_remotes.py) are not recovery commands.
KINDS: dict[str, Callable[[str], bool]] = {
    "damaged-file": lambda cmd: DAMAGED in cmd,
    "outputs": lambda cmd: cmd.startswith(f"dvc checkout {FILLED['STAGE@ITEM']}"),
    "damaged-outputs": lambda cmd: cmd.startswith(f"dvc checkout --force {FILLED['STAGE@ITEM']}"),
    "forced-rerun": lambda cmd: cmd.startswith(f"{RERUN}=1 "),
    "link-loop": lambda cmd: LOOP in cmd,
    "unlock": lambda cmd: cmd == "snakemake --unlock",
    "not-recovery": lambda cmd: bool({"-n", "--dry", "--pull", "pull"} & set(cmd.split())),
}


def commands(text: str) -> list[str]:
    """The commands ``text`` gives between backticks, in order, once each: a span whose first word
    after any ``NAME=value`` is one of ``TOOLS`` and that names more than a tool or a subcommand
    (`snakemake`, `dvc checkout`), ``STAGE`` and ``ITEM`` filled in (``FILLED``)."""
    found: list[str] = []
    for span in re.findall(r"`([^`]+)`", " ".join(text.split())):
        words = [w for w in span.split() if not re.fullmatch(r"[A-Z_]+=\S*", w)]
        if words and words[0] in TOOLS and len(words) > (2 if words[0] == "dvc" else 1):
            for name, value in FILLED.items():
                span = re.sub(rf"\b{name}\b", value, span)
            found += [span] if span not in found else []
    return found


def doc_commands(kind: str) -> list[str]:
    """The commands of docs/failures.md of one of ``KINDS``; at least one."""
    found = [cmd for cmd in commands(DOC.read_text()) if KINDS[kind](cmd)]
    assert found, f"docs/failures.md gives no command of the kind {kind}"
    return found


def user_env() -> dict[str, str]:
    """A user's environment: the suite's ``TASKGEOM_RERUN=1`` (conftest) is not set."""
    return {k: v for k, v in tool_env().items() if k != RERUN}


def as_printed(cmd: str, repo: Path) -> None:
    """Run ``cmd`` as a user would paste it, in a shell in ``repo``; it must succeed."""
    run(cmd, repo, env=user_env())


def nothing_to_do(repo: Path) -> None:
    assert plans(repo) == (set(), set())


@pytest.fixture
def repo(smoke_run: Path, tmp_path: Path) -> Path:
    return copy_run(smoke_run, tmp_path / "repo")


def test_each_command_the_doc_gives_is_run_here():
    kinds = {cmd: [kind for kind, taken in KINDS.items() if taken(cmd)] for cmd in commands(DOC.read_text())}
    assert len(kinds) >= 8 and all(len(of) == 1 for of in kinds.values()), kinds


def test_the_commands_a_damaged_hdf5_file_prints_each_restore_it(repo: Path, monkeypatch: pytest.MonkeyPatch):
    """The doc's example, truncated in place: the line the reader prints names the commands the doc
    gives; rerunning its writer and restoring it from DVC's cache each put back its bytes."""
    damaged = repo / DAMAGED
    published = damaged.read_bytes()

    def damage() -> list[str]:
        with damaged.open("r+b") as f:
            f.truncate(100_000)
        monkeypatch.chdir(repo)   # the stage reads it by its path in the repository
        with pytest.raises(StoreError) as refused:
            open_store(Path(DAMAGED), "targets")
        return commands(str(refused.value))

    printed = damage()
    assert sorted(printed) == sorted(doc_commands("damaged-file")), printed
    for cmd in printed:
        assert damage() == printed
        as_printed(cmd, repo)
        assert damaged.read_bytes() == published, cmd
        nothing_to_do(repo)


def test_dvc_checkout_puts_back_outputs_removed_or_damaged(repo: Path):
    outputs = [repo / p for p in resolve(stage("head"), SMOKE, HEAD)[1].values()]
    published = {p: p.read_bytes() for p in outputs}
    for cmd in doc_commands("outputs"):   # Snakemake removed them after the job failed
        for p in outputs:
            p.unlink()
        as_printed(cmd, repo)
        assert {p: p.read_bytes() for p in outputs} == published, cmd
    for cmd in doc_commands("damaged-outputs"):   # written into in place
        for p in outputs:
            with p.open("r+b") as f:
                f.write(b"damaged")
        as_printed(cmd, repo)
        assert {p: p.read_bytes() for p in outputs} == published, cmd
    nothing_to_do(repo)


def test_a_forced_rerun_does_the_work_again_and_writes_the_same_bytes(repo: Path):
    outputs = [repo / p for p in resolve(stage("zoo-table"), SMOKE, None)[1].values()]
    published = {p: p.read_bytes() for p in outputs}
    log = repo / "logs/zoo-table.log"
    for cmd in doc_commands("forced-rerun"):
        start = time.time()
        as_printed(cmd, repo)
        assert log.stat().st_mtime >= start and " done in " in log.read_text(), cmd   # not "kept them"
        assert {p: p.read_bytes() for p in outputs} == published, cmd
    nothing_to_do(repo)


def test_a_link_loop_is_undone_by_the_commands_printed_and_unlock_runs(repo: Path):
    loop = repo / LOOP
    published = loop.read_bytes()
    loop.unlink()
    loop.symlink_to(loop.name)
    refused = run(["dvc", "status"], repo, check=False, fresh=True)
    said = next(line for line in refused.stderr.splitlines() if line.startswith("taskgeom: error:"))
    assert commands(said) == doc_commands("link-loop"), said
    for cmd in commands(said):
        as_printed(cmd, repo)
    assert loop.read_bytes() == published and not loop.is_symlink()
    for cmd in doc_commands("unlock"):
        as_printed(cmd, repo)
    nothing_to_do(repo)
