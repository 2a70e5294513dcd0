"""Where this machine keeps the data sets and checkpoints: ``data/external/<name>``.

Profiles name external files by paths under ``data/external/`` (``data/external/imagenet-val``,
``data/external/paper-mini/models/clip-b16/model.safetensors``), the same on every machine. On
each machine ``data/external/<name>`` is a link to where the files really are, made once by
``taskgeom data link NAME PATH``; ``data/`` is git-ignored, so the links stay machine-local, and
the pipeline tracks the files by content (``pipeline/identity.py``), so pointing a link at a
copy of the same files elsewhere reruns nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

EXTERNAL = Path("data/external")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def link(name: str, target: str | Path, root: Path = Path(".")) -> Path:
    """Point ``root/data/external/<name>`` at ``target`` (made absolute), replacing an earlier link
    atomically; returns the link.

    Raises:
        ValueError: ``name`` is not one plain file name.
        FileNotFoundError: ``target`` does not exist.
        FileExistsError: ``data/external/<name>`` exists and is not a link (files are never replaced).
    """
    if not NAME.fullmatch(name):
        raise ValueError(f"{name!r}: a link name is one plain file name (letters, digits, '.', '_', '-')")
    target = Path(target).expanduser().absolute()
    if not target.exists():
        raise FileNotFoundError(f"{target}: does not exist; give the folder or file that holds {name}")
    where = root / EXTERNAL / name
    if where.exists() and not where.is_symlink():
        raise FileExistsError(f"{where}: exists and is not a link; move it away to link {name} elsewhere")
    where.parent.mkdir(parents=True, exist_ok=True)
    staged = where.with_name(f".{name}.link-{os.getpid()}")
    staged.unlink(missing_ok=True)
    staged.symlink_to(target, target_is_directory=target.is_dir())
    os.replace(staged, where)
    return where
