"""Each stage's code is one dependency, its record ``data/code/<stage>.txt``
(pipeline/code_records.py): the files its runner imports with their sha256, rewritten only when
that text changes. The end-to-end check that both front ends rerun exactly the importers of an
edited module is in test_reruns.py."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from taskgeom.pipeline import code_records
from taskgeom.pipeline.dag import dvc_stage, snakemake_rule
from taskgeom.pipeline.registry import STAGES

REPO = Path(__file__).resolve().parents[1]
EDITED = "src/taskgeom/prune/tome.py"


def test_a_record_lists_each_code_file_with_the_sha256_of_its_bytes():
    for stage in STAGES:
        lines = code_records.record_text(stage, REPO).splitlines()
        assert lines[0].startswith("# ") and stage.name in lines[0]
        assert lines[1:] == [f"{hashlib.sha256((REPO / f).read_bytes()).hexdigest()}  {f}" for f in sorted(stage.code)]


def test_the_record_is_each_front_ends_one_code_dependency():
    for stage in STAGES:
        body = dvc_stage(stage)
        deps = (body.get("do") or body)["deps"]
        assert stage.code_record in deps and not [d for d in deps if d.endswith(".py")], stage.name
    rule = snakemake_rule("zoo", {"device": "cpu", "zoo": {}})
    assert rule.input["code"] == "data/code/zoo.txt"


def test_an_edit_rewrites_exactly_the_records_of_the_stages_that_import_the_module(tmp_path: Path):
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    assert code_records.refresh(tmp_path) == [s.name for s in STAGES]
    dates = {s.name: (tmp_path / s.code_record).stat().st_mtime_ns for s in STAGES}
    assert code_records.refresh(tmp_path) == []  # the same text is not written again
    assert {s.name: (tmp_path / s.code_record).stat().st_mtime_ns for s in STAGES} == dates
    module = tmp_path / EDITED
    module.write_text(module.read_text() + "\n# an edit\n")
    importers = [s.name for s in STAGES if EDITED in s.code]
    assert importers and len(importers) < len(STAGES)
    assert code_records.refresh(tmp_path) == importers
    module.unlink()  # a file that cannot be read is recorded as such
    assert code_records.refresh(tmp_path) == importers
    assert all(f"{code_records.UNREADABLE}  {EDITED}" in (tmp_path / f"data/code/{name}.txt").read_text()
               for name in importers)
