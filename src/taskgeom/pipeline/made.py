"""What made a stage instance's published outputs, so that a rerun on the same inputs keeps them.

Snakemake reruns every job downstream of a job it runs, whatever that job wrote, while DVC
compares what each stage reads by content and stops where nothing changed. So that a rerun costs
the same under either front end, each successful run of ``taskgeom <stage>`` records its
*making* beside its kept outputs (``publish.KEPT``): one digest of the code it imports
(``runtime.code_digest``), the parameter values and identity entries it reads (``dag.rule_values``)
and each input file's bytes, with the sha256 of each output it published. A later run of the same
instance whose making is the same, and whose last published outputs still hold the recorded
bytes, puts them back and returns without running: they are what the run would write (a stage's
outputs are a function of its making: docs/design.md, "Seeds"), so neither front end sees
anything downstream change. ``TASKGEOM_RERUN=1`` runs it anyway (to time it again, or to check
that a rerun writes the same bytes).
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
RECORDS = KEPT.parent / "made"  # <address>.json: the making and the output digests of the last publish


def making(inputs: Mapping[str, Path | list[Path]], values: str, code: tuple[str, ...]) -> str:
    """sha256 of the code files' digest, the ``values`` a job reads (``dag.rule_values``) and the
    sha256 of each input file (a folder: its files, ``Digests.tree_sha256``), by path."""
    with Digests() as digests:
        files = {str(p): digests.tree_sha256(p) for v in inputs.values() for p in (v if isinstance(v, list) else [v])}
    text = json.dumps({"code": code_digest(code), "values": values, "inputs": files}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def record_path(address: str) -> Path:
    return RECORDS / f"{address}.json"


def unchanged(address: str, made: str, outputs: Mapping[str, Path]) -> bool:
    """Whether the instance ``address`` last published its ``outputs`` from the making ``made``
    and they hold those bytes still, after putting back those a front end deleted
    (``publish.restore``); never when ``TASKGEOM_RERUN=1``."""
    if os.environ.get(RERUN) == "1":
        return False
    try:
        recorded = json.loads(record_path(address).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict) or recorded.get("made") != made:
        return False
    restore(outputs.values(), KEPT)
    with Digests() as digests:
        return all(Path(p).is_file() and digests.file_sha256(Path(p)) == recorded["outputs"].get(str(p))
                   for p in outputs.values())


def record(address: str, made: str, outputs: Mapping[str, Path]) -> None:
    """Record that ``outputs``, as they are now, were published from the making ``made``."""
    with Digests() as digests:
        sha256 = {str(p): digests.file_sha256(Path(p)) for p in outputs.values()}
    path = record_path(address)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({"made": made, "outputs": sha256}, indent=1, sort_keys=True) + "\n")
