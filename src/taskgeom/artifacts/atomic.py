"""Writing files atomically: a reader never sees a half-written output, and a failed
write leaves the previous file in place."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from taskgeom.artifacts.provenance import header_line

UMASK = os.umask(0)
os.umask(UMASK)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed over ``path`` only if the block succeeds.

    Args:
        path: the file to write; its directory is created.

    Yields:
        The temporary path (``.<name>.<8 random characters>.tmp``), removed if the block fails.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~UMASK)  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def leftovers(path: str | Path) -> list[Path]:
    """The temporary files beside ``path`` that writes to it (``atomic_path``) left when the
    process was killed before the rename: ``.<name>.<8 random characters>.tmp``.

    Args:
        path: the file written.

    Returns:
        The leftover temporary files, sorted.
    """
    path = Path(path)
    return sorted(path.parent.glob(f".{glob.escape(path.name)}.{'?' * 8}.tmp"))


def write_text(path: str | Path, text: str, provenance: dict | None = None) -> None:
    """Write ``text`` atomically; with ``provenance``, a first line records it (.csv, .md, .tex, .yaml).

    Args:
        path: the file.
        text: its content.
        provenance: the record for the header line (``header_line``), or None for none.
    """
    if provenance is not None:
        text = header_line(provenance, Path(path).suffix) + text
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` atomically as indented JSON with sorted keys.

    Args:
        path: the file.
        obj: anything ``json.dumps`` takes.
    """
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
