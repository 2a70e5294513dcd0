"""One truth across both front ends: dvc.lock. ``dvc status`` and ``snakemake -n`` agree after
a run of either, after ``dvc checkout`` or ``dvc pull``, and after any parameter edit.

dvc.lock records, per stage instance, the content of what its job read (files, parameters, the
identity of data outside the pipeline) and of what it wrote, from the job's own record
(``made``, ``job_record``). Snakemake keeps records of its own (``.snakemake/metadata``) and
judges by modification times; those are never a second truth here, but derived from dvc.lock
whenever the workspace changes, and every Snakemake job that ends up to date is written into
dvc.lock.

**Snakemake to DVC** (``commit_to_dvc``, the Snakefile's ``onsuccess`` and ``onerror``). Both
front ends run the same commands (``dag``), so a Snakemake job and a DVC stage are matched by
their command. At the end of a run, successful or not, the jobs it did not need to run and those
it finished (``up_to_date_commands``) are committed (``dvc commit -f``: dvc.lock records their
deps, params and outputs, and the outputs enter DVC's cache), each only where its job's own
record (``made``) describes its files as they are, and with the parameter values that job read
(``job_record``), never params.yaml's as it is at the end; ``check-params``, which every DVC
stage depends on, is run by its own command (its output is replaced atomically, never deleted
as ``dvc repro`` would) and committed too. The commit waits until no ``dvc repro`` is inside a
stage (``dvc_in_a_stage``). DVC's commit rewrites the files it caches, which would make every
output look newer than Snakemake recorded, so each output's modification time is put back
afterwards. The commit (``dvc_commit``) writes dvc.lock once for all its stages, where ``dvc
commit`` rewrites it per target, and atomically (``dvc_atomic``), where DVC truncates it first,
so a run killed during its hook leaves the previous dvc.lock. Snakemake's records are then
derived from dvc.lock again (``follow_dvc``): its judgement at the start of the run, under
whatever ``--rerun-triggers``, is not the record.

**DVC to Snakemake** (``follow_dvc``, when the Snakefile is read). Whenever the workspace differs
from the one last followed (``workspace_state``: dvc.lock, params.yaml, and the size and
modification time of every file a stage reads or writes), each stage instance whose outputs
exist is judged by ``dvc status`` alone, in the registry's order (which is topological):

- up to date (its files, parameters and code as dvc.lock records them): the record Snakemake
  would have written had it run the job, and outputs (and the Snakemake benchmark file, which
  Snakemake dates the job by too) newer than its inputs;
- anything else (a parameter or a file it reads changed, an output damaged, no entry in
  dvc.lock): no record, and outputs dated before the newest input, so Snakemake reruns it, as
  DVC would, under any ``--rerun-triggers``.

Only the main Snakemake process follows: a cluster job that reads the Snakefile again does not.
A rerun whose inputs, parameters and code are unchanged keeps its outputs
(``made``), so a job Snakemake reruns only because an upstream one ran costs no work. Both
directions rest on the two tools' internals, so loading this module stops unless each is the
version they were tested with (``tools``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from base64 import urlsafe_b64encode
from collections.abc import Iterable
from hashlib import sha256
from pathlib import Path
from typing import Any

import yaml

from taskgeom.artifacts.atomic import atomic_path, leftovers
from taskgeom.pipeline import identity as content_identity
from taskgeom.pipeline.dag import PARAMS_FILE, rule_values, snakemake_rule
from taskgeom.pipeline.dvc_commit import RECORDED
from taskgeom.pipeline.publish import KEPT, keep
from taskgeom.pipeline.registry import instances
from taskgeom.pipeline.stage import PARAMS_OK, Stage, resolve
from taskgeom.pipeline.tools import require

require("snakemake", "dvc")  # its records imitate this Snakemake's; its commit patches this DVC

CHECK_PARAMS = "check-params"
DVC_RWLOCK = Path(".dvc/tmp/rwlock")  # DVC's record of the paths a running stage reads and writes
FOLLOWED = Path(".snakemake/taskgeom-dvc-lock.sha256")  # the workspace_state last followed or committed
SNAKEMAKE_METADATA = Path(".snakemake/metadata")
RECORD_FORMAT_VERSION = 6   # Snakemake 9's record layout, as written by its persistence.finished()
CHECKSUM_MAX_BYTES = 1_000_000  # Snakemake's default max_checksum_file_size


def dvc_stages(root: Path) -> list[tuple[str, str, list[Path]]]:
    """(address, command, output paths) of every stage in ``root``'s dvc.yaml, foreach expanded."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return [(s.addressing, s.cmd, [root / o.def_path for o in s.outs]) for s in repo.index.stages]


def files_under(paths: Iterable[Path]) -> list[Path]:
    """The files among ``paths`` and inside the directories among them."""
    found: list[Path] = []
    for p in paths:
        found += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return found


def commit_targets(addresses: list[str], everything: set[str]) -> list[str]:
    """``dvc commit`` targets for ``addresses``: none when they are every stage (``check-params``
    aside), else each foreach group whose instances all are (``head`` for
    ``head@a``, ``head@b``, ...) and the rest one by one. DVC's cost grows with the number of
    targets it resolves, far beyond the cost of committing."""
    chosen = set(addresses)
    if chosen >= everything:
        return []
    groups: dict[str, set[str]] = {}
    for a in everything:
        groups.setdefault(a.split("@")[0], set()).add(a)
    targets = []
    for a in addresses:
        group = a.split("@")[0]
        if "@" in a and groups[group] <= chosen:
            if group not in targets:
                targets.append(group)
        else:
            targets.append(a)
    return targets


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dvc_in_a_stage(root: Path) -> dict[int, str]:
    """PID -> command of each live ``dvc`` process inside a stage of ``root`` (its path locks in
    DVC's rwlock file). DVC releases its repository lock while a stage's command runs and takes it
    back, without waiting, when the command ends: a commit holding it then fails that run."""
    try:
        lock = json.loads((root / DVC_RWLOCK).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    inside = str(root.resolve()) + os.sep
    infos = [i for path, infos in lock.get("read", {}).items() if path.startswith(inside) for i in infos]
    infos += [i for path, i in lock.get("write", {}).items() if path.startswith(inside)]
    return {i["pid"]: i["cmd"] for i in infos if i["pid"] != os.getpid() and alive(i["pid"])}


def wait_for_dvc_stages(root: Path, poll: float = 0.5) -> None:
    """Return once no ``dvc`` process is inside a stage of ``root``, saying whom it waits for."""
    told = False
    while running := dvc_in_a_stage(root):
        if not told:
            print(f"taskgeom: DVC is running a stage in process {', '.join(map(str, running))}; "
                  "recording this run in DVC once it ends", file=sys.stderr, flush=True)
            told = True
        time.sleep(poll)


def commit_to_dvc(commands: Iterable[str], root: Path = Path("."), params: dict | None = None) -> list[str]:
    """Record in DVC the stages whose command is among ``commands`` (the up-to-date jobs of a
    Snakemake run), whose outputs all exist and whose job record describes them, with the values
    that job read (``job_record``); return their addresses. Snakemake's records are then derived
    again (``follow_dvc``) under params.yaml as it is now (``params``, Snakemake's config, where
    that is not valid).

    Raises:
        subprocess.CalledProcessError: when ``dvc`` fails; nothing is committed then.
    """
    if not (root / ".dvc").is_dir() or not (root / "dvc.yaml").is_file():
        return []
    wait_for_dvc_stages(root)  # before reading what exists: a running stage may still rewrite it
    for unfinished in leftovers(root / "dvc.lock"):  # of a commit killed before its rename
        unfinished.unlink()
    done, known = set(commands), dvc_stages(root)
    stages = [(a, outs) for a, cmd, outs in known
              if a != CHECK_PARAMS and cmd in done and all(o.exists() for o in outs)]
    if not stages:
        return []
    outputs = files_under(o for _, outs in stages for o in outs)
    stamps = {f: f.stat() for f in outputs}
    quiet = {"cwd": root, "check": True, "stdout": subprocess.DEVNULL}
    # check-params's own command, not ``dvc repro check-params``: DVC deletes a stage's outputs
    # before it reruns it, and a ``dvc repro`` running meanwhile (its repository lock released
    # while a stage's command runs) would find the data/params.ok it depends on missing
    subprocess.run(next(cmd for a, cmd, _ in known if a == CHECK_PARAMS), shell=True, **quiet)
    everything = {a for a, _, _ in known} - {CHECK_PARAMS}
    targets = commit_targets([a for a, _ in stages], everything)
    if targets:  # none commits every stage, check-params included
        targets = [CHECK_PARAMS, *targets]
    try:
        committed = subprocess.run([sys.executable, "-m", "taskgeom.pipeline.dvc_commit", RECORDED, *targets],
                                   cwd=root, check=True, stdout=subprocess.PIPE, text=True).stdout.split()
    finally:
        for f, st in stamps.items():
            if f.exists():
                os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    # DVC's commit rewrote them: the stage command's links to them (publish.KEPT) follow, rather
    # than hold a second copy of each
    keep([f.relative_to(root) for f in outputs], root / KEPT, root)
    # Snakemake's records of the run are its own judgement, made with params.yaml as the run
    # began: derive them again from what dvc.lock now says (follow_dvc)
    if (now := current_params(root) or params) is not None:
        follow_dvc(now, root)
    return [a for a, _ in stages if a in committed]


def current_params(root: Path) -> dict | None:
    """params.yaml as it is now, validated; None when it is not valid."""
    from taskgeom.pipeline import config

    try:
        return config.validate(config.read(root / PARAMS_FILE), PARAMS_FILE)
    except config.ParamsError:
        return None


def up_to_date_commands(dag: Any) -> list[str]:
    """The commands of a Snakemake run's jobs that are up to date at its end: those it did not
    need to run and those it finished (``dag``: Snakemake's ``DAG``)."""
    return [job.shellcmd for job in dag.jobs if job.shellcmd and dag.noneedrun_finished(job)]


def workspace_state(root: Path, files: Iterable[Path | str]) -> str:
    """A digest of dvc.lock and of the size and modification time of each of ``files``
    (relative paths; or that it is missing): it changes with ``git pull``, ``dvc pull``,
    ``dvc checkout``, ``dvc repro``, any run that writes an output and any edit of an input."""
    state = sha256((root / "dvc.lock").read_bytes())
    for rel in sorted({str(f) for f in files}):
        try:
            st = (root / rel).stat()
            state.update(f"{rel} {st.st_size} {st.st_mtime_ns}\n".encode())
        except FileNotFoundError:
            state.update(f"{rel} missing\n".encode())
        except OSError:
            stop_at_loop(root, rel)
            raise
    return state.hexdigest()


def stop_at_loop(root: Path, rel: str) -> None:
    """Stop the process with one line (``external.loop_line``) if ``root/rel`` leads through a
    symbolic link loop; return otherwise."""
    from taskgeom.pipeline.external import loop_line, looping

    if looping(root / rel):
        raise SystemExit(f"taskgeom: error: {loop_line(rel, root)}")


def watched_files(params: dict) -> list[str]:
    """Every file of both DAGs under ``params``: params.yaml, DVC's ``check-params`` guard, and
    every Snakemake stage's outputs, inputs and code record (DVC's stages' outputs and file
    dependencies are the same files: tests/test_front_ends.py)."""
    files = {PARAMS_FILE, PARAMS_OK}
    for stage, value in instances(params):
        inputs, outs = resolve(stage, params, value)
        files.update(str(p) for v in [*inputs.values(), *outs.values()] for p in (v if isinstance(v, list) else [v]))
        files.add(stage.code_record)
    return sorted(files)


def mark_followed(root: Path, files: Iterable[Path | str]) -> None:
    (root / FOLLOWED).parent.mkdir(parents=True, exist_ok=True)
    (root / FOLLOWED).write_text(workspace_state(root, files))


def follow_dvc(params: dict, root: Path = Path(".")) -> list[str]:
    """Derive Snakemake's records and the outputs' modification times from dvc.lock and ``dvc
    status``, for every stage instance whose outputs exist, if the workspace changed since last
    followed (``workspace_state``); return the names of those taken as DVC records them.

    An instance whose files ``dvc status`` finds as dvc.lock records them (up to date, or changed
    in its parameters alone) gets the record Snakemake would have written for the parameters and
    identity dvc.lock records, and outputs newer than its inputs: Snakemake then judges its
    parameters itself, against what made the outputs. Any other (an output or a file it reads
    differs from dvc.lock, or dvc.lock lacks it) loses its record and is dated before its newest
    input, so Snakemake reruns it as DVC would."""
    if not (root / ".dvc").is_dir() or not (root / "dvc.lock").is_file():
        return []
    watched = watched_files(params)
    if (root / FOLLOWED).is_file() and (root / FOLLOWED).read_text() == workspace_state(root, watched):
        return []
    status = subprocess.run(["dvc", "--wait-for-lock", "status", "--json"], cwd=root, capture_output=True, text=True)
    if status.returncode != 0:  # the launcher's one-line refusal, or DVC's own error
        said = [line for line in status.stderr.splitlines() if line.strip()] or ["no output"]
        raise SystemExit(f"taskgeom: error: `dvc status` failed (exit status {status.returncode}): {said[-1]}")
    stale = {name.split(":")[-1] for name in json.loads(status.stdout or "{}")}
    locked, ident, followed = dvc_lock_stages(root), content_identity.read(root), []
    for stage, value in instances(params):
        inputs, outs = resolve(stage, params, value)
        if not all((root / o).exists() for o in outs.values()):
            continue
        input_files = sorted(str(p) for v in inputs.values() for p in (v if isinstance(v, list) else [v]))
        input_files = sorted([*input_files, stage.code_record])
        newest = max((root / f).stat().st_mtime_ns for f in input_files if (root / f).exists())
        address = stage.address(value)
        if address not in locked or address in stale:
            for output in outs.values():
                forget(root, output, newest)
            continue
        values = rule_values(stage, params, value, ident)
        for output in outs.values():
            after(root / output, newest)
            write_record(root, output, stage, value, params, values, input_files)
        keep(outs.values(), root / KEPT, root)  # what a rerun that fails leaves (pipeline/publish.py)
        benchmark = root / stage.benchmark.replace(f"{{{stage.wildcard}}}", value or "")
        if benchmark.is_file():  # Snakemake counts a job's benchmark among its outputs' times
            after(benchmark, newest)
        followed.append(address)
    mark_followed(root, watched)
    return followed


def dvc_lock_stages(root: Path) -> set[str]:
    """The stage instances dvc.lock records."""
    lock = yaml.load((root / "dvc.lock").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return set((lock or {}).get("stages") or {})


def forget(root: Path, output: Path, newest: int) -> None:
    """Make Snakemake rerun the job of ``output``, as DVC would: drop its record (a failed run's
    record describes the inputs it failed on) and date it (every file, if a directory) before
    ``newest``, the modification time (ns) of the job's newest input."""
    (root / SNAKEMAKE_METADATA / urlsafe_b64encode(str(output).encode()).decode()).unlink(missing_ok=True)
    for f in files_under([root / output]):
        st = f.stat()
        if st.st_mtime_ns >= newest:
            os.utime(f, ns=(st.st_atime_ns, newest - 1_000))


def after(path: Path, newest: int) -> None:
    """Make ``path`` (a file, or every file in a directory) newer than ``newest`` (ns) if it is not."""
    for f in files_under([path]):
        st = f.stat()
        if st.st_mtime_ns <= newest:
            os.utime(f, ns=(st.st_atime_ns, newest + 1_000))


def write_record(root: Path, output: Path, stage: Stage, value: str | None, params: dict, values: str,
                 input_files: list[str]) -> None:
    """Snakemake's record of ``output``, as its own run of the job would have written it with the
    ``values`` param ``values`` (``dag.rule_values``); the software environment is kept from an
    existing record (it is not ours to compute)."""
    path = root / SNAKEMAKE_METADATA / urlsafe_b64encode(str(output).encode()).decode()
    old = json.loads(path.read_text()) if path.is_file() else {}
    rule = snakemake_rule(stage.name, params)
    mtime = (root / output).stat().st_mtime
    record = {
        "rule": stage.name,
        "input": input_files,
        "log": [stage.log.replace(f"{{{stage.wildcard}}}", value or "")],
        "shellcmd": stage.command(value) if value else stage.command(),
        "params": [repr(values)],
        "code": rule.shell,
        "record_format_version": RECORD_FORMAT_VERSION,
        "conda_env": old.get("conda_env"),
        "container_img_url": None,
        "software_stack_hash": old.get("software_stack_hash"),
        "job_hash": old.get("job_hash", 0),
        "starttime": mtime,
        "endtime": mtime,
        "incomplete": False,
        "external_jobid": None,
        "input_checksums": {f: "sha256:" + sha256((root / f).read_bytes()).hexdigest() for f in input_files
                            if (root / f).is_file() and (root / f).stat().st_size <= CHECKSUM_MAX_BYTES},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(record))


