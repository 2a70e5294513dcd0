"""The code a stage runs, derived from its runner's imports.

A stage's ``code`` dependencies (dvc.yaml's ``deps``, the Snakemake rule's ``code`` input) are
every module of the package that its runner ``taskgeom.stages.<name>`` imports, directly or
through other modules, together with the packages that hold them (their ``__init__`` runs on
import). Imports are read from the source with ``ast``, at module level and inside functions
alike, so editing any module a stage may execute reruns that stage, and nothing is imported to
find out.

Parsing the package is much of the cost of reading the Snakefile, which every ``snakemake``
command (a dry run, each SLURM job) does. So what a source file names is kept between processes
in ``$XDG_CACHE_HOME/taskgeom/codedeps.json`` (default ``~/.cache``), keyed by the module,
whether it is a package (relative imports resolve against it) and the sha256 of its bytes: an
edited file is parsed again, and which of its names are modules of the package is decided anew
each time from the files present. The cache is written atomically and only when it gained an
entry; one that cannot be read or written is ignored.
"""

from __future__ import annotations

import ast
import hashlib
import os
from functools import cache
from pathlib import Path

from taskgeom.pipeline.json_cache import JsonCache

PACKAGE = "taskgeom"
SRC = Path(__file__).resolve().parents[2]  # the directory that holds the package


def module_file(module: str) -> Path | None:
    """The source file of a dotted module name of the package, or None if there is none."""
    base = SRC.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ``ImportFrom`` names, relative imports resolved against ``module``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def named_imports(source: bytes, module: str, is_package: bool, filename: str) -> list[str]:
    """Every absolute module name that ``source`` (the text of ``module``) imports or may import:
    ``import a.b``, ``from a import b`` as ``a`` and ``a.b``, relative imports resolved; sorted.
    Whether each is a module of the package is for the caller to decide."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            found.add(base)
            # ``from package import submodule`` imports the submodule too
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return sorted(found)


def cache_file() -> Path:
    """Where ``named_imports`` is kept between processes."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / PACKAGE / "codedeps.json"


class ScanCache(JsonCache):
    """``named_imports`` by (module, sha256 of its source), kept in ``cache_file()``."""

    def file(self) -> Path:
        return cache_file()

    def lookup(self, module: str, path: Path) -> list[str]:
        source, is_package = path.read_bytes(), path.name == "__init__.py"
        key = f"{module}{'/__init__' if is_package else ''} {hashlib.sha256(source).hexdigest()}"
        return self.get(key, lambda: named_imports(source, module, is_package, str(path)))


SCANS = ScanCache()


@cache
def direct_imports(module: str) -> frozenset[str]:
    """Modules of the package that ``module`` imports anywhere in its source."""
    path = module_file(module)
    if path is None:
        raise ModuleNotFoundError(f"{module}: no such module under {SRC / PACKAGE}")
    return frozenset(m for m in SCANS.lookup(module, path) if m.split(".")[0] == PACKAGE and module_file(m))


def with_packages(module: str) -> set[str]:
    """``module`` and every package above it (a.b.c -> a, a.b, a.b.c)."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


@cache
def import_closure(module: str) -> frozenset[str]:
    """Every module of the package that importing ``module`` may execute, ``module`` included."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for name in with_packages(todo.pop()):
            if name not in seen:
                seen.add(name)
                todo.extend(direct_imports(name))
    return frozenset(seen)


def code_files(module: str, root: Path = SRC.parent) -> tuple[str, ...]:
    """The source files of ``import_closure(module)``, relative to ``root`` and sorted."""
    files = {module_file(m) for m in import_closure(module)}
    SCANS.save()
    return tuple(sorted(str(f.relative_to(root)) for f in files if f is not None))
