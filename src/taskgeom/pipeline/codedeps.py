"""The code a stage runs, derived from its runner's imports.

A stage's ``code`` dependencies (dvc.yaml's ``deps``, the Snakemake rule's ``code`` input) are
every module of the package that its runner ``taskgeom.stages.<name>`` imports, directly or
through other modules, together with the packages that hold them (their ``__init__`` runs on
import). Imports are read from the source with ``ast``, at module level and inside functions
alike, so editing any module a stage may execute reruns that stage, and nothing is imported to
find out.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

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


@cache
def direct_imports(module: str) -> frozenset[str]:
    """Modules of the package that ``module`` imports anywhere in its source."""
    path = module_file(module)
    if path is None:
        raise ModuleNotFoundError(f"{module}: no such module under {SRC / PACKAGE}")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, path.name == "__init__.py")
            found.add(base)
            # ``from package import submodule`` imports the submodule too
            found.update(f"{base}.{alias.name}" for alias in node.names if module_file(f"{base}.{alias.name}"))
    return frozenset(m for m in found if m.split(".")[0] == PACKAGE and module_file(m))


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
    return tuple(sorted(str(f.relative_to(root)) for f in files if f is not None))
