"""dvc.lock written from the job's own record: what DVC saves for a stage is what its job read.

DVC saves a stage (``Stage.save``: after ``dvc repro`` runs its command, and in ``dvc commit``)
by reading params.yaml as it is then and hashing the files as they are then, and with the
run cache on it stores that pairing for any later ``dvc repro`` (or, pushed, a teammate's) to
restore. Whoever edited params.yaml while the job ran, or told Snakemake to judge by
modification times alone, gets outputs recorded as made with values that never made them.

The job knows better: ``made.record`` holds the parameter values it was given, the sha256 of the
input files it read and of the outputs it published. ``reconcile`` runs after DVC's own save:

- where the record describes the stage's files as they are (each output it published, and each
  input it read, holds the recorded bytes), each ``params`` dependency takes the values the job
  read, and the run cache may hold the stage only where those are the values DVC read too;
- where it does not (no record; outputs DVC restored from its run cache, or changed since), DVC's
  own reading stands; ``dvc_commit`` then leaves the stage out (``describes``).

``patch_save`` makes every save of this process's DVC do this (the project's ``dvc`` launcher,
``dvc_atomic``, and ``dvc_commit``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taskgeom.pipeline.made import input_sha256, output_sha256, read


def describes(record: dict, root: Path) -> bool:
    """Whether a job's ``record`` describes ``root``'s files as they are now: each output holds the
    bytes it published and each input the bytes it read."""
    outputs = {p: root / p for p in record["outputs"]}
    inputs = {p: root / p for p in record.get("inputs") or {}}
    if not all(p.exists() for p in inputs.values()):
        return False
    return (list(output_sha256(outputs).values()) == list(record["outputs"].values())
            and list(input_sha256(inputs).values()) == list((record.get("inputs") or {}).values()))


def record_of(stage: Any) -> dict | None:
    """The job record of DVC's ``stage`` that describes its files, None without one."""
    root = Path(stage.repo.root_dir)
    record = read(stage.addressing, root)
    return record if record is not None and describes(record, root) else None


def normal(values: Any) -> str:
    return json.dumps(values, sort_keys=True, default=str)


def reconcile(stage: Any) -> bool:
    """Give a DVC ``stage`` just saved the parameter values its job read (module docstring);
    whether DVC's own reading stands (no record describes it, or the job read those values)."""
    from dvc.dependency.param import ParamsDependency
    from dvc_data.hashfile.hash_info import HashInfo

    record = record_of(stage)
    if record is None:
        return True
    same = True
    for dep in stage.deps:
        if isinstance(dep, ParamsDependency):
            was = (record.get("params") or {}).get(dep.def_path) or {}
            wanted = {key: was[key] for key in dep.params if key in was}
            if normal(dep.hash_info.value) != normal(wanted):
                dep.hash_info, same = HashInfo(dep.PARAM_PARAMS, wanted), False
    return same


def patch_save(original: Callable[..., Any]) -> Callable[..., Any]:
    """DVC's ``Stage.save`` followed by ``reconcile``, the run cache written only where DVC's
    reading stands."""

    def save(self: Any, allow_missing: bool = False, run_cache: bool = True) -> None:
        original(self, allow_missing=allow_missing, run_cache=False)
        if reconcile(self) and run_cache:
            self.repo.stage_cache.save(self)

    save.__wrapped__ = original
    return save
