"""Content digests of files and folders, for data that lives outside the pipeline.

A data set's or checkpoint's identity is its bytes, never where it lies: ``tree_sha256`` of a
folder digests its files by their paths *relative to it* and their sha256, so the same files
copied anywhere give the same digest, and one changed byte gives another.

Hashing a paper-scale data set takes minutes; ``file_sha256`` remembers each file's digest in a
machine-local SQLite file (``$XDG_CACHE_HOME/taskgeom/digests.sqlite``), keyed by the file's
real path, device, inode, size and modification time in nanoseconds, so a file is read again only
after any of them changes (a copy, a move to another folder, an edit). The cache is an
optimisation only: when it cannot be opened or written, files are hashed every time.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

CHUNK = 1 << 20
SCHEMA = ("CREATE TABLE IF NOT EXISTS digests (path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, size INTEGER, "
          "mtime_ns INTEGER, sha256 TEXT)")


def cache_path() -> Path:
    """The digest cache: ``$XDG_CACHE_HOME/taskgeom/digests.sqlite`` (default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "taskgeom" / "digests.sqlite"


def _connect() -> sqlite3.Connection | None:
    try:
        path = cache_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=60)
        db.execute("PRAGMA synchronous = OFF")  # a cache: losing its last entries in a crash costs a re-hash
        db.execute(SCHEMA)
        return db
    except (OSError, sqlite3.Error):
        return None


def hash_file(path: Path, algorithm: str = "sha256") -> str:
    """The hex digest of a file's bytes by ``algorithm`` (a ``hashlib`` name), read in chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


class Digests:
    """sha256 of files, remembered by (real path, device, inode, size, mtime_ns); a context manager."""

    def __init__(self) -> None:
        """Open the machine's digest cache; without one (unwritable), every file is hashed."""
        self.db = _connect()

    def __enter__(self) -> Digests:
        """Use the cache inside a ``with`` block."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Commit what was remembered and close the cache."""
        if self.db is not None:
            try:
                self.db.commit()
            except sqlite3.Error:
                pass
            self.db.close()

    def file_sha256(self, path: Path) -> str:
        """sha256 of the bytes of ``path`` (a symlink is followed); FileNotFoundError if absent."""
        real = os.path.realpath(path)
        st = os.stat(real)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if self.db is not None:
            try:
                row = self.db.execute("SELECT dev, ino, size, mtime_ns, sha256 FROM digests WHERE path = ?",
                                      (real,)).fetchone()
                if row is not None and tuple(row[:4]) == key:
                    return row[4]
            except sqlite3.Error:
                self.db = None
        digest = hash_file(Path(real))
        if self.db is not None:
            try:  # committed at once: a long hash must not hold the cache's write lock from other processes
                self.db.execute("INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?)", (real, *key, digest))
                self.db.commit()
            except sqlite3.Error:
                self.db = None
        return digest

    def named_sha256(self, files: Iterable[tuple[str, Path]]) -> str:
        """``combined`` of the ``(name, file)`` pairs' sha256: a digest of names and content,
        whatever folder holds the files."""
        return combined({name: self.file_sha256(path) for name, path in files})

    def tree_sha256(self, path: Path) -> str:
        """A file's sha256, or a folder's ``named_sha256`` over every file under it (symlinks
        followed), named by their paths relative to it."""
        path = Path(path)
        if not path.is_dir():
            return self.file_sha256(path)
        files = [(p.relative_to(path).as_posix(), p) for p in walk_files(path)]
        return self.named_sha256(files)


def combined(sha256: dict[str, str]) -> str:
    """sha256 of the lines ``name<TAB>sha256`` of each named file, in sorted order of names."""
    return hashlib.sha256("".join(f"{name}\t{sha256[name]}\n" for name in sorted(sha256)).encode()).hexdigest()


def walk_files(root: Path) -> list[Path]:
    """Every file under ``root``, following symlinked folders (a Hugging Face cache links its
    snapshots to blobs), in sorted order."""
    found = []
    for folder, dirs, names in os.walk(root, followlinks=True):
        dirs.sort()
        found += [Path(folder) / n for n in sorted(names) if (Path(folder) / n).is_file()]
    return found
