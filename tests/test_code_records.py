"""Each stage's code is one dependency, its record ``data/code/<stage>.txt``
(pipeline/code_records.py): the files its runner imports with their code digests
(pipeline/code_digest.py), rewritten only when that text changes; and the code version a stage's
provenance records is made of the same digests. A comment, a docstring or a layout change leaves
both as they were; an edit of the code, or a syntax error, changes both. The end-to-end checks that
both front ends rerun exactly the importers of an edited module, and nothing for a comment, are in
test_reruns.py."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from taskgeom.pipeline import code_digest, code_records
from taskgeom.pipeline.dag import dvc_stage, snakemake_rule
from taskgeom.pipeline.registry import STAGES, stage

REPO = Path(__file__).resolve().parents[1]
EDITED = "src/taskgeom/prune/tome.py"
CODE_EDIT = "\nEDITED = 1  # a module-level constant: new code\n"  # what an edit of a module appends
HEAD_FIT = "src/taskgeom/metric/head_fit.py"  # imported by the stage `head` alone


@pytest.fixture
def digest_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A digest cache of the test's own, empty, in memory and on disk."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(code_digest, "DIGESTS", code_digest.DigestCache())
    return tmp_path / "cache" / "taskgeom" / "code_digest.json"


def test_a_record_lists_each_code_file_with_its_code_digest():
    digests = {f: code_digest.source_digest((REPO / f).read_bytes()) for f in {f for s in STAGES for f in s.code}}
    for s in STAGES:
        lines = code_records.record_text(s, REPO).splitlines()
        assert lines[0].startswith("# ") and s.name in lines[0]
        assert lines[1:] == [f"{digests[f]}  {f}" for f in sorted(s.code)]


def test_the_record_is_each_front_ends_one_code_dependency():
    for s in STAGES:
        body = dvc_stage(s)
        deps = (body.get("do") or body)["deps"]
        assert s.code_record in deps and not [d for d in deps if d.endswith(".py")], s.name
    rule = snakemake_rule("zoo", {"device": "cpu", "zoo": {}})
    assert rule.input["code"] == "data/code/zoo.txt"


def test_an_edit_rewrites_exactly_the_records_of_the_stages_that_import_the_module(tmp_path: Path):
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    assert code_records.refresh(tmp_path) == [s.name for s in STAGES]
    dates = {s.name: (tmp_path / s.code_record).stat().st_mtime_ns for s in STAGES}
    assert code_records.refresh(tmp_path) == []  # the same text is not written again
    assert {s.name: (tmp_path / s.code_record).stat().st_mtime_ns for s in STAGES} == dates
    module = tmp_path / EDITED
    module.write_text(module.read_text() + CODE_EDIT)
    importers = [s.name for s in STAGES if EDITED in s.code]
    assert importers and len(importers) < len(STAGES)
    assert code_records.refresh(tmp_path) == importers
    module.unlink()  # a file that cannot be read is recorded as such
    assert code_records.refresh(tmp_path) == importers
    assert all(f"{code_records.UNREADABLE}  {EDITED}" in (tmp_path / f"data/code/{name}.txt").read_text()
               for name in importers)


MODULE = '''"""A module."""
import os

RATE = 0.5


class Scaler:
    """Scales."""

    def scale(self, x):
        """Times the rate."""
        return x * RATE  # the rate


async def later():
    """Waits."""
    return f"{RATE} {os.sep}"
'''
SAME_CODE = {  # edits that cannot change what the module does
    "a comment": lambda s: s + "# a comment\n",
    "a comment changed": lambda s: s.replace("# the rate", "# RATE, the rate"),
    "the layout": lambda s: s.replace("x * RATE", "(x\n                *RATE)").replace("\n\n\nclass", "\nclass"),
    "the module's docstring": lambda s: s.replace("A module.", "A module, documented again."),
    "a class's docstring": lambda s: s.replace("Scales.", "Scales by a rate."),
    "a method's docstring, removed": lambda s: s.replace('        """Times the rate."""\n', ""),
    "a coroutine's docstring": lambda s: s.replace("Waits.", "Waits, then says."),
}
OTHER_CODE = {  # edits that can
    "a constant": lambda s: s.replace("RATE = 0.5", "RATE = 0.6"),
    "a name": lambda s: s.replace("def scale", "def rescale"),
    "an f-string": lambda s: s.replace('f"{RATE} {os.sep}"', 'f"{RATE}{os.sep}"'),
    "an f-string where a docstring would be": lambda s: s.replace('"""Waits."""', 'f"""Waits{RATE}."""'),
    "a docstring made a statement": lambda s: s.replace('        """Times the rate."""\n', "        pass\n"),
    "a syntax error": lambda s: s + "def broken(:\n",
}


def test_the_code_digest_ignores_comments_layout_and_docstrings_and_nothing_else():
    digest = code_digest.source_digest
    base = digest(MODULE.encode())
    for what, edit in {**SAME_CODE, **OTHER_CODE}.items():
        edited = edit(MODULE)
        assert edited != MODULE, what   # the edit applies
        assert (digest(edited.encode()) == base) == (what in SAME_CODE), what
    broken = OTHER_CODE["a syntax error"](MODULE).encode()
    assert code_digest.normalised(broken) == b"bytes\n" + broken   # digested by its bytes
    assert digest(broken) == digest(broken) != digest(broken + b"# another comment\n")


def test_a_digest_is_kept_by_the_bytes_it_was_computed_from(tmp_path: Path, digest_cache: Path):
    path = tmp_path / "module.py"
    path.write_bytes(b"X = 1\n")
    stat = path.stat()
    first = code_digest.DigestCache()
    computed = first.digest(path)
    first.save()
    kept = json.loads(digest_cache.read_text())
    assert list(kept.values()) == [computed]
    digest_cache.write_text(json.dumps(dict.fromkeys(kept, "planted")))   # what the next process reads
    assert code_digest.DigestCache().digest(path) == "planted"
    path.write_bytes(b"X = 2\n")   # other code, of the same size and date: only its bytes tell
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert code_digest.DigestCache().digest(path) == code_digest.source_digest(b"X = 2\n") != computed
    digest_cache.write_text("{not json")   # a cache that cannot be read is ignored
    assert code_digest.DigestCache().digest(path) == code_digest.source_digest(b"X = 2\n")


HEAD_FIT_EDITS: dict[str, tuple[Callable[[str], str], bool]] = {  # an edit, and whether it can change a result
    "a comment appended": (lambda s: s + "\n# a comment that changes no behaviour\n", False),
    "a docstring": (lambda s: s.replace("The dataset a head learns", "The dataset that a head learns", 1), False),
    "the layout": (lambda s: s.replace("(kind: str, target: TargetFile, power_iters: int)",
                                       "(\n    kind: str, target: TargetFile, power_iters: int,\n)", 1), False),
    "a constant": (lambda s: s.replace('if kind == "spectral":', 'if kind == "spectral ":', 1), True),
    "a syntax error": (lambda s: s + "\ndef broken(:\n", True),
}
CODE_VERSION = ("import json, sys; from taskgeom.pipeline import runtime;"
                "ctx = runtime.StageContext('head', {}, {}, {}, code=tuple(json.loads(sys.argv[1])));"
                "print(runtime.__file__, ctx.provenance()['code_version'])")


def code_version(tree: Path, code: tuple[str, ...]) -> str:
    """The code version a ``head`` run's provenance records, from the package under ``tree/src``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "XDG_CACHE_HOME": str(tree / "cache")}
    out = subprocess.run([sys.executable, "-c", CODE_VERSION, json.dumps(code)], cwd=tree, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert Path(out[0]).is_relative_to(tree / "src"), out   # that package, not this checkout's
    return out[1]


def test_only_an_edit_that_can_change_a_result_changes_the_record_and_the_code_version(tmp_path: Path):
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    head = stage("head")
    assert HEAD_FIT in head.code
    module = tmp_path / HEAD_FIT
    original = module.read_text()
    before = code_records.record_text(head, tmp_path), code_version(tmp_path, head.code)
    assert re.fullmatch(r"\d[\w.]*\+code\.[0-9a-f]{16}", before[1]), before[1]
    for what, (edit, changes) in HEAD_FIT_EDITS.items():
        assert edit(original) != original, what
        module.write_text(edit(original))
        after = code_records.record_text(head, tmp_path), code_version(tmp_path, head.code)
        assert (after[0] != before[0], after[1] != before[1]) == (changes, changes), what
    module.write_text(original)
    assert (code_records.record_text(head, tmp_path), code_version(tmp_path, head.code)) == before


def test_no_module_of_the_package_reads_a_docstring():
    """Which is what lets the code digest leave docstrings out: none can change a result."""
    readers = []
    for path in sorted((REPO / "src/taskgeom").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
            if name in ("__doc__", "getdoc"):
                readers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not readers
