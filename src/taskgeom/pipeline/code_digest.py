"""The digest of a source file as code a stage runs: it changes with what the code does, not with
how it is written.

A file's digest is the sha256 of its normalised source: ``ast.dump`` of the parsed module (which
holds no line or column numbers, comments or layout) with every docstring removed (the first
statement of a module, class or function body when it is a string constant; no module of the
package reads ``__doc__``). A comment, a blank line, reformatting or a docstring edit leaves it
unchanged; any edit that changes the parsed code (a constant, a name, a statement) changes it. A
file that does not parse is digested by its bytes, so a syntax error changes the digest as well.
Both a stage's code record (``code_records``) and the code version its provenance records
(``runtime.code_digest``, which ``made`` reads too) are built from it: an edit that cannot change
a result reruns no stage, and a stage rerun for another reason writes the bytes it wrote before.

The parse is the interpreter's, so the digest is that of its Python minor version, which the
environment's lock pins (envs/requirements.lock). Parsing is most of the cost of refreshing the
records, which each front end does before it decides, so a digest is kept between processes in
``$XDG_CACHE_HOME/taskgeom/code_digest.json`` (default ``~/.cache``), keyed by the normalisation's
``FORMAT``, the Python version and the sha256 of the file's bytes: a file's digest is computed
again whenever its bytes change, and never taken from a file with other bytes. The cache is
written atomically, only when it gained an entry; one that cannot be read or written is ignored.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from pathlib import Path

from taskgeom.pipeline.json_cache import JsonCache

FORMAT = 1  # the normalisation's version: a change of ``normalised`` must change it
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)  # nodes with a docstring


def is_docstring(node: ast.stmt) -> bool:
    """Whether ``node`` is a statement that is only a string constant (a docstring, when first)."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def normalised(source: bytes, filename: str = "<source>") -> bytes:
    """``source`` as its digest sees it: a line ``ast`` and ``ast.dump`` of the module with the
    docstrings of the module, its classes and functions removed; a line ``bytes`` and ``source``
    itself when it does not parse (so the two kinds never coincide)."""
    try:
        tree = ast.parse(source, filename=filename)
        for node in ast.walk(tree):
            if isinstance(node, DOCUMENTED) and node.body and is_docstring(node.body[0]):
                node.body = node.body[1:]
        return b"ast\n" + ast.dump(tree).encode()
    except (SyntaxError, ValueError, RecursionError):  # ValueError: a null byte, undecodable text
        return b"bytes\n" + source


def source_digest(source: bytes, filename: str = "<source>") -> str:
    """sha256 (hex) of ``normalised(source)``."""
    return hashlib.sha256(normalised(source, filename)).hexdigest()


def cache_file() -> Path:
    """Where file digests are kept between processes."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "taskgeom" / "code_digest.json"


class DigestCache(JsonCache):
    """``source_digest`` by (``FORMAT``, Python version, sha256 of the bytes), kept in ``cache_file()``."""

    def file(self) -> Path:
        return cache_file()

    def digest(self, path: Path) -> str:
        """The digest of the file at ``path``; raises OSError if it cannot be read."""
        source = path.read_bytes()
        key = f"{FORMAT} {sys.version_info[0]}.{sys.version_info[1]} {hashlib.sha256(source).hexdigest()}"
        return self.get(key, lambda: source_digest(source, str(path)), lambda v: isinstance(v, str))


DIGESTS = DigestCache()


def file_digest(path: Path) -> str:
    """The digest of the source file at ``path`` (``DIGESTS``); raises OSError if it cannot be
    read. Call ``save_digests`` once done, to keep new digests for the next process."""
    return DIGESTS.digest(path)


def save_digests() -> None:
    """Keep the digests computed since the last save for the next process (``DIGESTS.save``)."""
    DIGESTS.save()
