"""What made a stage instance's published outputs: the job's own record of what it read and wrote.

Each successful run of ``taskgeom <stage>`` records its *making* beside its kept outputs
(``publish.KEPT``), atomically, once they are published: what it read (the sha256 of each input
file, a folder by ``Digests.tree_sha256``; the parameter values and identity entries it was
given, by the file DVC reads each from, ``dag.dvc_values``), a digest of that and of the code it
imports (``runtime.code_digest``), and the sha256 of each output it published. It is the one
record of the instance's work: dvc.lock is written from it (``job_record``), and so is
Snakemake's record through dvc.lock (``sync.follow_dvc``).

Snakemake reruns every job downstream of a job it runs, whatever that job wrote, while DVC
compares what each stage reads by content and stops where nothing changed. So that a rerun costs
the same under either front end, a later run of the same instance whose making is the same, and
whose last published outputs still hold the recorded bytes, puts them back and returns without
running: they are what the run would write (a stage's outputs are a function of its making:
docs/design.md, "Seeds"), so neither front end sees anything downstream change. Where no record
matches (a clone that pulled, or checked out, what others made), dvc.lock stands for it
(``from_lock``). ``TASKGEOM_RERUN=1`` runs it anyway (to time it again, or to check that a rerun
writes the same bytes).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from taskgeom.artifacts.atomic import write_text
from taskgeom.data.digests import Digests
from taskgeom.pipeline.publish import KEPT, restore
from taskgeom.pipeline.runtime import code_digest

RERUN = "TASKGEOM_RERUN"  # "1": run a stage even when its making is unchanged
RECORDS = KEPT.parent / "made"  # <address>.json: the job's record of its last publish

Inputs = Mapping[str, Path | list[Path]]


def input_sha256(inputs: Inputs) -> dict[str, str]:
    """sha256 of each input file (a folder: ``Digests.tree_sha256``), by path."""
    with Digests() as digests:
        return {str(p): digests.tree_sha256(p) for v in inputs.values() for p in (v if isinstance(v, list) else [v])}


def output_sha256(outputs: Mapping[str, Path]) -> dict[str, str | None]:
    """sha256 of each output file by path, None for one that is missing."""
    with Digests() as digests:
        return {str(p): digests.file_sha256(Path(p)) if Path(p).is_file() else None for p in outputs.values()}


def making(read: Mapping[str, str], values: str, code: tuple[str, ...]) -> str:
    """sha256 of the code files' digest, the ``values`` a job reads (``dag.rule_values``) and the
    sha256 of each input file it reads (``input_sha256``)."""
    text = json.dumps({"code": code_digest(code), "values": values, "inputs": dict(read)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def record_path(address: str) -> Path:
    return RECORDS / f"{address}.json"


def read(address: str, root: Path = Path(".")) -> dict | None:
    """The instance's record, None when there is none or it is unreadable."""
    try:
        recorded = json.loads((root / record_path(address)).read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) and isinstance(recorded.get("outputs"), dict) else None


def unchanged(address: str, made: str, outputs: Mapping[str, Path]) -> bool:
    """Whether the instance ``address`` last published its ``outputs`` from the making ``made``
    and they hold those bytes still, after putting back those a front end deleted
    (``publish.restore``); never when ``TASKGEOM_RERUN=1``."""
    if os.environ.get(RERUN) == "1":
        return False
    recorded = read(address)
    if recorded is None or recorded.get("made") != made:
        return False
    restore(outputs.values(), KEPT)
    return output_sha256(outputs) == recorded["outputs"]


def record(address: str, made: str, read: Mapping[str, str], values: Mapping[str, dict],
           outputs: Mapping[str, Path]) -> None:
    """Record that ``outputs``, as they are now, were published from the making ``made``: the
    input files' sha256 as the job ``read`` them and the parameter ``values`` (params file ->
    {key: value}) it was given."""
    text = json.dumps({"made": made, "inputs": dict(read), "params": values,
                       "outputs": output_sha256(outputs)}, indent=1, sort_keys=True)
    path = record_path(address)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text + "\n")
