"""A stage's outputs are published as a set (pipeline/publish.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskgeom.artifacts.atomic import write_text
from taskgeom.pipeline.publish import KEPT, staged_outputs


def test_a_killed_runs_staged_files_and_unfinished_writes_are_removed_by_the_next_run(tmp_path: Path):
    outputs = {"table": tmp_path / "t.csv", "figure": tmp_path / "figures/f.png"}
    killed = [tmp_path / ".staged.t.csv", tmp_path / "figures/.staged.f.png",
              tmp_path / "figures/..staged.f.png.k3_9xq0a.tmp"]   # an atomic write to the staged name
    kept = [tmp_path / "t.csv.bak", tmp_path / ".staged.t.csv.notes"]
    for path in killed + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("left")
    with staged_outputs(outputs) as staged:
        assert not any(p.exists() for p in killed)
        for key, path in staged.items():
            write_text(path, key)
    assert {p.name for p in tmp_path.rglob("*") if p.is_file()} == {"t.csv", "f.png", *(p.name for p in kept)}
    assert (tmp_path / "t.csv").read_text() == "table"


def test_outputs_deleted_before_a_rerun_are_back_while_it_runs_and_after_it_fails(tmp_path: Path, monkeypatch):
    """Both front ends delete a job's outputs before they run it; the command puts back the last
    published ones from its links (KEPT) until a run replaces them."""
    monkeypatch.chdir(tmp_path)
    outputs = {"table": Path("results/t.csv")}
    with staged_outputs(outputs, KEPT) as staged:
        write_text(staged["table"], "first")
    Path("results/t.csv").unlink()   # as `dvc repro` and Snakemake do before they rerun a stage
    with pytest.raises(RuntimeError), staged_outputs(outputs, KEPT) as staged:
        assert Path("results/t.csv").read_text() == "first"
        write_text(staged["table"], "second")
        raise RuntimeError("the stage failed")
    assert Path("results/t.csv").read_text() == "first"
    with staged_outputs(outputs, KEPT) as staged:
        write_text(staged["table"], "third")
    assert Path("results/t.csv").read_text() == "third" and (KEPT / "results/t.csv").samefile("results/t.csv")


def test_a_kept_link_shares_the_outputs_inode_so_in_place_damage_reaches_it_and_a_rename_does_not(
        tmp_path: Path, monkeypatch):
    """The kept link is the output's own file (publish.py): a write into the output changes it, and
    the front end's deletion then brings the damaged file back; a file renamed over the output
    leaves it with the published bytes."""
    monkeypatch.chdir(tmp_path)
    outputs = {"table": Path("results/t.csv")}
    with staged_outputs(outputs, KEPT) as staged:
        write_text(staged["table"], "published")
    with open("results/t.csv", "r+") as fh:   # damage in place: truncated, then overwritten
        fh.truncate(3)
        fh.write("damaged")
    assert (KEPT / "results/t.csv").read_text() == "damaged"
    Path("results/t.csv").unlink()   # as a front end does before it reruns the stage
    with pytest.raises(RuntimeError), staged_outputs(outputs, KEPT):
        assert Path("results/t.csv").read_text() == "damaged"
        raise RuntimeError("the stage failed")

    with staged_outputs(outputs, KEPT) as staged:
        write_text(staged["table"], "published again")
    Path("results/other.csv").write_text("replacement")
    Path("results/other.csv").replace("results/t.csv")   # replaced by rename: a new inode at the name
    assert (KEPT / "results/t.csv").read_text() == "published again"
    Path("results/t.csv").unlink()
    with pytest.raises(RuntimeError), staged_outputs(outputs, KEPT):
        assert Path("results/t.csv").read_text() == "published again"
        raise RuntimeError("the stage failed")
    assert Path("results/t.csv").read_text() == "published again"
