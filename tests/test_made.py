"""``pipeline/made.py``: a stage keeps its published outputs when its making (code, values, input
bytes) is the one they were made from, and only then; and provenance names the code by content."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskgeom.pipeline import made
from taskgeom.pipeline.publish import KEPT, keep
from taskgeom.pipeline.runtime import StageContext, code_digest

CODE = ("src/taskgeom/pipeline/made.py", "src/taskgeom/pipeline/publish.py")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(made.RERUN, raising=False)
    Path("in.txt").write_text("input")
    Path("out.txt").write_text("output")
    return tmp_path


def published(values: str = "{}") -> str:
    """Record out.txt as made from in.txt with ``values``, as a run would; return its making."""
    read = made.input_sha256({"x": Path("in.txt")})
    making = made.making(read, values, CODE)
    keep([Path("out.txt")], KEPT)
    made.record("stage@item", making, read, {"params.yaml": {"lr": 0.2}}, {"out": Path("out.txt")})
    return making


def test_the_same_making_keeps_the_outputs_and_puts_back_a_deleted_one(workspace: Path):
    making = published()
    assert made.unchanged("stage@item", making, {"out": Path("out.txt")})
    Path("out.txt").unlink()  # a front end deletes a job's outputs before it runs it
    again = made.making(made.input_sha256({"x": Path("in.txt")}), "{}", CODE)
    assert made.unchanged("stage@item", again, {"out": Path("out.txt")})
    assert Path("out.txt").read_text() == "output"


@pytest.mark.parametrize("change", ["input bytes", "values", "code", "output damaged", "rerun asked", "no record"])
def test_anything_else_runs_the_stage(workspace: Path, change: str, monkeypatch: pytest.MonkeyPatch):
    making = published()
    address, values, code = "stage@item", "{}", CODE
    if change == "input bytes":
        Path("in.txt").write_text("other input")
    elif change == "values":
        values = '{"lr": 0.1}'
    elif change == "code":
        code = CODE[:1]
    elif change == "output damaged":
        Path("out.txt").write_text("outpu")
    elif change == "rerun asked":
        monkeypatch.setenv(made.RERUN, "1")
    else:
        address = "stage@other"
    now = made.making(made.input_sha256({"x": Path("in.txt")}), values, code)
    assert (now != making) == (change in ("input bytes", "values", "code"))
    assert not made.unchanged(address, now, {"out": Path("out.txt")})


def test_provenance_names_the_code_by_its_content_not_the_commit(tmp_path: Path):
    ctx = StageContext("demo", {}, {}, {}, code=CODE)
    version = ctx.provenance()["code_version"]
    assert version.endswith("+code." + code_digest(CODE)[:16])
    assert code_digest(CODE) != code_digest(CODE[:1]) and code_digest(CODE) == code_digest(CODE[::-1])
    assert "+g" not in version
