"""The package's layers, read from its source: library code never reaches up into the pipeline,
nothing imports in a circle, every stage runs from the module named after it, the files and
functions stay small, and each stage's derived code dependencies cover every module its runner
loads."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, tool_env

from taskgeom.pipeline.codedeps import direct_imports, module_file
from taskgeom.pipeline.registry import STAGES

SRC = REPO / "src"
LIBRARY = ("linalg", "diagnostics", "probes", "models", "data", "metric", "prune", "retrieval", "evaluate", "fixtures",
           "artifacts", "inspection", "fitting", "patching", "comparing")
UPPER = ("taskgeom.pipeline", "taskgeom.stages")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
# function -> why it stays longer than MAX_FUNCTION_LINES
LONG_FUNCTIONS: dict[str, str] = {}


def modules() -> list[str]:
    """Every module of the package, by dotted name."""
    names = []
    for path in sorted((SRC / "taskgeom").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_library_code_never_imports_the_pipeline_or_a_stage():
    library = tuple(f"taskgeom.{name}" for name in LIBRARY)
    reaching_up = {m: sorted(i for i in direct_imports(m) if under(i, UPPER))
                   for m in modules() if under(m, library)}
    assert not {m: up for m, up in reaching_up.items() if up}


def test_no_import_cycle():
    graph = {m: {i for i in direct_imports(m) if i != m} for m in modules()}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return
        for i in sorted(graph.get(m, ())):
            visit(i, path + [m])
        done.add(m)

    for m in graph:
        visit(m, [])


def bound_names(init: Path) -> set[str]:
    """Names a package's ``__init__`` binds at import: assignments, definitions and imports."""
    names: set[str] = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_names_are_imported_from_where_the_import_closure_sees_them():
    """``from package import name`` must name a submodule or a name the package's ``__init__``
    binds itself; a name it provides lazily (``taskgeom.linalg``'s ``__getattr__``) is imported
    from its submodule, or the stage's derived dependencies would miss that submodule."""
    wrong = []
    for m in modules():
        for node in ast.walk(ast.parse(module_file(m).read_text())):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("taskgeom")):
                continue
            init = module_file(node.module)
            if init is None or init.name != "__init__.py":
                continue
            for alias in node.names:
                if not module_file(f"{node.module}.{alias.name}") and alias.name not in bound_names(init):
                    wrong.append(f"{m}: `from {node.module} import {alias.name}`: import it from its submodule")
    assert not wrong, "\n".join(wrong)


def test_every_stage_runs_from_the_module_named_after_it():
    runners = {s.runner for s in STAGES}
    for s in STAGES:
        path = module_file(s.runner)
        assert path is not None and path == SRC / "taskgeom" / "stages" / f"{s.name.replace('-', '_')}.py", s.name
        run = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "run"]
        assert run and [a.arg for a in run[0].args.args] == ["ctx"], f"{path}: no run(ctx)"
    strays = [m for m in modules() if m.startswith("taskgeom.stages.") and m not in runners]
    assert not strays, f"modules in taskgeom/stages/ that no stage runs: {strays}"


def test_files_and_functions_stay_small():
    too_long = []
    for path in sorted([*SRC.rglob("*.py"), *(REPO / "tests").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]):
        text = path.read_text()
        rel = path.relative_to(REPO)
        if text.count("\n") > MAX_FILE_LINES:
            too_long.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and f"{rel}::{node.name}" not in LONG_FUNCTIONS:
                    too_long.append(f"{rel}::{node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)


# Run in a fresh interpreter: import the third-party libraries once, then fork once per stage and
# import its runner alone, so each child's sys.modules holds what that runner loads and nothing else.
LOADED_BY_EACH_RUNNER = r"""
import json, os, sys
import matplotlib; matplotlib.use("Agg")
for lib in ("numpy", "scipy.stats", "pandas", "h5py", "yaml", "jsonschema", "tqdm", "torch", "torch.func",
            "timm", "transformers", "safetensors.torch", "matplotlib.pyplot", "PIL.Image"):
    __import__(lib)
out = {}
for runner in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        __import__(runner)
        loaded = sorted(m for m in sys.modules if m == "taskgeom" or m.startswith("taskgeom."))
        os.write(write, json.dumps(loaded).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        out[runner] = json.loads(pipe.read() or "null")
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """Runner -> the package's modules that importing it loads."""
    proc = subprocess.run([sys.executable, "-c", LOADED_BY_EACH_RUNNER, *sorted({s.runner for s in STAGES})],
                          env=tool_env(warm=False) | {"PYTHONPATH": str(SRC)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


def undeclared(runner_loads: list[str], code: tuple[str, ...]) -> list[str]:
    """The loaded modules whose source files are not among a stage's code dependencies."""
    return [m for m in runner_loads if str(module_file(m).relative_to(REPO)) not in code]


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_a_stage_depends_on_every_module_its_runner_loads(stage, loaded):
    assert loaded[stage.runner], f"{stage.runner} failed to import"
    missing = undeclared(loaded[stage.runner], stage.code)
    assert not missing, f"{stage.name}: its runner loads {missing}, which its code dependencies leave out"


def test_the_dependency_check_names_a_module_left_out(loaded):
    diagnose = next(s for s in STAGES if s.name == "diagnose")
    code = tuple(f for f in diagnose.code if f != "src/taskgeom/linalg/ritz_density.py")
    assert undeclared(loaded[diagnose.runner], code) == ["taskgeom.linalg.ritz_density"]
