"""Every artifact form records its provenance and gives it back."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
from torch import nn

from taskgeom.artifacts import provenance
from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.figures import plt, save_figure
from taskgeom.artifacts.tables import read_table, write_table
from taskgeom.data.hdf5 import encode_attrs, new_file
from taskgeom.models import zoo
from taskgeom.pipeline.cli import main

# Characters each format must escape: non-ASCII, PDF string delimiters, quotes, a backslash.
RECORD = {"stage": "demo[x]", "code_version": "0.1.0+gabc", "device": "cpu", "machine": "host x86_64 CPU ×2",
          "params": {"note": "a (b) \\ \"c\"", "ratios": [0.1, 0.5], "nested": {"k": None}}}


def test_tables_and_their_renderings_record_it_and_still_read(tmp_path: Path):
    df = pd.DataFrame({"a": [1.5, 2.0], "b": ["x", "#y"]})
    paths = [tmp_path / f"t.{ext}" for ext in ("csv", "md", "tex")]
    write_table(df, *paths, caption="T", provenance=RECORD)
    for path in paths:
        assert provenance.read(path) == RECORD, path
    pd.testing.assert_frame_equal(read_table(paths[0]), df)


def test_figures_record_it_and_stay_byte_reproducible(tmp_path: Path):
    def draw(stem: str) -> tuple[Path, Path]:
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        png, pdf = tmp_path / f"{stem}.png", tmp_path / f"{stem}.pdf"
        save_figure(fig, png, pdf, provenance=RECORD)
        return png, pdf

    first, second = draw("a"), draw("b")
    for path in first:
        assert provenance.read(path) == RECORD, path
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_checkpoints_and_json_record_it(tmp_path: Path):
    weights, config = tmp_path / "model.safetensors", tmp_path / "config.json"
    zoo.save(nn.Linear(2, 2), {"kind": "linear"}, weights, config, RECORD, {"parameters": 6})
    assert provenance.read(weights) == RECORD
    assert provenance.read(config) == RECORD and json.loads(config.read_text())["parameters"] == 6
    write_json(tmp_path / "m.json", {"x": 1, "provenance": RECORD})
    assert provenance.read(tmp_path / "m.json") == RECORD


def test_hdf5_records_it(tmp_path: Path):
    path = tmp_path / "a.h5"
    with new_file(path, encode_attrs({"provenance": RECORD}), {"x": ((3,), np.float32)}, 2) as f:
        f["x"][...] = 1
    assert provenance.read(path) == RECORD


def test_a_file_without_it_is_named(tmp_path: Path, capsys):
    bare = tmp_path / "bare.csv"
    bare.write_text("a\n1\n")
    with pytest.raises(ValueError, match="bare.csv: records no provenance"):
        provenance.read(bare)
    with h5py.File(tmp_path / "bare.h5", "w"):
        pass
    with pytest.raises(ValueError, match="bare.h5: records no provenance"):
        provenance.read(tmp_path / "bare.h5")
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ValueError, match="no provenance form for .txt"):
        provenance.read(tmp_path / "notes.txt")
    assert main(["provenance", str(bare)]) == 2
    assert "bare.csv: records no provenance" in capsys.readouterr().err


def test_cli_prints_the_record(tmp_path: Path, capsys):
    write_json(tmp_path / "m.json", {"provenance": RECORD})
    assert main(["provenance", str(tmp_path / "m.json")]) == 0
    assert json.loads(capsys.readouterr().out) == RECORD
