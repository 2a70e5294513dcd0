"""A stage instance publishes its outputs as a set.

The stage writes each output under a staged name in the output's own directory,
``.staged.<name>`` (the extension kept, so writers that go by it still do), and only when the
whole run and its checks have succeeded are the staged files renamed to their real names, one
``os.replace`` each. A run that fails removes what it staged and leaves the outputs of the last
successful run as they were; a killed run's staged files, and the temporary files of the atomic
writes it was in the middle of, are removed when the next run starts.
Resumable state (the ``.partial/`` files of ``data/hdf5.py`` and the zoo's training state) lives
beside the staged names and is untouched either way.

Both front ends delete a job's outputs before they run it (DVC's ``dvc repro``, Snakemake's job
preparation), so a rerun would otherwise leave its published outputs missing for as long as it
runs, and a failed one without them. The command keeps a hard link to each output it published
under ``.taskgeom/published/<path>`` (``KEPT``; nothing is copied) and, once it holds the stage's
lock, puts back any output that is missing from there before it runs: until a run replaces them
as a set, the last published outputs are in place, and a run that fails leaves them there.
(Snakemake removes a failed job's outputs again when the command has exited: ``docs/failures.md``.)

A kept link is the output's own inode, not a copy. It survives the output being unlinked, or
replaced by another file renamed over its name; but a write into the output itself (truncated,
overwritten or appended to in place) changes the kept link with it, and once a front end deletes
the damaged output, ``restore`` puts the damaged file back. ``restore`` fills in only missing
outputs: one that is present is left as it is, whatever it holds. What keeps the published bytes
apart from the workspace is DVC's cache (its own copy, at DVC's default cache types ``reflink``
and ``copy``), restored with ``dvc checkout --force STAGE@ITEM``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from taskgeom.artifacts.atomic import leftovers

PREFIX = ".staged."
KEPT = Path(".taskgeom/published")  # a hard link to each output as a stage last published it


def staged_path(path: Path) -> Path:
    """Where a stage writes ``path`` until the run publishes it."""
    return path.parent / f"{PREFIX}{path.name}"


def kept_path(path: Path, kept: Path) -> Path | None:
    """Where ``kept`` holds the last published ``path``: none for an absolute path."""
    return None if path.is_absolute() else kept / path


def restore(outputs: Iterable[Path], kept: Path, root: Path = Path(".")) -> list[Path]:
    """Put back each of ``outputs`` (relative to ``root``) that is missing, from its hard link
    under ``kept``; return those put back."""
    restored = []
    for path in map(Path, outputs):
        link = kept_path(path, kept)
        if (root / path).exists() or link is None or not link.is_file():
            continue
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.link(link, root / path)
            restored.append(path)
    return restored


def keep(outputs: Iterable[Path], kept: Path, root: Path = Path(".")) -> None:
    """Hard-link each of ``outputs`` (relative to ``root``) under ``kept``, replacing the link it
    had; where the file system refuses (another device), drop the old link rather than keep an
    older file."""
    for path in map(Path, outputs):
        link = kept_path(path, kept)
        if link is None or not (root / path).is_file():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        new = link.parent / f".{link.name}.new"
        new.unlink(missing_ok=True)
        try:
            os.link(root / path, new)
            os.replace(new, link)
        except OSError:
            new.unlink(missing_ok=True)
            link.unlink(missing_ok=True)


@contextlib.contextmanager
def staged_outputs(outputs: Mapping[str, Path], kept: Path | None = None) -> Iterator[dict[str, Path]]:
    """Yield the staged path of every output (by the same keys); on a clean exit rename them all
    into place, on an exception remove them and leave the real outputs alone. With ``kept``, first
    put back the outputs a front end deleted from their links there, and link the new ones there."""
    staged = {key: staged_path(Path(path)) for key, path in outputs.items()}
    if kept is not None:
        restore(outputs.values(), kept)
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
    if kept is not None:
        keep(outputs.values(), kept)
