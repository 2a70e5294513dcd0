"""``dvc`` with its YAML files and its rwlock written atomically:
``python -m taskgeom.pipeline.dvc_atomic ARGS`` runs ``dvc ARGS``.

DVC writes dvc.lock (and dvc.yaml) by opening it for writing, which truncates it, and then
dumping the YAML into it (``dvc.utils.serialize._common._dump_data``). A process killed in
between leaves a truncated dvc.lock, and every later ``dvc`` command and Snakemake run stops on
"'./dvc.lock' validation failed". Here each such dump is rendered to a string first and written
through ``atomic_path``: a kill at any moment leaves either the previous file or the new one.
dvc.lock is rendered one stage entry at a time, each unchanged entry's text kept from this
process's last dump (``dvc_lock_dump``): the same bytes, without rendering the whole file again
for every stage that ``dvc repro`` records.

DVC records the paths each running stage reads and writes in ``.dvc/tmp/rwlock``, a JSON file it
rewrites the same way (truncate, then dump; ``dvc.rwlock._edit_rwlock``) as a stage starts and
ends. A kill in between leaves it empty or cut, and every later ``dvc repro`` stops on "Unable to
read RWLock-file". Here its writes go through ``atomic_path`` too. DVC makes them holding its
``rwlock.lock``, so a temporary file that the holder of that lock finds beside the rwlock was left
by a writer killed before its rename, and is removed.

Before ``status``, ``repro``, ``exp``, ``pull``, ``checkout`` and ``commit``, the launcher stops
with one line on what DVC would stop on with a traceback, or spend without end on
(``refuse_unreadable``): a params.yaml ``taskgeom params check`` cannot read (not UTF-8, not
YAML, or YAML aliases repeating more nodes than ``config.MAX_REPEATED_NODES``), and a symbolic
link loop under data/ or results/.
It then brings ``data/identity.yaml`` up to date (``refresh_identity``): DVC reads the content of
the data sets and checkpoints that the stages read from outside the pipeline as parameters from it;
and each stage's code record (``refresh_code``, ``code_records``), its one code dependency.

DVC's run cache hashes a stage's dependencies before it runs it, even in ``dvc repro --dry``,
where the outputs of the stages before it are not made: on a fresh clone the dry run stopped on
the first dependency still to be made (``data/params.ok``). Here a stage with a missing
dependency is one the run cache cannot hold (``run_cache_needs_deps``), as DVC already treats a
stage with no dependencies; ``dvc repro`` then runs it, and the dry run shows it.

The commit the Snakefile's ``onsuccess`` runs (``sync.commit_to_dvc``, through ``dvc_commit``)
writes through this module, and so does every ``dvc`` command of the project's environment: its
``dvc`` launcher runs this module (``envs/setup-venv.sh``). A DVC installed elsewhere writes as
DVC does. The same processes read dvc.lock for its updates with the safe loader
(``dvc_lock_parse``).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from taskgeom.artifacts.atomic import atomic_path, leftovers
from taskgeom.pipeline.dvc_lock_dump import lock_text
from taskgeom.pipeline.dvc_lock_parse import LOCK_FILE, patch_lock_parse
from taskgeom.pipeline.dvc_yaml_parse import patch_yaml_parse
from taskgeom.pipeline.external import loops_refusal
from taskgeom.pipeline.job_record import patch_save
from taskgeom.pipeline.tools import require

RWLOCK = "rwlock"  # DVC's rwlock file, in its tmp directory (dvc.rwlock.RWLOCK_FILE)
PARAMS = "params.yaml"


def atomic_dump(original: Callable[..., Any]) -> Callable[..., Any]:
    """DVC's ``_dump_data(path, data, dumper, fs=None, **dumper_args)`` writing local files
    atomically, dvc.lock through ``lock_text``; files on another file system go to ``original``."""

    def dump(path: Any, data: Any, dumper: Callable[..., Any], fs: Any = None, **dumper_args: Any) -> None:
        if fs is not None and "local" not in getattr(fs, "protocol", ("local",)):
            return original(path, data, dumper, fs=fs, **dumper_args)
        if Path(path).name == LOCK_FILE and not dumper_args:
            text = lock_text(data, dumper)  # each unchanged stage entry's text kept from the last dump
        else:
            out = io.StringIO()
            dumper(data, out, **dumper_args)
            text = out.getvalue()
        with atomic_path(Path(path)) as tmp:
            tmp.write_text(text, encoding="utf-8")
        return None

    dump.__wrapped__ = original  # inspect.signature reports DVC's (tests/test_tools.py)
    return dump


class AtomicWrites:
    """A local DVC file system ``fs`` whose ``open(path, "w", ...)`` writes through ``atomic_path``;
    everything else is ``fs``'s."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    @contextmanager
    def open(self, path: Any, mode: str = "r", **kwargs: Any) -> Iterator[Any]:
        if "w" not in mode:
            with self._fs.open(path, mode, **kwargs) as f:
                yield f
            return
        with atomic_path(Path(path)) as tmp, open(tmp, mode, **kwargs) as f:
            yield f


def atomic_rwlock(original: Callable[..., Any]) -> Callable[..., Any]:
    """DVC's ``_edit_rwlock(lock_dir, fs, hardlink)`` (a context manager yielding the lock's
    contents) writing a local rwlock atomically and removing what killed writes left beside it."""

    @contextmanager
    def edit(lock_dir: Any, fs: Any, hardlink: Any) -> Iterator[Any]:
        if "local" not in getattr(fs, "protocol", ("local",)):
            with original(lock_dir, fs, hardlink) as lock:
                yield lock
            return
        with original(lock_dir, AtomicWrites(fs), hardlink) as lock:
            for unfinished in leftovers(Path(lock_dir) / RWLOCK):  # under rwlock.lock: writers killed
                unfinished.unlink(missing_ok=True)
            yield lock

    edit.__wrapped__ = original
    return edit


def run_cache_needs_deps(original: Callable[..., Any]) -> Callable[..., Any]:
    """DVC's ``dvc.stage.cache._can_hash(stage)``, False for a stage with a local dependency that
    does not exist (nothing to hash; DVC hashed it and failed)."""

    def can_hash(stage: Any) -> bool:
        if any(dep.protocol == "local" and not dep.exists for dep in stage.deps):
            return False
        return original(stage)

    can_hash.__wrapped__ = original
    return can_hash


def patch_dvc() -> None:
    """Make every YAML dump of this process's DVC atomic (``modify_yaml`` calls ``_common``'s
    ``_dump_data``; ``dump_yaml`` the name ``_yaml`` imported from it), its updates of dvc.lock
    parse with the safe loader, each text it parses safely parse once (``dvc_yaml_parse``),
    and its rwlock be written atomically (``rwlock`` looks ``_edit_rwlock`` up in its module at
    each call), its run cache pass a stage with a missing dependency (``run_cache_needs_deps``;
    ``StageCache`` looks ``_can_hash`` up in its module), and each stage it saves take the values
    its job read (``job_record.patch_save``). Stops unless DVC is the version these
    patches were tested with (``tools.require``). A second call (``main`` run again in one
    process) changes nothing."""
    require("dvc")
    from dvc import rwlock
    from dvc.stage import Stage, cache
    from dvc.utils.serialize import _common, _yaml

    if hasattr(_common._dump_data, "__wrapped__"):
        return
    patch_lock_parse()
    patch_yaml_parse()
    rwlock._edit_rwlock = atomic_rwlock(rwlock._edit_rwlock)
    cache._can_hash = run_cache_needs_deps(cache._can_hash)
    Stage.save = patch_save(Stage.save)

    dump = atomic_dump(_common._dump_data)
    _common._dump_data = dump
    _yaml._dump_data = dump


# commands that read, record or restore the workspace
REFRESHING = ("status", "repro", "exp", "pull", "checkout", "commit")


def subcommand(argv: list[str]) -> str | None:
    """The DVC command ``argv`` runs here, after the global flags (``--wait-for-lock``, ``-q``, ...);
    None for none, or for one run in another directory (``--cd DIR``)."""
    for arg in argv:
        if arg == "--cd" or arg.startswith("--cd="):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def refuse_unreadable(argv: list[str]) -> Any:
    """Before a command in ``REFRESHING`` in a DVC project, stop (``SystemExit``, one line naming
    the file and what to do) on a params.yaml ``config.read`` refuses or on a symbolic link loop
    where the stages write (``external.loops_refusal``); return params.yaml's document,
    unvalidated (None when there is nothing to check: another command, no dvc.yaml, or no
    params.yaml for DVC to read)."""
    if subcommand(argv) not in REFRESHING or not Path("dvc.yaml").is_file():
        return None
    from taskgeom.pipeline import config

    params = None
    if Path(PARAMS).exists():
        try:
            params = config.read(PARAMS)
        except config.ParamsError as err:
            raise SystemExit(f"taskgeom: error: {err}") from None
    if line := loops_refusal():
        raise SystemExit(line)
    return params


def refresh_identity(params: Any) -> None:
    """Recompute ``data/identity.yaml`` (``pipeline/identity.py``) from ``params`` if they are
    valid, so DVC sees the content of what the stages read from outside the pipeline as it is
    now, and make the folders of the collections they leave empty (``dag.empty_collections``),
    which a clone or a pull lacks; invalid parameters (or none) are left to check-params."""
    from taskgeom.pipeline import config, identity
    from taskgeom.pipeline.dag import empty_collections

    try:
        valid = config.validate(params, PARAMS)
    except config.ParamsError:
        return
    identity.refresh(valid)
    for folder in empty_collections(valid):
        folder.mkdir(parents=True, exist_ok=True)


def refresh_code() -> None:
    """In this project's DVC pipeline (a dvc.yaml ``taskgeom dvc-yaml`` wrote), rewrite the stages'
    code records (``code_records``) whose code changed, so DVC sees the code as it is now."""
    from taskgeom.pipeline.code_records import refresh
    from taskgeom.pipeline.dag import DVC_HEADER

    with open("dvc.yaml", encoding="utf-8", errors="replace") as spec:
        ours = spec.read(len(DVC_HEADER)) == DVC_HEADER
    if ours:
        refresh()


def main(argv: list[str]) -> int:
    if (params := refuse_unreadable(argv)) is not None:
        refresh_identity(params)
    if subcommand(argv) in REFRESHING and Path("dvc.yaml").is_file():
        refresh_code()
    patch_dvc()
    from dvc.cli import main as dvc_main

    return dvc_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
