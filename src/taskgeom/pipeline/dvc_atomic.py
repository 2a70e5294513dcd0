"""``dvc`` with its YAML files written atomically: ``python -m taskgeom.pipeline.dvc_atomic ARGS``
runs ``dvc ARGS``.

DVC writes dvc.lock (and dvc.yaml) by opening it for writing, which truncates it, and then
dumping the YAML into it (``dvc.utils.serialize._common._dump_data``). A process killed in
between leaves a truncated dvc.lock, and every later ``dvc`` command and Snakemake run stops on
"'./dvc.lock' validation failed". Here each such dump is rendered to a string first and written
through ``atomic_path``: a kill at any moment leaves either the previous file or the new one.

The commit the Snakefile's ``onsuccess`` runs (``sync.commit_to_dvc``, through ``dvc_commit``)
writes through this module, and so does every ``dvc`` command of the project's environment: its
``dvc`` launcher runs this module (``envs/setup-venv.sh``). A DVC installed elsewhere writes as
DVC does. The same processes read dvc.lock for its updates with the safe loader
(``dvc_lock_parse``).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taskgeom.artifacts.atomic import atomic_path
from taskgeom.pipeline.dvc_lock_parse import patch_lock_parse


def atomic_dump(original: Callable[..., Any]) -> Callable[..., Any]:
    """DVC's ``_dump_data(path, data, dumper, fs=None, **dumper_args)`` writing local files
    atomically; files on another file system go to ``original``."""

    def dump(path: Any, data: Any, dumper: Callable[..., Any], fs: Any = None, **dumper_args: Any) -> None:
        if fs is not None and "local" not in getattr(fs, "protocol", ("local",)):
            return original(path, data, dumper, fs=fs, **dumper_args)
        text = io.StringIO()
        dumper(data, text, **dumper_args)
        with atomic_path(Path(path)) as tmp:
            tmp.write_text(text.getvalue(), encoding="utf-8")
        return None

    return dump


def patch_dvc() -> None:
    """Make every YAML dump of this process's DVC atomic (``modify_yaml`` calls ``_common``'s
    ``_dump_data``; ``dump_yaml`` the name ``_yaml`` imported from it), and its updates of
    dvc.lock parse with the safe loader."""
    from dvc.utils.serialize import _common, _yaml

    patch_lock_parse()

    dump = atomic_dump(_common._dump_data)
    _common._dump_data = dump
    _yaml._dump_data = dump


def main(argv: list[str]) -> int:
    patch_dvc()
    from dvc.cli import main as dvc_main

    return dvc_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
