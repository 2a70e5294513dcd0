"""Shared fixtures: a copy of the repository to run the pipeline in, and small worlds."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from filelock import FileLock
from warm_cli import WarmCLI, ask_together

from taskgeom.fixtures.paper_mini import MANIFEST
from taskgeom.pipeline import server
from taskgeom.pipeline.config import get
from taskgeom.pipeline.registry import STAGES, instances
from taskgeom.pipeline.stage import Stage, resolve

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SMOKE = yaml.safe_load((REPO / "params/smoke.yaml").read_text())  # the smoke profile's parameters
# The repositories that tests make with `dvc init` have DVC's usage reports on; each DVC command
# in them would start a background reporter (a process of its own) that this machine cannot use.
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# Tests force reruns to check what a run does (byte-identical reruns, kills, SLURM jobs): a stage
# reruns even when its making is unchanged (pipeline/made.py); tests of that reuse drop it.
os.environ.setdefault("TASKGEOM_RERUN", "1")


def tool_env(warm: bool = True) -> dict[str, str]:
    """The environment a pipeline command runs in: this venv's tools first on PATH, and OpenMP
    threads that sleep when they wait. The suite runs several DAGs at once (one per pytest-xdist
    worker, each on every core), so a stage on two threads (prune-speed) shares its cores with
    other jobs, and threads that spin at each barrier burn the time its partner is descheduled.
    ``warm``: ``taskgeom`` commands run in this worker's stage server (pipeline/server.py), not
    each in a fresh interpreter that imports torch again (tests/test_server.py checks that a
    stage run cold writes the same bytes)."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.pop(server.ENV, None)
    if warm:
        env[server.ENV] = stage_server(env)
    return env


SERVER: dict[str, str] = {}


def stage_server(env: dict[str, str]) -> str:
    """The socket of this worker's stage server, started at the first call and stopped at exit."""
    if "socket" not in SERVER:
        path = Path(tempfile.mkdtemp(prefix="taskgeom-")) / "stage.sock"
        proc = subprocess.Popen([str(BIN / "taskgeom"), "serve", "--socket", str(path)], env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        atexit.register(lambda: proc.poll() is None and (proc.terminate(), proc.wait()))
        deadline = time.monotonic() + 300
        while not path.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stage server did not start (exit status {proc.poll()})")
            time.sleep(0.05)
        SERVER["socket"] = str(path)
    return SERVER["socket"]


TIMEOUT = 1800  # s: a guard against a hung command, not a speed target (a whole smoke DAG on a loaded machine)


WARM_CLI: dict[str, WarmCLI] = {}


def warm_cli(tool: str) -> WarmCLI:
    """This worker's ``dvc`` or ``snakemake`` that imported its tool once (tests/warm_cli.py),
    started at the first command and stopped at exit."""
    if tool not in WARM_CLI or WARM_CLI[tool].proc.poll() is not None:  # (one that hung was killed)
        WARM_CLI[tool] = WarmCLI(tool, REPO, tool_env())
        atexit.register(WARM_CLI[tool].__exit__)
    return WARM_CLI[tool]


def warm_tool(cmd: list[str] | str) -> str | None:
    """The tool whose warm process runs ``cmd``: ``dvc`` for any ``dvc`` command, ``snakemake``
    for a dry run (``snakemake -n …``, which only reads); ``None`` for any other command."""
    if isinstance(cmd, list) and cmd[:1] == ["snakemake"] and "-n" in cmd:
        return "snakemake"
    if isinstance(cmd, list) and cmd[:1] == ["dvc"]:
        return "dvc"
    return None


def run(cmd: list[str] | str, cwd: Path, check: bool = True, timeout: float = TIMEOUT, warm: bool = True,
        env: dict[str, str] | None = None, fresh: bool = False, **kw) -> subprocess.CompletedProcess:
    """Run a command in ``cwd`` (in ``env``, default ``tool_env(warm)``); on failure show its output
    in the test report. With ``warm``, and no ``env``, timeout or other options, a ``warm_tool``
    command goes to this worker's warm process of that tool, unless ``fresh`` asks for a process
    of its own, as a user's command line starts."""
    routed = warm and not fresh and env is None and timeout == TIMEOUT and not kw
    tool = warm_tool(cmd) if routed else None
    if tool is not None:
        (proc,) = ask_together([(warm_cli(tool), cmd[1:])], cwd)
        if check:
            succeeded(proc)
        return proc
    proc = subprocess.run(cmd, cwd=cwd, env=env or tool_env(warm), capture_output=True, text=True, timeout=timeout,
                          shell=isinstance(cmd, str), **kw)
    if check:
        succeeded(proc)
    return proc


def succeeded(proc: subprocess.CompletedProcess) -> None:
    if proc.returncode != 0:
        raise AssertionError(f"{proc.args} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")


def copy_repo(dest: Path, profile: str = "smoke") -> Path:
    """The repository's files (tracked and new, not ignored) in a fresh git repo at ``dest``."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    shutil.copyfile(dest / "params" / f"{profile}.yaml", dest / "params.yaml")
    git = ["git", "-c", "user.email=ci@taskgeom", "-c", "user.name=taskgeom"]
    run(["git", "init", "-q"], dest)
    run(["git", "add", "-A"], dest)
    run([*git, "commit", "-qm", "copy"], dest)
    return dest


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    return copy_repo(tmp_path / "repo")


# Files holding wall-clock measurements, which differ between any two runs.
WALL_CLOCK = ("results/prune/speed",)


def output_digests(repo: Path) -> dict[str, str]:
    """sha256 of every file the pipeline wrote under data/ and results/, by relative path."""
    return {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
            for top in ("data", "results") for p in sorted((repo / top).rglob("*"))
            if p.is_file() and ".partial" not in p.parts}


def session_folder(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str) -> Path:
    """A folder of this pytest session that every pytest-xdist worker sees."""
    base = tmp_path_factory.getbasetemp()
    return (base if worker_id == "master" else base.parent) / name


def build_once(folder: Path, done: str, build: Callable[[Path], None]) -> Path:
    """``build(folder)`` in ``folder``, emptied first, unless a worker already built it: the first
    worker to ask builds while the others wait on a file lock. ``build`` writes ``done`` last,
    so a build that failed is built again by the next worker to ask."""
    with FileLock(f"{folder}.lock"):
        if not (folder / done).is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
    return folder


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The smoke DAG, run once locally by Snakemake (``build_once``), with the digests of what it
    wrote beside it. Nothing changes it: a test that runs or edits anything works in a copy
    (``copy_run``, or the fixture ``smoke``)."""

    def build(base: Path) -> None:
        repo = copy_repo(base / "repo")
        run(["snakemake", "--profile", "profiles/local", "--cores", "2"], repo)
        (base / "digests.json").write_text(json.dumps(output_digests(repo)))

    return build_once(session_folder(tmp_path_factory, worker_id, "smoke-run"), "digests.json", build) / "repo"


@pytest.fixture(scope="session")
def paper_mini_files(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[Path, dict]:
    """The paper-mini fixtures, written once per session by ``taskgeom fixtures paper-mini``
    (``build_once``), and their manifest. Tests read them, or copy them where they change anything."""

    def build(base: Path) -> None:
        run(["taskgeom", "fixtures", "paper-mini", "paper-mini"], base)
        (base / "written").touch()

    files = build_once(session_folder(tmp_path_factory, worker_id, "paper-mini-files"), "written", build) / "paper-mini"
    return files, json.loads((files / MANIFEST).read_text())


def copy_run(src: Path, dest: Path, **kw) -> Path:
    """A copy of a repository where the pipeline has run (its git, DVC and Snakemake state)."""
    shutil.copytree(src, dest, symlinks=True, **kw)
    return dest


@pytest.fixture(scope="session")
def smoke(smoke_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the smoke run that the end-to-end tests change and restore, in file order."""
    return copy_run(smoke_run, tmp_path_factory.mktemp("smoke") / "repo")


@pytest.fixture(scope="session")
def smoke_digests(smoke_run: Path) -> dict[str, str]:
    return json.loads((smoke_run.parent / "digests.json").read_text())


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker keeps torch's pool to one thread; the commands the
    tests start choose their own."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch
        torch.set_num_threads(1)


# The longest files first, in this order. pytest-xdist (`make test`: whole files, in collection
# order) gives each worker (three on two cores) one file, then a second in the same order, and each
# further file to a worker as it starts its last: the smoke run (test_pipeline) and, with LONG=1,
# the paper-mini run (which needs no smoke run) and the SLURM test (which mostly waits) start
# together, then the other files of over about 30 s (results/benchmarks/suite_cost.md), longest
# first; the suite ends on short files, not on a long one.
LONGEST_FIRST = ("test_pipeline.py", "test_paper_mini_run.py", "test_slurm.py", "test_crash.py", "test_reruns.py",
                 "test_remotes.py", "test_one_truth.py", "test_failures.py", "test_recovery_commands.py",
                 "test_compare.py", "test_dvc_experiments.py", "test_train.py", "test_fixtures.py",
                 "test_hostile_input.py", "test_server.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order


def snakemake_jobs(repo: Path) -> dict[str, dict]:
    """Snakemake's jobs for a run from scratch, by shell command: rule, inputs, outputs, benchmark,
    wildcards (the line as printed) and priority (0, Snakemake's default, where it prints none)."""
    out = run(["snakemake", "-n", "--forceall", "--printshellcmds"], repo).stdout
    jobs: dict[str, dict] = {}
    job: dict = {}
    for line in out.splitlines():
        if line.startswith(("rule ", "localrule ")):
            job = {"rule": line.split()[1].rstrip(":"), "inputs": set(), "outputs": set(), "priority": 0}
        elif line.startswith("    input: ") and job:
            job["inputs"] = set(line.removeprefix("    input: ").split(", "))
        elif line.startswith("    output: ") and job:
            job["outputs"] = set(line.removeprefix("    output: ").split(", "))
        elif line.startswith("    benchmark: ") and job:
            job["benchmark"] = line.removeprefix("    benchmark: ")
        elif line.startswith("    wildcards: ") and job:
            job["wildcards"] = line.removeprefix("    wildcards: ")
        elif line.startswith("    priority: ") and job:
            job["priority"] = int(line.removeprefix("    priority: "))
        elif line.startswith("Shell command: ") and job and job["rule"] != "all":
            jobs[line.removeprefix("Shell command: ")] = job
            job = {}
    return jobs


def one_item_per_stage(params: dict) -> list[tuple[Stage, str | None]]:
    """Every registry stage once, with its first item (``None`` for a stage without one), in
    the registry's order, which both DAGs can run in: the fewest jobs that run every stage's
    code. (Both front ends run the same command for every item: test_front_ends.)"""
    return [(s, None if s.foreach is None else next(iter(get(params, s.foreach)))) for s in STAGES]


def dvc_stages(repo: Path) -> dict[str, dict]:
    """DVC's stages (foreach expanded), by command: name, deps, outs, params keys."""
    code = (
        "import json; from dvc.repo import Repo; r = Repo('.');"
        "print(json.dumps({s.cmd: {'name': s.addressing, "
        "'deps': [d.def_path for d in s.deps if not hasattr(d, 'params')], "
        "'params': [p for d in s.deps if hasattr(d, 'params') for p in d.params], "
        "'outs': [o.def_path for o in s.outs]} for s in r.index.stages}))"
    )
    return json.loads(run(["python", "-c", code], repo).stdout)


def plans(repo: Path) -> tuple[set[str], set[str]]:
    """(the shell commands of the jobs ``snakemake -n`` plans, the stages ``dvc status`` finds
    changed), asked side by side."""
    dry, status = ask_together([(warm_cli("snakemake"), ["-n", "--printshellcmds"]),
                                (warm_cli("dvc"), ["status", "--json"])], repo)
    succeeded(dry)
    succeeded(status)
    lines = dry.stdout.splitlines()
    commands = {line.removeprefix("Shell command: ") for line in lines if line.startswith("Shell command: ")}
    return commands - {"None"}, set(json.loads(status.stdout or "{}"))  # "None": the rule `all`


def jobs(repo: Path) -> dict[str, tuple[str, set[str], set[str]]]:
    """Every stage instance of the repository's params.yaml: command -> (DVC name, input files, output
    files), from the registry both front ends are drawn from (test_front_ends: they agree)."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    out = {}
    for stage, value in instances(params):
        inputs, outputs = resolve(stage, params, value)
        files = {str(p) for v in inputs.values() for p in (v if isinstance(v, list) else [v])}
        out[stage.command(value) if value else stage.command()] = (stage.address(value), files,
                                                                     {str(p) for p in outputs.values()})
    return out
