"""A stage instance publishes its outputs as a set.

The stage writes each output under a staged name in the output's own directory,
``.staged.<name>`` (the extension kept, so writers that go by it still do), and only when the
whole run and its checks have succeeded are the staged files renamed to their real names, one
``os.replace`` each. A run that fails removes what it staged and leaves the outputs of the last
successful run as they were; a killed run's staged files, and the temporary files of the atomic
writes it was in the middle of, are removed when the next run starts.
Resumable state (the ``.partial/`` files of ``data/hdf5.py`` and the zoo's training state) lives
beside the staged names and is untouched either way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from taskgeom.artifacts.atomic import leftovers

PREFIX = ".staged."


def staged_path(path: Path) -> Path:
    """Where a stage writes ``path`` until the run publishes it."""
    return path.parent / f"{PREFIX}{path.name}"


@contextlib.contextmanager
def staged_outputs(outputs: Mapping[str, Path]) -> Iterator[dict[str, Path]]:
    """Yield the staged path of every output (by the same keys); on a clean exit rename them all
    into place, on an exception remove them and leave the real outputs alone."""
    staged = {key: staged_path(Path(path)) for key, path in outputs.items()}
    for path in staged.values():
        for stale in (path, *leftovers(path)):  # staged, or being written, by a run that was killed
            stale.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield staged
    except BaseException:
        for path in staged.values():
            path.unlink(missing_ok=True)
        raise
    for key, path in staged.items():
        os.replace(path, outputs[key])
