"""Table 2 of ``prune-tables``: ToMe's own soft merging is a labelled reference line beside the
paper's methods, and it leaves the ToMe-score rows (the paper's Table 2 ToMe) as they were."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import yaml

from taskgeom.artifacts.provenance import split_header
from taskgeom.artifacts.tables import read_table
from taskgeom.stages import prune_tables as pt

NUMBERS = yaml.safe_load((Path(__file__).parents[1] / "references/paper_numbers.yaml").read_text())
VALUES = {"random": 3.0, "tome_score": 2.0, "evit": 1.5, "tome": 1.2, "importance": 1.0}


def rows(metric: str, methods: tuple[str, ...], **setting) -> list[dict]:
    return [{"model": "m", "domain": "rgb", "resolution": 32, "metric": metric, "method": method, "ratio": ratio,
             "mean": VALUES[method] * ratio, "std_seeds": 0.0, "ci_low": 0.0, "ci_high": 1.0, "images": 8,
             "p_vs_importance": None if method == "importance" else 1e-3, **setting}
            for method in methods for ratio in (0.2, 0.5)]


def frames(methods: tuple[str, ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    cls = pd.DataFrame(rows("cls_degradation", methods))
    dense = pd.DataFrame(rows("add_silog", methods, schedule="1-stage", llf=True)
                         + rows("add_silog", methods, schedule="2-stage", llf=True))
    return cls, dense


def run_table2(tmp_path: Path, methods: tuple[str, ...]) -> tuple[pd.DataFrame, str]:
    outputs = {f"table2_{ext}": tmp_path / f"table2.{ext}" for ext in ("csv", "md", "tex")}
    ctx = SimpleNamespace(outputs=outputs, provenance=lambda: {"stage": "prune-tables"})
    pt.table2(ctx, *frames(methods), NUMBERS, 32)
    return read_table(outputs["table2_csv"]), split_header(outputs["table2_md"].read_text(), ".md")[1]


def test_table2_shows_tome_merging_as_a_labelled_reference_line(tmp_path):
    long, md = run_table2(tmp_path, tuple(VALUES))
    ours = long[long["source"] == "ours"]
    for part in ("cls", "dense"):
        got = ours[ours["part"] == part]
        assert set(got["method"]) == {"random", "tome_score", "importance", "tome"}   # EViT stays in Table 12
        assert list(dict.fromkeys(got["method"])) == ["random", "tome_score", "importance", "tome"]
        tome = got[got["method"] == "tome"].sort_values("ratio")
        assert list(tome["mean"]) == [1.2 * 0.2, 1.2 * 0.5]
    assert set(long.loc[long["source"] == "paper", "method"]) == {"random", "tome_score", "importance"}
    score, merging = pt.METHOD_LABELS["tome_score"], pt.METHOD_LABELS["tome"]
    assert score == "ToMe score (Table 2's ToMe)" and merging == "ToMe merging (soft, reference)"
    pivots = [line for line in md.splitlines() if line.startswith("|")]
    assert sum(f"| {merging} " in line for line in pivots) >= 2          # both halves' pivots (and comparisons)
    assert sum(f"| {score} " in line for line in pivots) >= 4            # ours and the paper's, both halves
    assert not any("| tome " in line or "| tome_score " in line for line in pivots)
    caption = md.split("\n\n", 1)[0]
    assert score in caption and merging in caption


def test_the_reference_line_leaves_the_tome_score_rows_alone(tmp_path):
    with_ref, _ = run_table2(tmp_path / "a", tuple(VALUES))
    without, _ = run_table2(tmp_path / "b", ("random", "tome_score", "evit", "importance"))
    pick = lambda t: t[t["method"] == "tome_score"].drop(columns=["label"], errors="ignore").reset_index(drop=True)
    pd.testing.assert_frame_equal(pick(with_ref), pick(without))
    assert len(without[without["method"] == "tome"]) == 0


def test_the_tables_order_and_name_methods_as_the_registry_does():
    from taskgeom.prune.methods import METHODS

    assert pt.METHOD_ORDER == tuple(METHODS)
    assert pt.METHOD_LABELS == {name: m.label for name, m in METHODS.items()}
    shuffled = pd.DataFrame({"method": list(reversed(METHODS)), "mean": range(len(METHODS))})
    assert list(pt.ordered(shuffled)["method"]) == list(METHODS)
    assert list(pt.labelled(shuffled)["method"]) == [METHODS[m].label for m in reversed(METHODS)]
