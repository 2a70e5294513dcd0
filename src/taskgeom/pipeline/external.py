"""Where this machine keeps the data sets and checkpoints: ``data/external/<name>``.

Profiles name external files by paths under ``data/external/`` (``data/external/imagenet-val``,
``data/external/paper-mini/models/clip-b16/model.safetensors``), the same on every machine. On
each machine ``data/external/<name>`` is a link to where the files really are, made once by
``taskgeom data link NAME PATH``; ``data/`` is git-ignored, so the links stay machine-local, and
the pipeline tracks the files by content (``pipeline/identity.py``), so pointing a link at a
copy of the same files elsewhere reruns nothing.

A link that leads back to itself (``ln -s val.h5 data/world/val.h5``) is no file to any tool, and
DVC and Snakemake stop on it with a traceback: both front ends look for such loops where the stages
write (``WRITTEN``, ``loops_refusal``) before they read anything, and name the first with what to
do (``loop_line``).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable
from pathlib import Path

EXTERNAL = Path("data/external")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
WRITTEN = ("data", "results")  # the folders that hold every stage's outputs (tests/test_hostile_input.py)


def link(name: str, target: str | Path, root: Path = Path(".")) -> Path:
    """Point ``root/data/external/<name>`` at ``target`` (made absolute), replacing an earlier link
    atomically; returns the link.

    Raises:
        ValueError: ``name`` is not one plain file name; ``target`` is empty, or holds
            ``data/external`` (the repository ``root``, ``data/``, or a folder above them): every
            file under the link is hashed, and the link would lead into itself.
        FileNotFoundError: ``target`` does not exist.
        FileExistsError: ``data/external/<name>`` exists and is not a link (files are never replaced).
    """
    if not NAME.fullmatch(name):
        raise ValueError(f"{name!r}: a link name is one plain file name (letters, digits, '.', '_', '-')")
    if not str(target).strip():
        raise ValueError(f"PATH is empty: give the folder or file that holds {name}")
    target = Path(target).expanduser().absolute()
    if not target.exists():
        raise FileNotFoundError(f"{target}: does not exist; give the folder or file that holds {name}")
    if target.resolve() in (home := (root / EXTERNAL).resolve(), *home.parents):
        raise ValueError(f"{target}: holds data/external/{name} itself (the repository, data/, data/external/ or a "
                         f"folder above them), so the link would lead into itself; give the folder or file that "
                         f"holds {name}")
    where = root / EXTERNAL / name
    if where.exists() and not where.is_symlink():
        raise FileExistsError(f"{where}: exists and is not a link; move it away to link {name} elsewhere")
    where.parent.mkdir(parents=True, exist_ok=True)
    staged = where.with_name(f".{name}.link-{os.getpid()}")
    staged.unlink(missing_ok=True)
    staged.symlink_to(target, target_is_directory=target.is_dir())
    os.replace(staged, where)
    return where


def looping(path: Path) -> bool:
    """Whether ``path``, followed, is a symbolic link loop (ELOOP)."""
    try:
        path.stat()
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def link_loops(root: Path, tops: Iterable[str]) -> list[str]:
    """The symbolic links under each folder ``root/<top>`` that are loops, relative to ``root``,
    sorted; links are not followed, and a folder that is missing or cannot be listed is passed."""
    loops, folders = [], []
    for top in tops:
        (loops if looping(root / top) else folders).append(root / top)
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                loops += [Path(entry.path)] if looping(Path(entry.path)) else []
            elif entry.is_dir(follow_symlinks=False):
                folders.append(Path(entry.path))
    return sorted(str(p.relative_to(root)) for p in loops)


def loop_line(path: str | Path, root: Path = Path(".")) -> str:
    """One line naming the symbolic link loop at ``path`` (relative to the repository ``root``) and
    what to do: remove it, then restore what the pipeline wrote there from DVC's cache, or link an
    external name again. A loop met through a parent folder is named at that folder."""
    path = Path(path)
    at = next((p for p in (*reversed(path.parents[:-1]), path) if looping(root / p)), path)
    fix = (f"link the data again with `taskgeom data link {at.relative_to(EXTERNAL).parts[0]} PATH`"
           if EXTERNAL in at.parents else f"restore it with `dvc checkout --force {at}`")
    return f"{at}: a symbolic link loop (it leads back to itself); remove it (`rm {at}`), then {fix}"


def loops_refusal(root: Path = Path(".")) -> str | None:
    """The line a front end stops with on the symbolic link loops under ``root/<each of WRITTEN>``
    (``link_loops``): the first named with what to do (``loop_line``), and how many more; None
    when there is none."""
    if not (loops := link_loops(root, WRITTEN)):
        return None
    more = f" ({len(loops) - 1} more loop(s): {', '.join(loops[1:4])}{', ...' if len(loops) > 4 else ''})"
    return f"taskgeom: error: {loop_line(loops[0], root)}{more if len(loops) > 1 else ''}"
